"""core.class_archive: a dump becomes the archive only when it completed, no
partial file is ever left, and another JDK has another id."""

from __future__ import annotations

import shutil

import pytest

from core.class_archive import jdk_id, make


def _dump(completed: bool, dies: bool = False):
    def dump(partial):
        partial.write_bytes(b"classes")  # what a JVM wrote before it ended, whole or not
        if dies:
            raise RuntimeError("the JVM died")
        return completed
    return dump


def test_a_dump_becomes_the_archive_only_when_it_completed(tmp_path):
    path = tmp_path / "cds" / "classes.jsa"
    assert not make(path, _dump(False))
    with pytest.raises(RuntimeError):
        make(path, _dump(True, dies=True))
    assert list(path.parent.iterdir()) == []
    assert make(path, _dump(True))
    assert path.read_bytes() == b"classes" and list(path.parent.iterdir()) == [path]


def test_another_jdk_has_another_id(tmp_path):
    assert jdk_id("java") == jdk_id(shutil.which("java"))
    other = tmp_path / "bin" / "java"
    other.parent.mkdir()
    other.write_bytes(b"")
    assert jdk_id(str(other)) != jdk_id("java")
