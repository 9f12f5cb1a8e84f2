"""Human words for results: a one-line description of each example, and the
terminal summary of `harness check`. The HTML report uses the same words;
what each anomaly means is `checkers.anomalies.MEANING`."""

from __future__ import annotations


def run_seconds(ns: int) -> str:
    """A history time as the reader of a terminal sees it: seconds into the run."""
    return f"{ns / 1e9:.1f} s into the run"


def describe(name: str, e: dict, clock=run_seconds) -> str:
    """One line that says what an example shows and where to find it; `clock`
    turns a history time (ns) into words (the report passes a wall clock)."""
    if name == "lost-acked":
        read = (f"read at {clock(e['read_time'])} (event {e['read_index']})" if e.get("read_index") is not None
                else "never read")
        return (f"value {e['value']} acknowledged at partition {e['partition']} offset {e['offset']} "
                f"(event {e['ack_index']}), {read}, not in the topic at the end "
                f"(the final log of partition {e['partition']} ends at offset {e['final_end']})")
    if name == "dirty-read":
        send = {"info": f"its send's outcome unknown (event {e['completion_index']})",
                "never completed": f"its send never completed (event {e['invoke_index']})",
                "no send": "no send in the history wrote it"}.get(e["send"], e["send"])
        return (f"value {e['value']} read from partition {e['partition']} at {clock(e['read_time'])} "
                f"(event {e['read_index']}), {send}, not in the topic at the end "
                f"(its final log ends at offset {e['final_end']})")
    if name in ("lost-write", "unseen"):
        reach = (f"reads reached offset {e['max_read_offset']}" if e.get("max_read_offset") is not None
                 else "no read of that partition")
        return (f"value {e['value']} acknowledged at partition {e['partition']} offset {e['offset']} "
                f"(event {e['ack_index']}), never read; {reach}")
    if name == "duplicate":
        where = ", ".join(f"{p['partition']}/{p['offset']}" + _at(p) for p in e["positions"])
        return f"value {e['value']} at {where}"
    if name == "inconsistent-offset":
        values = ", ".join(f"{v['value']}" + _at(v) for v in e["values"])
        return f"partition {e['partition']} offset {e['offset']} holds values {values}"
    if name == "aborted-read":
        return (f"value {e['value']} failed ({e.get('error')}, event {e['fail_index']}) "
                f"but was read (event {e['read_index']})")
    if name in ("nonmonotonic-poll", "poll-skip"):
        text = (f"process {e['process']} read partition {e['partition']} offset {e['prev_offset']} "
                f"(event {e['prev_index']}) then {e['offset']} (event {e['index']})")
        if name == "poll-skip":
            text += f", skipping known offset {e['skipped_offset']}"
        return text
    if name == "nonmonotonic-send":
        return (f"process {e['process']} sent {e['prev_value']} (event {e['prev_invoke_index']}) "
                f"then {e['value']} (event {e['invoke_index']}) to partition {e['partition']}; "
                f"acked at offsets {e['prev_offset']} then {e['offset']}")
    return str(e)


def _at(p: dict) -> str:
    refs = []
    if "ack_index" in p:
        refs.append(f"acked event {p['ack_index']}")
    if "read_index" in p:
        refs.append(f"read event {p['read_index']}")
    return f" ({', '.join(refs)})" if refs else ""


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
        f"{chk['seconds']:.1f} s on Spark {chk['master']}",
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
