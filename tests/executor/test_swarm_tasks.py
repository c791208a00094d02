"""The swarm backend's reading of a service's tasks (pure: recorded task documents)."""

from __future__ import annotations

from typing import Any

from flowcon import contract
from flowcon.executor.backends.swarm import worker_from_service


class Svc:
    def __init__(self) -> None:
        self.id = "svc1"
        self.name = "flowcon-j--node2"
        self.attrs: dict[str, Any] = {
            "Spec": {
                "Labels": {contract.LABEL_JOB: "j", contract.LABEL_RANK: "0"},
                "Mode": {"Replicated": {"Replicas": 1}},
                "TaskTemplate": {"ContainerSpec": {"Image": "img:latest@sha256:00"}},
            }
        }


def task(
    state: str, code: int | None, index: int = 5, err: str = "", created: str = ""
) -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "Err": err}
    if code is not None:
        status["ContainerStatus"] = {"ContainerID": "c1", "ExitCode": code}
    doc: dict[str, Any] = {"Version": {"Index": index}, "Status": status}
    if created:
        doc["CreatedAt"] = created
    return doc


def test_a_task_whose_node_restarted_is_lost_not_completed() -> None:
    """What the manager showed after node 2's dockerd was stopped and started (recorded
    by the allocator-swarm-node-restart scenario): state failed, Err "No such container",
    the ExitCode 0 of the running status. Before the fix this read as exited 0, and the
    job was reported completed."""
    w = worker_from_service(Svc(), [task("failed", 0, err="No such container: x.1.abc")])  # type: ignore[arg-type]
    assert w.state == "dead"
    assert w.node_lost
    assert not w.completed
    assert w.dead
    assert worker_from_service(Svc(), [task("failed", None)]).node_lost  # type: ignore[arg-type]


def test_task_states() -> None:
    done = worker_from_service(Svc(), [task("complete", 0)])  # type: ignore[arg-type]
    assert done.completed
    assert not done.node_lost
    crashed = worker_from_service(Svc(), [task("failed", 1)])  # type: ignore[arg-type]
    assert crashed.state == "exited"
    assert crashed.exit_code == 1
    assert not crashed.node_lost
    stopped = worker_from_service(Svc(), [task("shutdown", 143)])  # type: ignore[arg-type]
    assert stopped.exit_code == contract.EXIT_PREEMPTED
    assert not stopped.node_lost
    newest = worker_from_service(Svc(), [task("failed", 1, 3), task("running", 0, 9)])  # type: ignore[arg-type]
    assert newest.state == "running"
    assert newest.image == "img:latest"


def test_the_current_task_is_the_newest_not_the_last_updated() -> None:
    """A restart is a new task; the old one's status can still change afterwards (its node
    reporting back after a restart), which raises its Version.Index past the new task's.
    The worker's state is the new task's."""
    old = task("complete", 0, index=40, created="2026-11-28T18:01:02.5Z")
    new = task("running", 0, index=31, created="2026-11-28T18:01:02.123456789Z")
    assert worker_from_service(Svc(), [old, new]).state == "exited"  # type: ignore[arg-type]
    new["CreatedAt"] = "2026-11-28T18:01:09.04Z"
    w = worker_from_service(Svc(), [old, new])  # type: ignore[arg-type]
    assert w.state == "running"
    assert not w.completed
    # without CreatedAt (an older engine's document) the last updated one, as before
    newest = worker_from_service(Svc(), [task("failed", 1, 3), task("running", 0, 9)])  # type: ignore[arg-type]
    assert newest.state == "running"


def recorded(
    tid: str, created: str, index: int, state: str, desired: str, cid: str | None, code: int | None
) -> dict[str, Any]:
    status: dict[str, Any] = {"State": state}
    if cid is not None:
        status["ContainerStatus"] = {"ContainerID": cid, "ExitCode": code}
    return {
        "ID": tid,
        "CreatedAt": created,
        "Version": {"Index": index},
        "DesiredState": desired,
        "Status": status,
    }


def test_node_restart_task_documents_read_as_a_worker_starting_not_completed() -> None:
    """The task documents of node 2's service as the manager showed them when the
    allocator recorded the job completed (allocator-swarm-node-restart scenario, recorded
    with its run): the executor's restarts after the node came back left four old tasks;
    the one updated last (Version.Index 119) is an old task shut down before its container
    ran, ExitCode 0 and no container, read as "exited 0". The current task (created last)
    is only prepared."""
    tasks = [
        recorded("axm6", "2026-11-28T18:37:51.345283792Z", 103, "failed", "shutdown", "dcce", 0),
        recorded("hxhd", "2026-11-28T18:38:42.569517259Z", 114, "ready", "shutdown", None, None),
        recorded("pnrv", "2026-11-28T18:38:44.453462832Z", 118, "ready", "ready", None, None),
        recorded("pyc7", "2026-11-28T18:38:33.616960298Z", 111, "shutdown", "shutdown", "5d25", -1),
        recorded("s2s3", "2026-11-28T18:38:33.889438311Z", 119, "shutdown", "shutdown", "", 0),
    ]
    w = worker_from_service(Svc(), tasks)  # type: ignore[arg-type]
    assert w.state == "starting"
    assert not w.completed
    # the old task alone (as the earlier reading took it) is not a completion either
    old = worker_from_service(Svc(), [tasks[-1]])  # type: ignore[arg-type]
    assert not old.completed
    assert old.dead
