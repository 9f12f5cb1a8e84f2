"""The report's section on the KRaft controller's own records (states.jsonl
`kraft-partition`, `kraft-broker` and `kraft-feature` lines,
docs/history.md): the feature levels it finalized
(core/history/features.py), one sentence per election
(core/history/elections.py: which set the leader came from) and the
records behind them. All data is escaped.
"""

from __future__ import annotations

from core.history.elections import BROKER, election_sentence, elections, names
from core.history.features import features_words
from harness.pages.html import esc, table

SHOWN = 200  # records in the table at most (all of them are in states.jsonl)


def controller_html(lines: list[dict], features: dict[str, int] | None = None) -> str:
    """The section, or "" for a run without controller records (ZooKeeper mode, the own broker)."""
    if not lines and not features:
        return ""
    said = elections(lines)
    rows = []
    for line in sorted(lines, key=lambda x: x["time"])[:SHOWN]:
        when = f"{line['time'] / 1e9:.2f}"
        if line["kind"] == BROKER:
            rows.append([esc(when), esc(line.get("node")), esc(f"{line.get('event')} (broker epoch {line.get('epoch')})"),
                         "", "", ""])
        else:
            rows.append([esc(when), esc(f"partition {line['partition']}"), esc(line.get("leader") or "none"),
                         esc(names(line.get("isr"))), esc(names(line.get("elr"))),
                         esc(names(line.get("last_known_elr")))])
    items = "".join(f"<li>{esc(election_sentence(e))}</li>" for e in said) or "<li>No leader changed.</li>"
    more = (f"<p class='muted'>The first {SHOWN} of {len(lines)} records; all of them are in states.jsonl.</p>"
            if len(lines) > SHOWN else "")
    return ("<h2>The KRaft controller's records</h2>"
            "<p class='muted'>From the controller's metadata log, read after the run: the workload topic's "
            "partition state as the controller decided it, and the brokers' registrations and fencing.</p>"
            + (f"<p>Features finalized (its FeatureLevelRecords): {esc(features_words(features))}.</p>"
               if features else "")
            + f"<ul>{items}</ul>"
            + table(("s", "what", "leader / event", "ISR", "eligible leader replicas", "last known ELR"), rows,
                    cls="wide")
            + more)
