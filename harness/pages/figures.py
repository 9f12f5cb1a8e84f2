"""The report's figures, drawn with matplotlib (imported inside the
functions that draw: it is heavy) as base64 PNGs for inline images: nothing
on a page fetches anything.

- send latency and throughput over time, fault intervals shaded (from
  results.json's stats and a sample of the sends the run's evidence holds);
- unavailability per fault (results.json's liveness);
- a lane chart of the cluster-state timeline: a lane per node (down,
  unreachable, controller), then per partition its leader, epoch and ISR
  over time, with fault bands, truncations and the checker's examples marked;
- consumers' realtime lag and the count of unseen values over time, from
  results.json's `series` (the checker counts them: checkers/kernel/series.py).

The data comes drawn-ready: results.json, and the run's evidence
(harness/run/evidence.py); nothing here reads a history.
"""

from __future__ import annotations

import base64
import io
import logging

from checkers.group_balance import words as starved_words
from checkers.liveness import hung_transaction_words, verdict_words
from harness.pages.html import esc
from nemesis.registry import BY_START_ACTION

log = logging.getLogger(__name__)

MAX_LANES = 40  # partitions drawn in the lane chart
SHOW_STARVED = 5  # starved members told in the liveness section (results.json lists them all)

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


GROUP_PARTITIONS = 6  # partitions drawn per group at most (the first ones)


def groups_png(groups: dict[str, dict], intervals: list[dict]) -> str:
    """Per consumer group (harness/run/evidence.py's `group_progress`), each
    partition's log end, what the members had handled and what the group had
    committed over time, with its members' rebalances and crashes: a committed
    line above the handled one is what a crash now would skip."""
    import matplotlib.pyplot as plt

    names = sorted(groups)
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 3.2 * len(names)), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[:, 0], names):
        g = groups[name]
        _shade(ax, intervals)
        for k, (p, series) in enumerate(sorted(g["partitions"].items())[:GROUP_PARTITIONS]):
            colour = cycle[k % len(cycle)]
            for key, style in (("end", {"ls": ":", "lw": 1.0}), ("handled", {"ls": "-", "lw": 1.0, "alpha": 0.6}),
                               ("committed", {"ls": "-", "lw": 2.0})):
                points = series.get(key) or []
                if points:
                    ax.step([x[0] for x in points], [x[1] for x in points], where="post", color=colour,
                            label=f"p{p} {key}", **style)
            read = [x for x in series.get("read back") or [] if x[1] >= 0]
            if read:
                ax.plot([x[0] for x in read], [x[1] for x in read], "o", color=colour, ms=4, mfc="none",
                        label=f"p{p} committed, read back")
        for t in g.get("rebalances") or []:
            ax.axvline(t, color="#868e96", lw=0.6, alpha=0.5)
        crashes = g.get("crashes") or []
        if crashes:
            top = ax.get_ylim()[1]
            ax.plot([c[0] for c in crashes], [top] * len(crashes), "x", color="#e03131", ms=8, mew=2,
                    label="a member crashed or was killed", clip_on=False)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("offset")
        ax.set_title(f"Consumer group {name}: log end (dotted), handled (thin), committed (thick); "
                     "grey lines: rebalances", fontsize=9)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    out = _png(fig)
    plt.close(fig)
    return out


def draw(results: dict, ev) -> dict[str, str]:
    """The report's images as base64 PNGs, from results.json and the run's
    evidence (harness/run/evidence.py's Evidence): `latency`, `throughput`
    always; `liveness` where faults were measured; `lanes` where the run has
    a cluster-state timeline; `lag` and `unread` where the checker counted them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    stats = results.get("stats", {})
    intervals = ev.intervals
    # Latency: a sample of every send, and per-second p99 lines.
    fig, ax = plt.subplots(figsize=(11, 3.6))
    _shade(ax, intervals)
    lat = ev.latencies
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
    try:
        if ev.lanes:
            out["lanes"] = lanes_png(ev.lanes, ev.truncations, intervals, ev.marks, ev.nodes)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no lane chart (states.jsonl: %s)", e)
    series = results.get("series") or {}
    try:
        if series.get("lag"):
            out["lag"] = lag_png(series["lag"], intervals)
        if series.get("unread"):
            out["unread"] = unread_png(series["unread"], intervals, ev.history_end / 1e9)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no lag or unread plot: %s", e)
    try:
        if getattr(ev, "groups", None):
            out["groups"] = groups_png(ev.groups, intervals)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no consumer group figure: %s", e)
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
        f"<tr><td><code>{esc(f['fault'])}</code> {esc(f.get('mode') or '')}</td>"
        f"<td class='num'>{n(f['start'])}</td><td class='num'>{n(f['end'])}</td>"
        f"<td class='num'>{n(f['producer_unavailable_s'])}</td><td class='num'>{n(f['consumer_unavailable_s'])}</td>"
        f"<td class='num'>{n(f['recovery_s'])}</td><td class='num'>{n(f['consumer_recovery_s'])}</td>"
        f"<td>{esc(' '.join(x.removeprefix('start-') for x in f.get('overlapping') or []) or '—')}</td></tr>"
        for f in live.get("faults", []))
    cls = "error" if live.get("verdict") == "hang" else ""
    parts = [f"<h2 id='liveness'>Liveness</h2><p class='{cls}'>{esc(verdict_words(live))}</p>",
             *(f"<p class='error'>{esc(hung_transaction_words(h))}</p>" for h in live.get("hung_transactions") or []),
             *(f"<p>{esc(starved_words(s))}</p>" for s in (live.get("starved_members") or [])[:SHOW_STARVED]),
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
    if "groups" in images:
        parts.append("<h2>Consumer groups</h2><p class='muted'>Per group and partition: the log's end, the "
                     "highest offset its members had handled and what the group had committed (rings: "
                     "committed offsets read back); where the committed line runs above the handled one, a "
                     "member killed then skips what lies between. Shaded: fault intervals; crosses: members "
                     "that crashed or were killed.</p>"
                     f"<img alt='consumer groups' src='data:image/png;base64,{images['groups']}'>")
    if "timeline" in images:
        name = esc(images["timeline"])
        parts.append(f"<p><a href='{name}'>Timeline of operations per process</a> ({name}).</p>")
    return "".join(parts)

