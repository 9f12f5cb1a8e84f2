"""The report's stories: each anomaly example told in short sentences (results.json `explanations`).

Under each anomaly, its stories: the summary sentence, then the steps in
time order, each linked to the history event behind it (an
anchor in the report's history excerpt or nemesis table), to the
states.jsonl line, or to the node's disk dump. All data is escaped.
`story_indexes` names the events the page must carry in its excerpt.
"""

from __future__ import annotations

from harness.pages.html import esc


SHOWN = 20  # stories per anomaly on the page (all of them are in results.json)
OPEN = 3  # of which the first few are unfolded


def _shown(results: dict) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for story in results.get("explanations") or []:
        if isinstance(story, dict) and isinstance(story.get("steps"), list):
            by.setdefault(str(story.get("anomaly")), []).append(story)
    return {name: stories[:SHOWN] for name, stories in by.items()}


def story_indexes(results: dict) -> set[int]:
    """The history indexes the shown stories link to."""
    return {s["event"] for stories in _shown(results).values() for story in stories
            for s in story["steps"] if isinstance(s, dict) and isinstance(s.get("event"), int)}


def _evidence(step: dict) -> str:
    """' — event 812' linked to the event's anchor, the states.jsonl line, or the disk dump."""
    if isinstance(step.get("event"), int):
        i = int(step["event"])
        return f" <span class='muted'>— <a href='#e{i}'>event {i}</a></span>"
    if isinstance(step.get("state"), int):
        return f" <span class='muted'>— <a href='states.jsonl'>states.jsonl line {int(step['state'])}</a></span>"
    if step.get("disk"):
        node = str(step["disk"])
        href = "disk/" if node == "all" else f"disk/{node}.jsonl.gz"
        return f" <span class='muted'>— <a href='{esc(href)}'>{esc(href)}</a></span>"
    return ""


def stories_html(results: dict) -> str:
    """The stories section of the report; empty when there are none."""
    shown = _shown(results)
    if not shown:
        return ""
    total = {}
    for story in results.get("explanations") or []:
        if isinstance(story, dict):
            total[str(story.get("anomaly"))] = total.get(str(story.get("anomaly")), 0) + 1
    parts = ["<h2>Stories</h2><p class='muted'>What happened to each example, from the history, "
             "the cluster-state timeline (states.jsonl) and each replica's disk at the end (disk/). "
             "Each step links to its evidence.</p>"]
    for name, stories in shown.items():
        parts.append(f"<h3><code>{esc(name)}</code></h3>")
        parts.append(on_disk_html(results, name))
        for i, story in enumerate(stories):
            steps = "".join(f"<li>{esc(s.get('text'))}{_evidence(s)}</li>" for s in story["steps"] if isinstance(s, dict))
            parts.append(f"<details class='story'{' open' if i < OPEN else ''}><summary>{esc(story.get('summary'))}"
                         f"</summary><ol>{steps}</ol></details>")
        if total.get(name, 0) > len(stories):
            parts.append(f"<p class='muted'>{total[name] - len(stories)} more in results.json</p>")
    return "".join(parts)


def on_disk_html(results: dict, name: str) -> str:
    """One sentence: of the anomaly's missing records looked up on the replicas'
    disks at the end (results.json `on_disk`), how many no replica holds and
    how many one still does, with the first of those."""
    found = (results.get("on_disk") or {}).get(name)
    if not isinstance(found, dict) or not found.get("checked"):
        return ""
    total = ((results.get("anomalies") or {}).get(name) or {}).get("count")
    first = "the first " if isinstance(total, int) and total > found["checked"] else ""
    text = (f"On disk at the end: of {first}{found['checked']} {name} records"
            + (f" (of {total})" if first else "")
            + f", {found['on_no_disk']} are on no replica's disk (lost from the log)"
            + f" and {found['on_disk']} are still on a replica (the log has them; reads missed them)")
    examples = found.get("examples") or []
    if examples:
        e = examples[0]
        where = ", ".join(f"{x.get('node')} at {x.get('partition')}:{x.get('offset')}" for x in e.get("on") or [])
        text += f", e.g. {e.get('value')} on {where}"
    return f"<p>{esc(text)}.</p>"
