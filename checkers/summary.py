"""Human words for results: the terminal summary of `harness check`. What
each anomaly means and the line of each example are its record's
(checkers/registry.py); the HTML report uses the same words."""

from __future__ import annotations

from checkers import registry
from checkers.anomaly import run_seconds


def describe(name: str, e: dict, clock=run_seconds) -> str:
    """One line that says what an example shows and where to find it (the
    anomaly's record's line, checkers/registry.py); `clock` turns a history
    time (ns) into words (the report passes a wall clock)."""
    return registry.describe(name, e, clock)


def verdict_line(results: dict) -> str:
    """`verdict: VALID`, or `verdict: INVALID (the anomalies counted as errors)`."""
    errors = [n for n, a in results["anomalies"].items() if a["error"]]
    return "verdict: VALID" if results["valid"] else f"verdict: INVALID ({', '.join(errors)})"


def top_anomaly(results: dict) -> str | None:
    """`NAME: words` for the most serious anomaly found (the first error in
    report order): the first line of its story when results.json explains
    it (`explanations`, a list of {"anomaly", "summary", ...}), else the
    line of its first example. None when no anomaly is an error."""
    top = next((n for n, a in results["anomalies"].items() if a["error"] and a["count"]), None)
    if top is None:
        return None
    stories = [x for x in results.get("explanations") or [] if isinstance(x, dict) and x.get("summary")]
    story = next((x for x in stories if x.get("anomaly") == top), None)
    if story is not None:
        lines = str(story["summary"]).strip().splitlines()
        if lines:
            return f"{top}: {lines[0]}"
    examples = results["anomalies"][top]["examples"]
    return f"{top}: {describe(top, examples[0])}" if examples else f"{top}: {results['anomalies'][top]['count']} found"


def render(results: dict, results_path: str | None = None, verdict: bool = True) -> str:
    """The terminal summary of a check; `verdict=False` leaves the verdict
    line out (`harness run` ends with it, after the rest)."""
    c = results["counts"]
    chk = results["checker"]
    s = c["sends"]
    info = results["stats"]["info_sends"]
    lines = [
        f"history: {chk['history']} ({chk['format']}, {chk['events']} events), checked in "
        f"{chk['seconds']:.1f} s " + (f"on Spark {chk['master']}" if chk.get("engine", "spark") == "spark"
                                       else "in this process (no Spark)"),
        f"sends: {s['ok']} ok, {s['fail']} fail, {s['info']} info "
        f"({info['read']} of the info sends were read, {info['unread']} never); "
        f"polls: {c['polls']['ok']} ok; records read: {c['records_read']}",
        f"promises: {'idempotent producer (no duplicates, ordered sends)' if results['promises']['idempotent'] else 'at-least-once'}"
        f" [{results['promises']['source']}]",
        "anomalies:",
    ]
    for name, a in results["anomalies"].items():
        if a["error"]:
            mark = "ERROR"
        elif a.get("allowed") and a["count"]:
            mark = "allowed"
        elif a["count"]:
            mark = "info"
        else:
            mark = ""
        line = f"  {name:<20} {a['count']:>8}  {mark:<7}"
        if a["count"] and a["examples"]:
            line += f"  e.g. {describe(name, a['examples'][0])}"
        elif not a["count"]:
            line = line.rstrip()
        lines.append(line)
    for w in results.get("warnings", []):
        lines.append(f"warning: {w}")
    if verdict:
        lines.append(verdict_line(results))
    if results_path:
        lines.append(f"results: {results_path}")
    return "\n".join(lines)
