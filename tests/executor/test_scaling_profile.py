"""Profiling by scaling, the pure parts: which GPUs each step uses and in what order."""

from __future__ import annotations

from flowcon.executor.scaling_profile import (
    grow_placement,
    profile_direction,
    shrink_placement,
)


def test_shrink_keeps_the_store_hosts_gpu_first():
    cur = {"a": ["0", "1"], "b": ["2", "3"]}
    assert shrink_placement(cur, 3) == {"a": ["0", "1"], "b": ["2"]}
    assert shrink_placement(cur, 1) == {"a": ["0"]}


def test_grow_keeps_every_gpu_and_prefers_the_same_node():
    free = [("b", ["0", "1"]), ("a", ["1", "2", "3"])]
    out = grow_placement({"a": ["0"]}, free, 3)
    assert out == {"a": ["0", "1", "2"]}
    out = grow_placement({"a": ["0"]}, free, 6)
    assert out == {"a": ["0", "1", "2", "3"], "b": ["0", "1"]}
    assert grow_placement({"a": ["0"]}, free, 7) is None
    assert grow_placement({}, free, 2) == {"b": ["0", "1"]}
    assert grow_placement({"a": ["0", "1"]}, free, 1) is None


def test_direction_is_down_when_the_largest_fits():
    assert profile_direction([1, 2, 4], largest_fits=True) == [4, 2, 1]
    assert profile_direction([4, 1, 2, 2], largest_fits=False) == [1, 2, 4]
