"""The host's load now: the 1-minute load average and the CPU busy fraction over a
short window (psutil), as a repeat.HostLoad. The decision on it is repeat.busy_reason."""

from __future__ import annotations

import os

import psutil

from flowcon.replay.repeat import HostLoad


def measure(window: float = 3.0) -> HostLoad:
    """Blocks for ``window`` seconds while psutil measures the CPUs' busy fraction."""
    busy = psutil.cpu_percent(interval=max(0.1, window)) / 100.0
    try:
        load1 = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load1 = 0.0
    return HostLoad(load1=load1, busy=busy, window=window, cpus=os.cpu_count() or 1)
