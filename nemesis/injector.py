"""The nemesis as a thread: follows a schedule, injects and records every fault.

Each step writes an `invoke` event before the fault is applied and an `ok`
after (with the exact targets and the probe's verdict), or `info` with the
error when applying or verifying failed; the events' `f` are the records'
start and stop actions (nemesis.registry). Several faults may be in force at
once, at most one of each name; a stop step undoes the fault it names. An
await step polls a topic partition's metadata until its condition holds
(nemesis.conditions) and records `await` (invoke, then ok with what it saw,
or info "timed out"); the schedule goes on either way. `heal()` stops every
fault in force, the last started first, and then sweeps the cluster clean
(`heal_everything`); it is safe to call more than once, from any thread,
also after Ctrl-C.
"""

from __future__ import annotations

import logging
import threading
import time

from core.errors import first_line
from core.history.format import NEMESIS
from nemesis import conditions
from nemesis.fault import Context, Step
from nemesis.registry import FAULTS

log = logging.getLogger(__name__)


def heal_everything(ctx: Context) -> dict:
    """Undo every fault there could be, whatever the schedule thinks is active:
    each registered fault's sweep once, by stage (partition rules removed,
    disks back to passthrough, paused processes resumed, killed ones restarted)."""
    done: dict = {}
    sweeps = dict.fromkeys(f.sweep for f in sorted(FAULTS.values(), key=lambda f: f.sweep_stage))
    for sweep in sweeps:
        done.update(sweep(ctx))
    return done


class Nemesis:
    """Follows the steps in a thread of its own; `heal()` ends it all."""

    def __init__(self, ctx: Context, steps: list[Step], history):
        self.ctx = ctx
        self.steps = steps
        self.history = history
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one fault change at a time, heal included
        self._active: dict[str, dict] = {}  # fault name -> state, in the order they started
        self._healed = False  # nothing started since the last heal()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    @property
    def current(self) -> str:
        """The faults in force, for progress displays: `partition halves n1,n2; pause n3`."""
        active = dict(self._active)
        if not active:
            return "none"
        return "; ".join(f"{fault} {state.get('label', '')}".strip() for fault, state in active.items())

    def start(self) -> None:
        if self.steps:
            self._thread.start()

    def stop(self) -> None:
        """Stop following the schedule (the faults in force stay until heal())."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            for step in self.steps:
                if self._stop.wait(step.delay):
                    return
                if step.action == "await":  # polls without the lock: heal() must not wait for it
                    self._await(step)
                    continue
                with self._lock:
                    if self._stop.is_set():
                        return
                    if step.action == "start":
                        self._start(step)
                    else:
                        self._end(step.fault)
        except BaseException as e:  # recorded; the runner heals and reports
            log.exception("nemesis failed")
            self.error = e

    def _record(self, type_: str, f: str, value: dict, **extra) -> None:
        try:
            self.history.record(NEMESIS, type_, f, value=value, **extra)
        except RuntimeError:  # the history is closed (a run ending badly): healing matters more
            log.warning("nemesis %s %s not recorded: history closed", type_, f)

    def _start(self, step: Step) -> None:
        if step.fault in self._active:
            # Only after its stop failed (schedules never start a fault twice): not applied, and not
            # recorded, since a second start of one fault in the history would pair with no stop.
            log.warning("nemesis: %s is still in force (its stop failed); this start skipped", step.fault)
            return
        self._healed = False
        fault = FAULTS[step.fault]
        start_f = fault.start_action
        planned = {"mode": step.mode} if step.mode else {}
        self._record("invoke", start_f, planned)
        try:
            value, state = fault.start(self.ctx, step)
        except Exception as e:
            log.warning("fault %s failed: %s", start_f, e)
            self._record("info", start_f, planned, error=first_line(e)[:300])
            # Whatever part of it took effect is undone at its stop, by its family's sweep.
            self._active[step.fault] = {"nodes": [], "grudge": {}, "failed": True}
            return
        state["label"] = _label(value)
        self._active[step.fault] = state
        verified = value.get("verified", {}).get("ok", False)
        self._record("ok" if verified else "info", start_f, value,
                     **({} if verified else {"error": "fault not verified"}))
        log.info("nemesis: %s %s (%s)", start_f, state["label"], "verified" if verified else "NOT verified")

    def _end(self, fault: str) -> None:
        """Undo the named fault, if in force; one that could not be undone stays in force (heal sweeps)."""
        state = self._active.get(fault)
        if state is None:
            return
        record = FAULTS[fault]
        stop_f = record.stop_action
        self._record("invoke", stop_f, {k: v for k, v in state.items() if k in ("nodes", "grudge")})
        try:
            if not state.get("failed"):
                value = record.stop(self.ctx, state)
            elif any(FAULTS[other].sweep is record.sweep for other in self._active if other != fault):
                # A start that failed half-way, while another fault of the same sweep (kill and
                # pause share one) is in force: sweeping now would undo that one too. What the
                # failed start left is swept by the heal at the end.
                value = {"swept": "at the final heal (another fault of its sweep is in force)"}
            else:
                # Its family's sweep, not heal_everything, which would also undo the other faults in force.
                value = record.sweep(self.ctx)
        except Exception as e:
            log.warning("undoing %s failed: %s", fault, e)
            self._record("info", stop_f, {}, error=first_line(e)[:300])
            return  # still active: heal() sweeps
        self._active.pop(fault, None)
        verified = value.get("verified", {"ok": True}).get("ok", False)
        self._record("ok" if verified else "info", stop_f, value,
                     **({} if verified else {"error": "recovery not verified"}))
        log.info("nemesis: %s", stop_f)

    def _await(self, step: Step) -> None:
        """Poll the partition's metadata until `step.until` holds or `step.timeout` passes;
        recorded as `await`. A failed read of the metadata is retried until the timeout."""
        asked = {"until": step.until, "partition": step.extra.get("partition", 0), "timeout": step.timeout}
        self._record("invoke", conditions.AWAIT, asked)
        began = time.monotonic()
        first: dict | None = None
        seen: dict | None = None
        error = ""
        while True:
            try:
                seen = conditions.observe(self.ctx, asked["partition"])
                error = ""
                if first is None:
                    first = seen
                if conditions.holds(step.until, seen, first):
                    waited = round(time.monotonic() - began, 3)
                    self._record("ok", conditions.AWAIT, {**asked, "seen": seen, "began": first, "waited_s": waited})
                    log.info("nemesis: await %s held after %.1f s", step.until, waited)
                    return
            except Exception as e:  # the metadata store may not answer during a fault: try again
                error = first_line(e)[:300]
            if time.monotonic() - began >= step.timeout:
                break
            if self._stop.wait(conditions.POLL_S):
                self._record("info", conditions.AWAIT, {**asked, "seen": seen}, error="interrupted")
                return
        waited = round(time.monotonic() - began, 3)
        self._record("info", conditions.AWAIT, {**asked, "seen": seen, "began": first, "waited_s": waited,
                                     **({"last_error": error} if error else {})}, error="timed out")
        log.warning("nemesis: await %s timed out after %.1f s", step.until, waited)

    def heal(self) -> dict:
        """End every fault in force, the last started first, and sweep every node clean;
        recorded as `heal`."""
        self._stop.set()
        with self._lock:
            if self._healed:
                return {}
            for fault in reversed(list(self._active)):
                self._end(fault)
            self._record("invoke", "heal", {})
            done = heal_everything(self.ctx)
            self._active.clear()
            self._healed = "errors" not in done
            self._record("ok" if self._healed else "info", "heal", done)
            return done


def _label(value: dict) -> str:
    if "nodes" in value:
        return ",".join(value["nodes"])
    if "isolated" in value:
        isolated = value["isolated"]
        return f"{value['mode']} {','.join(isolated) if isinstance(isolated, list) else isolated}"
    return value.get("mode", "")
