"""core.files.write_whole: the file is replaced whole, and nothing is left beside it."""

from __future__ import annotations

from core.files import write_whole


def test_a_file_is_replaced_whole_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    assert write_whole(path, "new text") == path
    assert path.read_text() == "new text"
    write_whole(path, b"\x00bytes", fsync=True)
    assert path.read_bytes() == b"\x00bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
