"""Loopback ports for the servers tests start, never handed out twice in one test process."""

from __future__ import annotations

import os
import random
import socket
import threading

# Below Linux's ephemeral range (32768-60999), so no outgoing connection or bind-to-0 can take a port
# between the test choosing it and the server binding it; above Ray's worker ports (10002-19999).
_FIRST, _LAST = 20000, 32767
# pytest-xdist's workers (gw0, gw1, ...) run test files at the same time: each draws from a slice of
# its own, so two workers never hand out the same port between choosing and binding it.
_SLICES = 8


def _worker_range() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return _FIRST, _LAST
    width = (_LAST - _FIRST + 1) // _SLICES
    low = _FIRST + (int(worker[2:]) % _SLICES) * width
    return low, low + width - 1


_LOW, _HIGH = _worker_range()
_handed_out: set[int] = set()
_lock = threading.Lock()
_random = random.Random()


def bindable(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:`port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on and no earlier call of this process returned.

    Binding to port 0 twice can return the same port when the first server has not bound it yet, which
    once made a collector's health_check and OTLP receiver collide (CI at 1c0b0fe).
    """
    with _lock:
        for _ in range(1000):
            port = _random.randint(_LOW, _HIGH)
            if port not in _handed_out and bindable(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port in {_LOW}-{_HIGH}")
