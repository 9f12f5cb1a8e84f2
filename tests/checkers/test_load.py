"""Where a JSONL history's Parquet conversion and the driver's read runs go
(checkers/load.py `scratch_for`): the temporary folder on a local master, beside the history
on a cluster (where the executors that read the history read it too), or a
folder the user names with `harness check --scratch`; a folder that cannot
be written is one line and exit 2, before Spark starts. None of these needs
Spark."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from checkers import load
from checkers.load import file_uri, scratch_for
from core.errors import UserError
from core.history.files import resolve
from core.history.parquet import write_parquet
from harness.cli import main
from tests.checkers.test_bad_input import GOOD, assert_one_line_error, lines

CLUSTER = "spark://127.0.0.1:1"  # never contacted: these fail, or end, before Spark starts


@pytest.fixture
def jsonl(tmp_path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "history.jsonl"
    path.write_text(lines(GOOD))
    return path


def test_a_local_master_converts_in_the_temporary_folder(jsonl):
    with scratch_for(resolve(jsonl), "local[*]") as folder:
        assert folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith("harness-check-")
    assert not folder.exists()


def test_a_cluster_master_converts_beside_the_history_hidden_and_readable_as_its_folder(jsonl):
    jsonl.parent.chmod(0o750)
    with scratch_for(resolve(jsonl), CLUSTER) as folder:
        assert folder.parent == jsonl.parent and folder.name.startswith(".harness-check-")
        assert folder.stat().st_mode & 0o777 == 0o750
        # A run folder holding the conversion still resolves to its own history.
        assert resolve(jsonl.parent).files == [jsonl]
    assert not folder.exists()
    assert [p.name for p in jsonl.parent.iterdir()] == ["history.jsonl"]


def test_a_named_scratch_folder_wins_on_any_master(jsonl, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    for master in ("local[*]", CLUSTER):
        with scratch_for(resolve(jsonl), master, shared) as folder:
            assert folder.parent == shared
        assert list(shared.iterdir()) == []


def test_a_parquet_history_on_a_cluster_gets_a_scratch_folder_only_if_named(tmp_path):
    # On a cluster a Parquet history is read where it is, and Spark makes the
    # read runs (checkers/read_runs.py) rather than the driver writing them
    # beside the user's history.
    path = tmp_path / "history.parquet"
    write_parquet(GOOD, path)
    with scratch_for(resolve(path), CLUSTER) as folder:
        assert folder is None
    assert [p.name for p in tmp_path.iterdir()] == ["history.parquet"]
    shared = tmp_path / "shared"
    shared.mkdir()
    with scratch_for(resolve(path), CLUSTER, shared) as folder:
        assert folder.parent == shared
    # A local master's: the temporary folder, as for JSONL.
    with scratch_for(resolve(path), "local[*]") as folder:
        assert folder.parent == Path(tempfile.gettempdir())
    assert not folder.exists()


def refuse_named_folders(monkeypatch) -> None:
    """mkdtemp refuses every folder but the temporary one: a read-only history
    folder (the tests run as root, whom a read-only mode does not stop)."""
    mkdtemp = tempfile.mkdtemp

    def refuse(prefix, dir=None):
        if dir is not None:
            raise PermissionError(13, "Permission denied")
        return mkdtemp(prefix=prefix)

    monkeypatch.setattr(load.tempfile, "mkdtemp", refuse)


def test_an_unwritable_history_folder_names_scratch(jsonl, monkeypatch):
    refuse_named_folders(monkeypatch)
    with pytest.raises(UserError, match="Permission denied.*--scratch DIR"):
        with scratch_for(resolve(jsonl), CLUSTER):
            pass
    # A local master does not need it: its executors read the temporary folder.
    with scratch_for(resolve(jsonl), "local[*]") as folder:
        assert folder.parent == Path(tempfile.gettempdir())


def test_harness_check_says_so_in_one_line(jsonl, capsys, monkeypatch):
    refuse_named_folders(monkeypatch)
    status = main(["check", str(jsonl), "--spark-master", CLUSTER])
    assert_one_line_error(status, capsys.readouterr().err, str(jsonl.parent), "--scratch DIR")


@pytest.mark.parametrize("name, is_file, words", [("nowhere", False, ["no such folder"]),
                                                    ("a-file", True, ["not a folder"])])
def test_a_bad_scratch_folder_is_one_line_and_exit_2(jsonl, tmp_path, capsys, name, is_file, words):
    bad = tmp_path / name
    if is_file:
        bad.write_text("")
    status = main(["check", str(jsonl), "--scratch", str(bad)])
    assert_one_line_error(status, capsys.readouterr().err, "--scratch", str(bad), *words)


def test_spark_reads_files_by_absolute_file_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Not resolved against a cluster's default filesystem, nor an executor's working folder.
    assert file_uri(Path("a b/history.parquet")) == f"file://{tmp_path}/a b/history.parquet"
    assert file_uri(Path("/x/y.parquet")) == "file:///x/y.parquet"


def test_the_events_ahead_of_a_read_are_exact_for_parquet_and_guessed_for_jsonl(jsonl, tmp_path):
    """`events_ahead` picks the session's JVM settings before the history is
    read: Parquet's footers count the events; JSONL's size gives a guess
    (JSONL_BYTES_PER_EVENT); a file that cannot be read counts 0 (its
    validation says why)."""
    events = len(GOOD)
    parquet = tmp_path / "history.parquet"
    write_parquet(iter(GOOD), parquet)
    assert load.events_ahead(resolve(parquet)) == events
    parts = tmp_path / "parts"
    parts.mkdir()
    write_parquet(iter(GOOD), parts / "part-0.parquet")
    write_parquet(iter(GOOD[:3]), parts / "part-1.parquet")
    assert load.events_ahead(resolve(parts)) == events + 3
    assert events / 2 <= load.events_ahead(resolve(jsonl)) <= 2 * events
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not a parquet file PAR1")
    assert load.events_ahead(resolve(broken)) == 0
