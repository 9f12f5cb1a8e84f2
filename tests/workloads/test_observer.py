"""workloads/observer.py's stop: a sample under way is not waited for, and
nothing it finds is written after the `end` phase."""

from __future__ import annotations

import threading
import time

import orjson

from workloads.observer import Observer


class _SlowMetadata:
    """A system whose metadata answers at once the first time, then hangs
    until released (a metadata store that stopped answering)."""

    def __init__(self):
        self.calls = 0
        self.hanging = threading.Event()
        self.release = threading.Event()

    def partition_states(self, topic):
        self.calls += 1
        if self.calls > 1:
            self.hanging.set()
            self.release.wait(60)
        return {0: ("n1", self.calls, ["n1"])}

    def truncations(self, node, logs):
        return []


def test_stop_does_not_wait_for_a_sample_under_way(tmp_path):
    system = _SlowMetadata()
    path = tmp_path / "states.jsonl"
    observer = Observer(path, time.monotonic_ns, system, [], "harness", "127.0.0.1:9", 9,
                        interval=0.01, hw_interval=3600)
    observer.start()
    observer.phase("workload")
    assert system.hanging.wait(30)
    # The metadata answers again 5 s from now: a stop that waited for the sample would return after that.
    timer = threading.Timer(5, system.release.set)
    timer.start()
    observer.stop()
    assert not system.release.is_set() and any(t.is_alive() for t in observer._threads)
    timer.join()
    observer.join()
    assert not any(t.is_alive() for t in observer._threads)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert lines[-1]["kind"] == "phase" and lines[-1]["phase"] == "end"
    # What the hanging sample found (epoch 2) came after the stop: not written.
    assert [x.get("epoch") for x in lines if x.get("kind") == "partition"] == [1]
