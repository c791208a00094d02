"""Operator requests beside the policy (flowcon.alloc.operations): pins, drains, avoidances."""

from __future__ import annotations

import pytest

from flowcon.alloc.operations import (
    Avoidance,
    OperationError,
    Operations,
    Pin,
    check_scale,
    free_block_on_node,
    honour_pins,
)

NODES = [("n0", 4), ("n1", 4)]


def test_pinned_job_gets_its_count_and_spare_holders_give_back():
    alloc = {"a": 4, "b": 4}
    out, short = honour_pins(alloc, {"a": 8}, floors={}, capacity=8)
    assert out == {"a": 8}
    assert short == {}


def test_floors_are_kept_when_others_shrink():
    alloc = {"a": 2, "b": 4, "c": 2}
    out, short = honour_pins(alloc, {"a": 4}, floors={"b": 2, "c": 2}, capacity=8)
    assert out == {"a": 4, "b": 2, "c": 2}
    assert short == {}


def test_a_pin_never_undercuts_a_guaranteed_share():
    out, _ = honour_pins({"a": 4}, {"a": 1}, floors={"a": 2}, capacity=8)
    assert out == {"a": 2}


def test_pins_that_cannot_fit_are_halved_and_reported_short():
    out, short = honour_pins({"a": 4, "b": 4}, {"a": 8}, floors={"b": 4}, capacity=8)
    assert out == {"a": 4, "b": 4}
    assert short == {"a": 4}


def test_unpinned_allocation_above_capacity_is_fitted():
    out, _ = honour_pins({"a": 8}, {}, floors={}, capacity=4)
    assert out == {"a": 4}


@pytest.mark.parametrize(
    ("gpus", "status", "words"),
    [
        (0, 400, "at least 1"),
        (16, 400, "outside the job's bounds"),
        (3, 400, "not a power of two"),
        (1, 409, "below its guaranteed share of 2"),
    ],
)
def test_scale_refusals_name_the_reason(gpus, status, words):
    with pytest.raises(OperationError) as err:
        check_scale(
            "a",
            gpus,
            bounds=(1, 8),
            guaranteed={"a": 2},
            pins={},
            capacity=8,
            power_of_two=True,
        )
    assert err.value.status == status
    assert words in str(err.value)
    assert err.value.field == "gpus"


def test_scale_must_fit_beside_others_guarantees_and_pins():
    with pytest.raises(OperationError, match="guaranteed to or pinned by other jobs"):
        check_scale(
            "a",
            4,
            bounds=(1, 8),
            guaranteed={"b": 4},
            pins={"c": 2},
            capacity=8,
            power_of_two=True,
        )
    check_scale(
        "a", 2, bounds=(1, 8), guaranteed={"b": 4}, pins={"c": 2}, capacity=8, power_of_two=True
    )


def test_blocked_covers_drained_nodes_and_live_avoidances():
    ops = Operations(drained={"n1": 5.0})
    ops.avoid.append(Avoidance("n0", 2, until=100.0, job="j", reason="straggler"))
    ops.avoid.append(Avoidance("n0", 3, until=10.0, job="j", reason="straggler"))
    assert ops.blocked(NODES, now=50.0) == {(1, 0), (1, 1), (1, 2), (1, 3), (0, 2)}
    assert ops.blocked(NODES, now=50.0, with_avoided=False) == {(1, g) for g in range(4)}
    assert ops.expire(50.0)
    assert [a.gpu for a in ops.avoid] == [2]
    assert not ops.expire(50.0)


def test_whole_node_avoidance():
    ops = Operations(avoid=[Avoidance("n1", None, until=9.0)])
    assert ops.blocked(NODES, now=1.0) == {(1, g) for g in range(4)}


def test_json_round_trip_and_bad_entries_are_skipped_with_reasons():
    ops = Operations(drained={"n1": 1.0})
    ops.set_pin("a", Pin(gpus=2, node="n0", by="operator", ts=3.0))
    ops.avoid.append(Avoidance("n0", 1, 9.0, "a", "straggler"))
    back, skipped = Operations.from_json(ops.to_json())
    assert back == ops
    assert skipped == []
    data = ops.to_json()
    data["pins"] = {"a": {"gpus": "two"}, "b": {"gpus": 4}}
    data["avoid"] = [{"node": 3}, {"node": "n0", "gpu": 1, "until": 2.0}]
    data["drained"] = {"n2": "yesterday"}
    back, skipped = Operations.from_json(data)
    assert back.pins == {"b": Pin(gpus=4)}
    assert len(back.avoid) == 1
    assert back.drained == {}
    assert len(skipped) == 3
    assert Operations.from_json("nonsense")[1] == ["operations: not a mapping"]
    assert Operations.from_json(None) == (Operations(), [])


def test_empty_pins_are_removed():
    ops = Operations()
    ops.set_pin("a", Pin(gpus=2, node="n1"))
    ops.clear_node_pin("a")
    assert ops.pins == {"a": Pin(gpus=2)}
    ops.set_pin("a", Pin())
    assert ops.pins == {}


def test_free_block_on_node_is_aligned_and_free():
    taken = [(0, 0), (1, 1)]
    assert free_block_on_node(0, 4, 2, taken) == ((0, 2), (0, 3))
    assert free_block_on_node(1, 4, 2, taken) == ((1, 2), (1, 3))
    assert free_block_on_node(1, 4, 4, taken) is None
    assert free_block_on_node(0, 4, 8, []) is None
