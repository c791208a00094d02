"""The published simulator's GPU layout and its trainer cache (``--world published``),
hand-checked on small clusters (flowcon/sim/published_layout.py, flowcon/sim/world.py)."""

from __future__ import annotations

import pytest

from flowcon.sim.published_layout import ElasticLayout, published_rank_keys
from flowcon.sim.world import published_world


def test_layout_whole_nodes_first_then_classes() -> None:
    """2 nodes x 8. The 8-GPU job opens node 0. The 4-GPU job cannot join the full set
    and opens node 1 (4 free: class 4). The 2-GPU job fills in that class-4 set (2 free:
    class 2), the first 1-GPU job the class-2 set (1 free: class 1), the second the
    class-1 set, which is then full. Ranks: node 0 for the big job, then node 1 in the
    order its jobs joined; the given order does not matter, sizes decide."""
    jobs = [("e", 1), ("a", 8), ("d", 1), ("c", 2), ("b", 4)]
    keys = published_rank_keys(jobs, num_nodes=2, gpus_per_node=8)
    assert keys == {"a": (0, 8), "b": (8, 4), "c": (12, 2), "e": (14, 1), "d": (15, 1)}


def test_layout_new_set_goes_ahead_of_a_full_one() -> None:
    """Three 2-GPU jobs and a 4-GPU one on 2 x 8, then a 2-GPU and a 1-GPU job: the
    fourth 2-GPU job finds the first set of its class full, opens node 1, and that
    emptier set is sorted ahead; the 1-GPU job fills in there."""
    lay = ElasticLayout(num_nodes=2, gpus_per_node=8)
    for job, n in [("q", 4), ("r", 2), ("s", 2), ("t", 2), ("u", 1)]:
        assert lay.place(job, n)
    assert lay.ranks() == {"q": (0, 4), "r": (4, 2), "s": (6, 2), "t": (8, 2), "u": (10, 1)}
    assert not lay.place("v", 3)  # no class of 3 GPUs


def test_layout_full_cluster_reports_no_room() -> None:
    keys = published_rank_keys([("a", 8), ("b", 8), ("c", 1)], num_nodes=2, gpus_per_node=8)
    assert keys == {"a": (0, 8), "b": (8, 8), "c": None}


def test_cache_keys_on_ranks_not_on_jobs() -> None:
    """1 x 8: a and b (4 GPUs each) start on ranks 0-3 and 4-7, both new: 2 + 2 (log2 4 +
    1) = 8 s each. Next event b runs alone on ranks 0-3, which a used: cached, 2 s. The
    event after a restart pays 2 + 27 + 6 = 35 s for a set not seen, and the cache is
    emptied after it: the same ranks cost the full 8 s at the next event."""
    world = published_world("elasticflow-published")
    cache: set[tuple[int, int]] = set()

    def charge(jobs: list[tuple[str, int]], restart: bool = False) -> dict[str, float]:
        keys = published_rank_keys(jobs, num_nodes=1, gpus_per_node=8)
        n = dict(jobs)
        return world.event_charges({j: (n[j], k) for j, k in keys.items()}, cache, restart, 8)

    assert charge([("a", 4), ("b", 4)]) == {"a": 8.0, "b": 8.0}
    assert charge([("b", 4)]) == {"b": 2.0}
    assert charge([("b", 2)], restart=True) == {"b": pytest.approx(2 + 27 + 2 * 2)}
    assert cache == set()
    assert charge([("b", 4)]) == {"b": 8.0}
    assert charge([("c", 4)]) == {"c": 2.0}  # another job, the same ranks


def test_cache_checked_before_the_restart_surcharge() -> None:
    """A cached set pays the base charge even at a restart event (its overhead function
    returns before adding the restart's 27 s); 7 s base on 256+ GPUs."""
    world = published_world("elasticflow-published")
    cache = {(0, 8)}
    out = world.event_charges({"a": (8, (0, 8)), "b": (8, (8, 8))}, cache, True, 512)
    assert out == {"a": 7.0, "b": pytest.approx(7 + 47 + 2 * 4)}
    assert cache == set()
