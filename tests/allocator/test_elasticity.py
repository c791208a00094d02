"""Operator requests through the planner over a real SQLite store: scale, migrate, drain,
undrain and straggler avoidance, each checked on the plan it leads to (no containers)."""

from __future__ import annotations

import pytest

from flowcon.alloc.model import Topology
from flowcon.alloc.operations import OperationError
from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.elasticity import Elasticity
from flowcon.allocator.planner import Planner
from flowcon.allocator.store import Store
from flowcon.jobspec.spec import parse_jobspec

PROFILE = {1: 10.0, 2: 18.0, 4: 32.0, 8: 50.0}
NODES = [("n0", 4), ("n1", 4)]


def _spec(name: str, iterations: int, deadline: float | None, **kw: object):
    data: dict[str, object] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": "true",
        "global_batch_size": 8,
        "iterations": iterations,
        "profile": PROFILE,
        **kw,
    }
    if deadline is None:
        data["best_effort"] = True
    else:
        data["deadline"] = deadline
    return parse_jobspec(data, now=0.0)


def _planner(store: Store) -> Planner:
    return Planner(store, 8, 10.0, placer=BuddyPlacer(Topology(2, 4)), nodes=NODES)


@pytest.fixture
def store(tmp_path):
    st = Store(tmp_path / "alloc.db")
    yield st
    st.close()


def _nodes_of(planner: Planner, job: str) -> set[int]:
    rec = planner.store.get_job(job)
    assert rec is not None
    return {int(n) for n, _ in rec.placement}


def test_scale_holds_the_count_until_auto(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None), now=0.0)
    assert p.plan(now=0.0).allocation == {"a": 8}
    el.scale("a", 2, "operator", now=1.0)
    plan = p.plan(now=1.0)
    assert plan.allocation == {"a": 2}
    assert p.plan(now=20.0).allocation == {"a": 2}  # held across rounds
    el.scale("a", None, "operator", now=30.0)
    assert p.plan(now=30.0).allocation == {"a": 8}
    kinds = [e.kind for e in store.events(job="a")]
    assert "scale_requested" in kinds
    assert "scale_auto" in kinds


def test_a_pinned_job_takes_spare_gpus_from_best_effort_jobs(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None), now=0.0)
    p.submit(_spec("b", 100_000, None), now=0.0)
    before = p.plan(now=0.0).allocation
    assert sum(before.values()) == 8
    el.scale("a", 8, "operator", now=1.0)
    assert p.plan(now=1.0).allocation == {"a": 8}


def test_scale_below_the_guarantee_is_refused(store):
    p = _planner(store)
    el = Elasticity(p)
    # needs 4 GPUs throughout to make its deadline: 32 it/s x 100 s = 3200
    assert p.submit(_spec("d", 3000, 100.0), now=0.0).admitted
    p.plan(now=0.0)
    share = p.guaranteed_shares(0.0)["d"]
    assert share >= 2
    with pytest.raises(OperationError, match="below its guaranteed share") as err:
        el.scale("d", 1, "operator", now=0.0)
    assert err.value.status == 409
    with pytest.raises(OperationError, match="outside the job's bounds"):
        el.scale("d", 16, "operator", now=0.0)
    with pytest.raises(OperationError, match="no job"):
        el.scale("nope", 1, "operator", now=0.0)


def test_drain_moves_jobs_off_the_node_and_undrain_reopens_it(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None, max_gpus=4), now=0.0)
    p.submit(_spec("b", 100_000, None, max_gpus=4), now=0.0)
    p.plan(now=0.0)
    on_n1 = [j for j in ("a", "b") if 1 in _nodes_of(p, j)]
    assert on_n1
    view = el.drain("n1", False, "operator", now=1.0)
    assert view.status == "Draining"
    assert view.jobs == on_n1
    plan = p.plan(now=1.0)
    assert sum(plan.allocation.values()) <= 4
    for j in plan.allocation:
        assert _nodes_of(p, j) == {0}
    assert el.nodes(now=1.0)[1].status == "Drained"
    assert el.nodes(now=1.0)[1].jobs == []
    el.undrain("n1", "operator", now=2.0)
    plan = p.plan(now=2.0)
    assert sum(plan.allocation.values()) == 8
    kinds = [e.kind for e in store.events()]
    assert "node_drained" in kinds
    assert "node_undrained" in kinds
    assert "capacity_changed" in kinds
    assert [e.kind for e in store.events(job=on_n1[0])].count("draining") == 1


def test_drain_that_would_lose_a_guarantee_is_refused_unless_forced(store):
    p = _planner(store)
    el = Elasticity(p)
    # 8 GPUs x 50 it/s x 100 s = 5000: needs the whole cluster
    assert p.submit(_spec("big", 4500, 100.0), now=0.0).admitted
    p.plan(now=0.0)
    with pytest.raises(OperationError, match="would lose the deadline guarantee of big"):
        el.drain("n0", False, "operator", now=1.0)
    assert p.ops.drained == {}
    el.drain("n0", True, "operator", now=1.0)
    plan = p.plan(now=1.0)
    assert plan.allocation["big"] <= 4
    assert "guarantee_lost" in [e.kind for e in store.events(job="big")]


def test_migrate_moves_a_job_to_the_node_and_is_done_once_there(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None, max_gpus=2), now=0.0)
    p.plan(now=0.0)
    src = _nodes_of(p, "a")
    assert len(src) == 1
    dst = "n1" if src == {0} else "n0"
    el.migrate("a", dst, "operator", now=1.0)
    plan = p.plan(now=1.0)
    want = [n for n, _ in NODES].index(dst)
    assert _nodes_of(p, "a") == {want}
    assert [c.job for c in plan.changes] == ["a"]
    assert plan.changes[0].old_gpus == plan.changes[0].new_gpus == 2
    assert p.ops.pins == {}
    assert "migrated" in [e.kind for e in store.events(job="a")]
    with pytest.raises(OperationError, match="runs on"):
        el.migrate("a", dst, "operator", now=2.0)
    with pytest.raises(OperationError, match="no node"):
        el.migrate("a", "n9", "operator", now=2.0)


def test_migrate_to_a_full_node_is_refused(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None, max_gpus=4), now=0.0)
    p.submit(_spec("b", 100_000, None, max_gpus=4), now=0.0)
    p.plan(now=0.0)
    other = "n1" if _nodes_of(p, "a") == {0} else "n0"
    with pytest.raises(OperationError, match="free GPUs"):
        el.migrate("a", other, "operator", now=1.0)


def test_a_stragglers_gpu_is_avoided_until_the_time_runs_out(store):
    p = _planner(store)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None, max_gpus=4), now=0.0)
    p.plan(now=0.0)
    rec = store.get_job("a")
    assert rec is not None
    node, gpu = rec.placement[0]
    name = NODES[int(node)][0]
    assert el.avoid("a", name, (str(gpu),), "straggler", 60.0, now=1.0) == [int(gpu)]
    p.plan(now=1.0)
    rec = store.get_job("a")
    assert rec is not None
    assert [int(node), int(gpu)] not in rec.placement
    assert el.nodes(now=1.0)[int(node)].status == "Avoided"
    assert el.avoided_by("a", now=1.0)[0]["gpu"] == int(gpu)
    assert "gpu_avoided" in [e.kind for e in store.events(job="a")]
    p.plan(now=100.0)  # expired: capacity back, nothing avoided
    assert p.ops.avoid == []
    assert el.nodes(now=100.0)[int(node)].status == "Ready"


def test_avoidance_never_takes_gpus_the_guarantees_need(store):
    p = _planner(store)
    el = Elasticity(p)
    assert p.submit(_spec("big", 4500, 100.0), now=0.0).admitted
    p.plan(now=0.0)
    assert el.avoid("big", "n0", ("0",), "straggler", 60.0, now=1.0) == []
    assert "gpu_not_avoided" in [e.kind for e in store.events(job="big")]


def test_requests_survive_a_restart(tmp_path):
    st = Store(tmp_path / "a.db")
    p = _planner(st)
    el = Elasticity(p)
    p.submit(_spec("a", 100_000, None), now=0.0)
    p.plan(now=0.0)
    el.drain("n1", False, "operator", now=1.0)
    el.scale("a", 2, "operator", now=1.0)
    st.close()
    st2 = Store(tmp_path / "a.db")
    p2 = _planner(st2)
    assert p2.ops.drained.keys() == {"n1"}
    plan = p2.plan(now=2.0)
    assert plan.allocation == {"a": 2}
    assert _nodes_of(p2, "a") == {0}
    st2.close()


def test_a_bad_stored_request_is_skipped_not_fatal(tmp_path, caplog):
    st = Store(tmp_path / "a.db")
    st.put_meta("operations", {"drained": {"n1": "soon"}, "pins": {"a": {"gpus": 2}}})
    p = _planner(st)
    assert p.ops.drained == {}
    assert p.ops.pins["a"].gpus == 2
    assert "skipped drained.n1" in caplog.text
    st.close()


def test_an_unplaceable_count_is_halved_not_a_failed_round(store):
    """Nodes of 8, 4, 2 and 2 GPUs: the policy may ask 8 + 8 (it counts GPUs, not nodes);
    the plan halves the job that cannot be placed instead of failing the round."""
    from flowcon.alloc.topology import Layout

    nodes = [("big", 8), ("mid", 4), ("s1", 2), ("s2", 2)]
    layout = Layout.of_nodes([range(c) for _, c in nodes])
    p = Planner(store, 16, 10.0, placer=BuddyPlacer(layout), nodes=nodes)
    p.submit(_spec("a", 10**6, None, max_gpus=8), now=0.0)
    p.submit(_spec("b", 10**6, None, max_gpus=8), now=0.0)
    plan = p.plan(now=0.0)
    assert sorted(plan.allocation.values()) == [4, 8]
    assert sum(len(w) for w in plan.placement.values()) == 12
    p.plan(now=10.0)
    (shrunk,) = store.events(kind="placement_shrunk")  # said once, not every round
    assert (shrunk.data["gpus"], shrunk.data["placed"]) == (8, 4)


def test_a_node_the_executor_refuses_takes_no_worker(store):
    """A Swarm node that lacks the required hardening leaves the capacity, as a drained
    node's GPUs do, and placement never uses it."""
    p = _planner(store)
    p.refuse_nodes(frozenset({"n1"}), now=0.0)
    p.submit(_spec("a", 100_000, None, max_gpus=4), now=0.0)
    p.submit(_spec("b", 100_000, None, max_gpus=4), now=0.0)
    plan = p.plan(now=0.0)
    assert sum(plan.allocation.values()) <= 4
    for j in plan.allocation:
        assert _nodes_of(p, j) == {0}
    p.refuse_nodes(frozenset(), now=1.0)
    assert sum(p.plan(now=1.0).allocation.values()) == 8
