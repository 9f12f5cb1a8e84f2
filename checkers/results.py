"""A check's results on disk: `results.json` (the contract is docs/checker.md).

`write_results` is what `harness check` and the run lifecycle both use, so
that every results.json is written the same way: indented JSON, replaced
atomically, an unwritable folder a one-line UserError.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from core.errors import UserError
from core.files import write_whole


def write_results(results: dict, out_dir: Path) -> Path:
    """Write `results` to `out_dir`/results.json (made if missing); return its path."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = write_whole(out_dir / "results.json", orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    except OSError as e:
        raise UserError(f"cannot write results to {out_dir}: {e.strerror}") from None
    return path
