"""The Spark driver JVM's class-data archive (Java's CDS), made once:
`python -m checkers.spark_archive`, which `make setup` runs.

It does nothing, and says nothing, when the archive of this JDK and this
pyspark is there already (`checkers.spark.class_archive_path`). Otherwise it
starts a session whose JVM writes the classes it loaded to a file when it
exits (`-XX:ArchiveClassesAtExit`), checks the built-in priming history in it
(`checkers.check.prime`: every plan of the checker, so every class a check
loads), stops the JVM, waits for the dump, and only then moves the file into
place (a dump cut short never becomes the archive). Every later driver JVM
maps it (`checkers.spark.get_session`). If this machine's JVM cannot make
one, it says so in one line and setup goes on: sessions start without it.
"""

from __future__ import annotations

import argparse
import sys

from core import class_archive
from core.errors import first_line
from checkers.check import prime
from checkers.spark import class_archive_path, get_session, jvm_log_path, stop_jvm

# The JVM writes its archive after the session stops: tens of megabytes, seconds.
DUMP_TIMEOUT_S = 300


def build(force: bool = False) -> bool:
    """Make the archive if it is missing (or `force`); True if it is there after."""
    path = class_archive_path()
    if path.is_file() and not force:
        return True
    return class_archive.make(path, _dump)


def _dump(partial) -> bool:
    """A session whose JVM writes `partial` as it exits, primed with every plan of the checker."""
    spark = get_session(java_options=f"-XX:ArchiveClassesAtExit={partial}", class_archive=False)
    try:
        prime(spark)
    finally:
        stop_jvm(spark, wait_s=DUMP_TIMEOUT_S)  # the JVM writes the archive as it exits
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="make it again even if it is there")
    args = parser.parse_args(argv)
    try:
        made = build(args.force)
    except Exception as e:  # noqa: BLE001 - a faster start is a nicety: setup goes on without it
        made, why = False, f"{type(e).__name__}: {first_line(e)}"
    else:
        why = f"the JVM wrote none (see {jvm_log_path()})"
    if not made:
        print(f"harness setup: no class-data archive for Spark's driver ({why}); sessions start without it",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
