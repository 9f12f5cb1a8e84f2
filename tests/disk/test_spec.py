"""Disk faults in the spec and the nemesis registry (no processes started)."""

from __future__ import annotations

import pytest

from core.errors import UserError
from harness.cli import main
from harness.run.spec import build
from nemesis import disk, power
from nemesis.registry import FAULT_ENDS
from nemesis.registry import FAULT_GROUPS, FAULTS
from nemesis.schedule import plan


def test_disk_means_the_three_disk_faults_and_they_need_the_faultfs():
    s = build({"nemesis": "partition,disk", "disk": {"slow-ms": 50, "ops": "fsync"}})
    assert s.nemesis == ("partition", "disk-stall", "disk-slow", "disk-fail")
    assert s.uses_faultfs and s.disk == {"slow-ms": 50, "ops": "fsync"}
    assert build({"nemesis": ["power-loss", "power-loss"]}).nemesis == ("power-loss",)
    assert not build({"nemesis": "kill"}).uses_faultfs
    assert build({"nemesis": "kill", "faultfs": True}).uses_faultfs


def test_every_disk_fault_is_registered_and_shaded_in_reports():
    for record in (disk.STALL, disk.SLOW, disk.FAIL, disk.CORRUPT, power.POWER_LOSS):
        assert FAULTS[record.name] is record and record.needs_faultfs
        assert FAULT_ENDS[record.start_action] == record.stop_action, record.name
    # disk-corrupt stays out of the group: `--nemesis disk` draws what it drew before, seed for seed.
    assert FAULT_GROUPS == {"disk": ("disk-stall", "disk-slow", "disk-fail")}


def test_disk_faults_are_planned_like_kill_with_their_targets():
    steps = [s for s in plan(("disk-stall", "power-loss"), "majority", 5, 3.0, 60.0, seed=4) if s.action == "start"]
    assert {s.fault for s in steps} == {"disk-stall", "power-loss"}
    assert all(len(s.picks) == 3 for s in steps)


@pytest.mark.parametrize("values,words", [
    ({"nemesis": "disk-quake"}, "--nemesis 'disk-quake'"),
    ({"disk": {"slow-ms": 0}}, "disk.slow-ms 0"),
    ({"disk": {"slow-ms": True}}, "disk.slow-ms True"),
    ({"disk": {"ops": "reads"}}, "disk.ops 'reads'"),
    ({"disk": {"colour": "red"}}, "disk.colour: unknown setting"),
    ({"disk": "fast"}, "[disk] must be a table"),
    ({"faultfs": "yes"}, "--faultfs: expected true or false"),
])
def test_bad_disk_settings(values, words):
    with pytest.raises(UserError) as e:
        build(values)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_bad_disk_settings_from_the_command_line_are_one_line(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('nemesis = ["disk"]\n[disk]\nslow-ms = -3\n')
    status = main(["run", "--results", str(tmp_path / "r"), "-c", str(spec)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "disk.slow-ms -3" in err
    assert not (tmp_path / "r").exists()  # nothing started


def test_disk_corrupt_and_torn_settings_are_read_and_checked():
    s = build({"nemesis": "disk-corrupt", "disk": {"corrupt": "writes", "corrupt-files": ["indexes", "checkpoints"],
                                                   "corrupt-fraction": 0.05, "power-loss": "torn"}})
    assert s.nemesis == ("disk-corrupt",) and s.uses_faultfs
    for values, words in [({"corrupt": "sideways"}, "disk.corrupt 'sideways'"),
                          ({"corrupt-files": "movies"}, "disk.corrupt-files 'movies'"),
                          ({"corrupt-files": []}, "disk.corrupt-files []"),
                          ({"corrupt-fraction": 0}, "disk.corrupt-fraction 0"),
                          ({"corrupt-fraction": "1%"}, "disk.corrupt-fraction '1%'"),
                          ({"power-loss": "melt"}, "disk.power-loss 'melt'")]:
        with pytest.raises(UserError) as e:
            build({"nemesis": "disk-corrupt", "disk": values})
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_words_of_corrupt_and_torn_events_survive_odd_values():
    assert disk.describe_corrupt({"nodes": ["n2"], "direction": "writes", "files": ["segments"], "fraction": 0.01,
                                  "verified": {"ok": True, "probe": {"n2": "1 flipped bit(s)"}}}, False) == (
        "n2, bit flips in 1% of writes of segments", "verified: 1 flipped bit(s) on n2")
    assert disk.describe_corrupt({"nodes": ["n2"], "flips": {"n2": {"matched": 40, "flipped": 3}}}, True)[0] == (
        "n2, flips off (3 of 40 operations flipped)")
    for odd in ({"nodes": ["n1"], "direction": "<b>", "files": "x", "fraction": "lots"},
                {"nodes": ["n1"], "flips": {"n1": "?"}}, {"nodes": None}, "text", {}):
        for stopping in (False, True):
            disk.describe_corrupt(odd, stopping)
            power.describe(odd, stopping)
    assert "torn in 2" in power.describe({"nodes": ["n1"], "lost": {"n1": {"files": 3, "torn": 2}}}, False)[0]
