"""A run's specification: CLI flags or a TOML file -> one frozen `TestSpec`.

Every setting has one name, the same in both places (a flag `--min-insync`
is the key `min-insync` or `min_insync` in the file); flags override the
file. A file may also hold `[broker]` (the system's settings, Kafka's names)
and `[producer]` / `[consumer]` (extra librdkafka settings) tables.
Anything unknown or out of range is a one-line UserError.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers import liveness
from checkers.registry import NAMES as ANOMALIES
from core.errors import UserError
from infra.cluster import FLAG_FIELDS, add_provider_arguments, options_from_values, validate_options
from infra.faultfs import validate_settings
from infra.nodes import DEFAULT_NODES, DEFAULT_REMOTE_DIR, DEFAULT_VAGRANT_SUBNET, ProvisionOptions
from infra.systems import SYSTEM_OPTIONS, SYSTEMS, system_named
from nemesis.partition import MODE_OF_TARGET
from nemesis.registry import FAULT_GROUPS, FAULTS, needs_faultfs
from nemesis.schedule import from_records
from nemesis.targets import TARGETS, refusal
from workloads.config import ACKS, CONSUMER_MODES, TxnConfig, WorkloadConfig, groups_of, own_groups

TABLES = ("broker", "producer", "consumer", "expect", "control_expect", "disk", "transactions")
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@dataclass(frozen=True)
class TestSpec:
    """What one run does. Defaults make `harness run --nemesis partition` a
    meaningful minute against the own broker on five local nodes."""

    __test__ = False  # not a pytest class, whatever its name says

    name: str = ""  # default: <system>-<nemesis>
    system: str = "own"
    provider: str = "local"
    nodes: int = DEFAULT_NODES
    zk_nodes: int = 3
    nemesis: tuple[str, ...] = ()
    nemesis_targets: str = "random"
    nemesis_interval: float = 8.0  # mean seconds between fault changes (with overlap: a period's length)
    nemesis_overlap: bool = False  # several faults at once (nemesis.schedule.plan_overlapping)
    time_limit: float = 60.0
    final_time_limit: float = 60.0
    rate: float = 500.0
    producers: int = 2
    consumers: int = 2
    consumer_mode: str = "assign"
    partitions: int = 5
    replication_factor: int = 3
    acks: str = "all"
    min_insync: int = 2
    unclean_election: bool = False
    idempotent: bool = False
    seed: int | None = None  # None: drawn at random, then recorded
    results: str = "results"
    faultfs: bool = False  # mount the fault-injecting filesystem under the data dirs (disk faults imply it)
    # The system's own settings (infra.systems: SystemKind.options), by name,
    # e.g. debug_bug for the own broker, kafka_version for Kafka; a file and the
    # flags give them flat, like every other setting.
    system_options: dict = field(default_factory=dict)
    # Providers: the flags of infra.cluster.add_provider_arguments, by the same names
    subnet: str | None = None
    cluster_id: str | None = None
    nodes_file: str | None = None
    hosts: str | None = None  # comma-separated, as --hosts takes them
    ssh_user: str | None = None
    ssh_key: str | None = None
    ssh_port: int = 22
    known_hosts: str | None = None
    ssh_insecure: bool = False
    remote_dir: str = DEFAULT_REMOTE_DIR
    vagrant_dir: str = "."
    vagrant_subnet: str = DEFAULT_VAGRANT_SUBNET
    # Tables
    broker: dict = field(default_factory=dict)
    producer: dict = field(default_factory=dict)
    consumer: dict = field(default_factory=dict)
    disk: dict = field(default_factory=dict)  # disk faults: slow-ms, ops (infra.faultfs.SETTINGS)
    # A scenario's words: what it shows, and what the checker should find
    # ({"valid": true} or anomaly name -> "present" / "absent").
    scenario: str = ""
    description: str = ""
    expect: dict = field(default_factory=dict)
    # What this spec's control (--control: its planted bugs left out) must show;
    # empty: valid. A scenario whose settings promise less than validity (an
    # unclean election may lose records never acknowledged) names what they promise.
    control_expect: dict = field(default_factory=dict)
    # An explicit fault schedule (steps as run.json's "schedule" holds them:
    # delay, action, fault, mode, picks, partition; or an await: delay,
    # action, until, partition, timeout), run instead of the one the seed
    # plans; `harness replay` and `harness shrink` write it.
    schedule: list = field(default_factory=list)
    # Consumer groups beside the consumers (workloads.config.GroupConfig's
    # fields, as [[groups]] tables give them: name, consumers, commit,
    # process-s, commit-interval-s).
    groups: list = field(default_factory=list)
    # Run the producers and the groups' members as OS processes, which the targets
    # `producers`, `consumers` and `clients` can kill and pause.
    client_processes: bool = False
    # Replace a client whose operation ended indeterminate (workloads.md,
    # Crashes and replacement), as Jepsen does; false keeps it running, as an
    # application that retries does (a group member then stays in its group).
    replace_on_info: bool = True
    # Transactional clients (workloads.config.TxnConfig's fields, as a
    # [transactions] table gives them); empty: none.
    transactions: dict = field(default_factory=dict)

    @property
    def uses_faultfs(self) -> bool:
        """Whether the run mounts the faultfs under each node's data dir."""
        return self.faultfs or needs_faultfs(self.nemesis)

    @property
    def test_name(self) -> str:
        return self.name or f"{self.system}-{'-'.join(self.nemesis) or 'none'}"

    def provision_options(self) -> ProvisionOptions:
        """What the run asks of its provider."""
        return options_from_values({name: getattr(self, name) for name in FLAG_FIELDS})

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["nemesis"] = list(self.nemesis)
        d["name"] = self.test_name
        for name, value in d.pop("system_options").items():  # flat, as a file gives them
            d[name] = list(value) if isinstance(value, tuple) else value
        return d


FIELDS = {f.name: f for f in dataclasses.fields(TestSpec)}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def add_arguments(parser) -> None:
    """The flags of `harness run`; each defaults to None so that the file's value shows through."""
    a = parser.add_argument
    a("-c", "--config", metavar="SPEC.toml", help="a spec file holding any of these settings")
    a("--scenario", metavar="NAME", help="a named scenario from scenarios/NAME.toml (see `harness scenarios`)")
    a("--control", action="store_true",
      help="run the scenario (or spec file) as its control: the same settings and faults without its planted "
           "bugs (--debug-bug), expecting a valid run or what its [control-expect] table says")
    a("--name", help="test name; results go to RESULTS/NAME/TIMESTAMP (default SYSTEM-NEMESIS)")
    a("--system", choices=list(SYSTEMS), help="the system under test (default own): "
                                              + "; ".join(f"{s.name}, {s.summary}" for s in SYSTEMS.values()))
    a("--zk-nodes", type=int, help="ZooKeeper ensemble size, 1 or 3 (default 3)")
    a("--nemesis", help=f"comma list of faults: {', '.join(FAULTS)}; "
                        + "; ".join(f"{g} means {', '.join(fs)}" for g, fs in FAULT_GROUPS.items())
                        + " (default none)")
    a("--nemesis-targets", choices=TARGETS,
      help="which nodes faults hit (default random); leaders, replicas, followers, out-of-sync: of a topic "
           "partition the seed draws, looked up when the fault starts; kraft-controllers: Kafka in KRaft mode; "
           "zookeeper: ZooKeeper's nodes (partition, kill, pause); clients: partition only, the clients cut "
           "off from a leader (docs/running.md)")
    a("--nemesis-interval", type=float, metavar="S", help="mean seconds between fault changes (default 8)")
    a("--nemesis-overlap", action="store_const", const=True,
      help="several faults at once: each period of about --nemesis-interval draws a subset of the fault "
           "families, started staggered and stopped by the period's end")
    a("--time-limit", type=float, metavar="S", help="seconds of workload under faults (default 60)")
    a("--final-time-limit", type=float, metavar="S", help="most seconds for the final reads (default 60)")
    a("--rate", type=float, help="target sends per second, all producers together (default 500)")
    a("--producers", type=int, help="producer clients (default 2)")
    a("--consumers", type=int, help="consumer clients (default 2)")
    a("--consumer-mode", choices=CONSUMER_MODES, help="explicit assign or group subscribe (default assign)")
    a("--partitions", type=int, help="topic partitions (default 5)")
    a("--replication-factor", type=int, help="replicas per partition (default 3)")
    a("--acks", choices=ACKS, help="producer acks (default all)")
    a("--min-insync", type=int, help="min.insync.replicas (default 2)")
    a("--unclean-election", action="store_const", const=True, help="allow unclean leader election")
    a("--idempotent", action="store_const", const=True, help="idempotent producers")
    a("--client-processes", action="store_const", const=True,
      help="run the producers and the consumer groups' members ([[groups]] in a spec file) as OS "
           "processes, which --nemesis kill,pause with the targets producers, consumers, clients can hit")
    a("--no-replace-on-info", dest="replace_on_info", action="store_const", const=False,
      help="keep a client whose operation ended indeterminate instead of replacing it")
    a("--seed", type=int, help="seed of the fault schedule (default: random, recorded in run.json)")
    a("--results", metavar="DIR", help="results folder (default results)")
    for owner, option in SYSTEM_OPTIONS.values():
        a(option.flag, action="append" if option.repeatable else "store", choices=option.choices or None,
          metavar=option.metavar, help=f"--system {owner}: {option.help}")
    a("--faultfs", action="store_const", const=True,
      help="mount the fault-injecting filesystem under the data dirs even without disk faults")
    add_provider_arguments(parser)


EXTENDS_DEPTH = 4  # scenarios extending scenarios, at most this deep (a cycle is an error)


def load_file(path: str, _depth: int = 0) -> dict[str, Any]:
    """A spec or scenario file's settings by field name. `extends = "NAME"`
    starts from the scenario NAME's settings, this file's replacing them key
    by key (a table replaces the whole table): a twin that differs in one
    setting (idempotence, a feature) says only that, and its description."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({e})") from None
    out: dict[str, Any] = {}
    if "extends" in data:
        base = data.pop("extends")
        if not isinstance(base, str):
            raise UserError(f"{path}: extends: expected a scenario name")
        if _depth >= EXTENDS_DEPTH:
            raise UserError(f"{path}: extends {base!r}: scenarios extend each other more than "
                            f"{EXTENDS_DEPTH} deep (a cycle?)")
        try:
            out.update(load_file(str(scenario_file(base)), _depth + 1))
        except UserError as e:
            raise UserError(f"{path}: extends: {e}") from None
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in FIELDS and name not in SYSTEM_OPTIONS or name == "system_options":
            raise UserError(f"{path}: unknown setting {key!r}")
        out[name] = value
    return out


def scenario_file(name: str) -> Path:
    path = SCENARIOS / f"{name}.toml"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or "") or not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIOS.glob("*.toml"))) or "none"
        raise UserError(f"--scenario {name!r}: no such scenario (known: {known})")
    return path


def from_args(args) -> TestSpec:
    """Build the spec from a scenario or spec file (if any) and flags, flags winning."""
    values: dict[str, Any] = {}
    if getattr(args, "scenario", None):
        values.update(load_file(str(scenario_file(args.scenario))))
        values.setdefault("name", args.scenario)
    if getattr(args, "config", None):
        values.update(load_file(args.config))
    if getattr(args, "control", False):
        values = control_of(values)
    for name in (*FIELDS, *SYSTEM_OPTIONS):
        flag = getattr(args, name, None)
        if flag is not None:
            values[name] = flag
    return build(values)


def control_of(values: dict[str, Any]) -> dict[str, Any]:
    """A spec that plants bugs, as its control: the same settings and faults
    without the bugs, named NAME-control and expecting what `control_expectation`
    says. A planted bug counts as caught only where its control meets that (the
    mutation score, `harness calibrate --mutants`)."""
    bugs = planted_bugs(values)
    if not bugs:
        raise UserError("--control: this spec plants no bug (debug-bug): it is its own control")
    name = values.get("name") or "spec"
    expect = control_expectation(values)
    return {**values, "debug_bug": [], "expect": expect, "name": f"{name}-control",
            "description": f"The control of {name}: its settings and faults without the planted "
                           f"bug{'s' if len(bugs) > 1 else ''} {', '.join(bugs)}; a correct broker meets "
                           f"{expect_words(expect)}.\n\n{values.get('description', '')}".rstrip()}


def planted_bugs(values: dict[str, Any]) -> list[str]:
    """The bugs a spec's values plant (its `debug-bug` setting)."""
    return [str(b) for b in values.get("debug_bug") or ()]


def control_expectation(values: dict[str, Any]) -> dict:
    """What a spec's control must show: its [control-expect] table, else a valid run."""
    return dict(values.get("control_expect") or {"valid": True})


def build(values: dict[str, Any]) -> TestSpec:
    v = dict(values)
    if isinstance(v.get("nemesis"), str):
        v["nemesis"] = [x.strip() for x in v["nemesis"].split(",") if x.strip()]
    if isinstance(v.get("hosts"), (list, tuple)):  # a file may list them
        v["hosts"] = ",".join(str(h) for h in v["hosts"])
    system_options = _system_options(v)
    if "nemesis" in v and isinstance(v["nemesis"], (list, tuple)):
        v["nemesis"] = list(dict.fromkeys(x for f in v["nemesis"] for x in
                                          (FAULT_GROUPS.get(f, (f,)) if isinstance(f, str) else (f,))))
    if "nemesis" in v:
        v["nemesis"] = _names("nemesis", v["nemesis"])
    elif isinstance(v.get("schedule"), (list, tuple)):  # a schedule alone names its faults
        v["nemesis"] = tuple(dict.fromkeys(r.get("fault") for r in v["schedule"]
                                           if isinstance(r, dict) and isinstance(r.get("fault"), str)))
    if "schedule" in v and isinstance(v["schedule"], (list, tuple)):
        v["schedule"] = [dict(r) if isinstance(r, dict) else r for r in v["schedule"]]
    if "groups" in v:
        v["groups"] = _groups(v["groups"])
    if v.get("transactions"):  # checked as the workload will, with its defaults filled in
        v["transactions"] = TxnConfig.from_mapping(v["transactions"]).to_dict()
    for name in TABLES:
        if name in v and not isinstance(v[name], dict):
            raise UserError(f"[{name}] must be a table of settings")
    if "acks" in v:
        v["acks"] = "all" if str(v["acks"]) == "-1" else str(v["acks"])
    for name, value in v.items():
        _check_type(name, value)
    spec = TestSpec(**v, system_options=system_options)
    validate(spec)
    if spec.seed is None:
        spec = dataclasses.replace(spec, seed=random.SystemRandom().randrange(2**31))
    return spec


def _groups(value: Any) -> list[dict]:
    """[[groups]] tables as GroupConfig's fields, checked as the workload
    will (a one-line UserError before anything starts)."""
    return [g.to_dict() for g in groups_of(value, taken=own_groups(WorkloadConfig.group_id))]


def _names(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise UserError(f"{name.replace('_', '-')}: expected a list of names")
    return tuple(value)


def _system_options(v: dict[str, Any]) -> dict[str, Any]:
    """Takes the system's own settings out of `v`: those of the chosen system,
    checked and with their defaults; another system's setting is an error
    unless it holds that setting's default."""
    system = v.get("system", FIELDS["system"].default)
    chosen = SYSTEMS[system].options if system in SYSTEMS else ()  # an unknown system: validate() says so
    given = {name: v.pop(name) for name in list(v) if name in SYSTEM_OPTIONS}
    out = {o.name: o.default for o in chosen}
    for name, value in given.items():
        owner, option = SYSTEM_OPTIONS[name]
        if option.repeatable:
            value = _names(name, [value] if isinstance(value, str) else value)
        else:
            _check_type(name, value, option.default)
        if option.choices and value not in option.choices:
            raise UserError(f"{option.flag} {value!r}: expected one of {', '.join(option.choices)}")
        if owner != system:
            if value != option.default:
                raise UserError(f"{option.flag} is a setting of --system {owner}; it needs --system {owner}")
            continue
        out[name] = value
    return out


def _check_type(name: str, value: Any, default: Any = dataclasses.MISSING) -> None:
    if name in TABLES or name in ("schedule", "groups"):
        return  # checked as tables above; the schedule by validate(), the groups by _groups
    if default is dataclasses.MISSING:
        default = FIELDS[name].default if FIELDS[name].default is not dataclasses.MISSING else None
    flag = "--" + name.replace("_", "-")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UserError(f"{flag}: expected true or false, not {value!r}")
    elif isinstance(default, int) and not isinstance(default, bool) or name == "seed":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserError(f"{flag}: expected an integer, not {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{flag}: expected a number, not {value!r}")
    elif isinstance(default, str) or (default is None and name not in ("seed",)):
        if value is not None and not isinstance(value, str):
            raise UserError(f"{flag}: expected a string, not {value!r}")


def validate(s: TestSpec) -> None:
    def bad(msg: str):
        raise UserError(msg)

    if s.name and not _NAME_RE.match(s.name):
        bad(f"--name {s.name!r}: use letters, digits, '.', '_', '-' (at most 100)")
    system = system_named(s.system)
    if s.schedule or not isinstance(s.schedule, list):
        from_records(s.schedule, s.nodes, s.partitions)  # one line naming the step
        for i, step in enumerate(s.schedule, 1):
            if step["action"] != "await" and step["fault"] not in s.nemesis:
                bad(f"schedule step {i}: fault {step['fault']} is not in --nemesis ({','.join(s.nemesis) or 'none'})")
    for fault in s.nemesis:
        if fault not in FAULTS:
            bad(f"--nemesis {fault!r}: expected a comma list of {', '.join(FAULTS)} or {' or '.join(FAULT_GROUPS)}")
    if s.nemesis_targets not in TARGETS:
        bad(f"--nemesis-targets {s.nemesis_targets!r}: expected one of {', '.join(TARGETS)}")
    for fault in s.nemesis:
        if s.nemesis_targets not in FAULTS[fault].targets:
            bad(f"--nemesis-targets {s.nemesis_targets}: {fault} takes {', '.join(FAULTS[fault].targets)}")
    # Targets the system has no such nodes for (kraft-controllers on ZooKeeper mode, ...): the
    # seed's targets, or an explicit schedule's modes (a partition's shape named by its target).
    target_of_shape = {shape: target for target, shape in MODE_OF_TARGET.items()}
    used = ([target_of_shape.get(step.get("mode"), step.get("mode")) for step in s.schedule
             if step.get("action") == "start"] if s.schedule else [s.nemesis_targets] if s.nemesis else [])
    for target in dict.fromkeys(used):
        why = refusal(str(target), s.system, s.system_options)
        if why:
            bad(why)
    for target in ("group-coordinator", "group-follower"):
        if target in used and not (s.groups or s.consumer_mode == "subscribe"):
            bad(f"{target}: the target needs a consumer group ([[groups]] or --consumer-mode subscribe)")
    if "txn-coordinator" in used and not s.transactions:
        bad("txn-coordinator: the target needs transactions ([transactions])")
    if "consumers" in used and not (s.groups and s.client_processes):
        bad("consumers: the target needs group members running as processes ([[groups]] and "
            "client-processes = true)")
    hits_clients = ([step.get("fault") for step in s.schedule if step.get("action") == "start"
                     and step.get("mode") == "clients"] if s.schedule
                    else list(s.nemesis) if s.nemesis_targets == "clients" else [])
    if not s.client_processes and ("producers" in used or {"kill", "pause"} & set(hits_clients)):
        bad("producers, clients: a fault that hits a client needs clients running as processes "
            "(client-processes = true)")
    if s.consumer_mode not in CONSUMER_MODES:
        bad(f"--consumer-mode {s.consumer_mode!r}: expected one of {', '.join(CONSUMER_MODES)}")
    if s.acks not in ACKS:
        bad(f"--acks {s.acks!r}: expected one of 0, 1, all")
    if not 1 <= s.nodes <= 64:
        bad(f"--nodes {s.nodes}: expected 1 to 64")
    if s.zk_nodes not in (1, 3, 5) or s.zk_nodes > s.nodes:
        bad(f"--zk-nodes {s.zk_nodes}: expected 1, 3 or 5, and no more than --nodes ({s.nodes})")
    if not 1 <= s.replication_factor <= s.nodes:
        bad(f"--replication-factor {s.replication_factor}: expected 1 to --nodes ({s.nodes})")
    if not 1 <= s.min_insync <= s.replication_factor:
        bad(f"--min-insync {s.min_insync}: expected 1 to --replication-factor ({s.replication_factor})")
    if not 1 <= s.partitions <= 10_000:
        bad(f"--partitions {s.partitions}: expected 1 to 10000")
    for name in ("producers", "consumers"):
        if not 0 <= getattr(s, name) <= 256:
            bad(f"--{name} {getattr(s, name)}: expected 0 to 256")
    if s.producers == 0:
        bad("--producers 0: a run needs at least one producer")
    for name in ("time_limit", "final_time_limit", "nemesis_interval"):
        if not 0 < getattr(s, name) <= 7 * 24 * 3600:
            bad(f"--{name.replace('_', '-')} {getattr(s, name)}: expected more than 0 seconds (at most a week)")
    if not 0 <= s.rate <= 1_000_000:
        bad(f"--rate {s.rate}: expected 0 (as fast as possible) to 1000000")
    if s.idempotent and s.acks != "all":
        bad("--idempotent needs --acks all (what an idempotent producer requires)")
    if s.seed is not None and not 0 <= s.seed < 2**63:
        bad(f"--seed {s.seed}: expected a non-negative integer")
    validate_options(s.provision_options())  # the provider flags, checked as `harness cluster up` checks them
    system.check(s.system_options, s.broker)  # e.g. Kafka's version, mode and jars, before anything starts
    if s.disk:
        validate_settings(s.disk)
    check_expect("expect", s.expect, bad)
    check_expect("control-expect", s.control_expect, bad)


def check_expect(table: str, expect: dict, bad) -> None:
    """An [expect] (or [control-expect]) table's keys and values, each error through `bad`."""
    for key, want in expect.items():
        if key == "valid":
            if not isinstance(want, bool):
                bad(f"{table}.valid: expected true or false, not {want!r}")
        elif key in LIVENESS_LIMITS:
            if isinstance(want, bool) or not isinstance(want, (int, float)) or not 0 <= want <= 7 * 24 * 3600:
                bad(f"{table}.{key}: expected a number of seconds (0 or more), not {want!r}")
        elif key in ("hang", "hung-transaction"):
            if want not in ("present", "absent"):
                bad(f"{table}.{key}: expected \"present\" or \"absent\", not {want!r}")
        elif key == "one-of":
            if not isinstance(want, list) or not want or any(a not in ANOMALIES for a in want):
                bad(f"{table}.one-of: expected a list of anomaly names ({', '.join(ANOMALIES)}), not {want!r}")
        elif key == "logged":
            for pattern in want if isinstance(want, list) else [want]:
                if not isinstance(pattern, str) or not pattern:
                    bad(f"{table}.logged: expected a regular expression or a list of them, not {want!r}")
                try:
                    re.compile(pattern)
                except re.error as e:
                    bad(f"{table}.logged {pattern!r}: not a regular expression ({e})")
        elif key not in ANOMALIES:
            bad(f"{table}.{key}: not an anomaly (known: valid, {', '.join(ANOMALIES)}, hang, hung-transaction, "
                f"{', '.join(LIVENESS_LIMITS)}, one-of, logged)")
        elif want not in ("present", "absent"):
            bad(f"{table}.{key}: expected \"present\" or \"absent\", not {want!r}")


# [expect] liveness limits, seconds -> the results.json `liveness` number each bounds:
# from above (`max-`), or from below (`min-`: a scenario pinning a stall it reproduces).
LIVENESS_LIMITS = {"max-recovery-s": "recovery_s", "max-unavailable-s": "unavailable_s",
                   "max-starved-member-s": "starved_member_s", "min-starved-member-s": "starved_member_s"}
_LIMITED = {"max-recovery-s": "recovery", "max-unavailable-s": "unavailability",
            "max-starved-member-s": "a group member starved", "min-starved-member-s": "a group member starved"}
LIVENESS_KEYS = (*LIVENESS_LIMITS, "hang", "hung-transaction")


def expectation(expect: dict, results: dict) -> tuple[bool, list[str]]:
    """Whether a run's results show what its scenario expects; the misses."""
    misses = []
    for key, want in expect.items():
        if key == "valid":
            if results["valid"] != want:
                misses.append(f"expected {'valid' if want else 'invalid'}, got {'valid' if results['valid'] else 'invalid'}")
            continue
        if key in LIVENESS_KEYS:
            miss = _liveness_miss(key, want, results.get("liveness"))
            if miss:
                misses.append(miss)
            continue
        if key == "one-of":
            if not any(results["anomalies"][a]["count"] > 0 for a in want):
                misses.append(f"expected one of {', '.join(want)} present, found none")
            continue
        if key == "logged":
            misses += [f"expected a node log record matching /{p}/, found none"
                       for p in (want if isinstance(want, list) else [want]) if not _logged(p, results)]
            continue
        count = results["anomalies"][key]["count"]
        if (want == "present") != (count > 0):
            misses.append(f"expected {key} {want}, found {count}")
    return not misses, misses


def _logged(pattern: str, results: dict) -> bool:
    """Whether a record of the node-log scan (results.json `node_logs`: its
    ERROR records and traces, grouped) matches `pattern`, in its signature or
    its first occurrence's text."""
    rx = re.compile(pattern)
    for g in (results.get("node_logs") or {}).get("groups", []):
        if rx.search(g.get("signature", "")) or rx.search((g.get("first") or {}).get("text", "")):
            return True
    return False


def expect_words(expect: dict) -> str:
    """An [expect] table in words: `invalid, one of lost-acked lost-write, logged /CRC/`."""
    parts = []
    for key, want in expect.items():
        if key == "valid":
            parts.append("valid" if want else "invalid")
        elif key == "one-of":
            parts.append(f"one of {' '.join(want)} present")
        elif key == "logged":
            parts += [f"logged /{p}/" for p in (want if isinstance(want, list) else [want])]
        else:
            parts.append(f"{key} {want}")
    return ", ".join(parts) or "-"


def _liveness_miss(key: str, want, live: dict | None) -> str | None:
    """The miss of one [expect] liveness key, with the measured value; None if met."""
    if not live:
        return f"expected {key} {want}, but no liveness was measured"
    if key == "hang":
        got = "present" if live["verdict"] == "hang" else "absent"
        return None if got == want else f"expected hang {want}, got {got} (recovery {_secs(live.get('recovery_s'))})"
    if key == "hung-transaction":
        got = "present" if live.get("hung_transactions") else "absent"
        return None if got == want else f"expected hung-transaction {want}, got {got}"
    measured = live.get(LIVENESS_LIMITS[key])
    if key == "max-recovery-s" and measured is None:
        if live.get("heal") is None or live.get("verdict") != "hang":
            return None  # no heal, or nothing attempted after it: no recovery to bound
        return f"expected recovery within {want:g} s, got none in the {_secs(live.get('unrecovered_s'))} watched"
    if key.startswith("min-"):
        if measured is None or measured < want:
            return f"expected {_LIMITED[key]} at least {want:g} s, measured {_secs(measured)}"
        return None
    if measured is not None and measured > want:
        return f"expected {_LIMITED[key]} at most {want:g} s, measured {measured:g} s"
    return None


def _secs(x) -> str:
    return "none" if x is None else f"{x:g} s"


def liveness_failed(expect: dict, results: dict) -> list[str]:
    """Why the run fails on liveness (harness run exits 1): a HANG, expected or
    not (as an invalid run exits 1 whether or not its scenario expects it), and
    each missed [expect] liveness key."""
    live = results.get("liveness") or {}
    out = [m for k in LIVENESS_KEYS if k in expect and (m := _liveness_miss(k, expect[k], live))]
    if live.get("verdict") == "hang":
        out.insert(0, "HANG: nothing acknowledged for more than "
                      f"{live.get('hang_after_s', 0):g} s after the final heal")
    for hung in live.get("hung_transactions") or []:
        out.insert(0, liveness.hung_transaction_words(hung))
    return out


def hung_transactions(final_reads: dict | None) -> list[dict]:
    """The partitions an open transaction held back when the final reads
    ended (run.json `final_reads`, workloads.consumer.PartitionReach): their
    last stable offset below the log's end after the fault phase, the heal
    and the final reads' whole time limit."""
    return [{"partition": r["partition"], "stable_offset": r["stable_offset"], "high_watermark": r["high_watermark"]}
            for r in (final_reads or {}).get("partitions", []) if r.get("stable_offset") is not None]


# -- writing a spec file (replay, shrink and nightly hand their runs one)

# Always written, default or not, so that a spec file reads as a whole scenario.
ALWAYS = ("system", "nodes", "zk_nodes", "partitions", "replication_factor", "acks", "min_insync", "nemesis",
          "time_limit", "final_time_limit", "rate", "seed")
NEVER = ("results", "schedule", "groups", "description", "expect")  # written apart, or not at all


def _default(name: str):
    if name in SYSTEM_OPTIONS:
        return SYSTEM_OPTIONS[name][1].default
    f = FIELDS[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _same(a, b) -> bool:
    norm = (lambda x: list(x) if isinstance(x, tuple) else x)
    return norm(a) == norm(b)


def spec_file(values: dict, header: str = "") -> str:
    """A spec file (TOML) holding these values: the settings that differ from
    the defaults (and ALWAYS), the description, the tables, then the schedule
    as [[schedule]] tables. `specs.load_file` reads it back to the same values."""
    lines = [f"# {ln}".rstrip() for ln in header.strip().splitlines()] if header.strip() else []
    if lines:
        lines.append("")
    if values.get("description"):
        lines.append(f"description = {_string(values['description'], multiline=True)}")
    tables = {}
    for name, value in values.items():
        if name in NEVER:
            continue
        if name in TABLES:
            if value:
                tables[name] = value
            continue
        if name not in ALWAYS and name != "name" and _same(value, _default(name)):
            continue
        lines.append(f"{name.replace('_', '-')} = {_value(value)}")
    for name, table in list(tables.items()) + ([("expect", values["expect"])] if values.get("expect") else []):
        lines += ["", f"[{name.replace('_', '-')}]"] + [f"{_key(k)} = {_value(v)}" for k, v in table.items()]
    for group in values.get("groups") or []:
        lines += ["", "[[groups]]"] + [f"{k.replace('_', '-')} = {_value(v)}" for k, v in group.items()]
    for step in values.get("schedule") or []:  # a stop's mode and picks are empty: not written
        lines += ["", "[[schedule]]"] + [f"{_key(k)} = {_value(v)}" for k, v in step.items()
                                         if step.get("action") in ("start", "await")
                                         or k in ("delay", "action", "fault")]
    return "\n".join(lines) + "\n"


def _key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else json.dumps(k)


def _string(s: str, multiline: bool = False) -> str:
    if multiline and "\n" in s.strip() and '"""' not in s and "\\" not in s:
        return '"""\n' + s.strip() + '\n"""'
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a TOML basic string


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise UserError(f"cannot write {v!r} into a spec file")
