"""From a limit L (a share of the host) to the engine's CPU setting, within label bounds."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flowcon.core.labels import MIN_CPUS

NANO = 1_000_000_000


@dataclass(frozen=True)
class CpuLimit:
    cpus: float  # what the container may use, in CPUs
    unlimited: bool  # the whole host: nothing to throttle

    @property
    def nano_cpus(self) -> int:
        return int(round(self.cpus * NANO))


def to_cpus(
    limit: float, host_cpus: float, cpus_min: float | None = None, cpus_max: float | None = None
) -> CpuLimit:
    """``--cpus = L * host CPUs``, clamped to the container's bounds and the engine's range.

    L = 1 is the whole host. Docker cannot clear NanoCpus once set (0 is ignored by
    ``update``), so "unlimited" is applied as NanoCpus = all host CPUs, which the
    kernel never throttles.
    """
    if not math.isfinite(limit):  # never from Algorithm 1; from a hand-edited state file
        limit = 1.0
    cpus = max(0.0, min(limit, 1.0)) * host_cpus
    if cpus_min is not None:
        cpus = max(cpus, cpus_min)
    if cpus_max is not None:
        cpus = min(cpus, cpus_max)
    cpus = min(max(cpus, MIN_CPUS), host_cpus)
    cpus = round(cpus, 3)
    return CpuLimit(cpus, cpus >= host_cpus)
