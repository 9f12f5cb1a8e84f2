"""The Spark driver's class-data archive (checkers/spark_archive.py): `make
setup` made one for this JDK and pyspark, a driver JVM that `get_session`
starts maps it, and making it again when it is there does nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from checkers.spark import JVM_LOG_ENV, class_archive_path
from tests.support import REPO, fresh_python

_SESSION = ("from checkers.spark import get_session, QUICK_START_JAVA\n"
            "spark = get_session(java_options=QUICK_START_JAVA + ' -Xlog:cds=info')\n"
            "assert spark.range(3).count() == 3\n")


def _driver_log(tmp_path) -> str:
    """The JVM log of a fresh process's session."""
    log = tmp_path / "jvm.log"
    fresh_python(_SESSION, env={JVM_LOG_ENV: str(log)})
    return log.read_text(errors="replace")


@pytest.mark.spark
def test_setup_made_the_archive_and_a_driver_maps_it(tmp_path):
    archive = class_archive_path()
    assert archive.is_file(), "make setup makes it: python -m checkers.spark_archive"
    mapped = _driver_log(tmp_path)
    assert f"Opened archive {archive}." in mapped, mapped
    assert "Unable to use shared archive" not in mapped and "failed" not in mapped.lower(), mapped


def test_making_it_again_when_it_is_there_says_nothing():
    proc = subprocess.run([sys.executable, "-m", "checkers.spark_archive"], cwd=REPO, timeout=60,
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
