"""The history of a run, by role: format (vocabulary and validation), writer,
jsonl and parquet (reading and storing), follow (Parquet while the JSONL is
written), files (what a user names)."""
