"""The coordinator of a stop-free job on the executor side, pure: every container gets
its own standby store, the plan lets the coordinator's container leave (a scale-in, a
drain, a migration: keep-then-leave when nobody stays), joiners are pointed at the
coordinator as it is now, and a dead coordinator is survived or restarted, saying which."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_stopfree_exec import FakeBackend, env, executor, launched, spec
from test_workers_left import _store

from flowcon import contract
from flowcon.allocator.target import ExecutorTarget
from flowcon.executor.backend import Worker
from flowcon.executor.executor_base import JobState
from flowcon.executor.reconcile import coordinator_loss, lost_workers_only
from flowcon.executor.stopfree_plan import coordinator, plan_stopfree

JOINED = json.dumps({"event": "joined", "worker": "x/0", "step": 3})


def _w(index: int, gpu: str, node: str = "node1", store: bool = True, **kw: Any) -> Worker:
    labels = {contract.LABEL_SCALING: contract.SCALING_STOPFREE}
    if store:
        labels[contract.LABEL_STORE_ADDR] = f"flowcon-j--{node}-w{index}:29500"
    return Worker(
        f"id{index}", f"flowcon-j--{node}-w{index}", "j", node, index, (gpu,),
        kw.get("state", "running"), kw.get("exit_code"), labels,
    )  # fmt: skip


def test_every_container_gets_its_own_store_address() -> None:
    be, _, _ = launched(3)
    e = [env(r) for r in be.requests]
    assert e[0][contract.ENV_STORE_ADDR] == f"{e[0]['MASTER_ADDR']}:{e[0]['MASTER_PORT']}"
    assert e[1][contract.ENV_STORE_ADDR] == "flowcon-sf--node1-w1:" + e[0]["MASTER_PORT"]
    assert e[2][contract.ENV_STORE_ADDR].startswith("flowcon-sf--node1-w2:")
    for r in be.requests:
        assert r.labels[contract.LABEL_STORE_ADDR] == env(r)[contract.ENV_STORE_ADDR]


def test_plan_scale_in_that_removes_the_coordinator() -> None:
    cur = [_w(0, "0"), _w(1, "1"), _w(2, "2")]
    plan = plan_stopfree(cur, [("node1", "1"), ("node1", "2")])
    assert plan.fallback is None
    assert plan.coordinator_leaves
    assert not plan.join_first
    assert [w.node_rank for w in plan.keep] == [1, 2]
    assert [w.node_rank for w in plan.leave] == [0]
    assert coordinator(cur) is cur[0]


def test_plan_coordinator_leaving_without_a_standby_store_falls_back() -> None:
    cur = [_w(0, "0", store=False), _w(1, "1", store=False)]
    plan = plan_stopfree(cur, [("node1", "1")])
    assert plan.fallback is not None
    assert "no standby store" in plan.fallback
    # a scale-in that keeps the coordinator needs none
    assert plan_stopfree(cur, [("node1", "0")]).fallback is None


def test_plan_drain_of_the_coordinators_node() -> None:
    cur = [_w(0, "0", "a"), _w(1, "1", "a"), _w(2, "0", "b")]
    plan = plan_stopfree(cur, [("b", "0"), ("c", "0"), ("c", "1")])
    assert plan.fallback is None
    assert plan.coordinator_leaves
    assert not plan.join_first  # somebody stays: the leavers go first, as for any move
    assert [w.node_rank for w in plan.keep] == [2]
    assert [w.node_rank for w in plan.leave] == [1, 0]
    assert [(s.node, s.node_rank, s.first_rank) for s in plan.join] == [("c", 3, 1), ("c", 4, 2)]
    assert plan.join_world == 3


def test_plan_migration_that_keeps_nobody_joins_first() -> None:
    cur = [_w(0, "0", "a"), _w(1, "1", "a")]
    plan = plan_stopfree(cur, [("b", "0"), ("b", "1")])
    assert plan.fallback is None
    assert plan.join_first
    assert plan.coordinator_leaves
    assert plan.keep == ()
    assert [(s.node_rank, s.first_rank) for s in plan.join] == [(2, 2), (3, 3)]
    assert plan.join_world == 4  # they join the two running containers first
    assert [w.node_rank for w in plan.running_at_join] == [0, 1]
    assert [w.node_rank for w in plan.leave] == [1, 0]
    assert plan.new_world == 2
    # the same GPUs elsewhere: still a plan; nothing at all: a fallback
    assert plan_stopfree(cur, []).fallback == "no container stays"


def test_migration_starts_joiners_at_the_coordinator_then_lets_the_old_ones_go() -> None:
    be, ex, s = launched(2)
    host = be.workers[0]
    for name in ("flowcon-sf--node2-w2", "flowcon-sf--node2-w3"):
        be.output[name] = [JOINED]
    res = ex.rescale(s, {"node2": ["0", "1"]})
    assert res.mode == "stopfree", res
    assert res.fallback is None
    assert res.joined == ("flowcon-sf--node2-w2", "flowcon-sf--node2-w3")
    assert res.left == ("flowcon-sf--node1-w1", "flowcon-sf--node1-w0")
    assert be.signals == [("flowcon-sf--node1-w1", "SIGUSR1"), ("flowcon-sf--node1-w0", "SIGUSR1")]
    assert be.stopped == []
    for r in be.requests[2:]:
        e = env(r)
        assert e[contract.ENV_TARGET_WORLD] == "4"
        assert e["MASTER_ADDR"] == host.name
        assert e["MASTER_PORT"] == env(be.requests[0])["MASTER_PORT"]
    assert [env(r)["RANK"] for r in be.requests[2:]] == ["2", "3"]
    assert [w.name for w in be.workers] == list(res.joined)


def test_migration_whose_joiners_never_join_is_checkpoint_restarted() -> None:
    be, ex, s = launched(2, leave_timeout_s=0.05)
    res = ex.rescale(s, {"node2": ["0", "1"]})
    assert res.mode == "restart"
    assert "did not join" in (res.fallback or "")
    assert be.signals == []  # the old ones were never asked to leave


def test_joiners_after_a_hand_over_reach_the_new_coordinator() -> None:
    be, ex, s = launched(2)
    ex.rescale(s, {"node1": ["1"]})  # the coordinator's container w0 leaves
    res = ex.rescale(s, {"node1": ["1", "2"]})
    assert res.joined == ("flowcon-sf--node1-w2",)
    e = env(be.requests[-1])
    assert e["MASTER_ADDR"] == "flowcon-sf--node1-w1"
    assert e[contract.ENV_TARGET_WORLD] == "2"


def test_joiners_reach_a_coordinator_on_a_free_port_by_its_launcher_line() -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(scaling="stopfree")
    ex.launch(s, {"node1": ["0", "1"]})
    w1 = be.workers[1]
    w1.labels = {**w1.labels, contract.LABEL_STORE_ADDR: "10.0.0.7:0"}  # host networking
    started = {"event": "launcher_started", "store": "10.0.0.7:41234"}
    be.output[w1.name] = ["not json", json.dumps(started)]
    ex.rescale(s, {"node1": ["1"]})
    ex.rescale(s, {"node1": ["1", "2"]})
    e = env(be.requests[-1])
    assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.0.0.7", "41234")


def test_a_dead_coordinator_is_survived_when_every_survivor_hosts_a_store() -> None:
    dead = _w(0, "0", state="exited", exit_code=137)
    state = JobState("j", (dead, _w(1, "1"), _w(2, "2")))
    loss = coordinator_loss(state)
    assert loss is not None
    heir, why = loss
    assert heir is not None
    assert heir.node_rank == 1
    assert "elect flowcon-j--node1-w1's store" in why
    assert lost_workers_only(state)
    # an old container without a store: restart, saying why
    old = JobState("j", (dead, _w(1, "1", store=False)))
    loss = coordinator_loss(old)
    assert loss is not None
    assert loss[0] is None
    assert "no standby store" in loss[1]
    assert not lost_workers_only(old)
    # a dead non-coordinator: no coordinator loss
    assert coordinator_loss(JobState("j", (_w(0, "0"), _w(1, "1", state="exited")))) is None


def test_reconcile_reports_the_election_or_the_restart() -> None:
    be, ex, _ = launched(3)
    be.workers[0].state, be.workers[0].exit_code = "exited", 137
    (ev,) = ex.reconcile()
    assert ev.kind == "lost", ev
    assert "flowcon-sf--node1-w0 exit 137" in ev.detail
    assert "the survivors elect flowcon-sf--node1-w1's store" in ev.detail
    assert [w.name for w in be.workers] == ["flowcon-sf--node1-w1", "flowcon-sf--node1-w2"]

    be2, ex2, _ = launched(2)
    for w in be2.workers:
        w.labels = {k: v for k, v in w.labels.items() if k != contract.LABEL_STORE_ADDR}
    be2.workers[0].state, be2.workers[0].exit_code = "exited", 137
    (ev2,) = ex2.reconcile()
    assert ev2.kind == "restarted", ev2
    assert "hosts no standby store" in ev2.detail
    assert "restarted from its checkpoint" in ev2.detail


def test_the_allocators_stored_event_says_what_happened(tmp_path: Path) -> None:
    """Through ``ExecutorTarget.poll``: a dead coordinator survived is a ``worker_lost``
    event whose detail names the election; one that cannot be survived is a ``restarted``
    event whose detail says why."""
    be, ex, _ = launched(3)
    be.workers[0].state, be.workers[0].exit_code = "exited", 137
    store = _store(tmp_path)
    try:
        assert ExecutorTarget(ex, None).poll(store) == []  # type: ignore[arg-type]
        (lost,) = store.events(kind="worker_lost")
        assert "the survivors elect flowcon-sf--node1-w1's store" in lost.data["detail"]
        for w in be.workers:  # the survivors died too: now the job restarts
            w.state, w.exit_code = "exited", 1
        ExecutorTarget(ex, None).poll(store)  # type: ignore[arg-type]
        (restarted,) = store.events(kind="restarted")
        assert "flowcon-sf--node1-w1 exit 1" in restarted.data["detail"]
        assert "restarted from its checkpoint" in restarted.data["detail"]
    finally:
        store.close()
