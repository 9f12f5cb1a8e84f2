"""The report's figures: send latency and throughput over time with fault
intervals shaded, drawn with matplotlib (imported inside the functions that
draw: it is heavy) and returned as base64 PNGs for inline images.

Data comes from results.json's stats and from the history's columns, read
through `HistorySource` (Parquet column reads; never the whole history as
Python objects where Parquet is there).
"""

from __future__ import annotations

import base64
import io
import logging

from core.errors import HistoryError
from core.history.files import HistorySource, iter_source_jsonl
from core.history.format import NEMESIS_PROCESS_ID
from core.history.jsonl import ReadReport
from core.history.parquet import events_to_table
from nemesis.registry import BY_START_ACTION

log = logging.getLogger(__name__)

MAX_SCATTER = 20_000
COLORS = {"ok": "#2b8a3e", "info": "#e67700", "fail": "#c92a2a"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _shade(ax, intervals: list[dict]) -> None:
    """Each fault interval in its fault's colour, its label once in the legend."""
    labelled = set()
    for i in intervals:
        fault = BY_START_ACTION[i["f"]]
        ax.axvspan(i["start"] / 1e9, i["end"] / 1e9, color=fault.colour, alpha=0.5, lw=0,
                   label=None if fault.name in labelled else fault.label)
        labelled.add(fault.name)


def send_latencies(source: HistorySource, limit: int = MAX_SCATTER):
    """(completion time s, latency ms, outcome) of a sample of sends, from the history."""
    import pandas as pd

    table = _read_columns(source, ["process", "type", "f", "value", "time"])
    df = table.to_pandas() if table is not None else pd.DataFrame()
    if df.empty:
        return df
    sends = df[(df["f"] == "send") & (df["process"] != NEMESIS_PROCESS_ID)]
    inv = sends[sends["type"] == "invoke"][["value", "time"]].rename(columns={"time": "t0"})
    comp = sends[sends["type"] != "invoke"][["value", "time", "type"]]
    pairs = comp.merge(inv, on="value")
    if len(pairs) > limit:
        pairs = pairs.sample(limit, random_state=0)
    return pd.DataFrame({"t": pairs["time"] / 1e9, "ms": (pairs["time"] - pairs["t0"]) / 1e6,
                         "type": pairs["type"]})


def _read_columns(source: HistorySource, columns: list[str]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if source.format == "parquet":
        return pa.concat_tables([pq.read_table(f, columns=columns) for f in source.files])
    events = list(iter_source_jsonl(source, ReadReport()))
    return events_to_table(events).select(columns)


def plots(results: dict, source: HistorySource | None, intervals: list[dict]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    stats = results.get("stats", {})
    # Latency: a sample of every send, and per-second p99 lines.
    fig, ax = plt.subplots(figsize=(11, 3.6))
    _shade(ax, intervals)
    try:
        lat = send_latencies(source) if source is not None else None
    except (OSError, HistoryError, ValueError) as e:
        log.warning("no latency scatter: %s", e)
        lat = None
    if lat is not None and len(lat):
        for type_ in ("ok", "info", "fail"):
            g = lat[lat["type"] == type_]
            ax.scatter(g["t"], g["ms"], s=3, alpha=0.4, color=COLORS.get(type_, "#495057"), label=f"send {type_}")
    p99 = {x["second"]: x["p99_ms"] for x in stats.get("latency_by_second", [])
           if x["f"] == "send" and x["type"] == "ok"}
    if p99:
        # Seconds without a completion break the line rather than bridging it.
        seconds = range(min(p99), max(p99) + 1)
        ax.plot([x + 0.5 for x in seconds], [p99.get(x, float("nan")) for x in seconds], color="black", lw=1,
                label="send ok p99")
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Send latency")
    ax.legend(loc="upper right", fontsize=8, markerscale=3)
    out["latency"] = _png(fig)
    plt.close(fig)
    # Throughput: completions per second by operation and outcome.
    fig, ax = plt.subplots(figsize=(11, 3.2))
    _shade(ax, intervals)
    series: dict[tuple[str, str], dict[int, int]] = {}
    for x in stats.get("throughput", []):
        if x["f"] in ("send", "poll"):
            series.setdefault((x["f"], x["type"]), {})[x["second"]] = x["count"]
    last = max((max(points) for points in series.values()), default=0)
    for (f, type_), points in sorted(series.items()):
        xs = range(0, last + 1)  # a second without completions is a zero, not a gap
        ax.plot([x + 0.5 for x in xs], [points.get(x, 0) for x in xs], lw=1.2, label=f"{f} {type_}",
                color=COLORS.get(type_) if f == "send" else None, ls="-" if f == "send" else "--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("operations / s")
    ax.set_title("Throughput")
    if series or intervals:
        ax.legend(loc="upper right", fontsize=8)
    out["throughput"] = _png(fig)
    plt.close(fig)
    return out
