"""Algorithm 1 of the paper: classify containers into NL/WL/CL and compute their limits.

A limit L is a share of the host (1 = the whole host, i.e. unlimited). Pure: the
caller measures G and applies the limits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Literal

from flowcon.core.lists import ListName

# What every limit becomes when all containers are in CL (lines 14-16). "free": 1, free
# competition, as the paper writes it. "equal": 1/|c| each, the same split as free
# competition between equally busy jobs, but as limits a thread-aware job sizes its pool
# to, so jobs that adapt their threads do not oversubscribe the host again (measured in
# docs/agent.md, "When every container is in CL").
AllClRule = Literal["free", "equal"]


@dataclass(frozen=True)
class Decision:
    limit: float
    reason: str


@dataclass(frozen=True)
class Result:
    lists: dict[str, ListName]
    decisions: dict[str, Decision]
    all_completing: bool  # line 14: every container is in CL, so itval doubles


def classify(current: ListName, g: float, alpha: float) -> ListName:
    """Lines 4-13."""
    if g < alpha and current == ListName.NL:
        return ListName.WL
    if g < alpha and current == ListName.WL:
        return ListName.CL
    if g >= alpha:
        return ListName.NL
    return current  # G < alpha and already in CL


def _finite(g: float) -> float:
    return g if math.isfinite(g) and g > 0.0 else 0.0


def algorithm1(
    lists: Mapping[str, ListName],
    g: Mapping[str, float],
    limits: Mapping[str, float],
    beta: float,
    alpha: float,
    fresh: Set[str] | None = None,
    all_cl: AllClRule = "free",
) -> Result:
    """One run over the worker's containers (the keys of ``lists``).

    ``g``: normalized growth efficiency per container (every key of ``lists``).
    ``limits``: current limits, kept for containers in WL (line 24).
    ``fresh``: containers whose G was measured since they were last classified; only
    they move between lists (None = all). A run triggered by a listener between two
    measurements must not move a container twice on the same G.
    ``all_cl``: the limits when every container is in CL (``AllClRule``); itval doubles
    under either rule (line 17).
    """
    # A NaN or infinite G (a caller's bug, or overflowing metrics) would turn every share
    # into NaN: it counts as no growth instead.
    g = {cid: _finite(g[cid]) for cid in lists}
    new_lists: dict[str, ListName] = {}
    for cid, current in lists.items():
        if fresh is None or cid in fresh:
            new_lists[cid] = classify(current, g[cid], alpha)
        else:
            new_lists[cid] = current

    decisions: dict[str, Decision] = {}
    n = len(new_lists)
    if all(lst == ListName.CL for lst in new_lists.values()):
        if all_cl == "equal":
            everyone = Decision(1.0 / max(n, 1), "all-CL: equal shares 1/|c|")
        else:
            everyone = Decision(1.0, "all-CL: free competition")
        return Result(new_lists, dict.fromkeys(new_lists, everyone), True)

    total = sum(g[cid] for cid in new_lists)
    floor = 1.0 / (beta * n)
    for cid, lst in new_lists.items():
        share = g[cid] / total if total > 0 else 0.0
        if lst == ListName.CL:
            if share >= floor:
                decisions[cid] = Decision(min(share, 1.0), "CL: G/sumG")
            else:
                decisions[cid] = Decision(min(floor, 1.0), "CL: floor 1/(beta*|c|)")
        elif lst == ListName.WL:
            decisions[cid] = Decision(limits.get(cid, 1.0), "WL: unchanged")
        else:
            decisions[cid] = Decision(min(share, 1.0), "NL: G/sumG")
    return Result(new_lists, decisions, False)
