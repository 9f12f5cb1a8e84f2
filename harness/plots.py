"""The report's figures, and the per-process timeline page.

Drawn with matplotlib (imported inside the functions that draw: it is heavy)
as base64 PNGs for inline images, or written as inline SVG: nothing on a
page fetches anything.

- send latency and throughput over time, fault intervals shaded (from
  results.json's stats and the history);
- a lane chart from the run folder's `states.jsonl` (docs/history.md): a
  lane per node (down, unreachable, controller), then per partition its
  leader, epoch and ISR over time, with fault bands, truncations and the
  checker's examples marked (no states.jsonl: no chart);
- consumers' realtime lag and the count of unseen values over time, from
  results.json's `series` (the checker counts them: checkers/kernel/series.py);
- `timeline.html` beside the report: one lane per process, operations as
  bars from invocation to completion, a fixed budget of them drawn so that a
  10M-event run's page stays small.

History columns are read once through `HistorySource` (Parquet column reads;
JSONL converted in batches), never the whole history as Python objects.
"""

from __future__ import annotations

import base64
import html
import io
import logging
from pathlib import Path

import orjson

from checkers.liveness import verdict_words
from core.errors import HistoryError
from core.files import write_whole
from core.history.files import HistorySource, iter_source_jsonl
from core.history.format import NEMESIS, NEMESIS_PROCESS_ID
from core.history.jsonl import ReadReport
from core.history.parquet import events_to_table
from core.history.states import read_states as read_states_file
from nemesis.registry import BY_START_ACTION

log = logging.getLogger(__name__)

MAX_SCATTER = 20_000
# Client operations drawn in timeline.html at most: about 200 bytes each, so the
# page stays under a few MB whatever the run's length.
TIMELINE_BUDGET = 5_000
MAX_LANES = 40  # partitions drawn in the lane chart
# Columns of the history the figures read (one read for all of them).
COLUMNS = ["index", "time", "process", "type", "f", "value", "partition", "offset", "error", "records"]
COLORS = {"ok": "#2b8a3e", "info": "#e67700", "fail": "#c92a2a"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _shade(ax, intervals: list[dict]) -> None:
    """Each fault interval in its fault's colour, its label once in the legend:
    one collection per fault, spanning the axes' height (a long run has
    thousands of intervals; one artist each is slow to draw). Where several
    faults were injected (they may overlap), each also has a solid strip of
    its own at the top of the axes, so that overlapping faults stay apart
    where their shades mix."""
    from matplotlib.collections import PolyCollection

    by_fault: dict[str, list] = {}
    for i in intervals:
        x0, x1 = i["start"] / 1e9, i["end"] / 1e9
        by_fault.setdefault(i["f"], []).append((x0, x1))
    strip = 0.035  # of the axes' height, per fault
    for row, (f, spans) in enumerate(by_fault.items()):
        fault = BY_START_ACTION[f]
        verts = [[(x0, 0), (x0, 1), (x1, 1), (x1, 0)] for x0, x1 in spans]
        ax.add_collection(PolyCollection(verts, transform=ax.get_xaxis_transform(), facecolor=fault.colour,
                                         alpha=0.5, lw=0, label=fault.label), autolim=False)
        if len(by_fault) > 1:
            top, bottom = 1 - row * strip, 1 - (row + 1) * strip
            ax.add_collection(PolyCollection([[(x0, bottom), (x0, top), (x1, top), (x1, bottom)] for x0, x1 in spans],
                                             transform=ax.get_xaxis_transform(), facecolor=fault.colour,
                                             edgecolor="#495057", lw=0.3, zorder=4), autolim=False)
        ax.update_datalim([(min(x0 for x0, _ in spans), 0), (max(x1 for _, x1 in spans), 0)], updatey=False)


def _positions(n: int, k: int, seed: int = 0):
    """k of range(n) chosen uniformly at random (all of them if k >= n), sorted."""
    import numpy as np

    if k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def send_latencies(source: HistorySource | None = None, limit: int = MAX_SCATTER, table=None):
    """(completion time s, latency ms, outcome) of a sample of `limit` send
    completions, uniformly at random, each with its invocation; from the
    history (`table`: its columns already read, else read from `source`)."""
    import pandas as pd
    import pyarrow.compute as pc

    if table is None:
        table = _read_columns(source, ["process", "type", "f", "value", "time"])
    send = pc.and_(pc.equal(table["f"], "send"), pc.not_equal(table["process"], NEMESIS_PROCESS_ID))
    invoke = pc.equal(table["type"], "invoke")
    done = table.filter(pc.and_(send, pc.invert(invoke))).select(["value", "time", "type"])
    done = done.take(_positions(done.num_rows, limit))
    inv = table.filter(pc.and_(pc.and_(send, invoke), pc.is_in(table["value"], value_set=done["value"])))
    comp = done.to_pandas()
    comp["type"] = comp["type"].astype(str)
    pairs = comp.merge(inv.select(["value", "time"]).to_pandas().rename(columns={"time": "t0"}), on="value")
    return pd.DataFrame({"t": pairs["time"] / 1e9, "ms": (pairs["time"] - pairs["t0"]) / 1e6,
                         "type": pairs["type"]})


def _read_columns(source: HistorySource, columns: list[str], batch: int = 250_000):
    """These columns of the whole history as one Arrow table. JSONL is
    converted `batch` events at a time, so only one batch is ever Python dicts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if source.format == "parquet":
        # type, f and error repeat a few strings millions of times: read them as dictionaries.
        strings = [c for c in ("type", "f", "error") if c in columns]
        return pa.concat_tables([pq.read_table(f, columns=columns, read_dictionary=strings) for f in source.files],
                                promote_options="permissive")
    tables, events = [], []
    for e in iter_source_jsonl(source, ReadReport()):
        events.append(e)
        if len(events) >= batch:
            tables.append(events_to_table(events).select(columns))
            events = []
    tables.append(events_to_table(events).select(columns))
    return pa.concat_tables(tables)


def history_table(source: HistorySource):
    """The columns every figure reads (COLUMNS), in one read."""
    return _read_columns(source, COLUMNS)


# --------------------------------------------------------------------------
# Data: the cluster-state timeline (states.jsonl)


def read_states(run_dir: Path) -> list[dict]:
    """The lines of run_dir/states.jsonl (core/history/states.py), sorted by time; [] without the file."""
    return sorted(read_states_file(Path(run_dir) / "states.jsonl") or [], key=lambda s: s["time"])


def partition_lanes(states: list[dict], end_time: int) -> dict[int, list[dict]]:
    """Per partition, its segments of constant leader, epoch and ISR:
    [{start, end, leader, epoch, isr}] in ns; the last one ends at `end_time`
    (or at its start, if that is later). Lines that change only the HW do not
    cut a segment."""
    lanes: dict[int, list[dict]] = {}
    for s in states:
        if s["kind"] != "partition" or not isinstance(s.get("partition"), int):
            continue
        state = (s.get("leader"), s.get("epoch"), tuple(s.get("isr") or ()))
        segs = lanes.setdefault(s["partition"], [])
        if segs and (segs[-1]["leader"], segs[-1]["epoch"], tuple(segs[-1]["isr"])) == state:
            continue
        if segs:
            segs[-1]["end"] = s["time"]
        segs.append({"start": s["time"], "end": None, "leader": state[0], "epoch": state[1], "isr": list(state[2])})
    for segs in lanes.values():
        segs[-1]["end"] = max(end_time, segs[-1]["start"])
    return dict(sorted(lanes.items()))


def node_lanes(states: list[dict], end_time: int) -> dict[str, list[dict]]:
    """Per node, its segments of constant state: [{start, end, alive,
    reachable, controller}] in ns (alive/reachable as the observer said,
    None before it said; controller: the node was the controller). The
    last one ends at `end_time` (or at its start, if that is later)."""
    now: dict[str, dict] = {}
    lanes: dict[str, list[dict]] = {}
    controller = None

    def cut(node: str, t: int) -> None:
        state = now.setdefault(node, {"alive": None, "reachable": None})
        key = (state["alive"], state["reachable"], node == controller)
        segs = lanes.setdefault(node, [])
        if segs and segs[-1]["start"] == t:
            segs.pop()  # two changes at one moment: the later one stands
        if segs and (segs[-1]["alive"], segs[-1]["reachable"], segs[-1]["controller"]) == key:
            segs[-1]["end"] = None
            return
        if segs:
            segs[-1]["end"] = t
        segs.append({"start": t, "end": None, "alive": key[0], "reachable": key[1], "controller": key[2]})

    for s in states:
        if s["kind"] == "node" and isinstance(s.get("node"), str):
            now[s["node"]] = {"alive": s.get("alive"), "reachable": s.get("reachable")}
            cut(s["node"], s["time"])
        elif s["kind"] == "controller":
            before, controller = controller, s.get("node") if isinstance(s.get("node"), str) else None
            for node in {before, controller} - {None}:
                cut(node, s["time"])
    for segs in lanes.values():
        segs[-1]["end"] = max(end_time, segs[-1]["start"])
    return dict(sorted(lanes.items()))


def anomaly_marks(results: dict, table) -> list[dict]:
    """[{name, partition, time}] for the checker's examples (the first five
    of each anomaly, as the report shows) that name a partition, at the time
    of each history event they cite."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = []
    for name, a in results.get("anomalies", {}).items():
        for e in a.get("examples", [])[:5]:
            if isinstance(e, dict) and isinstance(e.get("partition"), int):
                for k, v in e.items():
                    if k.endswith("index") and isinstance(v, int):
                        wanted.append((name, e["partition"], v))
    if not wanted or table is None:
        return []
    keep = pa.array(sorted({i for _, _, i in wanted}), pa.int64())
    rows = table.filter(pc.is_in(table["index"], value_set=keep)).select(["index", "time"]).to_pydict()
    time_of = dict(zip(rows["index"], rows["time"]))
    return [{"name": n, "partition": p, "time": time_of[i]} for n, p, i in wanted if i in time_of]


# --------------------------------------------------------------------------
# Drawing


def _node_colours(lanes: dict[int, list[dict]]) -> dict:
    import matplotlib

    nodes = sorted({s["leader"] for segs in lanes.values() for s in segs if s["leader"] is not None}, key=str)
    cmap = matplotlib.colormaps["tab10"]
    return {n: cmap(i % 10) for i, n in enumerate(nodes)}


# Not leader colours (tab10): a node lane must not read as a leader.
NODE_COLOURS = {"down": "#495057", "unreachable": "#ced4da", "up": "#ebfbee"}
NODE_HATCH = {"unreachable": "xxxx"}


def lanes_png(lanes: dict[int, list[dict]], truncations: list[dict], intervals: list[dict],
              marks: list[dict], nodes: dict[str, list[dict]] | None = None) -> str:
    """The lane chart: a lane per node (down, unreachable from the control
    node, up; a black bar under it while it is the controller), then one lane
    per partition, coloured by leader, hatched where the ISR is smaller than
    the partition's largest, labelled with the leader, epoch and ISR where a
    segment is wide enough; truncations as black crosses, the checker's
    examples as red triangles."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    nodes = nodes or {}
    shown = list(lanes)[:MAX_LANES]
    colours = _node_colours(lanes)
    ends = [s["end"] for p in shown for s in lanes[p]] + [s["end"] for segs in nodes.values() for s in segs]
    t_max = max(ends + [i["end"] for i in intervals] + [1]) / 1e9
    k = len(nodes)
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.42 * (len(shown) + k)))
    _shade(ax, intervals)
    for row, (node, segs) in enumerate(nodes.items()):
        for s in segs:
            x0, w = s["start"] / 1e9, max((s["end"] - s["start"]) / 1e9, t_max / 2000)
            state = "down" if s["alive"] is False else "unreachable" if s["reachable"] is False else \
                "up" if s["alive"] or s["reachable"] else None
            if state:
                ax.barh(row, w, left=x0, height=0.5, color=NODE_COLOURS[state], lw=0, hatch=NODE_HATCH.get(state))
            if s["controller"]:
                ax.barh(row + 0.3, w, left=x0, height=0.1, color="black", lw=0)
    for row, p in enumerate(shown, start=k):
        full = max(len(s["isr"]) for s in lanes[p])
        # One collection per lane and hatching (thousands of segments in a long run).
        for shrunk in (False, True):
            segs = [s for s in lanes[p] if (len(s["isr"]) < full) == shrunk]
            if segs:
                ax.broken_barh([(s["start"] / 1e9, max((s["end"] - s["start"]) / 1e9, t_max / 2000)) for s in segs],
                               (row - 0.35, 0.7), facecolors=[colours.get(s["leader"], "white") for s in segs],
                               edgecolor="#343a40", lw=0.3, hatch="///" if shrunk else None)
        for s in lanes[p]:
            x0, x1 = s["start"] / 1e9, s["end"] / 1e9
            label = f"{s['leader'] or 'no leader'} e{s['epoch'] if s['epoch'] is not None else '?'} " \
                    f"[{' '.join(map(str, s['isr']))}]"
            # Only where it fits: the axes are about 800 px wide, a character of it about 4.3 px.
            if (x1 - x0) / t_max * 800 > len(label) * 4.3 + 4:
                ax.text(x0 + t_max * 0.003, row, label, va="center", fontsize=6.5, clip_on=True)
    rows = {p: r for r, p in enumerate(shown, start=k)}
    tx = [(t["time"] / 1e9, rows[t["partition"]]) for t in truncations if t.get("partition") in rows]
    if tx:
        ax.scatter(*zip(*tx), marker="x", color="black", s=30, zorder=3, label="truncation")
    mx = [(m["time"] / 1e9, rows[m["partition"]] + 0.3) for m in marks if m["partition"] in rows]
    if mx:
        ax.scatter(*zip(*mx), marker="v", color="#c92a2a", s=22, zorder=3, label="anomaly example event")
    ax.set_yticks(range(k + len(shown)), list(nodes) + [f"p{p}" for p in shown])
    ax.set_ylim(k + len(shown) - 0.5, -0.5)
    ax.set_xlim(0, t_max)
    ax.set_xlabel("time (s)")
    title = "Nodes, and partitions: leader (colour), epoch and ISR (hatched: ISR shrunk)" if nodes else \
        "Partitions: leader (colour), epoch and ISR (hatched: ISR shrunk)"
    if len(lanes) > len(shown):
        title += f"; first {len(shown)} of {len(lanes)} partitions"
    ax.set_title(title)
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(color=c, label=f"leader {n}") for n, c in colours.items()]
    if nodes:
        handles += [Patch(facecolor=NODE_COLOURS[s], hatch=NODE_HATCH.get(s), label=f"node {s}")
                    for s in ("down", "unreachable")]
        handles.append(Patch(color="black", label="controller"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    out = _png(fig)
    plt.close(fig)
    return out


def lag_png(lag: dict[str, list[list]], intervals: list[dict]) -> str:
    """Realtime lag of each consumer process over time (results.json's
    `series.lag`: per process, its polls' worst lag in each stretch of time);
    one step line per process, all in one LineCollection (a long run has
    thousands of consumer processes)."""
    import numpy as np
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(11, 3.4))
    _shade(ax, intervals)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines, colours, legend = [], [], []
    for k, (proc, points) in enumerate(sorted(lag.items(), key=lambda kv: int(kv[0]))):
        x, y = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
        # Steps: each value holds until the next poll.
        xs, ys = np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]
        lines.append(np.column_stack([xs, ys]) if len(x) > 1 else np.array([[x[0], y[0]], [x[0], y[0]]]))
        colours.append(cycle[k % len(cycle)])
        if k < 12:
            legend.append(Line2D([], [], color=colours[-1], lw=0.9, label=f"process {proc}"))
    if lines:
        ax.add_collection(LineCollection(lines, colors=colours, linewidths=0.9))
        ax.autoscale_view()
    ax.set_xlabel("time (s)")
    ax.set_ylabel("offsets behind the head")
    ax.set_title("Realtime lag of consumers (per poll: its worst partition)")
    if lag:
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=handles + legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7,
                  title=f"{len(lag)} processes" if len(lag) > 12 else None)
    out = _png(fig)
    plt.close(fig)
    return out


def unread_png(unread: dict[str, list[list]], intervals: list[dict], end_s: float = 0) -> str:
    """Acknowledged values not yet read over time (results.json's
    `series.unread`: per partition, its count where it changes), stacked by
    partition (twelve at most; more: their total), drawn to `end_s`."""
    import numpy as np
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.4))
    _shade(ax, intervals)
    if unread:
        t = np.unique(np.array([x[0] for points in unread.values() for x in points] + [end_s], float))
        t = t[t <= max(end_s, t[-2] if len(t) > 1 else t[-1])]
        layers = []
        for points in unread.values():
            times = np.array([x[0] for x in points], float)
            counts = np.array([x[1] for x in points])
            i = np.searchsorted(times, t, side="right") - 1
            layers.append(np.where(i >= 0, counts[np.clip(i, 0, None)], 0))
        if len(unread) <= 12:
            ax.stackplot(t, layers, labels=[f"p{p}" for p in unread], step="post", alpha=0.8)
        else:
            ax.step(t, np.sum(layers, axis=0), where="post", color="#1971c2", label="all partitions")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("acknowledged, not yet read")
    ax.set_title("Unseen values")
    out = _png(fig)
    plt.close(fig)
    return out


def plots(results: dict, source: HistorySource | None, intervals: list[dict],
          run_dir: Path | None = None) -> dict[str, str]:
    """The report's images as base64 PNGs: `latency`, `throughput` always;
    `lanes` where run_dir has a states.jsonl; `lag` and `unread` where the
    history has polls and sends. With run_dir, also writes run_dir/timeline.html
    and names it under `timeline`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    stats = results.get("stats", {})
    table = None
    if source is not None:
        try:
            table = history_table(source)
        except (OSError, HistoryError, ValueError) as e:
            log.warning("no history figures: %s", e)
    # Latency: a sample of every send, and per-second p99 lines.
    fig, ax = plt.subplots(figsize=(11, 3.6))
    _shade(ax, intervals)
    lat = send_latencies(table=table) if table is not None else None
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
    # The figures below are extras: one that cannot be drawn is a warning, never a report lost.
    try:
        if (results.get("liveness") or {}).get("faults"):
            out["liveness"] = liveness_png(results["liveness"])
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no liveness plot: %s", e)
    states = read_states(run_dir) if run_dir is not None else []
    end_time = int(table["time"][-1].as_py()) if table is not None and table.num_rows else 0
    until = max([end_time] + [s["time"] for s in states])
    try:
        lanes = partition_lanes(states, until)
        if lanes:
            truncations = [s for s in states if s["kind"] == "truncation"]
            out["lanes"] = lanes_png(lanes, truncations, intervals, anomaly_marks(results, table),
                                     node_lanes(states, until))
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no lane chart (states.jsonl: %s)", e)
    series = results.get("series") or {}
    try:
        if series.get("lag"):
            out["lag"] = lag_png(series["lag"], intervals)
        if series.get("unread"):
            out["unread"] = unread_png(series["unread"], intervals, end_time / 1e9)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no lag or unread plot: %s", e)
    if table is not None and run_dir is not None:
        try:
            out["timeline"] = write_timeline(run_dir, table, intervals).name
        except (OSError, KeyError, TypeError, ValueError) as e:
            log.warning("no timeline.html: %s", e)
    return out


def liveness_png(live: dict) -> str:
    """Unavailability per fault (results.json `liveness.faults`): producers' and
    consumers' longest wait overlapping each fault, bars side by side, with the
    recovery after the fault's end marked (a cross where none came)."""
    import numpy as np
    import matplotlib.pyplot as plt

    faults = live["faults"]
    x = np.arange(len(faults))
    fig, ax = plt.subplots(figsize=(11, 3.2))
    ax.bar(x - 0.2, [f["producer_unavailable_s"] or 0 for f in faults], 0.4, color="#c92a2a", label="producers")
    ax.bar(x + 0.2, [f["consumer_unavailable_s"] or 0 for f in faults], 0.4, color="#1971c2", label="consumers")
    rec = [(i, f["recovery_s"]) for i, f in enumerate(faults) if f["recovery_s"] is not None]
    if rec:
        ax.scatter([i for i, _ in rec], [r for _, r in rec], marker="_", s=300, color="black", zorder=3,
                   label="recovery after the fault's end")
    never = [i for i, f in enumerate(faults) if f["recovery_s"] is None]
    if never:
        ax.scatter(never, [0] * len(never), marker="x", s=60, color="black", zorder=3, label="no recovery")
    # A tick per fault: its start, and (few faults) its name; many faults: every k-th start.
    few = len(faults) <= 12
    step = max(1, len(faults) // 40)
    ax.set_xticks(x[::step], [(f"{f['fault'].removeprefix('start-')}\n" if few else "") + f"{f['start']:.0f} s"
                              for f in faults[::step]], fontsize=7, rotation=0 if few else 60)
    ax.set_xlabel("fault (its start)")
    ax.set_ylabel("seconds")
    ax.set_title("Unavailability per fault (longest wait overlapping it)")
    ax.legend(loc="upper right", fontsize=8)
    out = _png(fig)
    plt.close(fig)
    return out


def liveness_html(live: dict | None, images: dict[str, str]) -> str:
    """The report's liveness section: the verdict, the numbers per fault, the plot."""
    if not live:
        return ""

    def n(x) -> str:
        return "—" if x is None else f"{x:g}"

    rows = "".join(
        f"<tr><td><code>{html.escape(f['fault'])}</code> {html.escape(f.get('mode') or '')}</td>"
        f"<td class='num'>{n(f['start'])}</td><td class='num'>{n(f['end'])}</td>"
        f"<td class='num'>{n(f['producer_unavailable_s'])}</td><td class='num'>{n(f['consumer_unavailable_s'])}</td>"
        f"<td class='num'>{n(f['recovery_s'])}</td><td class='num'>{n(f['consumer_recovery_s'])}</td>"
        f"<td>{html.escape(' '.join(x.removeprefix('start-') for x in f.get('overlapping') or []) or '—')}</td></tr>"
        for f in live.get("faults", []))
    cls = "error" if live.get("verdict") == "hang" else ""
    parts = [f"<h2 id='liveness'>Liveness</h2><p class='{cls}'>{html.escape(verdict_words(live))}</p>",
             f"<p class='muted'>Longest wait with no acknowledgement: producers "
             f"{n(live['producers']['unavailable_s'])} s, consumers {n(live['consumers']['unavailable_s'])} s; "
             f"first records read after the final heal: {n(live.get('consumer_recovery_s'))} s "
             f"(definitions: docs/checker.md).</p>"]
    if rows:
        parts.append("<table class='wide'><tr><th>fault</th><th>start (s)</th><th>end (s)</th>"
                     "<th>producers unavailable (s)</th><th>consumers unavailable (s)</th>"
                     "<th>recovery after its end (s)</th><th>consumers' recovery (s)</th>"
                     "<th>in force with (overlapping faults)</th></tr>" + rows + "</table>")
    if "liveness" in images:
        parts.append(f"<img alt='unavailability per fault' src='data:image/png;base64,{images['liveness']}'>")
    return "".join(parts)


def figures_html(images: dict[str, str]) -> str:
    """The report's section for the cluster-state, consumer and timeline
    figures that `plots` made (empty where it made none)."""
    parts = []
    if "lanes" in images:
        parts.append("<h2>Cluster state</h2><p class='muted'>From states.jsonl: each partition's leader, "
                     "epoch and ISR over time; shaded: fault intervals; crosses: truncations; triangles: "
                     "events of the anomaly examples above.</p>"
                     f"<img alt='partition lanes' src='data:image/png;base64,{images['lanes']}'>")
    if "lag" in images or "unread" in images:
        parts.append("<h2>Consumers</h2><p class='muted'>Lag: per ok poll, the highest acknowledged offset "
                     "(or high watermark) of a partition it read minus the offset it returned (final reads left out). "
                     "Unseen: "
                     "acknowledged values no poll had returned yet.</p>")
        parts += [f"<img alt='{k}' src='data:image/png;base64,{images[k]}'>" for k in ("lag", "unread")
                  if k in images]
    if "timeline" in images:
        name = html.escape(images["timeline"], quote=True)
        parts.append(f"<p><a href='{name}'>Timeline of operations per process</a> ({name}).</p>")
    return "".join(parts)


# --------------------------------------------------------------------------
# timeline.html


def timeline_ops(table, budget: int | None = None, seed: int = 0):
    """The operations to draw, one row each: index (its invocation's),
    process, f, type (its completion's; `info` where it never completed),
    start and end (ns), value, partition, offset, error, n (records a poll
    returned); and a sentence saying how they were chosen.

    With a budget: every nemesis operation, and at most `budget` client
    operations, the failed and indeterminate ones first (up to half the
    budget), the rest from the ok ones, each set chosen uniformly at random
    with `seed`. Operations are chosen by their completions before any are
    paired, so a 10M-event history never becomes a frame of every operation.
    Sends are paired with their invocation by value; anything else with the
    latest invocation of the same process and f before it (a process's other
    operations run one at a time; a final-reads brackets its polls)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    end = int(table["time"][-1].as_py()) if table.num_rows else 0
    f = table["f"].cast(pa.string())
    vocab = pc.unique(f)
    key = (table["process"].to_numpy() * len(vocab)
           + pc.index_in(f, value_set=vocab).to_numpy(zero_copy_only=False).astype("int64"))
    index = table["index"].to_numpy()
    is_inv = pc.equal(table["type"], "invoke").to_numpy(zero_copy_only=False)
    is_send = pc.and_(pc.equal(f, "send"), pc.not_equal(table["process"], NEMESIS_PROCESS_ID)).to_numpy(
        zero_copy_only=False)
    is_ok = pc.equal(table["type"], "ok").to_numpy(zero_copy_only=False)
    nemesis = (table["process"].to_numpy() == NEMESIS_PROCESS_ID)
    # Invocations that never completed: a send whose value no completion has;
    # the last invocation of a (process, f) after its last completion.
    done_values = table["value"].filter(pa.array(is_send & ~is_inv))
    inv_send = np.flatnonzero(is_send & is_inv)
    open_send = inv_send[~pc.is_in(table["value"].take(pa.array(inv_send)), value_set=done_values)
                         .to_numpy(zero_copy_only=False)]
    inv_other = pd.DataFrame({"index": index[~is_send & is_inv], "key": key[~is_send & is_inv],
                              "start": table["time"].to_numpy()[~is_send & is_inv]})
    last_inv = inv_other.groupby("key")["index"].max()
    last_done = pd.Series(index[~is_send & ~is_inv], index=key[~is_send & ~is_inv]).groupby(level=0).max()
    open_other = last_inv[last_inv > last_done.reindex(last_inv.index).fillna(-1)].to_numpy()
    open_pos = np.sort(np.concatenate([open_send, np.searchsorted(index, open_other)])).astype("int64")
    is_open = np.zeros(len(index), bool)
    is_open[open_pos] = True
    # Candidates: completions, and invocations that never completed (as info).
    cand = ~is_inv | is_open
    bad = np.flatnonzero(cand & ~nemesis & ~is_ok)
    good = np.flatnonzero(cand & ~nemesis & is_ok)
    every_nemesis = np.flatnonzero(cand & nemesis)
    n_client = len(bad) + len(good)
    if budget is None or n_client <= budget:
        chosen = np.flatnonzero(cand)
        said = f"All {n_client:,} client operations and {len(every_nemesis):,} nemesis operations are drawn."
    else:
        n_bad = min(len(bad), budget // 2) if len(good) > budget - len(bad) else len(bad)
        bad_s = bad[_positions(len(bad), n_bad, seed)]
        good_s = good[_positions(len(good), budget - len(bad_s), seed)]
        chosen = np.sort(np.concatenate([every_nemesis, bad_s, good_s]))
        said = (f"Sampled: {len(bad_s) + len(good_s):,} of {n_client:,} client operations are drawn "
                f"({len(bad_s):,} of {len(bad):,} failed or indeterminate, {len(good_s):,} of {len(good):,} ok; "
                f"chosen uniformly at random, seed {seed}), and all {len(every_nemesis):,} nemesis operations. "
                "The whole history is in history.parquet / history.jsonl.")
    rows = table.take(pa.array(chosen)).select(
        ["index", "time", "process", "type", "value", "partition", "offset", "error"]).to_pandas()
    rows["f"] = f.take(pa.array(chosen)).to_numpy(zero_copy_only=False)
    rows["n"] = pc.list_value_length(table["records"].take(pa.array(chosen))).to_numpy(zero_copy_only=False)
    rows["type"] = rows["type"].astype(str)
    rows["key"] = key[chosen]
    rows["open"] = is_open[chosen]
    rows["send"] = is_send[chosen]
    # Pair each chosen completion with its invocation.
    sends = rows[rows["send"] & ~rows["open"]]
    inv = table.filter(pa.array(is_send & is_inv)).filter(
        pc.is_in(table["value"].filter(pa.array(is_send & is_inv)), value_set=pa.array(sends["value"].to_numpy())))
    inv = pd.DataFrame({"value": inv["value"].to_numpy(), "inv": inv["index"].to_numpy(),
                        "start": inv["time"].to_numpy()})
    sends = sends.merge(inv, on="value", how="left")
    others = pd.merge_asof(rows[~rows["send"] & ~rows["open"]].sort_values("index"),
                           inv_other.rename(columns={"index": "inv"}), left_on="index", right_on="inv",
                           by="key", direction="backward")
    opened = rows[rows["open"]].assign(inv=lambda d: d["index"], start=lambda d: d["time"], time=end, type="info")
    ops = pd.concat([sends, others, opened]).dropna(subset=["inv"])
    ops = ops.assign(index=ops["inv"].astype("int64"), start=ops["start"].astype("int64"),
                     end=ops["time"].astype("int64"))
    ops = ops.sort_values("index", kind="stable").reset_index(drop=True)
    return ops[["index", "process", "f", "type", "start", "end", "value", "partition", "offset", "error", "n"]], said


TIMELINE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1em;color:#212529} .muted{color:#868e96}
.wrap{overflow-x:auto;border:1px solid #dee2e6} svg{display:block}
.ok{fill:#2b8a3e} .fail{fill:#c92a2a} .info{fill:#e67700} .fault{opacity:.45}
text{font-size:11px;font-family:ui-monospace,monospace} .grid{stroke:#e9ecef}
"""


def _op_title(o, process: str) -> str:
    t = f"{process} {o.f} {o.type} {o.start / 1e9:.3f}-{o.end / 1e9:.3f} s ({(o.end - o.start) / 1e6:.1f} ms)"
    if o.f == "send" and o.value == o.value:
        t += f" value {int(o.value)}"
    if o.partition == o.partition and o.offset == o.offset:
        t += f" at {int(o.partition)}:{int(o.offset)}"
    if o.f == "poll" and o.n == o.n:
        t += f", {int(o.n)} records"
    if isinstance(o.error, str):
        t += f" error {o.error}"
    return t


def timeline_html(ops, said: str, intervals: list[dict], title: str = "") -> str:
    """The page: an inline SVG, one lane per process (the nemesis first), each
    operation a bar from invocation to completion coloured by outcome, fault
    intervals shaded across all lanes; every text escaped."""
    esc = lambda x: html.escape(str(x), quote=True)  # noqa: E731 - the page's one escaper
    end = max([int(ops["end"].max()) if len(ops) else 0] + [i["end"] for i in intervals] + [1])
    width = int(min(16000, max(1200, end / 1e9 * 12)))
    scale = (width - 1) / end
    processes = sorted(ops["process"].unique(), key=lambda p: (p != NEMESIS_PROCESS_ID, p))
    if NEMESIS_PROCESS_ID not in processes and intervals:
        processes.insert(0, NEMESIS_PROCESS_ID)
    lane = {p: i for i, p in enumerate(processes)}
    label_w, h, top = 90, 14, 20
    height = top + h * len(processes) + 4
    body = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + label_w}' height='{height}'>"]
    for s in range(0, int(end / 1e9) + 1, 10):
        x = label_w + s * 1e9 * scale
        body.append(f"<line class='grid' x1='{x:.0f}' y1='{top}' x2='{x:.0f}' y2='{height}'/>"
                    f"<text x='{x + 2:.0f}' y='12'>{s}s</text>")
    for i in intervals:  # in its fault's colour: overlapping faults mix their shades
        fault = BY_START_ACTION[i["f"]]
        x0, x1 = label_w + i["start"] * scale, label_w + i["end"] * scale
        body.append(f"<rect class='fault' fill='{esc(fault.colour)}' x='{x0:.1f}' y='{top}' "
                    f"width='{max(x1 - x0, 1):.1f}' height='{height - top}'>"
                    f"<title>{esc(fault.label)} {i['start'] / 1e9:.3f}-{i['end'] / 1e9:.3f} s "
                    f"{esc(orjson.dumps(i.get('value')).decode())}</title></rect>")
    for p in processes:
        name = NEMESIS if p == NEMESIS_PROCESS_ID else f"process {p}"
        body.append(f"<text x='2' y='{top + lane[p] * h + 11}'>{esc(name)}</text>")
    for o in ops.itertuples(index=False):
        name = NEMESIS if o.process == NEMESIS_PROCESS_ID else f"process {o.process}"
        x = label_w + o.start * scale
        w = max((o.end - o.start) * scale, 1.0)
        cls = o.type if o.type in ("ok", "fail", "info") else "info"
        body.append(f"<rect class='{cls}' x='{x:.1f}' y='{top + lane[o.process] * h + 2}' width='{w:.1f}' "
                    f"height='{h - 4}'><title>{esc(_op_title(o, name))}</title></rect>")
    body.append("</svg>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)} — timeline</title>"
            f"<style>{TIMELINE_STYLE}</style></head><body><h1>{esc(title)} — operations per process</h1>"
            f"<p>{esc(said)}</p><p class='muted'>Each bar runs from an operation's invocation to its completion: "
            "green ok, red fail, orange info (indeterminate, or never completed); shaded: fault intervals. "
            "Hover a bar for its details.</p>"
            f"<div class='wrap'>{''.join(body)}</div></body></html>")


def write_timeline(run_dir: Path, table, intervals: list[dict], budget: int = TIMELINE_BUDGET,
                   title: str | None = None) -> Path:
    """Write run_dir/timeline.html from the history's columns; returns its path."""
    sample, said = timeline_ops(table, budget)
    page = timeline_html(sample, said, intervals, title if title is not None else Path(run_dir).name)
    return write_whole(Path(run_dir) / "timeline.html", page)
