"""The three launchers without an engine: worker layout, environment and command per
launcher for 1, 2 and 3 workers over 1 and 2 nodes, the spec key and its records' round
trip, and master ports unique among live jobs (flowcon/executor/launchers.py, workers.py,
the executor's and the allocator target's use of them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import count
from typing import ClassVar

import pytest
from support.swarm_fixtures import step_job_spec

from flowcon.allocator.records import spec_from_dict, spec_to_dict
from flowcon.allocator.store import Store, new_record
from flowcon.allocator.target import ExecutorTarget
from flowcon.contract import LABEL_JOB, LABEL_MASTER_PORT, LABEL_RANK
from flowcon.executor.backend import Worker, WorkerRequest
from flowcon.executor.launchers import TORCHRUN_SH, launch_command, launch_env, layout
from flowcon.executor.lifecycle import Executor
from flowcon.executor.workers import (
    PORT_RANGE,
    WorkerSlot,
    allocate_master_port,
    live_master_port,
    plan_workers,
    worker_env,
)
from flowcon.jobspec.spec import JobSpecError, parse_jobspec

# every variable torch 1.13's elastic agent gives a worker (local_elastic_agent.py), less
# NCCL_ASYNC_ERROR_HANDLING and TORCHELASTIC_ERROR_FILE, which it passes through
TORCHRUN_VARS = {
    "LOCAL_RANK",
    "RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
}

# (placement, workers): 1, 2 and 3 workers over 1 and 2 nodes
LAYOUTS = [
    ({"n1": ["g0"]}, 1),
    ({"n1": ["g0", "g1"]}, 2),
    ({"n1": ["g0"], "n2": ["g0"]}, 2),
    ({"n1": ["g0", "g1", "g2"]}, 3),
    ({"n1": ["g0", "g1"], "n2": ["g0"]}, 3),
]


def spec(launcher: str, **extra: object):
    return step_job_spec("lj", launcher=launcher, global_batch_size=64, **extra)  # type: ignore[arg-type]


def slots_of(launcher: str, placement: Mapping[str, Sequence[str]]) -> list[WorkerSlot]:
    return layout(launcher, plan_workers(placement))


@pytest.mark.parametrize(("placement", "workers"), LAYOUTS)
def test_none_is_one_single_process_worker_per_container(placement, workers) -> None:
    s = spec("none")
    slots = slots_of("none", placement)
    assert len(slots) == workers
    assert all(len(x.gpus) == 1 for x in slots)
    envs = [launch_env(s, x, slots, "rank0-host", 21000) for x in slots]
    for rank, (slot, env) in enumerate(zip(slots, envs, strict=True)):
        assert set(env) >= TORCHRUN_VARS, TORCHRUN_VARS - set(env)
        assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(rank), "0", "1")
        assert env["WORLD_SIZE"] == env["GROUP_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"]
        assert env["WORLD_SIZE"] == str(workers)
        assert env["GROUP_RANK"] == env["ROLE_RANK"] == str(rank)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("rank0-host", "21000")
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"  # rank 0 hosts the store
        assert env["FLOWCON_GPUS"] == slot.gpus[0]
        assert env["FLOWCON_LOCAL_BATCH_SIZE"] == str(64 // workers)
        assert launch_command(s, slot, slots, "rank0-host", 21000) == s.command
    # every GPU of the placement is one container's, in node order
    assert [(x.node, x.gpus[0]) for x in slots] == [
        (n, g) for n, gs in placement.items() for g in gs
    ]


@pytest.mark.parametrize(("placement", "workers"), LAYOUTS)
def test_torchrun_runs_the_command_under_torchrun_per_node(placement, workers) -> None:
    cmd = ("python3", "/opt/train.py", "10", "1", "--snapshot_path", "/flowcon/checkpoint/s.pt")
    s = spec("torchrun", command=list(cmd))
    slots = slots_of("torchrun", placement)
    assert [x.node for x in slots] == list(placement)
    for slot in slots:
        env = launch_env(s, slot, slots, "m", 21001)
        assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"} & set(env)  # torchrun's
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["FLOWCON_JOB"] == "lj"
        got = launch_command(s, slot, slots, "m", 21001)
        assert got[:4] == ("sh", "-c", TORCHRUN_SH, "torchrun")
        args = got[4 : -len(cmd)]
        assert got[-len(cmd) :] == cmd  # the command, unchanged, once per worker
        assert f"--nnodes={len(placement)}" in args
        assert f"--nproc_per_node={len(slot.gpus)}" in args
        assert f"--node_rank={slot.node_rank}" in args
        assert "--master_addr=m" in args
        assert "--master_port=21001" in args
        assert "--no_python" in args
        assert "--max_restarts=0" in args
    assert sum(len(x.gpus) for x in slots) == workers


@pytest.mark.parametrize(("placement", "workers"), LAYOUTS)
def test_flowcon_keeps_the_node_view(placement, workers) -> None:
    s = spec("flowcon")
    slots = slots_of("flowcon", placement)
    assert len(slots) == len(placement)
    for slot in slots:
        assert launch_env(s, slot, slots, "m", 1) == worker_env(s, slot, slots, "m", 1)
        assert launch_command(s, slot, slots, "m", 1) == s.command
        assert "LOCAL_RANK" not in launch_env(s, slot, slots, "m", 1)


def test_the_spec_key_default_and_its_errors() -> None:
    base = {"name": "a", "image": "x", "command": "python3 t.py", "global_batch_size": 1}
    base |= {"iterations": 1, "best_effort": True}
    assert parse_jobspec(base).launcher == "none"
    for value in ("none", "torchrun", "flowcon"):
        assert parse_jobspec({**base, "launcher": value}).launcher == value
    with pytest.raises(JobSpecError) as err:
        parse_jobspec({**base, "launcher": "mpirun"})
    assert err.value.field == "launcher"
    assert "none, torchrun or flowcon" in str(err.value)
    with pytest.raises(JobSpecError, match="launcher"):
        parse_jobspec({**base, "launcher": True})
    for cmd in ("torchrun --nproc_per_node=2 t.py", "python3 -m torch.distributed.run t.py"):
        with pytest.raises(JobSpecError) as err:
            parse_jobspec({**base, "launcher": "torchrun", "command": cmd})
        assert err.value.field == "command"
        assert "adds it" in str(err.value)
    assert parse_jobspec({**base, "command": "torchrun t.py"}).launcher == "none"


def test_records_round_trip_launcher_and_port() -> None:
    s = spec("torchrun")
    back = spec_from_dict(spec_to_dict(s))
    assert back.launcher == "torchrun"
    assert back.master_port is None
    data = spec_to_dict(s) | {"master_port": 23456}
    assert spec_from_dict(data).master_port == 23456
    old = {k: v for k, v in spec_to_dict(s).items() if k not in ("launcher", "master_port")}
    assert spec_from_dict(old).launcher == "flowcon"  # the layout it was started with


def colliding_names() -> tuple[str, str]:
    """Two live jobs that must not share a master port."""
    return "job-a", "job-b"


def test_port_allocator_keeps_live_jobs_apart() -> None:
    a, b = colliding_names()
    pa = allocate_master_port(a, [])
    pb = allocate_master_port(b, [pa])
    assert pb != pa
    assert PORT_RANGE[0] <= pb < PORT_RANGE[1]
    # a job keeps its port while nobody else holds it, moves when another live job does
    assert live_master_port(a, pa, {a: pa, b: pb}) == pa
    assert live_master_port(b, pb, {a: pa, b: pb}) == pb
    assert live_master_port(b, pa, {a: pa}) != pa
    lo, hi = PORT_RANGE
    assert allocate_master_port(a, set(range(lo, hi - 1))) == hi - 1  # the last free one
    with pytest.raises(ValueError, match="no free master port"):
        allocate_master_port(a, range(lo, hi))


class MemoryBackend:
    """A host-network backend in memory: what the executor asks, what it created."""

    kind = "engine"

    def __init__(self) -> None:
        self.workers: list[Worker] = []
        self.requests: list[WorkerRequest] = []
        self.ids = count()

    def list_workers(self, selector: Mapping[str, str]) -> list[Worker]:
        return [w for w in self.workers if all(w.labels.get(k) == v for k, v in selector.items())]

    def master_addr(self, job, slots, rank0_name, labels, port=None):
        return "127.0.0.1", port or allocate_master_port(job, ()), "host"

    def create(self, req: WorkerRequest) -> Worker:
        self.requests.append(req)
        labels = dict(req.labels)
        w = Worker(str(next(self.ids)), req.name, req.job, req.node, int(labels[LABEL_RANK]),
                   req.gpus, "running", None, labels, req.image)  # fmt: skip
        self.workers.append(w)
        return w

    def stop(self, worker: Worker, grace_s: float) -> None:
        worker.state = "exited"

    def restart(self, worker: Worker) -> None:
        worker.state = "running"

    def remove(self, worker: Worker) -> None:
        self.workers.remove(worker)

    def logs(self, worker: Worker) -> list[str]:
        return []

    def cleanup(self, job: str, volume: str | None) -> None:
        pass


def test_executor_names_and_starts_one_container_per_worker_under_none() -> None:
    be = MemoryBackend()
    ex = Executor(be)  # type: ignore[arg-type]
    s = step_job_spec("lnone", launcher="none")
    ws = ex.launch(s, {"node1": ["0", "1"], "node2": ["0"]})
    assert [w.name for w in ws] == ["flowcon-lnone--node1-r0", "flowcon-lnone--node1-r1",
                                    "flowcon-lnone--node2-r2"]  # fmt: skip
    assert all(r.init for r in be.requests)
    assert ex.job("lnone").placement == {"node1": ["0", "1"], "node2": ["0"]}  # type: ignore[union-attr]
    assert len(ex.launch(s, {"node1": ["0", "1"], "node2": ["0"]})) == 3  # same: no restart
    assert len(be.requests) == 3
    ex.rescale(s, {"node1": ["0"]})
    assert [w.name for w in be.workers] == ["flowcon-lnone--node1-r0"]
    assert be.workers[0].labels["flowcon.launcher"] == "none"


def test_executor_gives_colliding_jobs_different_ports() -> None:
    a, b = colliding_names()
    be = MemoryBackend()
    ex = Executor(be)  # type: ignore[arg-type]
    ex.launch(step_job_spec(a, launcher="torchrun", command=["python3", "t.py"]), {"n": ["0"]})
    ex.launch(step_job_spec(b, launcher="none"), {"n": ["1"]})
    ports = {w.job: w.labels[LABEL_MASTER_PORT] for w in be.workers}
    assert ports[a] != ports[b], ports
    env_b = be.requests[-1].env
    assert env_b["MASTER_PORT"] == ports[b]
    assert f"--master_port={ports[a]}" in be.requests[0].command
    # a job the allocator gave a port runs on it
    given = replace(step_job_spec("given", launcher="none"), master_port=20001)
    ex.launch(given, {"n": ["2"]})
    assert be.requests[-1].env["MASTER_PORT"] == "20001"


class Inventory:
    """One node with four GPUs whose ids are their indices."""

    class Node:
        name, count, real = "n", 4, False

        def uuids(self, idx: list[int]) -> list[str]:
            return [str(i) for i in idx]

    nodes: ClassVar[list[Node]] = [Node()]

    def node(self, name: str) -> Node:
        return self.nodes[0]


class Planner:
    class Intake:
        def set_containers(self, name: str, containers: object) -> None:
            pass

    intake = Intake()


def test_allocator_keeps_colliding_jobs_apart_and_the_port_across_restarts(tmp_path) -> None:
    a, b = colliding_names()
    db = tmp_path / "state.db"
    store = Store(db)
    for i, name in enumerate((a, b)):
        rec = new_record(step_job_spec(name, launcher="none"), "running", {1: 1.0})
        rec.gpus, rec.placement = 1, [[0, i]]
        store.put_job(rec)
    be = MemoryBackend()
    target = ExecutorTarget(Executor(be), Inventory())  # type: ignore[arg-type]
    target.apply(store, Planner())  # type: ignore[arg-type]
    ports = {n: store.get_job(n).spec.master_port for n in (a, b)}  # type: ignore[union-attr]
    assert ports[a] != ports[b]
    assert all(isinstance(p, int) for p in ports.values())
    running = {w.job: w.labels[LABEL_MASTER_PORT] for w in be.workers}
    assert running == {n: str(p) for n, p in ports.items()}
    store.close()

    # a restarted allocator reads the same ports back; a rescale keeps them
    store = Store(db)
    assert {n: store.get_job(n).spec.master_port for n in (a, b)} == ports  # type: ignore[union-attr]
    rec = store.get_job(b)  # type: ignore[assignment]
    assert rec is not None
    rec.gpus, rec.placement = 2, [[0, 1], [0, 2]]
    store.put_job(rec)
    target = ExecutorTarget(Executor(be), Inventory())  # type: ignore[arg-type]
    target.apply(store, Planner())  # type: ignore[arg-type]
    assert {w.labels[LABEL_MASTER_PORT] for w in be.workers if w.labels[LABEL_JOB] == b} == {
        str(ports[b])
    }
    assert store.get_job(b).spec.master_port == ports[b]  # type: ignore[union-attr]
    store.close()


def test_a_job_whose_workers_are_finishing_is_not_rescaled(tmp_path) -> None:
    """Workers exit 0 one after another: a planning round between them saw the job as
    "mixed" and rescaled it, so a finished job ran again from its checkpoint."""
    store = Store(tmp_path / "state.db")
    rec = new_record(step_job_spec("done-soon", launcher="none"), "running", {1: 1.0})
    rec.gpus, rec.placement = 2, [[0, 0], [0, 1]]
    store.put_job(rec)
    be = MemoryBackend()
    target = ExecutorTarget(Executor(be), Inventory())  # type: ignore[arg-type]
    target.apply(store, Planner())  # type: ignore[arg-type]
    assert len(be.workers) == 2
    first = be.workers[0]
    first.state, first.exit_code = "exited", 0  # rank 0 finished, rank 1 still running
    assert target.executor.jobs()["done-soon"].status == "finishing"
    rec.gpus, rec.placement = 1, [[0, 0]]  # the plan moved on meanwhile
    store.put_job(rec)
    target.apply(store, Planner())  # type: ignore[arg-type]
    assert len(be.workers) == 2
    assert be.workers[0] is first
    assert first.state == "exited"
    assert len(be.requests) == 2  # nothing created again
    store.close()


def test_slot_layout_is_the_ranks_in_node_order() -> None:
    slots = slots_of("none", {"b": ["x", "y"], "a": ["z"]})
    assert [(s.node, s.node_rank, s.first_rank, s.gpus) for s in slots] == [
        ("b", 0, 0, ("x",)),
        ("b", 1, 1, ("y",)),
        ("a", 2, 2, ("z",)),
    ]
