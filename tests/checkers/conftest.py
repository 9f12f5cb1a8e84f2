"""Fixtures for checker tests: one Spark session for the whole test run, and
a small builder for hand-written histories."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import json
from pathlib import Path

import pytest

from checkers.check import Options, check_history
from tests.checkers.reference import reference_counts


# The warning every history without replica dumps beside it gets.
NO_DUMPS = "replica-divergence was not checked: no replica dumps (disk/NODE.jsonl.gz) beside the history"


class Hist:
    """Builds a history event by event; indexes and times follow the call order."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def add(self, process, type_, f, **fields) -> int:
        index = len(self.events)
        self.events.append({"index": index, "time": index * 1_000_000, "process": process,
                            "type": type_, "f": f, **fields})
        return index

    def send(self, process, value, partition=None, offset=None, outcome="ok", key=0, error=None) -> int:
        """An invocation and its completion; returns the completion's index."""
        self.add(process, "invoke", "send", key=key, value=value)
        if outcome == "ok":
            return self.add(process, "ok", "send", value=value, partition=partition, offset=offset)
        if outcome is None:
            return -1
        return self.add(process, outcome, "send", value=value, error=error or "SOME_ERROR")

    def poll(self, process, *records) -> int:
        self.add(process, "invoke", "poll")
        return self.add(process, "ok", "poll", records=[
            {"partition": p, "offset": o, "key": 0, "value": v} for p, o, v in records])

    def assign(self, process, partitions, group=None, generation=None) -> None:
        fields = {"group": group, "generation": generation} if group is not None else {}
        self.add(process, "invoke", "assign", partitions=partitions, **fields)
        self.add(process, "ok", "assign", partitions=partitions, **fields)

    def process(self, process, *records, outcome="ok") -> int:
        """A `process` of delivered records ((partition, offset, value) each);
        `outcome` None: never completed. Returns the invocation's index."""
        items = [{"partition": p, "offset": o, "value": v} for p, o, v in records]
        at = self.add(process, "invoke", "process", records=items)
        if outcome is not None:
            self.add(process, outcome, "process", records=items)
        return at

    def commit(self, process, group, offsets: dict[int, int], outcome="ok") -> int:
        """A commit of `group`'s offsets (partition -> the next offset); `outcome`
        None: never completed. Returns the completion's index (or the invocation's)."""
        items = [{"partition": p, "offset": o} for p, o in sorted(offsets.items())]
        at = self.add(process, "invoke", "commit", group=group, offsets=items)
        if outcome is not None:
            at = self.add(process, outcome, "commit", group=group, offsets=items)
        return at

    def committed(self, process, group, returned: dict[int, int], final=False) -> int:
        """A read of `group`'s committed offsets (partition -> offset, -1: none); its completion's index."""
        self.add(process, "invoke", "committed", group=group, partitions=sorted(returned),
                 **({"final": True} if final else {}))
        return self.add(process, "ok", "committed",
                        offsets=[{"partition": p, "offset": o} for p, o in sorted(returned.items())])

    def seek(self, process, partition, offset) -> None:
        self.add(process, "invoke", "seek", partition=partition, offset=offset)
        self.add(process, "ok", "seek", partition=partition, offset=offset)

    def final_reads(self, process, partitions) -> int:
        """The invocation of a final-reads bracket; returns its index."""
        return self.add(process, "invoke", "final-reads", partitions=partitions)

    def final_reads_ok(self, process, ends: dict[int, int]) -> int:
        """Its ok completion: each partition of `ends` was read to that end."""
        return self.add(process, "ok", "final-reads",
                        ends=[{"partition": p, "offset": o} for p, o in sorted(ends.items())])

    def crash(self, process) -> None:
        self.add(process, "invoke", "crash")
        self.add(process, "ok", "crash")

    def write(self, directory: Path, run: dict | None = None, parquet: bool = False) -> Path:
        if parquet:
            from core.history.parquet import write_parquet

            path = directory / "history.parquet"
            write_parquet(self.events, path)
        else:
            path = directory / "history.jsonl"
            path.write_text("".join(json.dumps(e) + "\n" for e in self.events))
        if run is not None:
            (directory / "run.json").write_text(json.dumps(run))
        return path


def every_role() -> Hist:
    """A history with a value in each role the by-value frame's columns tell
    apart (checkers/driver_by_value.py), and positions holding two values."""
    h = Hist()
    h.send(0, 1, 0, 0)  # acknowledged, read in the run and by the final reads
    h.send(0, 2, 0, 1)  # acknowledged, read only by the final reads
    h.send(0, 3, outcome="fail")  # failed, read anyway
    h.send(1, 4, outcome="info")  # unsettled, read in the run only
    h.send(1, 5, outcome=None)  # invoked, never completed
    h.send(1, 7, 1, 0)  # acknowledged in partition 1, read there and at partition 0's offset 5
    h.send(1, 13, 2, 0)  # in partition 2, whose final log is not known
    h.add(2, "ok", "send", value=8, partition=0, offset=9)  # a completion with no invocation
    h.send(2, 9, 0, 2)
    h.add(2, "ok", "send", value=9, partition=0, offset=3)  # completed twice
    h.send(2, 10, 0, 4)
    h.add(2, "invoke", "send", key=0, value=10)  # invoked twice
    h.add(3, "invoke", "send", key=0, value=11)
    h.add(4, "ok", "send", value=11, partition=0, offset=6)  # completed by another process
    h.add(4, "ok", "send", value=12, partition=0, offset=7)  # completed before its invocation
    h.add(4, "invoke", "send", key=0, value=12)
    h.poll(10, (0, 0, 1), (0, 5, 7), (1, 0, 7), (0, 8, 6))  # 6 was never sent
    h.poll(11, (0, 0, 3), (0, 1, 4), (2, 0, 13))
    for process in (20, 21):  # two readers, one with two brackets
        h.final_reads(process, [0, 1, 2])
        h.poll(process, (0, 0, 1), (0, 1, 2), (1, 0, 7))
        h.poll(process, (0, 3, 9))  # at the final log's end: not in it
        h.final_reads_ok(process, {0: 3, 1: 1})
    h.final_reads(21, [0])
    h.poll(21, (0, 2, 9), (0, 4, 10))  # 10 at the end, 4, that this bracket reports: not in the log
    h.final_reads_ok(21, {0: 4})
    h.poll(12, (0, 2, 9), (1, 0, 7))  # after the final reads: in the run
    return h


def without_timing(results: dict) -> dict:
    """results.json but the checker's own facts (time, stages, engine): what
    two ways of checking one history must agree on."""
    return {k: v for k, v in results.items() if k != "checker"}


@pytest.fixture
def hist():
    return Hist()


# Every hand-made history the `check` fixture checked in this session, kept
# for tests/checkers/test_spark_cluster.py to check again on a cluster: a
# folder each under CORPUS["folder"], with `options.json` and `results.json`
# (the results but the checker's own facts).
CORPUS: dict = {"folder": None, "count": 0}


@pytest.fixture(scope="session", autouse=True)
def _corpus_removed():
    """The corpus's folder, removed once the session ends."""
    yield
    if CORPUS["folder"] is not None:
        import shutil

        shutil.rmtree(CORPUS["folder"], ignore_errors=True)


def _kept(path: Path, options: dict, results: dict) -> None:
    """The history at `path` (and what lies beside it) into the corpus."""
    import shutil
    import tempfile

    if CORPUS["folder"] is None:
        CORPUS["folder"] = Path(tempfile.mkdtemp(prefix="harness-corpus-"))
    folder = CORPUS["folder"] / f"{CORPUS['count']:04d}"
    CORPUS["count"] += 1
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    for beside in ("run.json", "disk", "states.jsonl"):
        source = path.parent / beside
        if source.is_dir():
            shutil.copytree(source, folder / beside)
        elif source.is_file():
            shutil.copy(source, folder / beside)
    (folder / "options.json").write_text(json.dumps({k: sorted(v) if isinstance(v, set) else v
                                                     for k, v in options.items()}))
    (folder / "results.json").write_text(json.dumps(without_timing(results)))


@pytest.fixture
def check(spark, tmp_path):
    """Check a Hist with Spark's engine; also compare the reference's counts,
    and the whole results of the in-process engine (`--engine local`). Each
    history checked is kept in the corpus (`CORPUS`)."""

    def run(h: Hist, run_json: dict | None = None, parquet: bool = False, dumps: dict | None = None,
            **options) -> dict:
        path = h.write(tmp_path, run_json, parquet)
        if dumps is not None:
            write_dumps(tmp_path, dumps)
        results = check_history(path, Options(**options), spark=spark)
        _kept(path, options, results)
        counts = {k: v["count"] for k, v in results["anomalies"].items()}
        reference = reference_counts(h.events, dumps)
        assert counts == {k: reference[k] for k in counts}, "Spark and the reference disagree"
        if options.get("engine") != "local":
            # In process, liveness reads the history again, as it does a large one's.
            with _liveness_reads_again():
                local = check_history(path, Options(**{**options, "engine": "local"}))
            assert without_timing(local) == without_timing(results), "the in-process engine and Spark's disagree"
        results["counts_by_anomaly"] = counts
        return results

    return run


@contextmanager
def _liveness_reads_again() -> Iterator[None]:
    """Liveness's walk fed from a second read of the history, whatever its size."""
    from checkers.folds import liveness as facts

    held = facts.HOLD_EVENTS
    facts.HOLD_EVENTS = -1
    try:
        yield
    finally:
        facts.HOLD_EVENTS = held


def write_dumps(folder: Path, dumps: dict[str, list[list[int]]]) -> None:
    """Replica dumps (docs/history.md, "Replica logs at the end") beside a history."""
    import gzip

    (folder / "disk").mkdir(exist_ok=True)
    for node, records in dumps.items():
        with gzip.open(folder / "disk" / f"{node}.jsonl.gz", "wb") as f:
            f.write(b"".join(json.dumps(r).encode() + b"\n" for r in records))
