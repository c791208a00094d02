"""flowcon/core/cpusets.py: disjoint core sets sized from shares."""

from __future__ import annotations

import pytest

from flowcon.core.cpusets import all_cores, core_counts, cpuset_string, plan_cpusets


def test_two_containers_on_two_cores_get_one_each() -> None:
    assert plan_cpusets({"a": 1.5, "b": 0.5}, 2) == {"a": [0], "b": [1]}


def test_more_containers_than_cores_gives_no_plan() -> None:
    assert plan_cpusets({"a": 1.0, "b": 1.0, "c": 1.0}, 2) is None
    assert core_counts({"a": 1.0, "b": 1.0, "c": 1.0}, 2) is None


def test_largest_remainder_after_one_core_each() -> None:
    # 8 cores, 3 containers: 1 each, 5 spare by 0.6/0.3/0.1 -> 3, 1.5, 0.5
    counts = core_counts({"a": 0.6, "b": 0.3, "c": 0.1}, 8)
    assert counts == {"a": 4, "b": 3, "c": 1}
    assert sum(counts.values()) == 8
    # ties go to the earlier container
    assert core_counts({"x": 1.0, "y": 1.0}, 3) == {"x": 2, "y": 1}


@pytest.mark.parametrize("cores", [1, 2, 3, 5, 16, 64])
def test_sets_are_disjoint_cover_the_host_and_have_a_core_each(cores: int) -> None:
    shares = {f"c{i}": (i + 1) * 0.37 for i in range(min(cores, 7))}
    plan = plan_cpusets(shares, cores)
    assert plan is not None
    seen = [c for cs in plan.values() for c in cs]
    assert sorted(seen) == list(range(cores))
    assert all(len(cs) >= 1 for cs in plan.values())


def test_bad_shares_count_as_nothing() -> None:
    assert core_counts({"a": float("nan"), "b": -1.0, "c": 1.0}, 5) == {"a": 1, "b": 1, "c": 3}
    assert core_counts({"a": 0.0, "b": 0.0}, 4) == {"a": 2, "b": 2}
    assert plan_cpusets({}, 2) == {}


def test_cpuset_strings() -> None:
    assert cpuset_string([0]) == "0"
    assert cpuset_string([3, 0, 1, 2, 5]) == "0-3,5"
    assert cpuset_string([1, 3]) == "1,3"
    assert all_cores(1) == "0"
    assert all_cores(4) == "0-3"
