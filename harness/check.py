"""harness check HISTORY: check a history for lost writes, duplicates and offset anomalies.

HISTORY is a history.jsonl or history.parquet file, a folder of parts, or a
run directory. Writes results.json (beside the history unless --out), prints
a summary (or the JSON), and exits 0 valid, 1 anomalies, 2 could not check.

Only the command line lives here (and `add_explanations`, which the run
lifecycle shares): the check is `checkers.check.check_history`, the stories `checkers.explain`,
the file `checkers.results.write_results`, the summary `checkers.summary.render`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from checkers.check import ENGINES, Options, check_history
from checkers.explain import evidence_run
from checkers.liveness import verdict_words
from checkers.registry import STORIES
from checkers.results import write_results
from checkers.spark import conf_pairs
from checkers.summary import render
from core.history.files import resolve
from nemesis.registry import BY_START_ACTION

log = logging.getLogger(__name__)


def configure(parser) -> None:
    parser.add_argument("history", metavar="HISTORY", help="history file, folder of parts, or run directory")
    parser.add_argument("--out", metavar="DIR", help="where to write results.json (default: beside the history)")
    parser.add_argument("--allow", metavar="NAME", action="append", default=[],
                        help="declare an anomaly expected: counted, not an error (repeatable)")
    parser.add_argument("--idempotent", action="store_true",
                        help="the producer was idempotent: duplicates and reordered sends are errors")
    parser.add_argument("--spark-master", metavar="URL", help="Spark master (default local[*])")
    parser.add_argument("--spark-conf", metavar="KEY=VALUE", action="append", default=[],
                        help="extra Spark setting (repeatable)")
    parser.add_argument("--scratch", metavar="DIR",
                        help="an existing folder for a JSONL history's Parquet conversion, at a path every Spark "
                             "executor reads (default: the temporary folder on a local master; on a cluster, "
                             "beside the history; a Parquet history is read where it is)")
    parser.add_argument("--engine", choices=ENGINES, default="spark",
                        help="spark (default): Spark's executors run the checker's kernel, on --spark-master; "
                             "local: this process runs it, no JVM (a quick look, a machine without Java)")
    parser.add_argument("--json", action="store_true", help="print results.json instead of the summary")


def fault_ends() -> dict[str, str]:
    """Each fault's start action -> its stop action (the registry's pairs), which the
    checkers need and may not import: the stories and liveness's per-fault intervals."""
    return {action: fault.stop_action for action, fault in BY_START_ACTION.items()}


def add_explanations(results: dict, history) -> dict:
    """results["explanations"]: a story per anomaly example (checkers.explain), from the
    history and, where the run folder has them, states.jsonl and the disk dumps; with
    the dumps, results["on_disk"] too: which missing records the replicas still hold. Both
    `harness check` and `harness run` call it; a failure is logged, never fails the check."""
    try:
        results.update(evidence_run(resolve(history), results, STORIES, fault_ends()))
    except Exception as e:  # noqa: BLE001 - stories are an aid; the verdict stands without them
        log.warning("no explanations: %s: %s", type(e).__name__, e)
        results["explanations"] = []
    return results


def run(args) -> int:
    opts = Options(allow=set(args.allow), idempotent=args.idempotent or None,
                   master=args.spark_master, spark_conf=conf_pairs(args.spark_conf), fault_ends=fault_ends(),
                   scratch=args.scratch, engine=args.engine)
    results = add_explanations(check_history(args.history, opts), args.history)
    out_dir = Path(args.out) if args.out else resolve(args.history).root
    path = write_results(results, out_dir)
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    else:
        if results.get("liveness"):
            print(verdict_words(results["liveness"]))
        print(render(results, str(path)))
    # The exit status is about safety: a HANG is reported, and fails `harness run`.
    return 0 if results["valid"] else 1
