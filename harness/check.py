"""harness check HISTORY: check a history for lost writes, duplicates and offset anomalies.

HISTORY is a history.jsonl or history.parquet file, a folder of parts, or a
run directory. Writes results.json (beside the history unless --out), prints
a summary (or the JSON), and exits 0 valid, 1 anomalies, 2 could not check.

Only the command line lives here: the check is `checkers.check.check_history`,
the stories harness/run/explanations.py's, the file
`checkers.results.write_results`, the summary `checkers.summary.render`.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from checkers import group_balance
from checkers.check import ENGINES, Options, check_history
from checkers.liveness import verdict_words
from checkers.results import write_results
from checkers.spark import conf_pairs
from checkers.summary import render
from core.history.files import resolve
from harness.run.explanations import add_explanations
from nemesis.registry import FAULT_ENDS



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


def run(args) -> int:
    opts = Options(allow=set(args.allow), idempotent=args.idempotent or None,
                   master=args.spark_master, spark_conf=conf_pairs(args.spark_conf), fault_ends=FAULT_ENDS,
                   scratch=args.scratch, engine=args.engine)
    results = add_explanations(check_history(args.history, opts), args.history)
    out_dir = Path(args.out) if args.out else resolve(args.history).root
    path = write_results(results, out_dir)
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    else:
        if results.get("liveness"):
            print(verdict_words(results["liveness"]))
            starved = group_balance.summary_line(results["liveness"])
            if starved:
                print(starved)
        print(render(results, str(path)))
    # The exit status is about safety: a HANG is reported, and fails `harness run`.
    return 0 if results["valid"] else 1
