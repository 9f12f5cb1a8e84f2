"""`harness check` on a real standalone Spark cluster gives the results.json
of `local[*]`.

One cluster for the module (lab/spark_cluster.py: a master and two
workers of one core and 1 GiB on 127.0.0.1, from the pyspark distribution),
and the real command line, once in this process on the tests' local Spark
session and once in a subprocess with `--spark-master
spark://127.0.0.1:PORT`, on histories of the shapes a user
brings: every anomaly kind planted, with final reads and without, JSONL
parts (converted to Parquet beside the history, where the executors read
it) and Parquet parts (read where they are), a run.json that promises
idempotence. Everything in results.json but the `checker` block (the
master's name and timings) must be equal, counts first; and every
hand-made history the checker's tests checked before, again on the
cluster, in one application. The executors run
the checker's kernel in this virtual environment's Python (the driver
names it: checkers/spark.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.check import Options, check_history
from harness.cli import main
from lab.spark_cluster import standalone
from core.errors import UserError
from core.history.parquet import write_parquet
from lab.synthetic import Plan, generate
from tests.support import harness

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PLANTED = dict(lost=2, lost_acked=2, dirty_reads=2, duplicates=2, inconsistent=2, aborted=2, nonmonotonic_polls=2,
               skips=2, nonmonotonic_sends=2, unseen=2)
# Where the shapes differ: final reads or none (without them lost-acked and
# dirty-read cannot be planted, nor found), JSONL or Parquet parts.
SHAPES = {
    "jsonl-parts-final-reads": (Plan(events=6_000, seed=21, partitions=4, **PLANTED), "jsonl", None),
    "parquet-parts-no-final-reads-idempotent": (
        Plan(events=6_000, seed=22, partitions=5, final_reads=False,
             **{**PLANTED, "lost_acked": 0, "dirty_reads": 0}), "parquet",
        {"producer": {"enable.idempotence": True}}),
}
PARTS = 3


@pytest.fixture(scope="module")
def cluster():
    with standalone(workers=2, cores=1, memory="1g") as running:
        yield running


def write_parts(events: list[dict], folder: Path, fmt: str) -> None:
    """The history as PARTS files of `fmt` in `folder`, indexes continuing from part to part."""
    folder.mkdir()
    size = -(-len(events) // PARTS)
    for k in range(PARTS):
        chunk = events[k * size:(k + 1) * size]
        if fmt == "jsonl":
            (folder / f"part-{k}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in chunk))
        else:
            write_parquet(chunk, folder / f"part-{k}.parquet")


def executors(cluster) -> dict[int, set[str]]:
    """Each worker's executor folders (app-ID/N, in its work folder), by worker."""
    return {n: {str(p.relative_to(cluster.folder)) for p in (cluster.folder / f"worker-{n}").glob("app-*/*")}
            for n in range(2)}


def check(history: Path, out: Path, *argv: str, env: dict | None = None) -> dict:
    """`harness check HISTORY --out OUT ARGV` as a user runs it; its results.json."""
    out.mkdir()
    # Loopback only, as the cluster: the driver also binds to 127.0.0.1 for a
    # spark://127.0.0.1 master by itself (checkers.spark.on_loopback).
    proc = harness("check", str(history), "--out", str(out), *argv,
                   env={"SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("shape", SHAPES)
def test_a_standalone_cluster_finds_what_local_finds(cluster, spark, shape, tmp_path):
    plan, fmt, run_json = SHAPES[shape]
    syn = generate(plan)
    history = tmp_path / "history"
    write_parts(syn.events, history, fmt)
    if run_json is not None:
        (history / "run.json").write_text(json.dumps(run_json))

    # Locally in this process, on its session: a `harness check` of its own would start
    # another JVM for the same checker (a cold one is tests/bench/test_cold_check.py's).
    assert main(["check", str(history), "--out", str(tmp_path / "local")]) in (0, 1)
    local = json.loads((tmp_path / "local" / "results.json").read_text())
    apps_before = executors(cluster)
    on_cluster = check(history, tmp_path / "cluster", "--spark-master", cluster.url)

    assert on_cluster["checker"]["master"] == cluster.url
    assert on_cluster["checker"]["format"] == fmt and on_cluster["checker"]["events"] == len(syn.events)
    counts = {name: a["count"] for name, a in on_cluster["anomalies"].items()}
    assert counts == {name: syn.expected.get(name, 0) for name in counts}, "the planted anomalies, on the cluster"
    assert counts == {name: a["count"] for name, a in local["anomalies"].items()}
    assert on_cluster["counts"] == local["counts"]
    assert on_cluster["stats"]["final_logs"] == local["stats"]["final_logs"]
    assert on_cluster["stats"]["final_logs"]["checked"] is plan.final_reads
    # And everything else: verdict, examples, missing, statistics, liveness, stories, warnings.
    for key in set(local) | set(on_cluster):
        if key != "checker":
            assert on_cluster.get(key) == local.get(key), key
    if run_json is not None:
        assert on_cluster["promises"] == {"idempotent": True, "source": "run.json"}
        assert on_cluster["anomalies"]["duplicate"]["error"] is True
    # The conversion went beside the history for the cluster (hidden), and was removed.
    assert sorted(p.name for p in history.iterdir()) == sorted(
        [f"part-{k}.{fmt}" for k in range(PARTS)] + (["run.json"] if run_json else []))
    # Both workers ran an executor for the check on the cluster.
    new = {n: apps - apps_before[n] for n, apps in executors(cluster).items()}
    assert all(new.values()), f"a worker launched no executor for the check: {new}"


def holders_of(folder: Path) -> list[int]:
    """Processes with a file open in `folder` (a daemon's output is its log there)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(folder))
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                pids.append(int(pid))
        except OSError:  # gone, or not ours to look at
            pass
    return pids


def test_a_cluster_that_cannot_start_says_why_and_leaves_nothing_running(tmp_path):
    with pytest.raises(UserError, match=r"worker-0 exited \(1\) .*Usage: Worker"):
        with standalone(workers=1, memory="lots", folder=tmp_path):
            pass
    assert (tmp_path / "master.log").exists() and holders_of(tmp_path) == []


def test_every_hand_made_history_checked_before_gives_the_same_results_on_the_cluster(cluster, tmp_path):
    # The checker's tests check their hand-made histories with the `check`
    # fixture (through Spark on local[2] and in process, against the
    # reference); each is kept, and here checked again on the cluster, all
    # in one Spark application. Run alone, this module kept none: the
    # priming history, with every anomaly, is checked then.
    from checkers.check import _prime_dumps, _prime_events
    from tests.checkers.conftest import CORPUS, _kept

    if not CORPUS["count"]:
        folder = tmp_path / "prime"
        folder.mkdir()
        write_parquet(_prime_events(), folder / "history.parquet")
        _prime_dumps(folder)
        _kept(folder / "history.parquet", {}, check_history(folder / "history.parquet", Options(engine="local")))
    proc = subprocess.run([sys.executable, "-m", "tests.checkers.cluster_corpus", cluster.url, str(CORPUS["folder"])],
                          capture_output=True, text=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = sorted(p for p in CORPUS["folder"].iterdir() if p.is_dir())
    assert len(cases) == CORPUS["count"]
    differ = [case.name for case in cases
              if json.loads((case / "cluster.json").read_text()) != json.loads((case / "results.json").read_text())]
    assert differ == [], f"{len(differ)} of {len(cases)} histories differ on the cluster"
