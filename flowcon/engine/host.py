"""Host capacity: what a limit L (a share of the host) is a share of."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostCapacity:
    cpus: int
    memory_bytes: int


def host_capacity() -> HostCapacity:
    """Logical CPUs this process may run on (honours a cpuset) and total memory."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = psutil.cpu_count(logical=True) or 1
    return HostCapacity(cpus=max(cpus, 1), memory_bytes=int(psutil.virtual_memory().total))
