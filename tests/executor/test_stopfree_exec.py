"""Stop-free rescale on the executor side, pure: the job spec's
``scaling``, the rescale planning on an in-memory backend (which containers start, which
get the leave signal, the fallback to checkpoint-restart), the measured pause, and the
planner's per-mode overhead."""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import count
from typing import Any

import pytest

from flowcon import contract
from flowcon.allocator.planner import Planner, charged_overhead
from flowcon.allocator.records import spec_from_dict, spec_to_dict
from flowcon.allocator.store import Store
from flowcon.executor.backend import LogLine, Worker, WorkerRequest
from flowcon.executor.executor_base import JobState
from flowcon.executor.lifecycle import Executor, ExecutorOptions
from flowcon.executor.stopfree_plan import StepLine, plan_stopfree, step_lines, switch_gap
from flowcon.executor.workers import allocate_master_port
from flowcon.jobspec.spec import JobSpecError, parse_jobspec

IMAGE = "flowcon/elastic-example:latest"


def spec(name: str = "sf", **over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "command": ["python3", "/opt/train.py"],
        "global_batch_size": 64,
        "iterations": 100,
        "best_effort": True,
        "profile": {1: 1.0},
        "launcher": "flowcon",
    }
    raw.update(over)
    return parse_jobspec(raw)


class FakeBackend:
    """Containers in memory; a leave signal makes a container exit ``leave_code`` (None:
    it never exits); records every create, signal, stop and removal."""

    kind = "engine"

    def __init__(self, image_labels: Mapping[str, str] | None = None) -> None:
        self.workers: list[Worker] = []
        self.requests: list[WorkerRequest] = []
        self.signals: list[tuple[str, str]] = []
        self.stopped: list[str] = []
        self.removed: list[str] = []
        self.labels_of_image = dict(image_labels or {})
        self.leave_code: int | None = contract.EXIT_LEFT
        self.grow: list[bool] = []
        self.ids = count()
        self.output: dict[str, list[str]] = {}  # container name -> its output lines

    def list_workers(self, selector: Mapping[str, str]) -> list[Worker]:
        return [w for w in self.workers if all(w.labels.get(k) == v for k, v in selector.items())]

    def master_addr(self, job, slots, rank0_name, labels, port=None, grow=False):
        self.grow.append(grow)
        return rank0_name, port or allocate_master_port(job, ()), "flowcon-net-" + job

    def create(self, req: WorkerRequest) -> Worker:
        self.requests.append(req)
        labels = dict(req.labels)
        w = Worker(f"id{next(self.ids)}", req.name, req.job, req.node,
                   int(labels[contract.LABEL_RANK]), req.gpus, "running", None, labels,
                   req.image)  # fmt: skip
        self.workers.append(w)
        return w

    def kill(self, worker: Worker, signal: str) -> None:
        self.signals.append((worker.name, signal))
        if self.leave_code is not None:
            worker.state, worker.exit_code = "exited", self.leave_code

    def image_labels(self, image: str) -> Mapping[str, str]:
        return self.labels_of_image

    def stop(self, worker: Worker, grace_s: float) -> None:
        self.stopped.append(worker.name)
        worker.state, worker.exit_code = "exited", contract.EXIT_PREEMPTED

    def restart(self, worker: Worker) -> None:
        worker.state = "running"

    def remove(self, worker: Worker) -> None:
        self.removed.append(worker.name)
        self.workers.remove(worker)

    def logs(self, worker: Worker) -> list[str]:
        return []

    def read_logs(
        self, worker: Worker, after_ns: int = 0, tail: int | None = None
    ) -> list[LogLine]:
        return [LogLine(i, text) for i, text in enumerate(self.output.get(worker.name, []))]

    def cleanup(self, job: str, volume: str | None) -> None:
        pass


def executor(be: FakeBackend, **opts: Any) -> Executor:
    return Executor(be, None, ExecutorOptions(poll_s=0.0, **opts))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the job spec


def test_scaling_key_is_validated_and_named() -> None:
    assert spec().scaling is None  # decided at launch from the image's label
    assert spec(scaling="stopfree").scaling == "stopfree"
    assert spec(scaling="restart", launcher="none").scaling == "restart"
    with pytest.raises(JobSpecError) as bad:
        spec(scaling="elastic")
    assert bad.value.field == "scaling"
    assert "stopfree" in str(bad.value)
    with pytest.raises(JobSpecError) as wrong_launcher:
        spec(scaling="stopfree", launcher="torchrun")
    assert wrong_launcher.value.field == "scaling"
    assert "launcher: flowcon" in str(wrong_launcher.value)
    # kept in the store
    s = spec(scaling="stopfree")
    assert spec_from_dict(spec_to_dict(s)).scaling == "stopfree"
    assert spec_from_dict({**spec_to_dict(spec()), "scaling": None}).scaling is None


def test_default_scaling_comes_from_the_image_label_under_the_flowcon_launcher() -> None:
    declared = FakeBackend({contract.LABEL_ELASTIC: contract.SCALING_STOPFREE})
    assert executor(declared).scaling_of(spec()) == "stopfree"
    assert executor(declared).scaling_of(spec(scaling="restart")) == "restart"
    assert executor(declared).scaling_of(spec(launcher="none")) == "restart"
    assert executor(FakeBackend()).scaling_of(spec()) == "restart"
    assert executor(FakeBackend()).scaling_of(spec(scaling="stopfree")) == "stopfree"


# ---------------------------------------------------------------- launch and rescale


def launched(n: int, **opts: Any) -> tuple[FakeBackend, Executor, Any]:
    be = FakeBackend()
    ex = executor(be, **opts)
    s = spec(scaling="stopfree")
    ex.launch(s, {"node1": [str(i) for i in range(n)]})
    return be, ex, s


def env(req: WorkerRequest) -> dict[str, str]:
    return dict(req.env)


def test_stopfree_launch_one_container_per_gpu_first_is_the_store_host() -> None:
    be, ex, s = launched(2)
    assert [r.name for r in be.requests] == ["flowcon-sf--node1-w0", "flowcon-sf--node1-w1"]
    e0, e1 = env(be.requests[0]), env(be.requests[1])
    assert e0[contract.ENV_STORE_HOST] == "1"
    assert contract.ENV_STORE_HOST not in e1
    assert e0[contract.ENV_SCALING] == e1[contract.ENV_SCALING] == "stopfree"
    assert contract.ENV_JOIN not in e0
    assert contract.ENV_JOIN not in e1
    assert (e0["WORLD_SIZE"], e0["RANK"], e1["RANK"], e1["LOCAL_WORLD_SIZE"]) == (
        "2",
        "0",
        "1",
        "1",
    )
    assert e0["MASTER_ADDR"] == "flowcon-sf--node1-w0" == e1["MASTER_ADDR"]
    assert all(r.labels[contract.LABEL_SCALING] == "stopfree" for r in be.requests)
    assert not any(r.init for r in be.requests)  # the launcher itself gets the leave signal
    assert ex.job("sf").scaling == "stopfree"  # type: ignore[union-attr]
    # one container: still an address the joiners can reach
    be1, _, _ = launched(1)
    assert be1.grow == [True]
    # the same placement again: nothing new
    ex.launch(s, {"node1": ["0", "1"]})
    assert len(be.requests) == 2


def test_scale_out_starts_only_the_joiners() -> None:
    be, ex, s = launched(1)
    host = be.workers[0]
    res = ex.rescale(s, {"node1": ["0", "1"], "node2": ["0"]})
    assert res.mode == "stopfree"
    assert (res.old_gpus, res.new_gpus) == (1, 3)
    assert res.joined == ("flowcon-sf--node1-w1", "flowcon-sf--node2-w2")
    assert res.left == ()
    assert be.workers[0] is host
    assert host.state == "running"
    assert be.stopped == []
    assert be.removed == []
    assert be.signals == []
    joiners = be.requests[1:]
    assert [r.name for r in joiners] == list(res.joined)
    for r in joiners:
        e = env(r)
        assert e[contract.ENV_JOIN] == "1"
        assert e[contract.ENV_TARGET_WORLD] == "3"
        assert contract.ENV_STORE_HOST not in e
        assert e[contract.ENV_SCALING] == "stopfree"
        assert e["MASTER_ADDR"] == host.name
        assert e["MASTER_PORT"] == env(be.requests[0])["MASTER_PORT"]
        assert r.labels[contract.LABEL_MASTER_PORT] == host.labels[contract.LABEL_MASTER_PORT]
    assert ex.job("sf").placement == {"node1": ["0", "1"], "node2": ["0"]}  # type: ignore[union-attr]


def test_scale_in_signals_the_leavers_highest_first_and_removes_them() -> None:
    be, ex, s = launched(4)
    kept = be.workers[:2]
    res = ex.rescale(s, {"node1": ["0", "1"]})
    assert res.mode == "stopfree"
    assert res.fallback is None
    assert be.signals == [("flowcon-sf--node1-w3", "SIGUSR1"), ("flowcon-sf--node1-w2", "SIGUSR1")]
    assert sorted(be.removed) == ["flowcon-sf--node1-w2", "flowcon-sf--node1-w3"]
    assert be.workers == kept
    assert all(w.state == "running" for w in kept)
    assert be.stopped == []
    assert len(be.requests) == 4
    assert res.left == ("flowcon-sf--node1-w3", "flowcon-sf--node1-w2")
    # back out: the next index after the live containers' (the removed ones' names are free)
    res = ex.rescale(s, {"node1": ["0", "1", "2"]})
    assert res.joined == ("flowcon-sf--node1-w2",)
    assert env(be.requests[-1])["RANK"] == "2"


def test_a_move_leaves_first_then_joins_at_the_new_world() -> None:
    be, ex, s = launched(2)
    res = ex.rescale(s, {"node1": ["0"], "node2": ["1"]})
    assert res.mode == "stopfree"
    assert be.signals == [("flowcon-sf--node1-w1", "SIGUSR1")]
    assert res.joined == ("flowcon-sf--node2-w2",)
    assert env(be.requests[-1])[contract.ENV_TARGET_WORLD] == "2"


def test_the_coordinator_leaves_stop_free_without_a_restart() -> None:
    be, ex, s = launched(2)
    res = ex.rescale(s, {"node1": ["1"]})
    assert res.mode == "stopfree", res
    assert res.fallback is None
    assert be.signals == [("flowcon-sf--node1-w0", "SIGUSR1")]  # the coordinator's container
    assert be.stopped == []
    assert [w.name for w in be.workers] == ["flowcon-sf--node1-w1"]
    assert len(be.requests) == 2  # nothing started


def test_leave_timeout_falls_back_to_checkpoint_restart(caplog) -> None:
    be, ex, s = launched(2, leave_timeout_s=0.05)
    be.leave_code = None  # the runtime never lets it go
    res = ex.rescale(s, {"node1": ["0"]})
    assert res.mode == "restart"
    assert "did not leave" in (res.fallback or "")
    assert be.signals == [("flowcon-sf--node1-w1", "SIGUSR1")]
    assert "checkpoint-restart instead" in caplog.text
    (fresh,) = be.workers
    assert fresh.name == "flowcon-sf--node1-w0"
    assert fresh.id != "id0"  # a new container


def test_the_leave_signal_is_repeated_until_the_container_leaves() -> None:
    be, ex, s = launched(2, leave_resend_s=0.0)
    be.leave_code = None
    calls = []

    def late(worker: Worker, signal: str) -> None:  # the launcher handles the third one
        calls.append(signal)
        if len(calls) == 3:
            worker.state, worker.exit_code = "exited", contract.EXIT_LEFT

    be.kill = late  # type: ignore[method-assign]
    res = ex.rescale(s, {"node1": ["0"]})
    assert res.mode == "stopfree"
    assert res.fallback is None
    assert calls == ["SIGUSR1"] * 3


def test_wrong_exit_code_falls_back() -> None:
    be, ex, s = launched(2)
    be.leave_code = 138  # killed by the signal: the runtime does not know it
    res = ex.rescale(s, {"node1": ["0"]})
    assert res.mode == "restart"
    assert "exit 138" in (res.fallback or "")


def test_a_signal_that_cannot_be_sent_falls_back() -> None:
    from flowcon.executor.backend import ExecutorError

    be, ex, s = launched(2)

    def refuse(worker: Worker, signal: str) -> None:
        raise ExecutorError("no access to node2's engine")

    be.kill = refuse  # type: ignore[method-assign]
    res = ex.rescale(s, {"node1": ["0"]})
    assert res.mode == "restart"
    assert "cannot send SIGUSR1" in (res.fallback or "")


def test_restart_jobs_and_not_running_containers_are_checkpoint_restarted() -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(scaling="restart")
    ex.launch(s, {"node1": ["0"]})
    res = ex.rescale(s, {"node1": ["0", "1"]})
    assert res.mode == "restart"
    assert res.fallback is None
    assert be.signals == []
    be2, ex2, s2 = launched(2)
    be2.workers[1].state = "starting"
    res = ex2.rescale(s2, {"node1": ["0", "1", "2"]})
    assert res.mode == "restart"
    assert "not running" in (res.fallback or "")


def test_plan_of_a_mixed_job_and_a_left_worker_in_the_job_state() -> None:
    be, ex, _s = launched(3)
    plan = plan_stopfree(be.workers, [("node1", "0"), ("node1", "2")])
    assert [w.name for w in plan.leave] == ["flowcon-sf--node1-w1"]
    assert not plan.join
    # a container that left on its own (straggler): the job runs on without it
    gone = be.workers[2]
    gone.state, gone.exit_code = "exited", contract.EXIT_LEFT
    state = ex.job("sf")
    assert state is not None
    assert state.status == "running"
    assert state.gpus == 2
    events = ex.reconcile()
    assert [(e.kind, e.detail) for e in events] == [("left", gone.name)]
    assert gone not in be.workers
    assert be.stopped == []
    # the same exit code from a restart-mode container is a failure
    w = Worker("x", "n", "j", "node1", 0, ("0",), "exited", contract.EXIT_LEFT, {})
    assert w.dead
    assert JobState("j", (w,)).status == "failed"


def test_a_dead_worker_is_replaced_a_dead_coordinator_is_survived() -> None:
    be, ex, s = launched(3)
    w2 = be.workers[2]
    w2.state, w2.exit_code = "exited", 137  # kill -9 of its worker: the launcher exited
    events = ex.reconcile()
    assert [e.kind for e in events] == ["lost"]
    assert "exit 137" in events[0].detail
    assert w2 not in be.workers
    assert be.stopped == []  # the others go on
    res = ex.rescale(s, {"node1": ["0", "1", "2"]})  # the next round: a joiner in its place
    assert res.mode == "stopfree"
    assert res.joined == ("flowcon-sf--node1-w2",)
    assert env(be.requests[-1])[contract.ENV_TARGET_WORLD] == "3"
    host = be.workers[0]
    host.state, host.exit_code = "dead", None
    events = ex.reconcile()  # the survivors elect w1's store: no restart
    assert [e.kind for e in events] == ["lost"]
    assert "the survivors elect flowcon-sf--node1-w1's store" in events[0].detail
    assert be.stopped == []
    for w in be.workers:  # they did not make it: now the job restarts from its checkpoint
        w.state, w.exit_code = "exited", 1
    events = ex.reconcile()
    assert [e.kind for e in events] == ["restarted"]
    assert be.workers == []  # relaunched next


def test_preempted_workers_use_no_restart_and_a_failure_says_why() -> None:
    """Regression (allocator-engine-restart fault scenario): an engine restarted without
    --live-restore stops the containers (exit 143 after their checkpoint); after
    max_restarts such restarts the jobs were reported failed ("exit 143; 3 restarts used")."""
    be = FakeBackend()
    ex = executor(be, max_restarts=1)
    s = spec(scaling="restart")
    ex.launch(s, {"node1": ["0"]})
    w = be.workers[0]
    for _ in range(4):  # preempted again and again: always restarted, never failed
        w.state, w.exit_code = "exited", contract.EXIT_PREEMPTED
        assert [e.kind for e in ex.reconcile()] == ["restarted"]
        assert w.state == "running"
    be.output[w.name] = ["step 5", "Traceback (most recent call last):", "", "RuntimeError: bad"]
    w.state, w.exit_code = "exited", 1
    assert [e.kind for e in ex.reconcile()] == ["restarted"]  # the one restart allowed
    w.state, w.exit_code = "exited", 1
    (failed,) = ex.reconcile()
    assert failed.kind == "failed"
    assert failed.detail.endswith("1 restarts used; last output: RuntimeError: bad")


def test_a_worker_lost_with_its_swarm_node_uses_no_restart() -> None:
    """Regression (allocator-swarm-node-restart fault scenario): node 2's engine stopped and
    started; its task reads failed with the running status's exit code 0. The job was
    reported completed ("all workers exited 0"); now it is restarted, and repeated node
    restarts do not use up max_restarts."""
    be = FakeBackend()
    ex = executor(be, max_restarts=1)
    s = spec(scaling="restart")
    ex.launch(s, {"node1": ["0"]})
    w = be.workers[0]
    for _ in range(3):
        w.state, w.exit_code, w.node_lost = "dead", None, True
        (ev,) = ex.reconcile()
        assert ev.kind == "restarted", ev
        assert "lost with its node" in (ev.detail or ""), ev
        assert w.state == "running"
        w.node_lost = False


def progress_lines(last: int, done: bool = False) -> list[str]:
    out = [json.dumps({"step": i, "ts": 1000.0 + i}) for i in range(1, last + 1)]
    if done:
        out.append(json.dumps({"step": last, "event": "done", "ts": 2000.0}))  # the marker
    return out


def test_workers_exiting_0_short_of_their_iterations_are_not_a_completion(tmp_path) -> None:
    """Regression (allocator-swarm-node-restart fault scenario, run 2 of 3): a rate job's
    task that a node restart ended read as exited 0, and the allocator recorded the job
    completed ("all workers exited 0") at step 40 of its 100 iterations, its remaining
    work lost without a word. A job is completed only by its own marker or progress
    (flowcon/core/completion.py); otherwise it is restarted from its checkpoint, with an
    event that says why, and fails after max_restarts."""
    from flowcon.allocator.target import ExecutorTarget

    store = Store(tmp_path / "s.db")
    pl = Planner(store, total_gpus=4, slot_seconds=10.0)
    s = spec(scaling="restart")  # 100 iterations
    assert pl.submit(s, now=0.0).admitted
    be = FakeBackend()
    ex = executor(be, max_restarts=1)
    ex.launch(s, {"node1": ["0"]})
    target = ExecutorTarget(ex, None)  # type: ignore[arg-type]
    (w,) = be.workers
    be.output[w.name] = progress_lines(40)
    w.state, w.exit_code = "exited", 0  # what the task showed after the node came back
    assert target.poll(store) == []  # not completed ...
    assert w.state == "running"  # ... restarted from its checkpoint
    (ev,) = store.events("sf", kind="restarted")
    assert "exited 0 at step 40 of 100 without the job's completion marker" in ev.data["detail"]
    w.state, w.exit_code = "exited", 0  # again: its one restart is used
    ((name, state, reason),) = target.poll(store)
    assert (name, state) == ("sf", "failed")
    assert "1 restarts used" in reason
    store.close()


@pytest.mark.parametrize(
    ("output", "own", "why"),
    [
        (progress_lines(40, done=True), True, "the job reported done at step 40"),
        (progress_lines(100), True, "its progress reached 100 of 100 iterations"),
        (["hello", "no progress here"], True, "not confirmed: the job printed no progress"),
        (progress_lines(99), False, "at step 99 of 100"),
    ],
)
def test_a_completion_is_the_jobs_own_word(output: list[str], own: bool, why: str) -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(scaling="restart")
    ex.launch(s, {"node1": ["0"]})
    be.output[be.workers[0].name] = output
    verdict = ex.completion("sf", 100)
    assert verdict.own is own
    assert why in verdict.why
    be.workers[0].state, be.workers[0].exit_code = "exited", 0
    (ev,) = ex.reconcile(confirm=lambda name: ex.completion(name, 100))
    assert ev.kind == ("completed" if own else "restarted")
    assert why in ev.detail


def test_unreadable_output_is_not_a_completion() -> None:
    from flowcon.executor.backend import ExecutorError

    class Unreadable(FakeBackend):
        def read_logs(
            self, worker: Worker, after_ns: int = 0, tail: int | None = None
        ) -> list[LogLine]:
            raise ExecutorError("node2 is down")

    be = Unreadable()
    ex = executor(be)
    ex.launch(spec(scaling="restart"), {"node1": ["0"]})
    verdict = ex.completion("sf", 100)
    assert not verdict.own
    assert "could not be read: node2 is down" in verdict.why


# ---------------------------------------------------------------- the measured pause


def line(step: int, ts: float, world: int) -> str:
    return json.dumps({"step": step, "ts": ts, "world_size": world, "loss": 0.1})


def test_switch_gap_is_last_step_before_to_first_at_the_new_world() -> None:
    raw = [
        line(1, 10.0, 1),
        line(2, 10.5, 1),
        '{"event": "joining", "step": 2, "ts": 10.7}',
        "not json",
        line(3, 11.0, 1),
        line(4, 12.25, 2),
        line(5, 12.5, 2),
    ]
    lines = step_lines(raw)
    assert [ln.step for ln in lines] == [1, 2, 3, 4, 5]
    assert switch_gap(lines, began=10.2, world=2) == pytest.approx(1.25)
    assert switch_gap(lines, began=10.2, world=4) is None  # not switched yet
    assert switch_gap(lines, began=13.0, world=2) is None  # no switch after it began
    assert switch_gap([StepLine(1, 1.0, 2)], began=0.0, world=2) is None


# ---------------------------------------------------------------- what admission charges


def test_charged_overhead_is_the_largest_mode_in_use() -> None:
    costs = {"restart": 6.0, "stopfree": 0.8}
    assert charged_overhead(costs, []) == 6.0  # nothing known: a restart's
    assert charged_overhead(costs, ["stopfree", "stopfree"]) == 0.8
    assert charged_overhead(costs, ["stopfree", "restart"]) == 6.0
    assert charged_overhead({"restart": 6.0}, ["stopfree"]) == 6.0  # not measured yet
    assert charged_overhead({}, ["stopfree"]) == 0.0


def test_planner_tracks_restart_and_stopfree_overheads_apart(tmp_path) -> None:
    store = Store(tmp_path / "s.db")
    pl = Planner(store, total_gpus=4, slot_seconds=10.0, ewma_alpha=0.5)
    pl.observe_overhead(8.0)  # a checkpoint-restart
    pl.observe_overhead(1.0, "stopfree")
    pl.observe_overhead(0.6, "stopfree")
    assert pl.overheads == {"restart": 8.0, "stopfree": pytest.approx(0.8)}
    assert pl.overhead == 8.0  # no job's mode known yet
    pl.set_scaling("a", "stopfree")
    assert pl.overhead == pytest.approx(0.8)
    assert pl.policy.overhead == pytest.approx(0.8)  # type: ignore[attr-defined]
    pl.set_scaling("b", "restart")
    assert pl.overhead == 8.0
    pl.set_scaling("b", None)
    assert pl.overhead == pytest.approx(0.8)
    store.close()


def test_target_charges_the_stopfree_gap_and_a_restarted_daemon_reads_it_back(tmp_path) -> None:
    from flowcon.allocator.daemon import overhead_costs, restart_costs
    from flowcon.allocator.target import ExecutorTarget

    class Gaps:
        backend = FakeBackend()
        gap: float | None = None

        def switch_gap(self, job: str, began: float, world: int) -> float | None:
            return self.gap if world == 2 else None

    store = Store(tmp_path / "s.db")
    pl = Planner(store, total_gpus=4, slot_seconds=10.0)
    ex = Gaps()
    target = ExecutorTarget(ex, None)  # type: ignore[arg-type]
    target._resuming["j"] = (100.0, "rescale", None, "stopfree", 2)
    target.note_resumed(store, pl, "j", None, now=101.0)
    assert "j" in target._resuming
    assert pl.overheads == {}  # no line at 2 workers yet
    ex.gap = 0.7
    target.note_resumed(store, pl, "j", None, now=102.0)
    assert "j" not in target._resuming
    assert pl.overheads == {"stopfree": 0.7}
    target._resuming["k"] = (100.0, "rescale", 3.0, "restart", 2)
    target.note_resumed(store, pl, "k", (5.0, 104.5), now=105.0)
    assert pl.overheads == {"stopfree": 0.7, "restart": 4.5}
    assert overhead_costs(store) == [("stopfree", 0.7), ("restart", 4.5)]
    assert restart_costs(store) == [4.5]  # the stop-free pause is not a restart's cost
    store.close()


def test_target_sees_a_stopfree_job_whose_gpus_came_in_another_order_as_placed() -> None:
    from flowcon.allocator.target import ExecutorTarget

    class Inventory:
        class Node:
            def uuids(self, idx: list[int]) -> list[str]:
                return [str(i) for i in idx]

        def node(self, name: str) -> Node:
            return self.Node()

    be, ex, _s = launched(2)
    target = ExecutorTarget(ex, Inventory())  # type: ignore[arg-type]
    assert target._same(ex.job("sf"), {"node1": ["0", "1"]})
    # the store host ended up on GPU 1, a joiner on GPU 0 (after a move): no reason to
    # rescale a stop-free job
    w0, w1 = be.workers
    w0.gpus, w1.gpus = ("1",), ("0",)
    assert target._same(ex.job("sf"), {"node1": ["0", "1"]})
    assert not target._same(ex.job("sf"), {"node1": ["0", "2"]})
