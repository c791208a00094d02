"""Disjoint CPU sets sized from Algorithm 1's shares (the agent's ``control: cpuset``).

Pure: shares and the host's core count in, one list of cores per container out. Every
container gets at least one core; the cores left over go by largest remainder of the
shares, so the sizes follow the shares as closely as whole cores allow. Cores are handed
out in the containers' order, contiguous, so a container's set moves little between
rounds. Fewer cores than containers: no plan (the caller falls back to weights).
"""

from __future__ import annotations

import math
from collections.abc import Mapping


def core_counts(shares: Mapping[str, float], cores: int) -> dict[str, int] | None:
    """How many cores each container gets: one each, the rest by largest remainder of
    the shares (ties to the earlier container). None when ``cores < len(shares)``."""
    if not shares:
        return {}
    if cores < len(shares):
        return None
    weights = {k: (v if math.isfinite(v) and v > 0 else 0.0) for k, v in shares.items()}
    total = sum(weights.values())
    spare = cores - len(shares)
    if total <= 0:  # no usable shares: as if all were equal
        weights = dict.fromkeys(shares, 1.0)
        total = float(len(shares))
    ideal = {k: spare * w / total for k, w in weights.items()}
    counts = {k: 1 + math.floor(x) for k, x in ideal.items()}
    left = cores - sum(counts.values())
    index = {k: i for i, k in enumerate(shares)}
    order = sorted(shares, key=lambda k: (math.floor(ideal[k]) - ideal[k], index[k]))
    for k in order[:left]:
        counts[k] += 1
    return counts


def plan_cpusets(shares: Mapping[str, float], cores: int) -> dict[str, list[int]] | None:
    """Disjoint core lists (cores numbered 0..cores-1) sized by ``core_counts``; None
    when there are fewer cores than containers."""
    counts = core_counts(shares, cores)
    if counts is None:
        return None
    out: dict[str, list[int]] = {}
    nxt = 0
    for k in shares:
        out[k] = list(range(nxt, nxt + counts[k]))
        nxt += counts[k]
    return out


def cpuset_string(cores: list[int]) -> str:
    """The engine's form of a core list: ranges joined by commas ("0-2,5")."""
    parts: list[str] = []
    ordered = sorted(set(cores))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def all_cores(cores: int) -> str:
    """Every core of a host with ``cores`` cores ("0-3"; "0" for one)."""
    return cpuset_string(list(range(max(cores, 1))))
