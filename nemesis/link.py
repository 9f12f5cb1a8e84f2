"""Degraded links: `lossy-link` (packet loss) and `slow-link` (a bandwidth
limit), on every link between the target nodes and the other nodes.

- lossy-link: each packet crossing such a link, in either direction, is
  dropped with probability `loss` (10%, 30% or 50%, drawn by the seed), by
  an iptables rule `-m statistic --mode random --probability` on the
  receiving node, in a chain of the harness's own (infra.net.LINK_CHAIN,
  one jump into it from INPUT). One rule per direction of each link: a
  packet between two targets is dropped once, not twice, and the sender
  learns of it only as a real network lets it (no error from its send).
- slow-link: each direction of each such link is limited to `rate` (1 or
  10 mbit/s, drawn by the seed): an HTB root qdisc (handle
  infra.net.LINK_HANDLE) on the sending node's interface, with a class of
  that rate per peer, chosen by the peer's address. Egress on both ends of
  each link, not ingress: no IFB device or policer is needed, so it works
  wherever `tc` does (namespaces, containers with NET_ADMIN, VMs). Per link
  rather than one TBF per interface, so that traffic with the control node
  (the clients and the nemesis's own commands) is never slowed, as a
  partition never cuts it.

This kernel has no netem: no added latency, jitter, reordering or netem
loss; the loss here is iptables', the limit HTB's.

Each is verified by a probe that measures what it set, on a sample of the
links (at most MAX_PROBES directed links, each target with a peer, both
ways), with python3 on the nodes: a UDP probe sends N numbered datagrams
and the receiver counts them (N large enough that 20% of the set loss is
3.3 standard deviations of the binomial count: a correct fault fails its
check about once in a thousand links); a TCP probe times PROBE_S seconds'
worth of bytes at the set rate, measured by the receiver from its first
byte to the end, and cut off (a failed check) if it takes DEADLINE_X times
as long as it should: a link the probe crosses may also drop packets (a
lossy-link in force), where TCP crawls. The rate probe runs in classes of
its own of the same rate (its ports, PROBE_PORT and the 15 after it), so
the workload's traffic on the link neither slows it nor is slowed by it: it
measures the limit, not what is left of it. Healing removes the rules and
qdiscs and is verified when the loss is back to (about) none and the
transfer runs at least UNLIMITED_X times the old limit.

The loss or rate a step sets is in its `extra` (`loss`, `rate`): the
schedule keeps what the draw gave, and an explicit schedule may state it.
"""

from __future__ import annotations

import math
import random
import re
import shlex
import time

from infra import net
from infra.nodes import Node, parallel
from nemesis.fault import NETWORK, Context, Fault, FaultError, Step, describe_nodes, node_words, verdict
from nemesis.targets import NODE_TARGETS, draw_nodes, resolve

LOSSES = (0.1, 0.3, 0.5)  # a lossy link's drop probability, drawn by the seed
RATES = ("1mbit", "10mbit")  # a slow link's limit, drawn by the seed
SETTINGS = ("loss", "rate")  # a step's keys for them (Step.extra, a schedule's steps)
SETTING_OF = {"lossy-link": "loss", "slow-link": "rate"}  # which fault takes which
DEFAULT_LOSS, DEFAULT_RATE = 0.3, "1mbit"  # a step that states none
TOLERANCE = 0.2  # a probe must measure within 20% (relative) of what was set
Z = 3.3  # the tolerance is at least this many standard deviations of the loss probe's count
MAX_PROBES = 4  # directed links probed per fault
PROBE_PORT = 47104  # the probes' ports: PROBE_PORT .. PROBE_PORT + 15 (a u32 mask in the qdisc)
PROBE_S = 1.5  # the rate probe's transfer lasts about this long at the set rate
HEALED_LOSS = 0.02  # after healing, a loss probe may lose at most this much
HEALED_PACKETS = 400
UNLIMITED_X = 2.0  # after healing, a transfer runs at least this many times the old limit
DEADLINE_X, DEADLINE_SLACK_S = 3.0, 5.0  # a rate probe is cut off after 3x its transfer at the set rate, +5 s
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}

# The probes, run with `python3 -c` on the nodes. A receiver starts in the
# background, says it is ready in a file, and writes what it measured to
# another (renamed into place when complete), so the control node needs no
# open channel to it while the sender runs.
PROBE = r'''
import os, socket, struct, sys, time
mode = sys.argv[1]
def done(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)
if mode == "udp-recv":
    port, nonce, ready, out = int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4], sys.argv[5]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    open(ready, "w").close()
    seen, deadline, idle = set(), time.time() + 30, 5.0
    while time.time() < deadline:
        s.settimeout(idle)
        try:
            data = s.recv(256)
        except socket.timeout:
            break
        idle = 1.0  # once packets flow, a second of silence ends the count
        head, _, seq = data.partition(b" ")
        if head == nonce and seq.isdigit():
            seen.add(int(seq))
    done(out, "received=%d" % len(seen))
elif mode == "udp-send":
    addr, port, nonce, n = sys.argv[2], int(sys.argv[3]), sys.argv[4].encode(), int(sys.argv[5])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    errors = 0
    for i in range(n):
        try:
            s.sendto(nonce + b" %d" % i, (addr, port))
        except OSError:
            errors += 1
        if i % 10 == 9:
            time.sleep(0.01)  # about 1000 a second: no receive buffer (nor a slow link's queue) overflows
    print("sent=%d errors=%d" % (n, errors))
elif mode == "tcp-recv":
    port, ready, out, deadline = int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    s.settimeout(20)
    open(ready, "w").close()
    try:
        c, _ = s.accept()
    except socket.timeout:
        done(out, "error=no-connection")
        sys.exit()
    accepted = time.monotonic()
    t0, total, cut = None, 0, False
    try:
        while True:
            c.settimeout(max(0.01, accepted + deadline - time.monotonic()))
            data = c.recv(65536)
            if not data:
                break
            if t0 is None:
                t0 = time.monotonic()  # timed from the first read on
            else:
                total += len(data)
    except (socket.timeout, ConnectionResetError):  # the deadline passed (the sender's reset may be lost)
        cut = True
    took = time.monotonic() - (accepted if t0 is None else t0)
    done(out, ("cut=1 " if cut else "") + "bytes=%d seconds=%.6f" % (total, took))
elif mode == "tcp-send":
    addr, port, size, deadline = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    end = time.monotonic() + deadline
    c = socket.create_connection((addr, port), timeout=deadline)
    chunk = b"x" * 65536
    left = size
    try:
        while left > 0:
            c.settimeout(max(0.01, end - time.monotonic()))
            c.sendall(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
        c.shutdown(socket.SHUT_WR)
        c.settimeout(max(0.01, end - time.monotonic()))
        c.recv(1)
    except OSError:
        # Past the deadline (a link that also drops packets, say), or the receiver's
        # passed: a reset, so that neither end waits for what the send buffer holds.
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        print("sent=%d cut=1" % (size - left))
        sys.exit()
    print("sent=%d" % size)
'''


# ----------------------------------------------------------------------------
# settings


def rate_bits(rate: str) -> float:
    """`10mbit` -> 10e6 bits per second."""
    m = _RATE_RE.match(str(rate))
    if not m:
        raise ValueError(f"not a rate: {rate!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def check_setting(key: str, value: object, where: str, fault: str | None = None) -> object:
    """A step's `loss` (a fraction, more than 0, at most 1) or `rate` (`1mbit`,
    `500kbit`, from 8kbit to 10gbit), checked (and that `fault`, if named,
    takes it); a one-line FaultError (a UserError) else."""
    if fault is not None and SETTING_OF.get(fault) != key:
        takes = [f for f, k in SETTING_OF.items() if k == key]
        raise FaultError(f"{where}: {key} is a setting of {', '.join(takes) or 'no fault'}, not of {fault}")
    if key == "loss":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise FaultError(f"{where}: loss {value!r}: expected a fraction of packets, more than 0, at most 1")
        return float(value)
    if key == "rate":
        try:
            bits = rate_bits(str(value))
        except ValueError:
            bits = 0
        if not isinstance(value, str) or not 8e3 <= bits <= 10e9:
            raise FaultError(f"{where}: rate {value!r}: expected a rate like 1mbit or 500kbit (8kbit to 10gbit)")
        return value
    raise FaultError(f"{where}: unknown setting {key!r} (known: {', '.join(SETTINGS)})")


def draw_loss(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...], dict]:
    """The schedule's draw: targets as for kill (nemesis.targets), then the loss."""
    mode, picks = draw_nodes(target, n_nodes, rng)
    return mode, picks, {"loss": rng.choice(LOSSES)}


def draw_rate(target: str, n_nodes: int, rng: random.Random) -> tuple[str, tuple[int, ...], dict]:
    """The schedule's draw: targets as for kill (nemesis.targets), then the rate."""
    mode, picks = draw_nodes(target, n_nodes, rng)
    return mode, picks, {"rate": rng.choice(RATES)}


def loss_packets(loss: float) -> int:
    """How many datagrams the loss probe sends: enough that TOLERANCE * loss
    is Z standard deviations of the measured fraction (binomial), at least 400."""
    if loss >= 1:
        return HEALED_PACKETS
    return min(5000, max(400, math.ceil(Z * Z * (1 - loss) / (TOLERANCE * TOLERANCE * loss))))


# ----------------------------------------------------------------------------
# which links, and the probes


def links_of(names: list[str], targets: list[str]) -> list[tuple[str, str]]:
    """Every directed link (sender, receiver) with a target at one end, sorted."""
    t = set(targets)
    return sorted((a, b) for a in names for b in names if a != b and (a in t or b in t))


def probed_links(names: list[str], targets: list[str]) -> list[tuple[str, str]]:
    """The links probed: each target with its first peer that is not a target
    (else another target), both ways, until MAX_PROBES."""
    chosen: list[tuple[str, str]] = []
    for t in targets:
        peers = [n for n in names if n not in targets] or [n for n in names if n != t]
        if peers:
            for link in ((t, peers[0]), (peers[0], t)):
                if link not in chosen:
                    chosen.append(link)
    return chosen[:MAX_PROBES]


def _files(node: Node, tag: str) -> tuple[str, str]:
    base = f"{node.run_dir}/.link-probe-{tag}"
    return base + ".ready", base + ".out"


def _start_receiver(node: Node, args: list[str], ready: str, out: str) -> None:
    """Starts a probe receiver in the background on the node; returns once it listens."""
    q = shlex.quote
    script = (f"rm -f {q(ready)} {q(out)}; "
              f"( python3 -c {q(PROBE)} {' '.join(q(a) for a in args)} </dev/null >/dev/null 2>{q(out)}.err & ); "
              f"i=0; while [ ! -e {q(ready)} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
              f"[ -e {q(ready)} ] || {{ echo 'probe receiver did not start:' $(head -c 300 {q(out)}.err); exit 1; }}")
    node.remote.run(script, timeout=30)


def _result(node: Node, ready: str, out: str, wait_s: float) -> dict:
    """What the receiver wrote (waiting at most wait_s), its files removed."""
    q = shlex.quote
    script = (f"i=0; while [ ! -e {q(out)} ] && [ $i -lt {int(wait_s * 20)} ]; do sleep 0.05; i=$((i+1)); done; "
              f"cat {q(out)} 2>/dev/null || echo error=no-result $(head -c 200 {q(out)}.err); "
              f"rm -f {q(ready)} {q(out)} {q(out)}.err")
    text = node.remote.run(script, timeout=wait_s + 30).stdout
    return dict(x.split("=", 1) for x in text.split() if "=" in x)


def probe_loss(sender: Node, receiver: Node, port: int, packets: int) -> dict:
    """Sends `packets` numbered datagrams from sender to receiver: how many arrived, the loss."""
    tag = f"udp-{port}"
    ready, out = _files(receiver, tag)
    nonce = f"p{time.monotonic_ns() % 10 ** 9}"
    _start_receiver(receiver, ["udp-recv", str(port), nonce, ready, out], ready, out)
    try:
        sender.remote.run(f"python3 -c {shlex.quote(PROBE)} udp-send {receiver.address} {port} {nonce} {packets}",
                          timeout=60)
    finally:
        got = _result(receiver, ready, out, 10)
    if "received" not in got:
        return {"sent": packets, "error": " ".join(f"{k}={v}" for k, v in got.items())[:200]}
    received = int(got["received"])
    return {"sent": packets, "received": received, "loss": round(1 - received / packets, 4)}


def probe_rate(sender: Node, receiver: Node, port: int, size: int, deadline_s: float) -> dict:
    """Sends `size` bytes over TCP from sender to receiver: the rate the receiver
    saw, mbit/s; a transfer not done in `deadline_s` is cut off, and is an error."""
    tag = f"tcp-{port}"
    ready, out = _files(receiver, tag)
    _start_receiver(receiver, ["tcp-recv", str(port), ready, out, str(deadline_s)], ready, out)
    try:
        sender.remote.run(f"python3 -c {shlex.quote(PROBE)} tcp-send {receiver.address} {port} {size} {deadline_s}",
                          timeout=deadline_s + 10)
    finally:
        got = _result(receiver, ready, out, 10)
    if "seconds" not in got:
        return {"bytes": size, "error": " ".join(f"{k}={v}" for k, v in got.items())[:200]}
    received, seconds = int(got["bytes"]), float(got["seconds"])
    mbit = round(received * 8 / seconds / 1e6, 3) if seconds > 0 else None
    if "cut" in got:
        return {"bytes": received, "seconds": round(seconds, 6),
                "error": f"cut off after {deadline_s:g} s, {received} of {size} bytes in, {mbit} mbit/s"}
    return {"bytes": received, "seconds": round(seconds, 6), "mbit": mbit}


def _probe_links(ctx: Context, links: list[tuple[str, str]], probe) -> dict[str, dict]:
    """Runs `probe(sender, receiver, port)` on each link (in parallel, a port each): link words -> result.
    A probe that fails (no python3 on a node, a lost connection) is a result
    with an `error`, so the fault's event still says what was applied."""
    nodes = {n.name: n for n in ctx.cluster.nodes}
    jobs = [(a, b, PROBE_PORT + i) for i, (a, b) in enumerate(links)]

    def one(job):
        try:
            return probe(nodes[job[0]], nodes[job[1]], job[2])
        except Exception as e:  # noqa: BLE001 - a verdict, not a crash
            return {"error": (str(e).strip().splitlines() or [type(e).__name__])[0][:200]}

    results = parallel(one, jobs) if jobs else []
    return {f"{a}->{b}": r for (a, b, _), r in zip(jobs, results)}


def loss_within(measured: dict, loss: float) -> bool:
    """Whether a loss probe measured within TOLERANCE (relative) of `loss`."""
    m = measured.get("loss")
    return isinstance(m, (int, float)) and abs(m - loss) <= TOLERANCE * loss


def rate_within(measured: dict, rate: str) -> bool:
    """Whether a rate probe measured within TOLERANCE (relative) of `rate`."""
    m = measured.get("mbit")
    return isinstance(m, (int, float)) and abs(m * 1e6 - rate_bits(rate)) <= TOLERANCE * rate_bits(rate)


# ----------------------------------------------------------------------------
# lossy-link


def _loss_rules(ctx: Context, targets: list[str], loss: float) -> dict[str, list[str]]:
    """node -> the addresses it drops a fraction of (the senders of its links with a target)."""
    by_receiver: dict[str, list[str]] = {}
    for a, b in links_of(ctx.names, targets):
        by_receiver.setdefault(b, []).append(ctx.cluster.node(a).address)
    return by_receiver


def apply_loss(ctx: Context, targets: list[str], loss: float) -> dict[str, int]:
    """The rules on every receiving node (in parallel): node -> rules."""
    ipt = net.IPT
    by_receiver = _loss_rules(ctx, targets, loss)

    def one(name: str) -> int:
        lines = [f"{ipt} -N {net.LINK_CHAIN} 2>/dev/null || true",
                 f"{ipt} -C INPUT {net.LINK_JUMP} 2>/dev/null || {ipt} -I INPUT 1 {net.LINK_JUMP}"]
        for addr in by_receiver[name]:
            rule = f"{net.LINK_CHAIN} -s {addr} -m statistic --mode random --probability {loss:.4f} -j DROP"
            lines.append(f"{ipt} -C {rule} 2>/dev/null || {ipt} -A {rule}")
        ctx.cluster.node(name).remote.run("set -e\n" + "\n".join(lines), timeout=30)
        return len(by_receiver[name])

    names = sorted(by_receiver)
    return dict(zip(names, parallel(one, names)))


def _start_degraded(ctx: Context, step: Step, key: str, default, applied: str, apply, probe,
                    within) -> tuple[dict, dict]:
    """A degraded link's start: its setting (`key`, the step's or `default`), the
    targets, `apply` (what it did goes under `applied`), then `probe` across the
    probed links, each measurement held to the setting by `within`."""
    setting = check_setting(key, step.extra.get(key, default), step.fault)
    names, how = resolve(ctx, step)
    done = apply(ctx, names, setting)
    measured = _probe_links(ctx, probed_links(ctx.names, names), lambda a, b, port: probe(a, b, port, setting))
    ok = bool(measured) and all(within(m, setting) for m in measured.values())
    value = {"nodes": names, **how, key: setting, applied: done, "verified": {"ok": ok, key: measured}}
    return value, {"nodes": names, key: setting}


def start_loss(ctx: Context, step: Step) -> tuple[dict, dict]:
    return _start_degraded(ctx, step, "loss", DEFAULT_LOSS, "rules", apply_loss,
                           lambda a, b, port, loss: probe_loss(a, b, port, loss_packets(loss)), loss_within)


def stop_loss(ctx: Context, state: dict) -> dict:
    names = state.get("nodes", [])
    healed = parallel(lambda node: net.heal_links_node(node, qdiscs=False), ctx.cluster.nodes)
    links = probed_links(ctx.names, names)
    measured = _probe_links(ctx, links, lambda a, b, port: probe_loss(a, b, port, HEALED_PACKETS))
    ok = all(isinstance(m.get("loss"), (int, float)) and m["loss"] <= HEALED_LOSS for m in measured.values())
    return {"nodes": names, "healed": {n: h["rules"] for n, h in zip(ctx.cluster.names, healed) if h["rules"]},
            "verified": {"ok": ok, "loss": measured}}


# ----------------------------------------------------------------------------
# slow-link


def apply_rate(ctx: Context, targets: list[str], rate: str) -> dict[str, int]:
    """The HTB qdiscs on every sending node (in parallel): node -> links limited.

    Per peer, three classes of `rate`: the link (everything to the peer), the
    probes' data (to the probe ports) and their acknowledgements (from them).
    Unclassified traffic (the control node's) goes straight through (HTB's
    default 0).
    """
    h = net.LINK_HANDLE
    by_sender: dict[str, list[str]] = {}
    for a, b in links_of(ctx.names, targets):
        by_sender.setdefault(a, []).append(ctx.cluster.node(b).address)

    def one(name: str) -> int:
        node = ctx.cluster.node(name)
        lines = [f"dev=$(ip -o -4 addr show | awk -v a={node.address} '{{split($4, x, \"/\"); "
                 f"if (x[1] == a) print $2}}' | head -n 1)",
                 f"[ -n \"$dev\" ] || {{ echo 'no interface has {node.address}' >&2; exit 1; }}",
                 f"if tc qdisc show dev \"$dev\" root | grep -q '^qdisc htb {h}: '; then "
                 f"tc qdisc del dev \"$dev\" root; fi",
                 f"tc qdisc add dev \"$dev\" root handle {h}: htb"]
        mask = f"{PROBE_PORT} 0xfff0"
        for k, addr in enumerate(by_sender[name]):
            link, data, ack = (f"{0x10 + 3 * k + i:x}" for i in range(3))
            for c in (link, data, ack):
                lines.append(f"tc class add dev \"$dev\" parent {h}: classid {h}:{c} htb rate {rate} ceil {rate}")
            f = f"tc filter add dev \"$dev\" parent {h}: protocol ip"
            lines += [f"{f} prio 1 u32 match ip dst {addr}/32 match ip dport {mask} flowid {h}:{data}",
                      f"{f} prio 1 u32 match ip dst {addr}/32 match ip sport {mask} flowid {h}:{ack}",
                      f"{f} prio 2 u32 match ip dst {addr}/32 flowid {h}:{link}"]
        node.remote.run("set -e\n" + "\n".join(lines), timeout=30)
        return len(by_sender[name])

    names = sorted(by_sender)
    return dict(zip(names, parallel(one, names)))


def rate_probe_bytes(rate: str) -> int:
    """The rate probe's transfer: PROBE_S seconds at `rate`, at least 64 KB."""
    return max(65536, int(rate_bits(rate) / 8 * PROBE_S))


def rate_probe_deadline(rate: str) -> float:
    """How long a rate probe may take: DEADLINE_X times its transfer at `rate`,
    and DEADLINE_SLACK_S. A transfer that slow is far outside the tolerance
    anyway (a link that also drops packets, or is cut); waiting it out would
    only hold up the schedule, as it did before this deadline."""
    return round(DEADLINE_X * rate_probe_bytes(rate) * 8 / rate_bits(rate) + DEADLINE_SLACK_S, 1)


def start_rate(ctx: Context, step: Step) -> tuple[dict, dict]:
    return _start_degraded(ctx, step, "rate", DEFAULT_RATE, "limited", apply_rate,
                           lambda a, b, port, rate: probe_rate(a, b, port, rate_probe_bytes(rate),
                                                               rate_probe_deadline(rate)), rate_within)


def stop_rate(ctx: Context, state: dict) -> dict:
    names, rate = state.get("nodes", []), state.get("rate", DEFAULT_RATE)
    healed = parallel(lambda node: net.heal_links_node(node, rules=False), ctx.cluster.nodes)
    links = probed_links(ctx.names, names)
    size, deadline = rate_probe_bytes(rate), rate_probe_deadline(rate)
    measured = _probe_links(ctx, links, lambda a, b, port: probe_rate(a, b, port, size, deadline))
    floor = UNLIMITED_X * rate_bits(rate) / 1e6
    ok = all(isinstance(m.get("mbit"), (int, float)) and m["mbit"] >= floor for m in measured.values())
    return {"nodes": names, "rate": rate,
            "healed": {n: h["qdiscs"] for n, h in zip(ctx.cluster.names, healed) if h["qdiscs"]},
            "verified": {"ok": ok, "rate": measured}}


# ----------------------------------------------------------------------------
# both


def sweep(ctx: Context) -> dict:
    """Every lossy-link rule and bandwidth limit removed from every node: how many, where."""
    try:
        healed = parallel(net.heal_links_node, ctx.cluster.nodes)
    except Exception as e:  # keep healing the rest
        return {"links_error": str(e)}
    done = {n: h for n, h in zip(ctx.cluster.names, healed) if any(h.values())}
    return {"links_healed": done} if done else {}


def _percent(x: object) -> str:
    return f"{x * 100:.1f}%" if isinstance(x, (int, float)) else "?"


def _measured(probes: object, key: str) -> str:
    """A probe's measurements as `n2->n1 29.5%, n1->n2 31.0%` (or `12.3 mbit/s`)."""
    if not isinstance(probes, dict):
        return ""
    words = []
    for link, m in probes.items():
        if not isinstance(m, dict):
            continue
        if "error" in m:
            words.append(f"{link} failed ({m['error']})")
        elif key == "loss":
            words.append(f"{link} {_percent(m.get('loss'))} of {m.get('sent')}")
        else:
            words.append(f"{link} {m.get('mbit')} mbit/s")
    return ", ".join(words)


def describe(value: dict, stopping: bool) -> tuple[str, str]:
    """`n2, 30% of packets dropped on its links (both ways)`, `verified: measured
    loss n2->n1 29.5% of 525, ...`; `n2, links limited to 1mbit each way`,
    `verified: measured n2->n1 0.95 mbit/s, ...`; their ends: `healed`,
    `verified: loss n2->n1 0.0% of 400` or `... 310.2 mbit/s`."""
    if not isinstance(value, dict):
        return "", ""
    what, _ = describe_nodes(value, stopping)
    if "nodes" not in value:
        return what, ""
    v = value.get("verified") if isinstance(value.get("verified"), dict) else {}
    key = "loss" if "loss" in v else "rate"
    measured = _measured(v.get(key), key)
    if stopping:
        healed = value.get("healed")
        if "verified" not in value:  # the invoke of a stop: asked, not done yet
            return what + ", healing its links", ""
        what += ", links healed" + (f" (on {node_words(healed)})" if isinstance(healed, dict) and healed else "")
        if key == "loss":
            return what, verdict(value, f"loss back to at most {_percent(HEALED_LOSS)}: {measured}")
        rate = value.get("rate", "")
        return what, verdict(value, f"no limit (at least {UNLIMITED_X:g}x {rate}): {measured}")
    if key == "loss":
        what += f", {_percent(value.get('loss'))} of packets dropped on its links (both ways)"
        return what, verdict(value, f"measured loss {measured} (set {_percent(value.get('loss'))}, "
                                    f"within {TOLERANCE:.0%})")
    what += f", links limited to {value.get('rate')} each way"
    return what, verdict(value, f"measured {measured} (set {value.get('rate')}, within {TOLERANCE:.0%})")


LOSSY_LINK = Fault(
    name="lossy-link", start_action="start-lossy-link", start=start_loss, stop_action="stop-lossy-link",
    stop=stop_loss,
    verified_by="a UDP probe across a sample of the links loses within 20% of the set fraction; after healing, "
                "it loses at most 2%",
    targets=NODE_TARGETS, draw=draw_loss, sweep=sweep, sweep_stage=NETWORK, colour="#ffd8a8", label="lossy link",
    describe=describe)

SLOW_LINK = Fault(
    name="slow-link", start_action="start-slow-link", start=start_rate, stop_action="stop-slow-link",
    stop=stop_rate,
    verified_by="a TCP transfer across a sample of the links runs within 20% of the set rate; after healing, "
                "at least twice as fast",
    targets=NODE_TARGETS, draw=draw_rate, sweep=sweep, sweep_stage=NETWORK, colour="#96f2d7", label="slow link",
    describe=describe)
