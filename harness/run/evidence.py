"""What a run's pages show that is read from the run's folder, not from
results.json: the history's columns (a sample of send latencies, the
operations the timeline draws, the events behind the examples, the times of
the examples' events), the cluster-state timeline's lanes (states.jsonl),
run.json and the files to link. `gather` reads them once into `Evidence`;
harness/pages/ draws it and reads nothing itself.

History columns are read once through `HistorySource` (Parquet column reads;
JSONL converted in batches), never the whole history as Python objects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import HistoryError
from core.history.faults import fault_intervals as paired_intervals
from core.history.elections import controller_lines
from core.history.features import finalized
from core.history.files import HistorySource, iter_source_jsonl, load_run_json, resolve
from core.history.format import COMMITTED, NEMESIS_PROCESS_ID
from core.history.jsonl import ReadReport
from core.history.parquet import events_to_table, table_to_events
from core.history.states import read_states as read_states_file
from harness.pages.report import example_indexes
from harness.pages.stories import story_indexes
from nemesis.registry import FAULT_ENDS

log = logging.getLogger(__name__)

MAX_SCATTER = 20_000

# Client operations drawn in timeline.html at most, so that the page stays small
# whatever the run's length (its size is measured by `harness bench report`,
# docs/benchmarks.md, "Report of a 10M-event run").
TIMELINE_BUDGET = 5_000

# Columns of the history the figures read (one read for all of them).
COLUMNS = ["index", "time", "process", "type", "f", "value", "partition", "offset", "error", "records"]

CONTEXT = 2  # events shown before and after each example's events




@dataclass
class Evidence:
    """A run's folder as its pages need it (module docstring); empty parts where
    a file is missing or cannot be read (the report says less, never fails)."""

    folder: Path
    run: dict = field(default_factory=dict)  # run.json
    intervals: list[dict] = field(default_factory=list)  # each fault's interval, ns
    history_end: int = 0  # the history's last time, ns
    latencies: object = None  # a pandas frame of (t, ms, type): a sample of send completions
    lanes: dict = field(default_factory=dict)  # per partition, its leader, epoch and ISR segments
    nodes: dict = field(default_factory=dict)  # per node, its state's segments
    truncations: list[dict] = field(default_factory=list)
    controller: list[dict] = field(default_factory=list)  # the KRaft controller's records (kraft-* lines)
    features: dict = field(default_factory=dict)  # the feature levels the controller finalized, by name
    marks: list[dict] = field(default_factory=list)  # the examples' events, at their partition and time
    excerpt: list[dict] = field(default_factory=list)  # the history events the page cites, with context
    timeline: tuple | None = None  # (operations to draw, how they were chosen)
    groups: dict = field(default_factory=dict)  # per consumer group, its progress (`group_progress`)
    files: list[str] = field(default_factory=list)  # the run's files to link, relative to its folder


def gather(run_dir: Path, results: dict) -> Evidence:
    """Read what the pages of the run in `run_dir` show beside `results`."""
    ev = Evidence(Path(run_dir))
    if (ev.folder / "run.json").is_file():
        try:
            ev.run = load_run_json(ev.folder / "run.json")
        except HistoryError as e:
            log.warning("%s", e)
    try:
        source = resolve(ev.folder)
    except HistoryError:
        source = None
    stats = results.get("stats", {})
    end_time = max([x["second"] + 1 for x in stats.get("throughput", [])] or [0]) * 10**9
    ev.intervals = fault_intervals(stats.get("faults", []), end_time)
    table = None
    if source is not None:
        try:
            table = history_table(source)
        except (OSError, HistoryError, ValueError) as e:
            log.warning("no history figures: %s", e)
    if table is not None:
        ev.latencies = send_latencies(table=table)
        ev.history_end = int(table["time"][-1].as_py()) if table.num_rows else 0
        try:
            ev.timeline = timeline_ops(table, TIMELINE_BUDGET)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("no timeline: %s", e)
        if (ev.run.get("workload") or {}).get("groups"):
            try:
                ev.groups = group_progress(source, table)
            except (KeyError, TypeError, ValueError, OSError, HistoryError) as e:
                log.warning("no consumer group figure: %s", e)
    states = read_states(ev.folder)
    ev.controller = controller_lines(states)
    ev.features = finalized(states)
    until = max([ev.history_end] + [s["time"] for s in states])
    try:
        ev.lanes = partition_lanes(states, until)
        if ev.lanes:
            ev.truncations = [s for s in states if s["kind"] == "truncation"]
            ev.marks = anomaly_marks(results, table)
            ev.nodes = node_lanes(states, until)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("no lane chart (states.jsonl: %s)", e)
        ev.lanes = {}
    ev.excerpt = history_excerpt(source, example_indexes(results) | story_indexes(results))
    ev.files = run_files(ev.folder)
    return ev


def fault_intervals(faults: list[dict], end_time: int) -> list[dict]:
    """Each fault's interval (core/history/faults.py's rule, the registry's
    pairs): [{f, start, end, value, ...}] in ns; one never ended lasts to `end_time`."""
    return paired_intervals(faults, FAULT_ENDS, end_time).intervals


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


GROUP_POINTS = 1_000  # points a series of the group figure holds at most


def group_progress(source: HistorySource, table) -> dict:
    """Per consumer group, over time: per partition the log's end (the highest
    acknowledged offset + 1), what its members had handled (the highest handled
    offset + 1), what it had committed (each ok commit) and what reads of its
    committed offsets returned, with its members' rebalances and crashes:
    {group: {"partitions": {p: {"end", "handled", "committed", "read back":
    [[s, offset], ...]}}, "rebalances": [s, ...], "crashes": [[s, process],
    ...]}}. `table`: the history's COLUMNS, already read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    # Only the group columns `table` lacks are read again, row for row beside it.
    extra = _read_columns(source, ["offsets", "group", "partitions"])
    is_group = pc.fill_null(pc.is_in(table["f"], value_set=pa.array(["assign", "commit", COMMITTED])), False)
    marked = extra.filter(is_group)
    for name in ("process", "type", "f", "time"):
        marked = marked.append_column(name, table[name].filter(is_group))
    member: dict[int, str] = {}
    reading: dict[int, str] = {}  # process -> the group of its committed read under way
    out: dict[str, dict] = {}
    for e in marked.to_pylist():
        name = e["group"] if e["group"] is not None else reading.pop(e["process"], None)
        if name is None:
            continue
        if e["f"] != COMMITTED:
            member.setdefault(e["process"], name)
        g = out.setdefault(name, {"partitions": {}, "rebalances": [], "crashes": []})
        at = round(e["time"] / 1e9, 3)
        if e["f"] == "assign" and e["type"] == "ok":
            g["rebalances"].append(at)
        elif e["type"] == "ok" and e["f"] in ("commit", COMMITTED):
            series = "committed" if e["f"] == "commit" else "read back"
            for x in e["offsets"] or []:
                g["partitions"].setdefault(x["partition"], {}).setdefault(series, []).append([at, x["offset"]])
        elif e["f"] == COMMITTED and e["type"] == "invoke":
            reading[e["process"]] = name
    if not out:
        return {}
    crashed = table.filter(pc.fill_null(pc.and_(pc.equal(table["f"], "crash"), pc.equal(table["type"], "ok")),
                                        False))
    for t, proc in zip(crashed["time"].to_pylist(), crashed["process"].to_pylist()):
        if proc in member:
            out[member[proc]]["crashes"].append([round(t / 1e9, 3), proc])
    end_s = (int(table["time"][-1].as_py()) if table.num_rows else 0) / 1e9
    grid = np.linspace(0.0, end_s, GROUP_POINTS)
    # The log's end: every partition's acknowledged offsets, as a running maximum.
    acks = table.filter(pc.fill_null(pc.and_(pc.equal(table["f"], "send"), pc.equal(table["type"], "ok")), False))
    ends = _running_max(acks["time"].to_numpy(zero_copy_only=False) / 1e9,
                        acks["partition"].to_numpy(zero_copy_only=False),
                        acks["offset"].to_numpy(zero_copy_only=False) + 1, grid)
    done = pc.fill_null(pc.and_(pc.equal(table["f"], "process"), pc.equal(table["type"], "ok")), False)
    steps = table.filter(done)
    procs = steps["process"].to_numpy(zero_copy_only=False)
    records = steps["records"].combine_chunks()
    parent = pc.list_parent_indices(records).to_numpy()
    flat = pc.list_flatten(records)
    times = steps["time"].to_numpy(zero_copy_only=False)[parent] / 1e9
    for name, g in out.items():
        mine = np.isin(procs[parent], [p for p, grp in member.items() if grp == name])
        handled = _running_max(times[mine], flat.field("partition").to_numpy(zero_copy_only=False)[mine],
                               flat.field("offset").to_numpy(zero_copy_only=False)[mine] + 1, grid)
        for p in sorted(set(ends) | set(handled) | set(g["partitions"])):
            into = g["partitions"].setdefault(p, {})
            into["end"], into["handled"] = ends.get(p, []), handled.get(p, [])
            into.setdefault("committed", [])
            into.setdefault("read back", [])
    return out


def _running_max(time, partition, offset, grid) -> dict[int, list[list]]:
    """Per partition, the running maximum of `offset` over `time` (in time
    order), at the times of `grid` where it changed: [[s, offset], ...]."""
    import numpy as np

    out: dict[int, list[list]] = {}
    for p in np.unique(partition).tolist():
        at = partition == p
        t, o = time[at], offset[at]
        order = np.argsort(t, kind="stable")
        t, o = t[order], np.maximum.accumulate(o[order])
        i = np.searchsorted(t, grid, "right") - 1
        seen = i >= 0
        values = o[i[seen]]
        keep = np.concatenate(([True], values[1:] != values[:-1])) if len(values) else values.astype(bool)
        out[int(p)] = [[round(float(s), 3), int(v)] for s, v in zip(grid[seen][keep], values[keep])]
    return out


def history_table(source: HistorySource):
    """The columns every figure reads (COLUMNS), in one read."""
    return _read_columns(source, COLUMNS)


def history_excerpt(source: HistorySource | None, indexes: set[int]) -> list[dict]:
    """The events at `indexes`, with a little context on each side."""
    if source is None or not indexes:
        return []
    wanted = set()
    for i in indexes:
        wanted.update(range(max(0, i - CONTEXT), i + CONTEXT + 1))
    if source.format == "parquet":
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        keep = pa.array(sorted(wanted), pa.int64())
        return [e for f in source.files
                for e in table_to_events(pq.read_table(f, filters=pc.is_in(pc.field("index"), keep)))]
    return [e for e in iter_source_jsonl(source, ReadReport()) if e["index"] in wanted]


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



def run_files(run_dir: Path) -> list[str]:
    """The run's files a report links to, relative to its folder: the run's own, then each node's."""
    names = [n for n in ("run.json", "history.jsonl", "history.parquet", "results.json", "harness.log")
             if (run_dir / n).exists()]
    nodes = sorted(p for p in (run_dir / "nodes").glob("*") if p.is_dir()) if (run_dir / "nodes").is_dir() else []
    return names + [f.relative_to(run_dir).as_posix() for node in nodes for f in sorted(node.iterdir())]
