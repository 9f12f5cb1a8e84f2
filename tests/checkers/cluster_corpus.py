"""Check every history of a corpus folder (tests/checkers/conftest.py's
`CORPUS`) in one Spark session on the master named, and write each one's
results beside it as `cluster.json`:

    python -m tests.checkers.cluster_corpus MASTER FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from checkers.check import Options, check_history
from checkers.spark import get_session


def main(master: str, folder: Path) -> int:
    spark = get_session(master)
    for case in sorted(p for p in folder.iterdir() if p.is_dir()):
        options = json.loads((case / "options.json").read_text())
        if "allow" in options:
            options["allow"] = set(options["allow"])
        history = next(p for p in case.iterdir() if p.name.startswith("history."))
        results = check_history(history, Options(**options), spark=spark)
        (case / "cluster.json").write_text(json.dumps({k: v for k, v in results.items() if k != "checker"}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
