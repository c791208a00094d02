"""Free TCP ports on the loopback address, for tests and benchmarks."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listened on a moment ago (bound to port 0, then
    closed): for a store, a metrics server or a probe that must find nothing there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
