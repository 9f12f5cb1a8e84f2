"""A run's report files: report.html, and timeline.html beside it, from the
run's folder and its results. The evidence is read (harness/run/evidence.py),
the figures drawn and the pages made (harness/pages/), each file replaced
whole. `harness run` calls it after the check; `harness report DIR` to draw
a run's report again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.files import write_whole
from harness.pages.figures import draw
from harness.pages.report import report_page
from harness.pages.timeline import timeline_page
from harness.run.evidence import gather

log = logging.getLogger(__name__)


def render(run_dir: Path, results: dict) -> Path:
    """Write run_dir/report.html (and timeline.html where the history could be
    read); returns the report's path."""
    run_dir = Path(run_dir)
    ev = gather(run_dir, results)
    images = draw(results, ev)
    if ev.timeline is not None:
        ops, said = ev.timeline
        try:
            images["timeline"] = write_whole(run_dir / "timeline.html",
                                             timeline_page(ops, said, ev.intervals, run_dir.name)).name
        except (OSError, KeyError, TypeError, ValueError) as e:
            log.warning("no timeline.html: %s", e)
    return write_whole(run_dir / "report.html", report_page(results, ev, images))
