"""Remove everything harness runs left on this machine (namespaces, rules, daemons, mounts, keys,
check services' socket folders).

Works after a clean exit or a kill -9 alike, and is safe to run again; with
--cluster it removes one cluster only. Prints one line per thing removed.
"""

from __future__ import annotations

from checkers import service
from infra.clean import clean


def configure(parser) -> None:
    parser.add_argument("--cluster", dest="cluster_id", help="remove only this cluster (c<N>)")


def run(args) -> int:
    say = lambda line: print(f"removed {line}", flush=True)  # noqa: E731
    removed = clean(args.cluster_id, say=say)
    if not args.cluster_id:  # what no cluster owns: check services' socket folders
        removed += service.remove_stale(say)
    what = f"cluster {args.cluster_id}" if args.cluster_id else "harness runs"
    if removed:
        print(f"clean: removed {len(removed)} thing(s) left by {what}")
    else:
        print(f"clean: nothing left by {what}")
    return 0
