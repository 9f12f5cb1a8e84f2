"""Java class-data archives (dynamic CDS) made once and mapped by later JVMs:
the one copy of what the Spark driver's (checkers/spark_archive.py) and
Kafka's (infra/kafka_archive.py) have in common.

`jdk_id` names the JDK a `java` command runs, so that an archive's file name
can carry it: a JVM of another JDK never finds an archive of this one.
`make` has a JVM write its classes to a partial file as it exits
(`-XX:ArchiveClassesAtExit`) and moves the file into place only when the
dump is whole: a JVM maps an archive it is given without checking its length,
and one cut short kills it (SIGBUS), where an archive of other jars or of
another JDK is only refused with a warning.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable


def jdk_id(java: str = "java") -> str:
    """The JDK behind `java` (a path or a command on PATH): its binary's real
    path and modification time, which a new build of the JDK changes."""
    found = java if os.sep in java else (shutil.which(java) or java)
    try:
        return f"{os.path.realpath(found)}:{os.stat(found).st_mtime_ns}"
    except OSError:
        return found


def make(path: Path, dump: Callable[[Path], bool]) -> bool:
    """Makes the archive `path`: `dump(partial)` runs a JVM that writes its
    classes to `partial` as it exits and says whether that dump completed
    (the JVM did what it was to archive, exited, and the archive maps);
    only then is the partial file renamed to `path`. True if it was; a
    partial file is never left behind, whatever `dump` raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        if not dump(partial) or not partial.is_file() or partial.stat().st_size == 0:
            return False
        os.replace(partial, path)
        return True
    finally:
        partial.unlink(missing_ok=True)
