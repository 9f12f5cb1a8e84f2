"""Benchmark: bring-up and teardown of a 5-node local cluster with a 3-node ZooKeeper.

Run as root: .venv/bin/python bench/cluster_up.py [--repeats 5] [--json]
(the measuring code is infra/bench.py; `harness bench` may call bench_cluster_up()).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
