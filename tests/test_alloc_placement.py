"""Buddy placement: power-of-two jobs never fragment the cluster."""

from __future__ import annotations

import random

import pytest

from flowcon.alloc.model import Topology
from flowcon.alloc.placement import BuddyPlacer, Placement, PlacementError


def _check(topo: Topology, alloc: dict[str, int], placed: dict[str, Placement]) -> None:
    seen: set[tuple[int, int]] = set()
    g = topo.gpus_per_node
    assert set(placed) == {j for j, n in alloc.items() if n}
    for jid, p in placed.items():
        n = alloc[jid]
        assert len(p) == n and len(set(p)) == n
        assert not seen & set(p), "two jobs on one GPU"
        seen |= set(p)
        ids = sorted(node * g + gpu for node, gpu in p)
        assert ids == list(range(ids[0], ids[0] + n)) and ids[0] % n == 0, "not a buddy block"
        nodes = {node for node, _ in p}
        assert len(nodes) == max(1, n // g), "workers spread over more nodes than needed"
        assert all(0 <= node < topo.nodes and 0 <= gpu < g for node, gpu in p)


@pytest.mark.parametrize("spec", ["4x8", "3x8", "8x4", "2x2x8"])
def test_never_fragments_over_random_sequences(spec: str) -> None:
    topo = Topology.from_spec(spec)
    placer = BuddyPlacer(topo, overhead=5.0)
    rng = random.Random(spec)
    total = topo.total_gpus
    sizes = [1 << k for k in range(total.bit_length()) if (1 << k) <= total]
    for _ in range(60):  # sequences
        current: dict[str, Placement] = {}
        alloc: dict[str, int] = {}
        for step in range(40):
            # random arrivals, departures and resizes, keeping the total within the cluster
            for jid in list(alloc):
                r = rng.random()
                if r < 0.15:
                    del alloc[jid]
                elif r < 0.3:
                    alloc[jid] = rng.choice(sizes)
            for i in range(rng.randint(0, 3)):
                alloc[f"s{step}-{i}"] = rng.choice(sizes)
            while sum(alloc.values()) > total:
                alloc.pop(rng.choice(list(alloc)))
            plan = placer.place(alloc, current)  # must never fail: sum <= total suffices
            _check(topo, alloc, plan.placements)
            for jid in plan.changed:
                assert plan.overhead.get(jid, 5.0) == 5.0
            current = dict(plan.placements)


def test_unchanged_jobs_stay_and_best_fit() -> None:
    topo = Topology.from_spec("2x8")
    placer = BuddyPlacer(topo)
    p1 = placer.place({"a": 4, "b": 2}, {})
    p2 = placer.place({"a": 4, "b": 2, "c": 2}, p1.placements)
    assert p2.placements["a"] == p1.placements["a"] and p2.placements["b"] == p1.placements["b"]
    assert p2.rescaled == {"c"} and not p2.migrated
    # best fit: c goes into the node that is already partly used
    assert {n for n, _ in p2.placements["c"]} == {n for n, _ in p1.placements["a"]}


def test_defragmentation_migrates() -> None:
    topo = Topology.from_spec("2x8")
    placer = BuddyPlacer(topo)
    # 7 + 7 single-GPU jobs can leave one free GPU on each node: an 2-GPU job must migrate
    cur = {f"x{i}": ((i // 7, i % 7),) for i in range(14)}
    alloc = {k: 1 for k in cur} | {"big": 2}
    plan = placer.place(alloc, cur)
    _check(topo, alloc, plan.placements)
    assert plan.repacked and plan.migrated


def test_bad_sizes_raise() -> None:
    placer = BuddyPlacer(Topology.from_spec("1x8"))
    with pytest.raises(PlacementError):
        placer.place({"a": 3}, {})
    with pytest.raises(PlacementError):
        placer.place({"a": 8, "b": 1}, {})
