"""A session's priority (core/processes.py): a command run through
SESSION_NICE_PREFIX in a session of its own is niced and so is its session,
and the session that started it is left as it was; on a real kernel. Where
the kernel does not group processes by session (no autogroups) there is no
session's value to set: the command is still niced and keeps its status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from core.processes import SESSION_NICE_PREFIX, session_nice, set_session_nice

AUTOGROUPS = Path("/proc/self/autogroup").exists()
REPORT = "nice; cat /proc/self/autogroup 2>/dev/null"


def test_a_prefixed_command_alone_in_its_session_nices_the_session_and_keeps_its_status():
    ours = session_nice()
    done = subprocess.run(f"{SESSION_NICE_PREFIX.format(n=10)} sh -c '{REPORT}; exit 3'", shell=True,
                          start_new_session=True, capture_output=True, text=True)
    nice, group = (done.stdout.split("\n") + [""])[:2]
    # nice -n adds to this process's own (the suite's half beside runs at 19, the most there is).
    assert done.returncode == 3 and int(nice) == min(os.nice(0) + 10, 19), done
    assert group.endswith(" nice 10") if AUTOGROUPS else group == "", done
    assert session_nice() == ours  # another session's, not ours


def test_set_session_nice_sets_the_child_s_session_before_it_runs():
    done = subprocess.run(["sh", "-c", REPORT], start_new_session=True, capture_output=True, text=True,
                          preexec_fn=lambda: set_session_nice(7))
    group = (done.stdout.split("\n") + [""])[1]
    assert group.endswith(" nice 7") if AUTOGROUPS else group == "", done
    assert set_session_nice(0, pid=999_999_999) is False  # no such process: refused, not raised
