"""The nemesis as a thread: follows a schedule, injects and records every fault.

Each step writes an `invoke` event before the fault is applied and an `ok`
after (with the exact targets and the probe's verdict), or `info` with the
error when applying or verifying failed; the events' `f` are the records'
start and stop actions (nemesis.registry). `heal()` stops whatever fault is
active and then sweeps the cluster clean (`heal_everything`); it is safe to
call more than once, from any thread, also after Ctrl-C.
"""

from __future__ import annotations

import logging
import threading

from core.history.format import NEMESIS
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
        self._active: tuple[str, dict] | None = None  # (fault, state)
        self._healed = False  # nothing started since the last heal()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    @property
    def current(self) -> str:
        """The fault in force, for progress displays."""
        active = self._active
        if active is None:
            return "none"
        fault, state = active
        return f"{fault} {state.get('label', '')}".strip()

    def start(self) -> None:
        if self.steps:
            self._thread.start()

    def stop(self) -> None:
        """Stop following the schedule (the fault in force stays until heal())."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            for step in self.steps:
                if self._stop.wait(step.delay):
                    return
                with self._lock:
                    if self._stop.is_set():
                        return
                    if step.action == "start":
                        self._start(step)
                    else:
                        self._end()
        except BaseException as e:  # recorded; the runner heals and reports
            log.exception("nemesis failed")
            self.error = e

    def _record(self, type_: str, f: str, value: dict, **extra) -> None:
        try:
            self.history.record(NEMESIS, type_, f, value=value, **extra)
        except RuntimeError:  # the history is closed (a run ending badly): healing matters more
            log.warning("nemesis %s %s not recorded: history closed", type_, f)

    def _start(self, step: Step) -> None:
        self._healed = False
        fault = FAULTS[step.fault]
        start_f = fault.start_action
        planned = {"mode": step.mode} if step.mode else {}
        self._record("invoke", start_f, planned)
        try:
            value, state = fault.start(self.ctx, step)
        except Exception as e:
            log.warning("fault %s failed: %s", start_f, e)
            self._record("info", start_f, planned, error=_one_line(e))
            # Whatever part of it took effect is undone at the next stop.
            self._active = (step.fault, {"nodes": [], "grudge": {}, "failed": True})
            return
        state["label"] = _label(value)
        self._active = (step.fault, state)
        verified = value.get("verified", {}).get("ok", False)
        self._record("ok" if verified else "info", start_f, value,
                     **({} if verified else {"error": "fault not verified"}))
        log.info("nemesis: %s %s (%s)", start_f, state["label"], "verified" if verified else "NOT verified")

    def _end(self) -> None:
        if self._active is None:
            return
        fault, state = self._active
        stop_f = FAULTS[fault].stop_action
        self._record("invoke", stop_f, {k: v for k, v in state.items() if k in ("nodes", "grudge")})
        try:
            value = FAULTS[fault].stop(self.ctx, state) if not state.get("failed") else heal_everything(self.ctx)
        except Exception as e:
            log.warning("undoing %s failed: %s", fault, e)
            self._record("info", stop_f, {}, error=_one_line(e))
            return  # still active: heal() sweeps
        self._active = None
        verified = value.get("verified", {"ok": True}).get("ok", False)
        self._record("ok" if verified else "info", stop_f, value,
                     **({} if verified else {"error": "recovery not verified"}))
        log.info("nemesis: %s", stop_f)

    def heal(self) -> dict:
        """End the fault in force and sweep every node clean; recorded as `heal`."""
        self._stop.set()
        with self._lock:
            if self._healed:
                return {}
            self._end()
            self._record("invoke", "heal", {})
            done = heal_everything(self.ctx)
            self._active = None
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


def _one_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]
