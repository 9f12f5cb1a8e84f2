"""The fault registry: every record complete, names in the history as
documented (docs/history.md), heal's sweeps once each and in order, and the
spec reading the targets each fault accepts."""

from __future__ import annotations

import dataclasses
import random

import pytest

from core.errors import UserError
from harness.run import spec
from nemesis import injector, registry
from nemesis.fault import NETWORK, PROCESSES, STORAGE, Fault
from nemesis.registry import BY_START_ACTION, FAULT_GROUPS, FAULTS, needs_faultfs
from nemesis.targets import TARGETS


def test_names_and_history_actions_are_the_documented_ones():
    assert {name: (f.start_action, f.stop_action) for name, f in FAULTS.items()} == {
        "partition": ("start-partition", "stop-partition"),
        "lossy-link": ("start-lossy-link", "stop-lossy-link"),
        "slow-link": ("start-slow-link", "stop-slow-link"),
        "kill": ("kill", "start"),
        "pause": ("pause", "resume"),
        "disk-stall": ("stall-disk", "unstall-disk"),
        "disk-slow": ("slow-disk", "unslow-disk"),
        "disk-fail": ("fail-disk", "unfail-disk"),
        "disk-corrupt": ("corrupt-disk", "uncorrupt-disk"),
        "power-loss": ("power-loss", "power-restore"),
    }
    assert list(FAULTS) == list(spec.FAULTS)  # the order --nemesis lists them in
    assert {a: f.name for a, f in BY_START_ACTION.items()} == {f.start_action: n for n, f in FAULTS.items()}


def test_every_record_is_complete():
    colours = set()
    for name, f in FAULTS.items():
        assert isinstance(f, Fault) and f.name == name
        assert callable(f.start) and callable(f.stop) and callable(f.draw) and callable(f.sweep)
        assert f.verified_by and f.label and f.colour.startswith("#")
        assert f.targets and set(f.targets) <= set(TARGETS)
        assert f.sweep_stage in (NETWORK, STORAGE, PROCESSES)
        colours.add(f.colour)
    assert len(colours) == len(FAULTS)  # one shade per fault in the plots


def test_two_faults_never_share_a_name_or_an_action():
    kill, pause = FAULTS["kill"], FAULTS["pause"]
    for clash in (dataclasses.replace(pause, name="kill"), dataclasses.replace(pause, stop_action="start"),
                  dataclasses.replace(pause, start_action="start"), dataclasses.replace(pause, stop_action="pause")):
        with pytest.raises(ValueError):
            registry._table(kill, clash)
    assert list(registry._table(kill, pause)) == ["kill", "pause"]


def test_groups_and_the_faultfs():
    assert FAULT_GROUPS == {"disk": ("disk-stall", "disk-slow", "disk-fail")}
    assert {n for n, f in FAULTS.items() if f.needs_faultfs} == {"disk-stall", "disk-slow", "disk-fail", "disk-corrupt",
                                                                 "power-loss"}
    assert needs_faultfs(["kill", "power-loss"]) and not needs_faultfs(["partition", "kill", "pause", "unknown"])


def test_every_fault_draws_its_targets():
    for f in FAULTS.values():
        for target in f.targets:
            mode, picks, *settings = f.draw(target, 5, random.Random(1))
            assert mode and all(0 <= i < 5 for i in picks)
            assert not settings or isinstance(settings[0], dict)  # a fault's own settings (a lossy link's loss)


def test_heal_runs_each_sweep_once_network_then_disks_then_processes(monkeypatch):
    calls = []

    def sweep(what):
        def run(ctx):
            calls.append(what)
            return {what: ctx}
        return run

    def fault(name, what, stage):
        return dataclasses.replace(FAULTS["kill"], name=name, sweep=sweeps[what], sweep_stage=stage)

    sweeps = {w: sweep(w) for w in ("network", "disk", "process")}
    monkeypatch.setattr(injector, "FAULTS", {
        "kill": fault("kill", "process", PROCESSES), "stall": fault("stall", "disk", STORAGE),
        "cut": fault("cut", "network", NETWORK), "pause": fault("pause", "process", PROCESSES),
        "slow": fault("slow", "disk", STORAGE)})
    assert injector.heal_everything("ctx") == {"network": "ctx", "disk": "ctx", "process": "ctx"}
    assert calls == ["network", "disk", "process"]


def test_the_spec_checks_the_targets_a_fault_accepts(monkeypatch):
    monkeypatch.setitem(spec.FAULTS, "kill", dataclasses.replace(FAULTS["kill"], targets=("one", "all")))
    assert spec.build({"nemesis": "kill", "nemesis_targets": "all"}).nemesis_targets == "all"
    with pytest.raises(UserError) as e:
        spec.build({"nemesis": "partition,kill", "nemesis_targets": "leaders"})
    assert str(e.value) == "--nemesis-targets leaders: kill takes one, all"
