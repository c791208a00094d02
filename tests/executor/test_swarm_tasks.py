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


def task(state: str, code: int | None, index: int = 5, err: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "Err": err}
    if code is not None:
        status["ContainerStatus"] = {"ContainerID": "c1", "ExitCode": code}
    return {"Version": {"Index": index}, "Status": status}


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
