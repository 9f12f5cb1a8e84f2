"""A small, obviously-correct checker: HISTORY.md's definitions, read literally,
over a list of events in memory. Tests compare the Spark checker against it."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict


def reference_counts(events: list[dict], dumps: dict[str, list[list[int]]] | None = None) -> dict[str, int]:
    """Every anomaly's count; `dumps`: each node's replica records at the end,
    [partition, offset, epoch, key, value] (docs/history.md)."""
    client = [e for e in events if e["process"] != "nemesis"]
    # A transaction's sends are sends, its reads reads, its offsets a commit's (docs/history.md,
    # "Transactions"); a read at read_uncommitted is no read.
    txns = _transactions(client)
    client = [x for e in client for x in _as_plain(e)]

    # Sends by value.
    outcome: dict[int, str] = {}
    ack: dict[int, tuple[int, int]] = {}
    invoked_at: dict[int, int] = {}
    place: dict[int, int] = {}  # a transaction's send: its place in its invocation's list
    process_of: dict[int, int] = {}
    for e in client:
        if e["f"] != "send":
            continue
        v = e["value"]
        if e["type"] == "invoke":
            invoked_at[v] = e["index"]
            place[v] = e.get("place", 0)
            process_of[v] = e["process"]
            outcome.setdefault(v, "info")  # never completed counts as info
        else:
            outcome[v] = e["type"]
            if e["type"] == "ok":
                ack[v] = (e["partition"], e["offset"])

    # Reads: (process, index, partition, offset, value), in history order.
    reads = []
    for e in client:
        if e["f"] == "poll" and e["type"] == "ok":
            for r in e["records"]:
                reads.append((e["process"], e["index"], r["partition"], r["offset"], r["value"]))

    # Final reads: the polls of a process between its final-reads invocation
    # and that invocation's completion (paired by order); an invocation never
    # completed runs to the end. A partition's final log is known where an ok
    # completion lists it in `ends` (the latest such completion's end counts).
    spans: list[tuple[int, int, int]] = []
    ends: dict[int, int] = {}
    open_: dict[int, list[int]] = defaultdict(list)
    for e in client:
        if e["f"] != "final-reads":
            continue
        if e["type"] == "invoke":
            open_[e["process"]].append(e["index"])
        elif open_[e["process"]]:
            spans.append((e["process"], open_[e["process"]].pop(0), e["index"]))
            if e["type"] == "ok":
                for end in e["ends"]:
                    ends[end["partition"]] = end["offset"]
    for process, pending in open_.items():
        spans += [(process, i, float("inf")) for i in pending]
    final_read = [any(pr == process and lo < index < hi for pr, lo, hi in spans)
                  for process, index, _, _, _ in reads]
    final_log = {(v, p) for (_, _, p, o, v), fin in zip(reads, final_read) if fin and p in ends and o < ends[p]}

    read_values = {r[4] for r in reads}
    max_read: dict[int, int] = {}
    for _, _, p, o, _ in reads:
        max_read[p] = max(max_read.get(p, -1), o)

    positions: dict[int, set] = defaultdict(set)
    for v, pos in ack.items():
        positions[v].add(pos)
    for _, _, p, o, v in reads:
        positions[v].add((p, o))

    counts = {}
    counts["lost-write"] = sum(1 for v, (p, o) in ack.items()
                               if v not in read_values and max_read.get(p, -1) > o)
    lost_write = {v for v, (p, o) in ack.items() if v not in read_values and max_read.get(p, -1) > o}
    counts["unseen"] = sum(1 for v, (p, o) in ack.items()
                           if v not in read_values and not max_read.get(p, -1) > o and p not in ends)
    counts["lost-acked"] = sum(1 for v, (p, o) in ack.items()
                               if p in ends and (v, p) not in final_log and v not in lost_write)
    counts["dirty-read"] = len({v for (_, _, p, _, v), fin in zip(reads, final_read)
                                if not fin and p in ends and (v, p) not in final_log
                                and outcome.get(v) not in ("ok", "fail")})
    counts["duplicate"] = sum(1 for v, ps in positions.items() if len(ps) >= 2)
    values_at: dict[tuple[int, int], set] = defaultdict(set)
    for v, ps in positions.items():
        for pos in ps:
            values_at[pos].add(v)
    counts["inconsistent-offset"] = sum(1 for vs in values_at.values() if len(vs) >= 2)
    counts["aborted-read"] = sum(1 for v in read_values if outcome.get(v) == "fail")

    known: dict[int, list] = defaultdict(list)  # partition -> its known offsets, sorted
    for (p, o) in sorted(values_at):
        known[p].append(o)
    back = skip = 0
    for _, r, a in consecutive_reads(client):
        b = r["offset"]
        if a is not None:
            if b <= a:
                back += 1
            else:  # a known offset strictly between a and b: the first one above a
                offsets = known[r["partition"]]
                i = bisect_right(offsets, a)
                if i < len(offsets) and offsets[i] < b:
                    skip += 1
    counts["nonmonotonic-poll"] = back
    counts["poll-skip"] = skip

    # Each process's acknowledged sends to a partition, in invocation order (a transaction's as it lists them).
    by_proc: dict[tuple[int, int], list] = defaultdict(list)
    for v, (p, o) in ack.items():
        by_proc[(process_of[v], p)].append((invoked_at[v], place[v], o))
    counts["nonmonotonic-send"] = sum(
        1 for sends in by_proc.values() for (_, _, a), (_, _, b) in zip(sorted(sends), sorted(sends)[1:]) if b < a)

    counts.update(_groups(client, reads, final_read, ends, txns))

    # Replicas: at an offset below the final end that the final reads returned
    # values at, a node's record with another value.
    final_values: dict[tuple[int, int], set] = defaultdict(set)
    for (_, _, p, o, v), fin in zip(reads, final_read):
        if fin and p in ends and o < ends[p]:
            final_values[(p, o)].add(v)
    diverged = set()
    for records in (dumps or {}).values():
        for p, o, _epoch, _key, v in records:
            if (p, o) in final_values and v not in final_values[(p, o)]:
                diverged.add((p, o))
    counts["replica-divergence"] = len(diverged)

    counts.update(_transaction_counts(txns, client, values_at))
    counts["_info_read"] = sum(1 for v, oc in outcome.items() if oc == "info" and v in read_values)
    counts["_info_unread"] = sum(1 for v, oc in outcome.items() if oc == "info" and v not in read_values)
    return counts


def consecutive_reads(client: list[dict]):
    """Each record an ok poll returned, with its poll and the offset the same
    process last read in that partition (None at a restart): its consecutive
    reads, restarted by assign, crash (all partitions) and seek (its
    partition; all when it names none), each at its completion when it
    happened (ok or info; an info seek names its invocation's partition)."""
    last: dict[tuple[int, int], int] = {}
    seek_invoked: dict[int, list] = defaultdict(list)
    for e in client:
        if e["f"] == "seek" and e["type"] == "invoke":
            seek_invoked[e["process"]].append(e.get("partition"))
            continue
        if e["f"] in ("assign", "crash", "seek") and e["type"] in ("invoke", "fail"):
            if e["f"] == "seek":
                seek_invoked[e["process"]].pop(0)
            continue
        if e["f"] == "seek":
            named = e.get("partition", seek_invoked[e["process"]].pop(0))
        if e["f"] in ("assign", "crash") or (e["f"] == "seek" and named is None):
            for key in [k for k in last if k[0] == e["process"]]:
                del last[key]
        elif e["f"] == "seek":
            last.pop((e["process"], named), None)
        elif e["f"] == "poll" and e["type"] == "ok":
            for r in e["records"]:
                key = (e["process"], r["partition"])
                yield e, r, last.get(key)
                last[key] = r["offset"]


def _as_plain(e: dict) -> list[dict]:
    """A client event as the plain events it counts as: a transaction's as a
    send per send, a poll of its records, a commit of its offsets; a
    read_uncommitted poll as an empty one."""
    uncommitted = e.get("isolation") == "read_uncommitted"
    if e["f"] == "poll" and uncommitted:
        return [{**e, "records": []}] if e["type"] == "ok" else [e]
    if e["f"] != "txn":
        return [e]
    out = []
    for place, s in enumerate(e["sends"]):
        send = {"index": e["index"], "process": e["process"], "type": e["type"], "f": "send", "value": s["value"],
                "place": place}
        if e["type"] == "ok":
            send.update(partition=s["partition"], offset=s["offset"])
        out.append(send)
    if e["type"] != "invoke":
        out.append({**e, "f": "poll", "type": "ok", "records": [] if uncommitted else (e.get("records") or []),
                    "txn": e["index"]})
    if e.get("offsets") is not None:
        out.append({**e, "f": "commit", "txn": e["index"]})
    return out


def _transactions(client: list[dict]) -> list[dict]:
    """Each transaction: its invocation, its completion (None: never), its node."""
    out = []
    for inv, comp in _paired(client, "txn"):
        out.append({"inv": inv, "comp": comp, "node": comp["index"] if comp is not None else inv["index"]})
    return out


def _transaction_counts(txns: list[dict], client: list[dict], values_at) -> dict[str, int]:
    """precommitted-read, torn-transaction and the cycles, as docs/history.md's "Transactions" reads them."""
    writer = {}  # value -> its transaction
    for t in txns:
        for s in t["inv"]["sends"]:
            writer[s["value"]] = t
    polls = [e for e in client if e["f"] == "poll" and e["type"] == "ok"]
    own = {r["value"] for e in polls if "txn" in e for r in e["records"]
           if r["value"] in writer and writer[r["value"]]["node"] == e["txn"]}
    counts = {"precommitted-read": len(own)}

    # Each committed transaction's records, by partition.
    committed = [t for t in txns if t["comp"] is not None and t["comp"]["type"] == "ok"]
    records_of = {}
    for t in committed:
        for s in t["comp"]["sends"]:
            records_of.setdefault((t["node"], s["partition"]), []).append((s["offset"], s["value"]))
    # torn: a process's consecutive reads of a partition (restarted as for poll-skip) step over a record of a
    # committed transaction it returned another record of there.
    returned = {(e["process"], r["partition"], r["value"]) for e in polls for r in e["records"]}
    torn = set()
    for e, r, a in consecutive_reads(client):
        b = r["offset"]
        if a is not None and b > a + 1:
            for (node, p), recs in records_of.items():
                if p != r["partition"]:
                    continue
                for o, v in recs:
                    if a < o < b and any((e["process"], p, w) in returned for o2, w in recs if o2 != o):
                        torn.add((node, e["process"], p))
    counts["torn-transaction"] = len(torn)

    # The graphs: ww from each partition's log order, wr from the transactions' reads, realtime from
    # completions before invocations.
    ww, wr = set(), set()
    by_partition = defaultdict(list)
    for (node, p), recs in records_of.items():
        by_partition[p] += [(o, node) for o, _ in recs]
    for recs in by_partition.values():
        recs.sort()
        ww |= {(a, b) for (_, a), (_, b) in zip(recs, recs[1:]) if a != b}
    for e in polls:
        if "txn" in e:
            for r in e["records"]:
                t = writer.get(r["value"])
                if t is not None and t["node"] != e["txn"] and not (t["comp"] and t["comp"]["type"] == "fail"):
                    wr.add((t["node"], e["txn"]))
    nodes = {x for edge in ww | wr for x in edge}
    span = {t["node"]: (t["inv"]["index"], t["comp"]["index"] if t["comp"] else None) for t in txns}
    rt = {(a, b) for a in nodes for b in nodes if span[a][1] is not None and span[a][1] < span[b][0]}

    def components(edges: set) -> list[set]:
        """The strongly connected components of two nodes or more (Kosaraju's: the
        finishing order of a search along the edges, then searches against them)."""
        succ, pred = defaultdict(list), defaultdict(list)
        for a, b in edges:
            succ[a].append(b)
            pred[b].append(a)
        seen, order = set(), []
        for root in sorted(nodes):
            if root in seen:
                continue
            seen.add(root)
            stack = [(root, iter(succ[root]))]
            while stack:
                n, following = stack[-1]
                for m in following:
                    if m not in seen:
                        seen.add(m)
                        stack.append((m, iter(succ[m])))
                        break
                else:
                    stack.pop()
                    order.append(n)
        placed, found = set(), []
        for root in reversed(order):
            if root in placed:
                continue
            c, todo = {root}, [root]
            placed.add(root)
            while todo:
                for m in pred[todo.pop()]:
                    if m not in placed:
                        placed.add(m)
                        c.add(m)
                        todo.append(m)
            if len(c) >= 2:
                found.append(c)
        return found

    def holding(c: set, edges: set) -> bool:
        return any(a in c and b in c for a, b in edges)

    counts["G0"] = len(components(ww))
    counts["G1c"] = sum(1 for c in components(ww | wr) if holding(c, wr))
    counts["G0-realtime"] = sum(1 for c in components(ww | rt) if holding(c, rt))
    counts["G1c-realtime"] = sum(1 for c in components(ww | wr | rt) if holding(c, wr) and holding(c, rt))
    counts["wr-cycle"] = len(components(wr | rt))
    return counts


def _paired(client: list[dict], f: str) -> list[tuple[dict, dict | None]]:
    """Each invocation of `f` with its completion (the k-th of its process answers the k-th), None if none."""
    pending: dict[int, list[dict]] = defaultdict(list)
    pairs: list[list] = []
    for e in client:
        if e["f"] != f:
            continue
        if e["type"] == "invoke":
            pairs.append([e, None])
            pending[e["process"]].append(pairs[-1])
        elif pending[e["process"]]:
            pending[e["process"]].pop(0)[1] = e
    return [(inv, comp) for inv, comp in pairs]


def _groups(client: list[dict], reads: list, final_read: list, ends: dict, txns: list[dict]) -> dict[str, int]:
    """consumer-loss, redelivery and lost-commit, as docs/history.md's "Consumer groups" reads."""
    member: dict[int, str] = {}
    for e in client:
        if e["f"] in ("assign", "commit", "committed") and isinstance(e.get("group"), str) and "txn" not in e:
            member.setdefault(e["process"], e["group"])
    # A transaction carrying a group makes its process a member, and records processing.
    carrying = [e for t in txns for e in (t["inv"], t["comp"]) if e is not None and isinstance(e.get("group"), str)]
    for e in carrying:
        member.setdefault(e["process"], e["group"])
    processed = _paired(client, "process")
    processing = {member[e["process"]] for e in [inv for inv, _ in processed] + carrying if e["process"] in member}
    # The consume-transform-produce transactions' completions: those carrying a group handle their records.
    transforms = [e for e in carrying if e["type"] != "invoke"]
    # Each group's final committed offsets: its last final read's.
    final_committed: dict[tuple[str, int], int] = {}
    last_at: dict[tuple[str, int], int] = {}
    committed = _paired(client, "committed")
    for inv, comp in committed:
        if comp is None or comp["type"] != "ok" or not inv.get("final"):
            continue
        for item in comp["offsets"]:
            key = (inv["group"], item["partition"])
            if key not in last_at or last_at[key] < comp["index"]:
                last_at[key], final_committed[key] = comp["index"], item["offset"]
    lowest: dict[tuple[str, int], int] = {}
    for process, _, p, o, _ in reads:
        if process in member:
            key = (member[process], p)
            lowest[key] = min(lowest.get(key, o), o)
    handled: set = set()
    processed_ok: dict[tuple[str, int], int] = defaultdict(int)
    for inv, comp in processed:
        g = member.get(inv["process"])
        if g is None:
            continue
        if comp is None or comp["type"] in ("ok", "info"):
            for rec in inv["records"]:  # the step's records: a completion repeats them only when ok
                handled.add((g, rec["value"]))
        if comp is not None and comp["type"] == "ok":
            for rec in comp["records"]:
                processed_ok[(g, rec["value"])] += 1
    for comp in transforms:  # handled where it committed or may have; handled ok where it committed
        g = member[comp["process"]]
        for rec in (comp.get("records") or []) if comp["type"] in ("ok", "info") else []:
            handled.add((g, rec["value"]))
            processed_ok[(g, rec["value"])] += comp["type"] == "ok"
    loss = set()
    for (_, _, p, o, v), fin in zip(reads, final_read):
        if not (fin and p in ends and o < ends[p]):
            continue
        for g in processing:
            c = final_committed.get((g, p), -1)
            d = lowest.get((g, p))
            if c >= 0 and d is not None and d <= o < c and (g, v) not in handled:
                loss.add((g, v))
    counts = {"consumer-loss": len(loss),
              "redelivery": sum(1 for (g, _), n in processed_ok.items() if n >= 2 and g in processing)}
    # lost-commit: a committed read below an acknowledged commit no lower commit took back.
    commits = [e for e in client if e["f"] == "commit" and isinstance(e.get("group"), str)]
    lost = 0
    for inv, comp in committed:
        if comp is None or comp["type"] != "ok":
            continue
        for item in comp["offsets"]:
            g, p, returned = inv["group"], item["partition"], item["offset"]
            for c in commits:
                if c["type"] != "ok" or c["group"] != g or c["index"] >= inv["index"]:
                    continue
                for off in (x["offset"] for x in c["offsets"] if x["partition"] == p):
                    taken_back = any(j["type"] == "invoke" and j["group"] == g and c["index"] < j["index"] < comp["index"]
                                     and any(x["partition"] == p and x["offset"] < off for x in j["offsets"])
                                     for j in commits)
                    if off > returned and not taken_back:
                        break
                else:
                    continue
                lost += 1
                break
    counts["lost-commit"] = lost
    return counts
