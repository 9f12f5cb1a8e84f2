"""harness run: provision a cluster, run clients under faults, heal, read back, check, report.

The lifecycle, in order; every stage that started something is undone in
reverse order, also on Ctrl-C, SIGTERM or an error:

  spec -> run directory -> (a check service starts, niced) -> cluster ->
  ZooKeeper -> system -> topic -> history (and its follower, converting it
  to Parquet as it is written) + cluster-state observer ->
  workload + nemesis for --time-limit -> heal -> await recovery -> stop clients -> settle ->
  final reads -> stop the observer -> close history -> collect logs (and
  their truncations into states.jsonl) -> history.parquet ->
  disk dumps -> check (in the check service) -> results.json -> report.html
  beside the check: tear down (the stories wait for it)

After an interruption the history recorded so far is still checked and
reported, and the exit status is 2 (the run was not carried out), with the
reason. Otherwise: 0 valid and live, 1 anomalies, or a HANG (nothing
acknowledged long after the heal) or a missed [expect] liveness limit.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field

from checkers import group_balance, service
from checkers.check import check_history, Options
from checkers.liveness import HANG_S, verdict_words
from checkers.results import write_results
from checkers.summary import render as summary, top_anomaly, verdict_line
from core.errors import UserError
from core.history.follow import Follower
from core.history.parquet import jsonl_to_parquet
from core.history.writer import HistoryWriter
from harness.run import spec as specs, store
from harness.run.explanations import add_explanations
from harness.run.report import render as report
from infra import faultfs
from infra.cluster import provision
from infra.faultfs import unmount_system
from infra.system import collect_disk, collect_logs
from infra.systems import SYSTEMS
from infra.zookeeper import ZooKeeper, ZooKeeperOptions
from nemesis.fault import Context
from nemesis.injector import Nemesis
from nemesis.registry import FAULT_ENDS
from nemesis.schedule import from_records, plan, to_records
from workloads.clients import client_log
from workloads.config import WorkloadConfig
from workloads.observer import STATES_FILE, Observer, append_controller_records, append_truncations, origin_seconds
from workloads.topic import create_topic, wait_settled
from workloads.workload import Workload

log = logging.getLogger("harness.run")
SETTLE_S = 30.0  # most seconds to wait for every partition's ISR after healing


def configure(parser) -> None:
    specs.add_arguments(parser)


@dataclass
class Run:
    """Everything a run started, so that the end can undo it in reverse."""

    spec: specs.TestSpec
    dir: store.RunDir
    info: dict = field(default_factory=dict)  # becomes run.json
    cluster: object = None
    zookeeper: object = None
    system: object = None
    history: object = None
    workload: object = None
    nemesis: object = None
    faultfs: object = None  # the disk-fault filesystems under the data dirs (infra.faultfs), if mounted
    problem: str | None = None  # why the run could not be carried out
    observer: object = None  # the cluster-state observer (workloads/observer.py), writing states.jsonl
    check_service: object = None  # where the history is checked (checkers/service.py), if one answers
    reads_ended: float | None = None  # time.monotonic() at the final reads' end: the check phase's start
    teardown: threading.Thread | None = None  # the teardown under way beside the check (_finish)
    # Set by the teardown once the replicas' disks are dumped (or that step was passed):
    # the check reads the dumps (replica-divergence), the rest of the teardown goes on beside it.
    dumped: threading.Event = field(default_factory=threading.Event)
    follower: Follower | None = None  # converting the history to Parquet while it is written


def run(args) -> int:
    spec = specs.from_args(args)
    rd = store.create(spec.results, spec.test_name)
    handler = _log_to(rd.path / "harness.log", client_debug_to=rd.path / CLIENT_LOG if client_debug(spec) else None)
    r = Run(spec, rd, info={"name": spec.test_name, "spec": spec.to_dict(), "seed": spec.seed,
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "command": " ".join(sys.argv), "outcome": "running"})
    rd.write_json("run.json", r.info)
    print(f"run {spec.test_name}: {rd.path} (seed {spec.seed})", file=sys.stderr)
    # SIGINT set here too, not left as inherited: a process started in the background
    # by a script (`harness nightly ... &`, a CI job) inherits SIGINT ignored, and
    # then the one signal that asks a run to heal and tear down gently would be lost.
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            _execute(r)
            r.info["outcome"] = "completed"
        except KeyboardInterrupt:
            r.problem = "interrupted"
            print("\nharness: interrupted; healing and tearing down ...", file=sys.stderr)
        except UserError as e:
            r.problem = str(e)
            log.error("run failed: %s", e)
        except Exception as e:  # a harness bug: keep going to heal and record
            r.problem = f"internal error: {type(e).__name__}: {e}"
            log.error("run failed:\n%s", traceback.format_exc())
        finally:
            _finish(r)
        try:
            return _conclude(r)
        finally:
            _torn_down(r)
    finally:
        if r.follower is not None:
            r.follower.abandon()
        if r.check_service is not None:
            r.check_service.close()
        for sig, was in previous.items():
            signal.signal(sig, was)
        logging.getLogger().removeHandler(handler)
        handler.close()
        if handler.clients is not None:
            client_log.removeHandler(handler.clients)
            client_log.setLevel(logging.WARNING)
            handler.clients.close()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class _RunLog(logging.FileHandler):
    """harness.log; counts the client library's warnings on their way in,
    so that the end of the run can say how many there were."""

    def __init__(self, path):
        super().__init__(path)
        self.client_warnings = 0
        self.clients: logging.Handler | None = None  # clients.log, when the run keeps the client's debug log

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING and not _not_client_log(record):
            self.client_warnings += 1
        super().emit(record)


CLIENT_LOG = "clients.log"  # librdkafka's debug log, when the run's client settings ask for one


def client_debug(spec) -> bool:
    """Whether the run's client settings turn on librdkafka's debug log (`debug` in [producer] or [consumer])."""
    return any((settings or {}).get("debug") for settings in (spec.producer, spec.consumer))


def _log_to(path, client_debug_to=None) -> logging.Handler:
    """harness.log (INFO and up); and, with `client_debug_to`, every line
    the client library logs, its debug lines included, in a file of its own:
    the clients' side of a finding is then in the run's own evidence, and
    harness.log stays readable."""
    handler = _RunLog(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
        for h in root.handlers:  # the terminal keeps its warnings-only level
            if h is not handler and h.level == logging.NOTSET:
                h.setLevel(logging.WARNING)
    for noisy in ("kazoo", "paramiko", "py4j", "workloads.librdkafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if client_debug_to is not None:
        clients = logging.FileHandler(client_debug_to)
        clients.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        clients.setLevel(logging.DEBUG)
        client_log.setLevel(logging.DEBUG)
        client_log.addHandler(clients)
        handler.clients = clients
    # The clients' own complaints during faults (connection refused, REQTMOUT,
    # a thousand times in a power loss) go to harness.log only; the terminal
    # keeps the progress line, which counts their outcomes, and the end of the
    # run says how many there were. Every client is made with
    # `logger=client_log` (workloads.clients), so librdkafka prints nothing
    # to stderr itself.
    for h in root.handlers:
        if h is not handler:
            h.addFilter(_not_client_log)
    return handler


def _client_warnings() -> int | None:
    """How many warnings the client library logged in this run (None outside a run)."""
    return next((h.client_warnings for h in logging.getLogger().handlers if isinstance(h, _RunLog)), None)


def _not_client_log(record: logging.LogRecord) -> bool:
    return not record.name.startswith("workloads.librdkafka")


def _phase(name: str) -> None:
    log.info("phase: %s", name)
    print(f"  {name} ...", file=sys.stderr)


def _execute(r: Run) -> None:
    s = r.spec
    # An explicit schedule (a replay, a shrunk scenario) instead of the seed's plan.
    steps = (from_records(s.schedule, s.nodes, s.partitions) if s.schedule else
             plan(s.nemesis, s.nemesis_targets, s.nodes, s.nemesis_interval, s.time_limit, s.seed, s.partitions,
                  overlap=s.nemesis_overlap))
    r.info["schedule"] = to_records(steps)
    workload_config = WorkloadConfig(
        topic="harness", partitions=s.partitions, replication_factor=s.replication_factor, rate=s.rate,
        producers=s.producers, consumers=s.consumers, consumer_mode=s.consumer_mode, acks=s.acks,
        idempotent=s.idempotent, producer_settings=s.producer, consumer_settings=s.consumer, groups=s.groups,
        client_processes=s.client_processes, replace_on_info=s.replace_on_info,
        transactions=s.transactions or None,
        topic_settings={"min.insync.replicas": str(s.min_insync),
                        "unclean.leader.election.enable": str(s.unclean_election).lower()})

    def observed(phase: str) -> None:  # a phase line in states.jsonl
        if r.observer is not None:
            r.observer.phase(phase)

    # The check service first: its JVM's start and its first priming (slow at nice 19
    # beside a Kafka run's brokers) then have the bring-up's seconds too.
    r.check_service = _check_service(r)
    _phase(f"provisioning {s.nodes} {s.provider} nodes")
    r.cluster = provision(s.provision_options())
    r.info["nodes"] = {n.name: n.address for n in r.cluster.nodes}
    r.info["cluster"] = r.cluster.cluster_id
    zk_connect = ""
    if SYSTEMS[s.system].uses_zookeeper(s.system_options):
        _phase(f"starting ZooKeeper on {s.zk_nodes} node(s)")
        r.zookeeper = ZooKeeper(ZooKeeperOptions(nodes=s.zk_nodes))
        r.zookeeper.setup(r.cluster)
        zk_connect = r.zookeeper.connect_string()
    _phase(f"starting the {s.system} system")
    r.system = _system(s, zk_connect)
    if s.uses_faultfs:  # disk faults (issue 7): the faultfs under every data dir, before the system uses it

        _phase("mounting the fault-injecting filesystem under the data dirs")
        r.faultfs = faultfs.mount_system(r.cluster, r.system, s.disk)
        r.info["faultfs"] = r.faultfs.to_dict()
    r.system.setup(r.cluster)
    r.info["versions"] = {"system": r.system.version(),
                          **({"zookeeper": _zookeeper_version()} if r.zookeeper is not None else {})}
    bootstrap = r.system.bootstrap()
    create_topic(bootstrap, workload_config)
    r.info["topic"] = workload_config.topic
    r.info["bootstrap"] = bootstrap
    r.dir.write_json("run.json", r.info)

    r.history = HistoryWriter(r.dir.path / "history.jsonl")
    r.follower = _history_follower(r)
    # The wall clock at the history's time 0: the report says when things happened.
    origin = time.time() - r.history.now() / 1e9
    r.info["history_origin"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(origin)) + f".{int(origin % 1 * 1000):03d}Z"
    try:  # the cluster-state timeline; it must never be why a run fails
        r.observer = Observer(r.dir.path / STATES_FILE, r.history.now, r.system, r.system.nodes(r.cluster),
                              workload_config.topic, bootstrap, r.system.port)
        r.observer.start()
    except Exception as e:
        log.warning("no cluster-state observer: %s: %s", type(e).__name__, e)
        r.observer = None
    r.workload = Workload(workload_config, bootstrap, r.history)
    r.info.update(r.workload.run_info())
    r.info.setdefault("producer", {})["enable.idempotence"] = s.idempotent
    r.dir.write_json("run.json", r.info)
    r.nemesis = Nemesis(Context(r.cluster, r.system, workload_config.topic, clients=r.workload), steps, r.history)
    _phase(f"running clients for {s.time_limit:g} s with nemesis {','.join(s.nemesis) or 'none'}")
    observed("workload")
    r.workload.start()
    r.nemesis.start()
    _progress(r, s.time_limit)
    _phase("healing")
    observed("heal")
    _claim_check_service(r)
    r.nemesis.stop()
    r.nemesis.heal()
    if r.nemesis.error is not None:
        raise UserError(f"the nemesis failed: {r.nemesis.error}")
    _await_recovery(r)
    r.workload.stop(timeout=15)
    _phase("waiting for the cluster to settle")
    observed("settle")
    try:
        r.info["settled_isr"] = wait_settled(bootstrap, workload_config.topic, timeout_s=SETTLE_S)
    except UserError as e:  # reads still tell what survived; the report says it did not settle
        log.warning("cluster did not settle: %s", e)
        r.info["settled_isr"] = None
    _phase(f"final reads (at most {s.final_time_limit:g} s)")
    observed("final-reads")
    final = r.workload.final_reads(s.final_time_limit)
    r.reads_ended = time.monotonic()
    r.info["final_reads"] = final.to_dict()
    print(f"  {final.summary()}", file=sys.stderr)
    # A record whose key or value is not an integer is none this run wrote: on
    # the run's own topic, a corrupt one. The history has no place for it (its
    # offset counts as not read, so the checker sees what it displaced); the
    # count is kept and said, never dropped in silence.
    undecodable = r.workload.stats().get("skipped_records", 0)
    r.info["undecodable_records"] = undecodable
    if undecodable:
        log.warning("%d record(s) read were not this workload's (key or value not an integer)", undecodable)
        print(f"  warning: {undecodable} record(s) read were not this workload's (key or value not an integer: "
              f"corrupt?); their offsets count as not read", file=sys.stderr)
    transactions = r.workload.transaction_summary()
    if transactions is not None:
        r.info["transactions"] = transactions
        # A read_uncommitted reader that never saw an aborted record: the aborts did
        # not reach the log, so the read_committed readers' check proved little.
        if (transactions["aborted_values"] and workload_config.transactions.read_uncommitted
                and not transactions["aborted_values_read_uncommitted"]):
            print(f"  warning: {transactions['aborted_values']} value(s) of aborted transactions, none seen by "
                  f"a read_uncommitted reader: aborts did not show in the log", file=sys.stderr)


def _check_service(r: Run):
    """The service that will check this run's history: the shared one a nightly or a
    calibration names, else one of the run's own, started now (niced) so that its JVM
    starts and primes while the cluster comes up and the workload runs (its later
    primes on the history written so far); None if it cannot start."""
    shared = service.from_environment()
    if shared is not None:
        return shared
    try:
        return service.start(r.dir.path / "check-service.log", jvm_log_path=r.dir.path / "spark.log",
                             prime_from=r.dir.path / "history.jsonl")
    except (OSError, service.ServiceError) as e:  # the check runs in this process then
        log.warning("no check service: %s", e)
        return None


def _claim_check_service(r: Run) -> None:
    """Tell the check service, from a thread of its own, that the check comes soon: it
    stops priming during the heal and the final reads, not when the check comes (a prime
    under way takes a while to stop, which would be inside the check phase: docs/decisions.md,
    "The check service, claimed when the run heals")."""
    if r.check_service is None:
        return

    def claim() -> None:
        try:
            r.check_service.claim()
        except (UserError, service.ServiceError) as e:  # the check says it again, or checks here
            log.info("claiming the check service: %s", e)

    threading.Thread(target=claim, name="claim-check-service", daemon=True).start()


def _history_follower(r: Run) -> Follower | None:
    """The process that converts the history to Parquet as it is written
    (core/history/follow.py); None if it cannot start: the history is then
    converted after the run."""
    try:
        return Follower.start(r.history.path, r.dir.path / "history.parquet")
    except OSError as e:
        log.warning("no history follower: %s", e)
        return None


def _to_parquet(r: Run, path) -> None:
    """history.parquet beside the closed history: the follower's, else converted here."""
    if r.follower is not None:
        asked = time.monotonic()
        done = r.follower.finish()
        if isinstance(done, dict):
            for warning in done.get("warnings", []):
                log.info(warning)
            log.info("history.parquet: %d events, converted while written; done %.2f s after the history closed "
                     "(the follower: %s s after the word, %s s of it writing the last row group)", done["events"],
                     time.monotonic() - asked, done.get("after_told_s"), done.get("last_row_group_s"))
            return
        log.info("history.parquet: the follower wrote none (%s); converting here", done)
    jsonl_to_parquet(path, r.dir.path / "history.parquet")


def _check(r: Run, opts: Options) -> dict:
    """The history's results, from the check service if it answers, else checked here."""
    if r.check_service is not None:
        try:
            return r.check_service.check(r.dir.path, opts)
        except service.ServiceError as e:
            log.warning("the check service did not answer (%s): checking in this process", e)
            print(f"  the check service did not answer ({e}): checking in this process", file=sys.stderr)
    return check_history(r.dir.path, opts)


def _await_recovery(r: Run) -> None:
    """Keep the clients running after the heal until a send is acknowledged on
    every partition that acknowledged sends before it and (with consumers) a
    poll returns records, or for the HANG limit (or the
    spec's max-recovery-s, if longer) and a little more: the checker measures
    recovery from the history (checkers/liveness.py), and needs the clients
    still trying to see it, or its absence."""
    limit = max(HANG_S, float(r.spec.expect.get("max-recovery-s", 0))) + 3
    _phase(f"waiting for the cluster to acknowledge again (at most {limit:g} s)")

    def counts():
        st = r.workload.stats()
        return st.get("acked_offsets", {}), st.get("records_read", 0)

    acked0, read0 = counts()

    def silent(acked: dict) -> list[int]:
        # Every partition that acknowledged before the heal, again: one that stays
        # silent is watched for the whole limit, so the checker can call it hung.
        return sorted(p for p, o in acked0.items() if acked.get(p, -1) <= o)

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        acked, read = counts()
        if not silent(acked) and acked and (r.spec.consumers == 0 or read > read0):
            log.info("recovered: sends acknowledged on every partition and records read after the heal")
            return
        time.sleep(0.2)
    acked, read = counts()
    waiting = silent(acked)
    log.warning("in %g s after the heal: %s", limit, "; ".join(
        ([f"no acknowledgement on partition(s) {', '.join(map(str, waiting))}"] if waiting else [])
        + ([] if r.spec.consumers == 0 or read > read0 else ["no records read"])) or "no acknowledgement")


def _system(s: specs.TestSpec, zk_connect: str):
    settings = {"default.replication.factor": s.replication_factor, "min.insync.replicas": s.min_insync,
                "unclean.leader.election.enable": str(s.unclean_election).lower(),
                "num.partitions": s.partitions, **s.broker}
    return SYSTEMS[s.system].make(zk_connect, settings, s.system_options)


def _zookeeper_version() -> str:
    """The ZooKeeper release the ensemble runs (Debian's package)."""

    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "zookeeper"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return f"zookeeper {out}" if out else "zookeeper (Debian)"


def _progress(r: Run, seconds: float) -> None:
    """Wait out the fault phase, showing progress: one live line on a
    terminal (cut to its width, so that it never wraps and stays one line),
    a plain line every 10 s and one at the end otherwise."""
    tty = sys.stderr.isatty()
    started = time.monotonic()
    last_line = 0.0
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        if r.nemesis.error is not None:
            raise UserError(f"the nemesis failed: {r.nemesis.error}")
        line = _status(r, elapsed, seconds)
        if tty:
            width = shutil.get_terminal_size().columns
            print(f"\r  {line[:max(width - 3, 20)]}\033[K", end="", file=sys.stderr, flush=True)
        elif elapsed - last_line >= 10:
            print(f"  {line}", file=sys.stderr, flush=True)
            last_line = elapsed
        log.debug("%s", line)
        time.sleep(min(1.0, seconds - elapsed))
    if tty:
        print(file=sys.stderr)
    else:
        print(f"  {_status(r, seconds, seconds)}", file=sys.stderr, flush=True)


def _status(r: Run, elapsed: float, total: float) -> str:
    """elapsed, operations by outcome, the faults in force (the nemesis's own
    words: `Nemesis.current`)."""
    stats = r.workload.stats()
    ops = stats.get("ops", {})

    def triple(f: str) -> str:
        o = ops.get(f, {})
        return f"{o.get('ok', 0)}/{o.get('fail', 0)}/{o.get('info', 0)}"

    # The faults early: a narrow terminal cuts the end of the line.
    txns = f" | txns {triple('txn')}" if "txn" in ops else ""
    return (f"[{elapsed:4.0f}s / {total:.0f}s] faults: {r.nemesis.current} | sends ok/fail/info {triple('send')} | "
            f"polls {triple('poll')}{txns} | in flight {stats.get('in_flight', 0)}")


def _finish(r: Run) -> None:
    """Undo what the run started, in reverse, each step guarded. What the
    check reads is settled here: the nemesis, the clients and the observer
    stopped, the history closed, the node logs collected (results.json scans
    them). The rest (disk dumps, system, ZooKeeper, cluster) is made ready
    as `r.teardown`, a thread that `_conclude` starts beside the check once
    the history is converted: a Kafka run's disk dumps alone take seconds.
    Ctrl-C is held off meanwhile and while `_torn_down` waits for that
    thread, so that nothing is left half-undone."""
    def heal():
        r.nemesis.stop()
        r.nemesis.heal()

    def stop_clients():
        r.workload.stop(timeout=5)
        r.workload.abandon()

    with _held_off(signal.SIGINT):
        _undo(r, (("heal", r.nemesis, heal),
                  ("stop clients", r.workload, stop_clients),
                  ("stop the observer", r.observer, lambda: r.observer.stop()),
                  ("close history", r.history, lambda: r.history.close()),
                  ("collect logs", r.cluster, lambda: _collect_logs(r)),
                  ("collect truncations", r.observer, lambda: append_truncations(
                      r.observer.path, r.system, r.cluster, r.dir.nodes, r.observer.topic,
                      origin_seconds(r.info["history_origin"])))))
        r.teardown = threading.Thread(name="teardown", target=_undo, args=(r, (
            ("the observer's last samples", r.observer, lambda: r.observer.join()),
            ("dump the logs on disk", r.system, lambda: _dump_disk(r)),
            ("collect the controller's records", r.observer, lambda: append_controller_records(
                r.observer.path, r.system, r.observer.topic, origin_seconds(r.info["history_origin"]))),
            ("hand the dumps to the check", r, r.dumped.set),
            ("stop the system", r.system, lambda: r.system.teardown(r.cluster)),
            ("unmount the faultfs", r.faultfs, lambda: _unmount_faultfs(r)),
            ("stop ZooKeeper", r.zookeeper, lambda: r.zookeeper.teardown(r.cluster)),
            ("tear down the cluster", r.cluster, lambda: r.cluster.teardown()))))


@contextmanager
def _held_off(*signals):
    """These signals ignored meanwhile, their handlers back afterwards."""
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, was in held.items():
            signal.signal(sig, was)


def _tear_down_beside(r: Run) -> None:
    """Start the rest of the teardown (`_finish`) in its thread, if not yet."""
    if r.teardown is not None and r.teardown.ident is None:
        r.teardown.start()


def _undo(r: Run, steps) -> None:
    """Each (what, what it undoes, step) in turn whose thing was started; a
    failure is logged and said, and the rest still run."""
    for what, started, step in steps:
        if started is None:
            continue
        step_started = time.monotonic()
        try:
            step()
            # Each step's time in harness.log: what the run's end spends where.
            log.info("teardown: %s in %.1f s", what, time.monotonic() - step_started)
        except BaseException as e:  # keep undoing the rest
            log.error("%s failed: %s", what, e)
            print(f"harness: {what} failed: {e}", file=sys.stderr)
            if r.problem is None:
                r.problem = f"{what} failed: {e}"


def _torn_down(r: Run) -> None:
    """Wait for the teardown `_finish` made ready (started here if the check
    did not start it), Ctrl-C and SIGTERM held off; then record the run's end
    in run.json. Once, however often called."""
    if "ended" in r.info:
        return
    _tear_down_beside(r)
    if r.teardown is not None:
        with _held_off(signal.SIGINT, signal.SIGTERM):
            waited = time.monotonic()
            r.teardown.join()
            log.info("teardown: waited %.1f s for it", time.monotonic() - waited)
    r.info["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if r.problem:
        r.info["outcome"] = f"not carried out: {r.problem}"
    r.dir.write_json("run.json", r.info)


def _unmount_faultfs(r: Run) -> None:
    unmount_system(r.cluster, r.faultfs)


def _collect_logs(r: Run) -> None:
    systems = [x for x in (r.zookeeper, r.system, r.faultfs) if x is not None]
    collect_logs(r.cluster, r.dir.nodes, systems)


def _dump_disk(r: Run) -> None:
    """What each replica holds on disk at the end, into disk/<node>.jsonl.gz (the
    stories' evidence); before the system stops, since teardown removes its data.
    Never fails the run: a problem is logged and the step skipped."""
    if not r.info.get("topic"):
        return
    try:
        r.info["disk"] = collect_disk(r.cluster, r.system, r.info["topic"], r.dir.path / "disk")
    except Exception as e:  # noqa: BLE001 - evidence only
        log.warning("no disk dumps: %s", e)


def _conclude(r: Run) -> int:
    """Check and report whatever history there is; the exit status. The
    terminal's last lines: how many warnings the client library logged, the
    verdict, the top anomaly in one line, the report's path."""

    path = r.dir.path / "history.jsonl"
    verdict = None
    results = None
    live_failures: list[str] = []
    recorded = path.is_file() and path.stat().st_size > 0
    if recorded:
        try:
            _phase("checking the history")
            check_started = r.reads_ended or time.monotonic()
            try:
                _to_parquet(r, path)
            finally:
                # Only now: the conversion is Python in this process, and the teardown's
                # SSH and dump parsing would take turns with it for the GIL, slowing
                # both; the check runs in the service's process.
                _tear_down_beside(r)
            if r.teardown is not None:
                r.dumped.wait()  # the check reads the replicas' dumps; the rest of the teardown goes on
            checked = _check(r, Options(idempotent=r.spec.idempotent or None, fault_ends=FAULT_ENDS))
            _torn_down(r)  # the stories read the disk dumps
            hung = specs.hung_transactions(r.info.get("final_reads"))
            if hung and checked.get("liveness") is not None:
                checked["liveness"]["hung_transactions"] = hung
            results = add_explanations(checked, r.dir.path)
            write_results(results, r.dir.path)
            # Issue 16's measure: from the final reads' end (the teardown in it) to results.json.
            r.info["check_phase_s"] = round(time.monotonic() - check_started, 2)
            report(r.dir.path, results)
            print(summary(results, str(r.dir.path / "results.json"), verdict=False))
            verdict = results["valid"]
            live_failures = specs.liveness_failed(r.spec.expect, results)
            if r.spec.expect:
                met, misses = specs.expectation(r.spec.expect, results)
                r.info["expectation"] = {"expect": r.spec.expect, "met": met, "misses": misses}
                print(f"scenario {r.spec.scenario or r.spec.test_name}: expectation "
                      + ("met" if met else "NOT met: " + "; ".join(misses)))
            r.dir.write_json("run.json", r.info)
        except UserError as e:
            log.error("checking failed: %s", e)
            r.problem = r.problem or f"checking failed: {e}"
    _torn_down(r)
    if not recorded and r.problem is None:
        r.problem = "no history was recorded"
    store.point_latest(r.dir)
    store.write_index(r.dir.root)
    warnings = _client_warnings()
    if warnings:
        print(f"client library (librdkafka): {warnings} warning{'s' if warnings != 1 else ''}, "
              f"in {r.dir.path / 'harness.log'}")
    if verdict is not None:
        # Liveness first: the verdict and its top anomaly stay the last lines before the report's path.
        if results.get("liveness"):
            print(verdict_words(results["liveness"]))
            starved = group_balance.summary_line(results["liveness"])
            if starved:
                print(starved)
        for why in live_failures:
            print(f"  liveness: {why}")
        print(verdict_line(results))
        top = top_anomaly(results)
        if top:
            print(f"  {top}")
    print(f"report: {r.dir.path / 'report.html'}" if (r.dir.path / "report.html").exists()
          else f"results: {r.dir.path}")
    if r.problem:
        print(f"harness: error: the run was not carried out: {r.problem}", file=sys.stderr)
        return 2
    # Valid is about safety; a HANG or a missed [expect] liveness limit fails the run too.
    return 0 if verdict and not live_failures else 1
