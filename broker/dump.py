"""`python -m broker.dump`: print the records on a broker's disk, as Kafka's kafka-dump-log does.

    python -m broker.dump --data-dir DIR [--topic TOPIC] [--partition N]...

Reads each partition's segment files with the broker's own storage code
(`storage.scan_file`, `records.parse_header`), read-only: it never opens a
`Log`, whose recovery would cut a torn tail, so it is safe beside a running
broker. One JSON array per record on stdout:

    [partition, offset, leader_epoch, key, value]

key and value are integers when their bytes are a decimal number (what the
harness's workload writes), else text, null when absent. A compressed batch
other than gzip prints its offsets with key and value null (the workload
never compresses), or with `--refuse-compressed` ends the dump: one line on
stderr and exit 3 (the harness then asks Kafka's own tool). A batch whose CRC
does not match, or whose records do not decode (a flipped bit on disk), prints
its offsets with key null and the value `<corrupt batch: WHY>`. Exit 0; a
missing data dir is one line on stderr and exit 2.

Apache Kafka's data dirs are in the same format (a folder per partition,
`<topic>-<partition>`, segments named by base offset, v2 record batches),
so this reads them too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

from broker import records, storage

_COMPRESSION = 0x07
_GZIP = 1


def _bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = records.read_varint(buf, pos)
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


def _show(b: bytes | None):
    if b is None:
        return None
    text = b.decode("utf-8", "replace")
    try:
        return int(text)
    except ValueError:
        return text


class Undecodable(Exception):
    """A batch compressed with a codec this dump does not decode."""


def batch_records(batch, header: records.BatchHeader, refuse_compressed: bool = False):
    """(offset, key bytes, value bytes) of each record of one whole batch."""
    body = memoryview(batch)[records.HEADER_SIZE:header.length]
    codec = header.attributes & _COMPRESSION
    if codec == _GZIP:
        body = memoryview(gzip.decompress(bytes(body)))
    elif codec and refuse_compressed:
        raise Undecodable(f"offset {header.base_offset}: a batch compressed with codec {codec} "
                          f"(of the codecs, only gzip is decoded here)")
    elif codec:
        for delta in range(header.last_offset_delta + 1):
            yield header.base_offset + delta, None, None
        return
    pos = 0
    for _ in range(header.record_count):
        length, pos = records.read_varint(body, pos)
        end = pos + length
        pos += 1  # attributes
        _ts, pos = records.read_varint(body, pos)
        delta, pos = records.read_varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        yield header.base_offset + delta, key, value
        pos = end  # headers: skipped


def partition_records(directory: str, refuse_compressed: bool = False):
    """(offset, epoch, key bytes, value bytes) of every record in one partition directory, in order."""
    bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
    for base in bases:
        path = os.path.join(directory, f"{base:020d}.log")
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for pos, h in storage.scan_file(fd, 0, size, check_crc=False):
                batch = os.pread(fd, h.length, pos)
                try:
                    if not records.crc_ok(batch, 0, h.length):
                        raise ValueError("CRC mismatch")
                    decoded = list(batch_records(batch, h, refuse_compressed))
                except (ValueError, IndexError, EOFError, OSError) as e:  # a corrupt batch: said, not a crash
                    decoded = [(h.base_offset + d, None, f"<corrupt batch: {e}>".encode())
                               for d in range(h.last_offset_delta + 1)]
                for offset, key, value in decoded:
                    yield offset, h.leader_epoch, key, value
        finally:
            os.close(fd)


def dump(data_dir: str, topic: str | None = None, partitions: set[int] | None = None, out=None,
         refuse_compressed: bool = False) -> int:
    """Write every record of the data dir's partitions (of `topic`, if named) to `out`; the count.
    Raises Undecodable, with `refuse_compressed`, at a batch compressed other than with gzip."""
    out = out or sys.stdout
    found = []
    for name in os.listdir(data_dir):
        parsed = storage.parse_partition_dir(name)
        if parsed is None or not os.path.isdir(os.path.join(data_dir, name)):
            continue
        t, p = parsed
        if (topic is None or t == topic) and (partitions is None or p in partitions):
            found.append((t, p, name))
    n = 0
    for t, p, name in sorted(found):
        for offset, epoch, key, value in partition_records(os.path.join(data_dir, name), refuse_compressed):
            out.write(json.dumps([p, offset, epoch, _show(key), _show(value)], separators=(",", ":")) + "\n")
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m broker.dump", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True, help="the broker's --data-dir")
    p.add_argument("--topic", help="only this topic's partitions")
    p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    p.add_argument("--refuse-compressed", action="store_true",
                   help="exit 3 at a batch compressed with a codec other than gzip, rather than print it "
                        "without keys and values")
    args = p.parse_args(argv)
    if not os.path.isdir(args.data_dir):
        print(f"broker.dump: {args.data_dir}: no such directory", file=sys.stderr)
        return 2
    try:
        dump(args.data_dir, args.topic, set(args.partition) if args.partition else None,
             refuse_compressed=args.refuse_compressed)
    except Undecodable as e:
        print(f"broker.dump: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
