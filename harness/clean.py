"""Remove everything harness runs left on this machine (namespaces, rules, daemons, mounts, keys).

Works after a clean exit or a kill -9 alike, and is safe to run again; with
--cluster it removes one cluster only. Prints one line per thing removed.
"""

from __future__ import annotations

from infra.clean import clean


def configure(parser) -> None:
    parser.add_argument("--cluster", dest="cluster_id", help="remove only this cluster (c<N>)")


def run(args) -> int:
    removed = clean(args.cluster_id, say=lambda line: print(f"removed {line}", flush=True))
    what = f"cluster {args.cluster_id}" if args.cluster_id else "harness runs"
    if removed:
        print(f"clean: removed {len(removed)} thing(s) left by {what}")
    else:
        print(f"clean: nothing left by {what}")
    return 0
