"""Polling until something holds, and free TCP ports: the ground floor's
one copy of each, for the stages, the lab's fixtures and the tests."""

from __future__ import annotations

import random
import socket
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.1, what: str = "condition",
             retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """The first true value of `predicate()`, polled every `interval` s; after
    `timeout` s, TimeoutError naming `what`. An exception of `retry_on` counts
    as not yet (a process that is still starting refuses connections); any
    other goes to the caller."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except retry_on as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}"
                               + (f" (last error: {last})" if last else ""))
        time.sleep(interval)


def holds_within(check: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    """Whether `check()` came true within `timeout` s (wait_for, as a yes or no)."""
    try:
        wait_for(check, timeout, interval)
        return True
    except TimeoutError:
        return False


def free_ports(count: int = 1, candidates: range | None = None, used: set[int] | frozenset[int] = frozenset(),
               host: str = "127.0.0.1") -> list[int]:
    """`count` TCP ports free on `host` now (another process may take one
    before its user binds it). Without `candidates`, ports the kernel picks;
    with them, ports of that range from a random start, so that runs side by
    side rarely ask for the same ones."""
    if candidates is None:
        held = []
        try:
            for _ in range(count):  # all held at once: the kernel gives distinct ports
                s = socket.socket()
                held.append(s)
                s.bind((host, 0))
            return [s.getsockname()[1] for s in held]
        finally:
            for s in held:
                s.close()
    ports = list(candidates)
    start = random.randrange(len(ports))
    out = []
    for i in range(len(ports)):
        port = ports[(start + i) % len(ports)]
        if port not in used and _bindable(host, port):
            out.append(port)
            if len(out) == count:
                return out
    raise RuntimeError(f"no {count} free ports in {candidates}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False
