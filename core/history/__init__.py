"""The history of a run, by role: format (vocabulary and validation), writer,
jsonl and parquet (reading and storing), files (what a user names)."""
