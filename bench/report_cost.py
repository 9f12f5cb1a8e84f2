"""Benchmark: building the report of a large run, and what a browser makes of it.

    harness bench report [--events 10000000] [--cache .cache/bench] [--repeat 1] [--out FILE]

The history is the checker benchmark's (`harness bench check`: generated once
by `harness gen-history --parts` into the cache, Parquet parts), checked once
by `harness check` for its results.json, and given a synthetic states.jsonl
(every partition's leader moves every 30 s, a HW line each second, as the
cluster-state observer writes them). Then `harness report` runs as a user runs
it, in a fresh interpreter, and we record its wall time and peak memory, the
sizes of report.html and timeline.html, and, where Debian's `chromium` is
installed, how long each page takes to load in headless Chromium: a small
page loads it in an iframe and notes the time from inserting the iframe to
its load event (parse, layout, image decoding; the browser's own start is
not counted). The result is recorded (bench/record.py) against TARGETS,
figures named by size (`10M.report_s`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench import record
from bench.checker_cost import CACHE, PeakRSS, ensure_history, expected_of
from core.errors import UserError

TARGETS = (
    record.Target("10M.report_load_ms", "<=", 2000, "issue 13: the report of a 10M-event run opens in under 2 s"),
    record.Target("10M.timeline_load_ms", "<=", 2000, "issue 13: its timeline.html opens in under 2 s"),
)


def configure(parser) -> None:
    """Flags, for `harness bench report`."""
    parser.add_argument("--events", type=int, default=10_000_000, help="history size in events (default 10000000)")
    parser.add_argument("--cache", default=str(CACHE), help="where generated histories are kept "
                                                           "(default the project's .cache/bench)")
    parser.add_argument("--repeat", type=int, default=1, help="measured report builds (best is reported)")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True)


def _states(path: Path, partitions: int, seconds: int) -> None:
    """A states.jsonl at the observer's rate: a line per partition each second
    (its HW sample), the leader moving round n1..n5 every 30 s."""
    lines = []
    for p in range(partitions):
        for s in range(seconds + 1):
            leader = 1 + (p + s // 30) % 5
            lines.append({"time": s * 10**9 + p, "kind": "partition", "partition": p, "leader": f"n{leader}",
                          "epoch": s // 30, "isr": [f"n{1 + (leader - 1 + k) % 5}" for k in range(3)],
                          "hw": None})
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def run_folder(events: int, cache: Path) -> Path:
    """A run folder (history, results.json, states.jsonl) of about `events` events, made once."""
    source = ensure_history(events, cache)
    history = source / "history.parquet"  # a folder of parts
    if not (source / "results.json").is_file():
        print(f"checking {source} (once) ...", file=sys.stderr)
        proc = _harness("check", str(source), "--out", str(source))
        if not (source / "results.json").is_file():
            raise UserError(f"harness check failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    folder = cache / f"report-{events}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("history.parquet", "results.json"):
        if not (folder / name).exists():
            os.symlink((source / name).resolve(), folder / name)
    if not (folder / "states.jsonl").is_file():
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        columns = pq.read_table(history, columns=["time", "partition"])
        seconds = int(pc.max(columns["time"]).as_py() // 10**9) + 1
        partitions = int(pc.max(columns["partition"]).as_py()) + 1
        _states(folder / "states.jsonl", partitions, seconds)
    return folder


LOADER = """<!doctype html><html><body><script>
const t0 = performance.now();
const f = document.createElement('iframe');
f.style.width = '1280px'; f.style.height = '900px';
f.onload = () => { document.body.setAttribute('data-ms', String(performance.now() - t0)); };
f.src = %s;
document.body.appendChild(f);
</script></body></html>"""


def browser_ms(page: Path) -> float | None:
    """Milliseconds headless Chromium takes from inserting `page` in an iframe
    to its load event; None without chromium."""
    chromium = shutil.which("chromium")
    if chromium is None:
        return None
    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        loader = Path(tmp) / "load.html"
        loader.write_text(LOADER % orjson.dumps(page.resolve().as_uri()).decode())
        proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                               f"--user-data-dir={tmp}/profile", "--virtual-time-budget=60000", "--dump-dom",
                               loader.as_uri()], capture_output=True, text=True, timeout=300)
    marker = 'data-ms="'
    if marker not in proc.stdout:
        raise UserError(f"chromium did not load {page.name}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return float(proc.stdout.split(marker, 1)[1].split('"', 1)[0])


def run(args) -> int:
    """Make the run folder (once), build its report, measure, print, record."""
    begun = record.start()
    if args.events < 10_000:
        raise UserError("--events: at least 10000")
    folder = run_folder(args.events, Path(args.cache))
    best = None
    for _ in range(max(1, args.repeat)):
        with PeakRSS() as mem:
            t0 = time.monotonic()
            proc = _harness("report", str(folder))
            seconds = time.monotonic() - t0
        if proc.returncode != 0:
            raise UserError(f"harness report failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        if best is None or seconds < best["report_s"]:
            best = {"report_s": round(seconds, 2), "peak_rss_mb": round(mem.peak / 2**20)}
    expected = expected_of(ensure_history(args.events, Path(args.cache)))
    row = {"events": expected["events"], **best,
           "report_html_kb": round((folder / "report.html").stat().st_size / 1024),
           "timeline_html_kb": round((folder / "timeline.html").stat().st_size / 1024),
           "report_load_ms": None, "timeline_load_ms": None}
    for page in ("report", "timeline"):
        ms = browser_ms(folder / f"{page}.html")
        row[f"{page}_load_ms"] = None if ms is None else round(ms)
    print(f"{row['events']} events: `harness report` {row['report_s']} s, peak RSS {row['peak_rss_mb']} MiB; "
          f"report.html {row['report_html_kb']} KiB, timeline.html {row['timeline_html_kb']} KiB")
    if row["report_load_ms"] is None:
        print("chromium not installed: load times not measured")
    else:
        print(f"headless Chromium load: report.html {row['report_load_ms']} ms, "
              f"timeline.html {row['timeline_load_ms']} ms")
    if args.out:
        Path(args.out).write_bytes(orjson.dumps(row, option=orjson.OPT_INDENT_2))
    size = f"{record.size_label(args.events)}."
    record.write(args, "report", begun, {size + ("peak_rss_mib" if k == "peak_rss_mb" else k): v
                                           for k, v in row.items()}, TARGETS, details=row)
    return 0
