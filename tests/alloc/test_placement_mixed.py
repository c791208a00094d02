"""Buddy placement over nodes of different sizes, GPUs in link order, and blocked GPUs."""

from __future__ import annotations

import random

import pytest

from flowcon.alloc.model import Topology
from flowcon.alloc.placement import BuddyPlacer, Placement, PlacementError
from flowcon.alloc.topology import NVLINK, Layout, gpu_order

MIXED = [range(4), range(8), range(2)]  # node 0: 4 GPUs, node 1: 8, node 2: 2


def _check(
    sizes: list[int], alloc: dict[str, int], placed: dict[str, Placement], blocked: set[object]
) -> None:
    seen: set[tuple[int, int]] = set()
    assert set(placed) == {j for j, n in alloc.items() if n}
    for j, p in placed.items():
        n = alloc[j]
        assert len(p) == n == len(set(p))
        assert not seen & set(p), "two jobs on one GPU"
        assert not blocked & set(p), "a job on a blocked GPU"
        seen |= set(p)
        assert all(0 <= g < sizes[node] for node, g in p)
        nodes = {node for node, _ in p}
        if n <= max(sizes):
            assert len(nodes) == 1 or all(sizes[x] * len(nodes) == n for x in nodes)
        counts = {sizes[x] for x in nodes}
        assert len(counts) == 1, "spans nodes of different sizes"


def test_each_job_fits_in_one_node_when_one_is_big_enough() -> None:
    placer = BuddyPlacer(Layout.of_nodes(MIXED))
    assert placer.total == 14
    plan = placer.place({"a": 8, "b": 4, "c": 2}, {})
    assert {n for n, _ in plan.placements["a"]} == {1}
    assert {n for n, _ in plan.placements["b"]} == {0}
    assert {n for n, _ in plan.placements["c"]} == {2}


def test_small_jobs_fill_the_small_nodes_first() -> None:
    placer = BuddyPlacer(Layout.of_nodes(MIXED))
    plan = placer.place({"a": 2}, {})
    assert {n for n, _ in plan.placements["a"]} == {2}  # the 8-GPU node stays whole
    plan = placer.place({"a": 2, "b": 4}, plan.placements)
    assert {n for n, _ in plan.placements["b"]} == {0}


def test_a_job_bigger_than_any_node_spans_equal_nodes() -> None:
    placer = BuddyPlacer(Layout.of_nodes([range(8), range(4), range(4)]))
    plan = placer.place({"a": 8, "b": 8}, {})
    spans = {j: {n for n, _ in p} for j, p in plan.placements.items()}
    assert sorted(map(sorted, spans.values())) == [[0], [1, 2]]


def test_one_node_before_several() -> None:
    placer = BuddyPlacer(Layout.of_nodes([range(8), range(2), range(2)]))
    plan = placer.place({"a": 4}, {})
    assert {n for n, _ in plan.placements["a"]} == {0}  # not the two 2-GPU nodes
    plan = placer.place({"a": 4, "b": 4}, plan.placements)
    assert {n for n, _ in plan.placements["b"]} == {0}  # fills the 8-GPU node
    plan = placer.place({"a": 4, "b": 4, "c": 4}, plan.placements)
    assert {n for n, _ in plan.placements["c"]} == {1, 2}  # only now over two nodes


def test_a_half_used_big_node_beats_spanning_small_ones() -> None:
    placer = BuddyPlacer(Layout.of_nodes([range(8), range(2), range(2)]))
    first = placer.place({"x": 4}, {})
    plan = placer.place({"x": 4, "y": 4}, first.placements)
    assert {n for n, _ in plan.placements["y"]} == {0}


def test_a_job_that_no_node_run_holds_is_refused() -> None:
    placer = BuddyPlacer(Layout.of_nodes([range(8), range(4), range(2), range(2)]))
    with pytest.raises(PlacementError, match="no block of 8 GPUs"):
        placer.place({"a": 8, "b": 8}, {})  # 16 GPUs exist, but 4 + 2 + 2 is no block
    with pytest.raises(PlacementError, match="largest block is 8"):
        BuddyPlacer(Layout.of_nodes(MIXED)).place({"a": 16}, {})


def test_mixed_nodes_over_random_sequences() -> None:
    node_sizes = [4, 8, 2, 8, 1, 4]
    placer = BuddyPlacer(Layout.of_nodes([range(n) for n in node_sizes]), overhead=1.0)
    rng = random.Random(7)
    total = sum(node_sizes)
    for _ in range(30):
        current: dict[str, Placement] = {}
        alloc: dict[str, int] = {}
        for step in range(30):
            for j in list(alloc):
                if rng.random() < 0.2:
                    del alloc[j]
            for i in range(rng.randint(0, 3)):
                alloc[f"s{step}-{i}"] = rng.choice([1, 1, 2, 2, 4, 8, 16])
            while sum(alloc.values()) > total:
                alloc.pop(rng.choice(list(alloc)))
            try:
                plan = placer.place(alloc, current)
            except PlacementError:
                alloc.pop(max(alloc, key=lambda j: (alloc[j], j)))
                continue
            _check(node_sizes, alloc, plan.placements, set())
            for j in plan.placements:
                if j in current and j not in plan.changed:
                    assert set(current[j]) == set(plan.placements[j])
            current = dict(plan.placements)


def test_pairs_follow_nvlink() -> None:
    # NVLink pairs 0-4, 1-5, 2-6, 3-7: each 2-GPU job gets one of them
    links = {(0, 4): NVLINK, (1, 5): NVLINK, (2, 6): NVLINK, (3, 7): NVLINK}
    placer = BuddyPlacer(Layout.of_nodes([gpu_order(8, links)]))
    plan = placer.place({"a": 2, "b": 2, "c": 2, "d": 1}, {})
    for j in "abc":
        a, b = sorted(g for _, g in plan.placements[j])
        assert (a, b) in links
    # a placement read back (e.g. from the store, sorted) is recognised and kept
    kept = {j: tuple(sorted(p)) for j, p in plan.placements.items()}
    again = BuddyPlacer(Layout.of_nodes([gpu_order(8, links)])).place(
        {"a": 2, "b": 2, "c": 2, "d": 1}, kept
    )
    assert not again.changed


def test_uniform_layout_decides_as_the_topology_does() -> None:
    rng = random.Random(3)
    by_topo = BuddyPlacer(Topology(4, 8))
    by_layout = BuddyPlacer(Layout.uniform_nodes(4, 8))
    cur_t: dict[str, Placement] = {}
    cur_l: dict[str, Placement] = {}
    alloc: dict[str, int] = {}
    for step in range(200):
        for j in list(alloc):
            if rng.random() < 0.2:
                del alloc[j]
        alloc[f"j{step}"] = rng.choice([1, 2, 4, 8, 16])
        while sum(alloc.values()) > 32:
            alloc.pop(rng.choice(list(alloc)))
        pt, pl = by_topo.place(alloc, cur_t), by_layout.place(alloc, cur_l)
        assert pt == pl
        cur_t, cur_l = dict(pt.placements), dict(pl.placements)


# ---------------------------------------------------------------- blocked GPUs


@pytest.mark.parametrize("make", [lambda: Topology(2, 4), lambda: Layout.of_nodes(MIXED)])
def test_blocked_gpus_are_never_used(make: object) -> None:
    placer = BuddyPlacer(make())  # type: ignore[operator]
    blocked = frozenset({(0, 0), (1, 3)})
    plan = placer.place({"a": 2, "b": 1, "c": 1}, {}, blocked=blocked)
    used = {ng for p in plan.placements.values() for ng in p}
    assert not used & blocked


def test_a_job_on_a_blocked_gpu_moves() -> None:
    placer = BuddyPlacer(Topology(2, 4), overhead=3.0)
    alloc = {"a": 4, "b": 2}
    first = placer.place(alloc, {})
    node, gpu = first.placements["b"][0]
    plan = placer.place(alloc, first.placements, blocked={(node, gpu)})
    assert (node, gpu) not in plan.placements["b"]
    assert plan.migrated == {"b"}
    assert not plan.rescaled
    assert plan.overhead == {"b": 3.0}
    assert plan.placements["a"] == first.placements["a"]
    # the same blocked GPU next round (the incremental path): nothing moves
    same = placer.place(alloc, plan.placements, blocked={(node, gpu)})
    assert not same.changed
    # a job smaller than the block a blocked GPU sits in moves only when on it
    crowd = placer.place({"a": 4, "b": 2, "c": 1}, plan.placements, blocked={(node, gpu)})
    assert (node, gpu) not in {ng for p in crowd.placements.values() for ng in p}
    # unblocked again: nothing needs to move
    back = placer.place({"a": 4, "b": 2, "c": 1}, crowd.placements)
    assert not back.changed


def test_a_drained_node_moves_its_jobs() -> None:
    placer = BuddyPlacer(Topology(2, 4))
    first = placer.place({"a": 4}, {})
    (node,) = {n for n, _ in first.placements["a"]}
    drained = frozenset((node, g) for g in range(4))
    plan = placer.place({"a": 4}, first.placements, blocked=drained)
    assert {n for n, _ in plan.placements["a"]} == {1 - node}
    assert plan.migrated == {"a"}


def test_blocked_gpus_that_leave_too_few_raise() -> None:
    placer = BuddyPlacer(Topology(2, 4))
    with pytest.raises(PlacementError, match="7 usable"):
        placer.place({"a": 4, "b": 4}, {}, blocked={(1, 2)})
    # enough GPUs, but no whole block of 4 on either node
    with pytest.raises(PlacementError, match="no block of 4"):
        placer.place({"a": 4, "b": 2}, {}, blocked={(0, 1), (1, 2)})
    # blocked pairs outside the cluster are ignored
    plan = placer.place({"a": 4, "b": 4}, {}, blocked={(5, 0), (0, 9)})
    assert set(plan.placements) == {"a", "b"}
