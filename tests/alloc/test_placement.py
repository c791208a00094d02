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
        assert len(p) == n
        assert len(set(p)) == n
        assert not seen & set(p), "two jobs on one GPU"
        seen |= set(p)
        ids = sorted(node * g + gpu for node, gpu in p)
        assert ids == list(range(ids[0], ids[0] + n)), "not a buddy block"
        assert ids[0] % n == 0, "not a buddy block"
        nodes = {node for node, _ in p}
        assert len(nodes) == max(1, n // g), "workers spread over more nodes than needed"
        assert all(0 <= node < topo.nodes and 0 <= gpu < g for node, gpu in p)


def _random_step(
    rng: random.Random, alloc: dict[str, int], sizes: list[int], total: int, step: int
) -> None:
    """Random arrivals, departures and resizes, keeping the total within the cluster."""
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
            _random_step(rng, alloc, sizes, total, step)
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
    assert p2.placements["a"] == p1.placements["a"]
    assert p2.placements["b"] == p1.placements["b"]
    assert p2.rescaled == {"c"}
    assert not p2.migrated
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
    assert plan.repacked
    assert plan.migrated


def test_bad_sizes_raise() -> None:
    placer = BuddyPlacer(Topology.from_spec("1x8"))
    with pytest.raises(PlacementError):
        placer.place({"a": 3}, {})
    with pytest.raises(PlacementError):
        placer.place({"a": 8, "b": 1}, {})


def _ids(topo: Topology, p: Placement) -> list[int]:
    return sorted(node * topo.gpus_per_node + gpu for node, gpu in p)


@pytest.mark.parametrize("spec", ["4x8", "3x8", "2x2x8"])
def test_stable_allocation_never_migrates(spec: str) -> None:
    """Asking again with the same allocation changes nothing, whatever the history, and so
    does any change that only shrinks or removes jobs: the others keep their GPUs."""
    topo = Topology.from_spec(spec)
    placer = BuddyPlacer(topo, overhead=10.0)
    rng = random.Random(spec)
    sizes = [1, 1, 1, 2, 2, 4, 8]
    current: dict[str, Placement] = {}
    alloc: dict[str, int] = {}
    for step in range(200):
        for jid in list(alloc):
            if rng.random() < 0.2:
                alloc[jid] = rng.choice(sizes)
        alloc[f"s{step}"] = rng.choice(sizes)
        while sum(alloc.values()) > topo.total_gpus:
            alloc.pop(rng.choice(list(alloc)))
        current = dict(placer.place(alloc, current).placements)
        again = placer.place(alloc, current)
        assert not again.changed
        assert not again.repacked
        assert not again.overhead
        assert again.placements == current
        # fresh placer (no cached state, e.g. after a service restart): same answer
        assert BuddyPlacer(topo).place(alloc, current).placements == current
        # removing or pausing jobs never moves the others
        gone = set(rng.sample(sorted(alloc), k=min(2, len(alloc))))
        fewer = {j: (0 if j in gone else n) for j, n in alloc.items()}
        shrink = placer.place(fewer, current)
        assert not shrink.migrated
        assert shrink.rescaled == gone
        assert all(shrink.placements[j] == current[j] for j in alloc if j not in gone)
        current = dict(placer.place(alloc, current).placements)  # back (re-place the gone)


def test_defragmentation_moves_only_the_job_in_the_way() -> None:
    topo = Topology.from_spec("2x8")
    placer = BuddyPlacer(topo, overhead=10.0)
    # one idle GPU at the end of each node: a 2-GPU job needs exactly one 1-GPU job moved
    cur = {f"x{i}": ((i // 7, i % 7),) for i in range(14)}
    plan = placer.place({k: 1 for k in cur} | {"big": 2}, cur)
    assert plan.repacked
    assert len(plan.migrated) == 1
    assert plan.rescaled == {"big"}
    (moved,) = plan.migrated
    assert set(plan.overhead) == {"big", moved}
    assert all(plan.placements[j] == cur[j] for j in cur if j != moved)
    assert _ids(topo, plan.placements["big"]) in ([6, 7], [14, 15])


def test_defragmentation_prefers_fewest_and_smallest_jobs() -> None:
    topo = Topology.from_spec("2x8")
    placer = BuddyPlacer(topo)
    g = topo.gpus_per_node

    def at(*ids: int) -> Placement:
        return tuple(divmod(i, g) for i in ids)

    # node 0: a (4 GPUs) + b, c (1 each) + 2 idle; node 1: d (4) + e (2) + 2 idle
    cur = {"a": at(0, 1, 2, 3), "b": at(4), "c": at(5), "d": at(8, 9, 10, 11), "e": at(12, 13)}
    alloc = {"a": 4, "b": 1, "c": 1, "d": 4, "e": 2, "new": 4}
    plan = placer.place(alloc, cur)
    # freeing [4..7] moves two jobs, freeing [12..15] moves one (e): e moves
    assert plan.migrated == {"e"}
    assert _ids(topo, plan.placements["new"]) == [12, 13, 14, 15]
    assert _ids(topo, plan.placements["e"]) == [6, 7]
    # among equal job counts, the block holding fewer GPUs is emptied
    cur2 = {"a": at(0, 1, 2, 3), "b": at(4), "d": at(8, 9, 10, 11), "e": at(12, 13)}
    plan2 = placer.place({"a": 4, "b": 1, "d": 4, "e": 2, "new": 4, "f": 1}, cur2)
    assert plan2.migrated == {"b"}
    assert _ids(topo, plan2.placements["new"]) == [4, 5, 6, 7]


def test_no_migration_when_a_free_block_exists() -> None:
    """Over random histories, a job only moves when the placement had to defragment, and
    the jobs moved in one step hold fewer GPUs than the jobs that needed the room."""
    topo = Topology.from_spec("4x8")
    placer = BuddyPlacer(topo)
    rng = random.Random(7)
    current: dict[str, Placement] = {}
    alloc: dict[str, int] = {}
    defrags = 0
    for step in range(400):
        for jid in list(alloc):
            r = rng.random()
            if r < 0.1:
                del alloc[jid]
            elif r < 0.25:
                alloc[jid] = rng.choice([1, 2, 4, 8])
        alloc[f"s{step}"] = rng.choice([1, 1, 2, 4])
        while sum(alloc.values()) > topo.total_gpus:
            alloc.pop(rng.choice(list(alloc)))
        plan = placer.place(alloc, current)
        _check(topo, alloc, plan.placements)
        if plan.migrated:
            defrags += 1
            assert plan.repacked
            needing = sum(alloc[j] for j in plan.rescaled if j in alloc)
            assert sum(alloc[j] for j in plan.migrated) < max(needing, 1) * 2
        else:
            assert not plan.repacked
        current = dict(plan.placements)
    assert defrags > 0  # the scenario does exercise defragmentation


def _best_fit_by_definition(owner: list[str | None], n: int) -> int | None:
    """Best-Fit as the module states it, from the owners alone: among free aligned
    n-blocks the one with the fewest idle GPUs in its buddy, then in the next larger
    enclosing block, and so on (an enclosing block cut off by the cluster's end counts as
    full of idle GPUs), then the lowest offset."""
    total = len(owner)

    def idle(off: int, size: int) -> int:
        start = off - off % size
        return size if start + size > total else owner[start : start + size].count(None)

    free = [off for off in range(0, total - n + 1, n) if idle(off, n) == n]
    if not free:
        return None
    sizes = []
    s = 2 * n
    while s <= total:
        sizes.append(s)
        s *= 2
    return min(free, key=lambda off: ([idle(off, s) for s in sizes], off))


@pytest.mark.parametrize("total", [24, 32, 40, 64, 96])
def test_best_fit_picks_the_block_its_definition_names(total: int) -> None:
    """Random owners on clusters whose size is (24, 40, 96) or is not (32, 64) a power of
    two: the grid's incremental counts and its candidate scan give the block the
    definition gives, for every power-of-two size."""
    from flowcon.alloc.placement import _Grid

    rng = random.Random(total)
    sizes = [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= total]
    for _ in range(200):
        busy = rng.random()
        owner: list[str | None] = [None if rng.random() > busy else "x" for _ in range(total)]
        grid = _Grid(owner[:])
        for _ in range(4):  # then changed in place, aligned blocks taken and given back
            for n in sizes:
                assert grid.best_fit(n) == _best_fit_by_definition(owner, n), (owner, n)
            n = rng.choice(sizes)
            off = rng.randrange(total // n) * n
            idle = owner[off : off + n].count(None)
            if idle in (0, n):  # as the placer does: a free block taken, a held one freed
                job = "y" if idle else None
                grid.set(off, n, job)
                owner[off : off + n] = [job] * n


@pytest.mark.parametrize("skips", [False, True])
@pytest.mark.parametrize("spec", ["4x8", "3x8", "8x4", "2x2x8"])
def test_a_placer_that_goes_on_from_its_answer_agrees_with_a_fresh_one(
    spec: str, skips: bool
) -> None:
    """The placer goes on from its previous answer's grid, changed in place; a fresh placer
    given the same current placements must answer the same, step after step (arrivals,
    departures with or without their placement, resizes, repacks, refused calls in
    between). With ``skips``, every third step keeps every job's GPU count (a job may
    finish): the engine does not call the placer then, as its answer would be the current
    placements with nothing rescaled, migrated or charged, and the placer goes on later
    from an older answer."""
    topo = Topology.from_spec(spec)
    placer = BuddyPlacer(topo, overhead=5.0)
    rng = random.Random(f"fresh-{spec}")
    total = topo.total_gpus
    sizes = [1 << k for k in range(total.bit_length()) if (1 << k) <= total]
    current: dict[str, Placement] = {}
    alloc: dict[str, int] = {}
    for step in range(300):
        if skips and step % 3 == 0 and alloc:
            if rng.random() < 0.5:
                gone = rng.choice(sorted(alloc))
                del alloc[gone]
                del current[gone]
            same = BuddyPlacer(topo, overhead=5.0).place(alloc, current)
            assert same.placements == current
            assert not same.rescaled
            assert not same.migrated
            assert not same.overhead
            continue  # the engine's shortcut: no call
        _random_step(rng, alloc, sizes, total, step)
        for jid in [j for j in current if j not in alloc]:
            if rng.random() < 0.5:  # finished: the engine drops its placement too
                del current[jid]
        if step % 7 == 3:  # a refused call in between changes nothing
            with pytest.raises(PlacementError):
                placer.place({**alloc, "too-big": 3}, current)
        plan = placer.place(alloc, current)
        fresh = BuddyPlacer(topo, overhead=5.0).place(alloc, current)
        assert plan == fresh
        current = dict(plan.placements)
