"""timeline.html, beside the report: one lane per process, operations as
bars from invocation to completion, an inline SVG (nothing fetched). The
operations come chosen and paired (harness/run/evidence.py's timeline_ops:
a fixed budget of them, so a 10M-event run's page stays small).
"""

from __future__ import annotations

import orjson

from core.history.format import NEMESIS, NEMESIS_PROCESS_ID
from harness.pages.html import esc, page
from nemesis.registry import BY_START_ACTION

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


def timeline_page(ops, said: str, intervals: list[dict], title: str = "") -> str:
    """The page: an inline SVG, one lane per process (the nemesis first), each
    operation a bar from invocation to completion coloured by outcome, fault
    intervals shaded across all lanes; every text escaped."""
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
    return page(f"{title} — timeline",
                f"<h1>{esc(title)} — operations per process</h1>"
                f"<p>{esc(said)}</p><p class='muted'>Each bar runs from an operation's invocation to its completion: "
                "green ok, red fail, orange info (indeterminate, or never completed); shaded: fault intervals. "
                "Hover a bar for its details.</p>"
                f"<div class='wrap'>{''.join(body)}</div>")

