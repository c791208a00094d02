"""The executor on the real engine (testbox jobs): flowcon/executor/lifecycle.py with the
plain-engine backend."""

from __future__ import annotations

import re

import pytest

from flowcon.contract import (
    EXIT_PREEMPTED,
    LABEL_GPUS,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_NODE,
    LABEL_RANK,
    MANAGED_BY_ALLOCATOR,
)
from flowcon.executor.backend import ExecutorError
from flowcon.executor.backends.engine import EngineBackend, network_name
from flowcon.executor.lifecycle import Executor, ExecutorOptions
from flowcon.executor.workers import pack_placement
from flowcon.jobspec.spec import JobSpecError, parse_jobspec

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import step_job_spec, sweep  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)


def _env(container) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])


def _steps(executor_: Executor, job: str) -> int:
    """Last step printed by the job's rank-0 container."""
    last = 0
    for line in executor_.logs(job):
        m = re.match(r'\{"step":(\d+)', line)
        if m:
            last = int(m.group(1))
    return last


def _from(executor_: Executor, job: str) -> int | None:
    for line in executor_.logs(job):
        m = re.match(r"start .* from=(\d+)", line)
        if m:
            return int(m.group(1))
    return None


@pytest.mark.docker
def test_env_labels_network_and_no_device_requests(executor: Executor, docker_client) -> None:
    spec = step_job_spec("exenv")
    placement = {"node1": ["0", "1"], "node2": ["FAKE-node2-3"]}  # indices map to UUIDs
    workers = executor.launch(spec, placement)
    assert [w.node for w in workers] == ["node1", "node2"]
    c0 = docker_client.containers.get(workers[0].id)
    c1 = docker_client.containers.get(workers[1].id)
    e0, e1 = _env(c0), _env(c1)
    assert e0["WORLD_SIZE"] == e1["WORLD_SIZE"] == "3"
    assert (e0["RANK"], e1["RANK"]) == ("0", "2")
    assert (e0["LOCAL_WORLD_SIZE"], e1["LOCAL_WORLD_SIZE"]) == ("2", "1")
    assert e0["FLOWCON_GPUS"] == "FAKE-node1-0,FAKE-node1-1"
    assert e1["FLOWCON_GPUS"] == "FAKE-node2-3"
    assert e0["FLOWCON_LOCAL_BATCH_SIZE"] == "21"
    assert e0["FLOWCON_JOB"] == "exenv"
    assert e1["MASTER_ADDR"] == c0.name
    assert e0["FLOWCON_CHECKPOINT_DIR"] == "/flowcon/checkpoint"
    labels = c1.labels
    assert labels[LABEL_JOB] == "exenv"
    assert labels[LABEL_RANK] == "1"
    assert labels[LABEL_NODE] == "node2"
    assert labels[LABEL_GPUS] == "FAKE-node2-3"
    assert labels[LABEL_MANAGED_BY] == MANAGED_BY_ALLOCATOR
    assert "flowcon.test" in labels
    assert not c0.attrs["HostConfig"].get("DeviceRequests")  # no real GPUs here
    nets = c0.attrs["NetworkSettings"]["Networks"]
    assert network_name("exenv") in nets
    # both ranks reach the master by name on the job network (TCP: without capabilities
    # a job cannot ping, flowcon/executor/reach.py)
    wait_for(lambda: "start rank=2" in c1.logs().decode())
    c0.exec_run(["sh", "-c", "busybox nc -l -p 29499 >/dev/null"], detach=True)

    def reached() -> bool:
        cmd = f"echo hi | busybox nc -w 2 {c0.name} 29499 && echo ok"
        return b"ok" in c1.exec_run(["sh", "-c", cmd])[1]

    wait_for(reached)


@pytest.mark.docker
def test_launch_is_idempotent_and_adopted_by_a_new_executor(executor: Executor) -> None:
    spec = step_job_spec("exadopt")
    first = executor.launch(spec, {"node1": ["0"]})
    again = executor.launch(spec, {"node1": ["0"]})
    assert [w.id for w in again] == [w.id for w in first]
    # "restart" of the allocator: a fresh executor finds the job by its labels
    backend = EngineBackend(executor.backend.client)  # type: ignore[attr-defined]
    fresh = Executor(backend, executor.inventory, executor.options)
    jobs = fresh.jobs()
    assert "exadopt" in jobs
    assert jobs["exadopt"].placement == {"node1": ["FAKE-node1-0"]}
    assert jobs["exadopt"].status in ("running", "starting")
    adopted = fresh.launch(spec, {"node1": ["FAKE-node1-0"]})
    assert [w.id for w in adopted] == [w.id for w in first]
    assert len(fresh.job("exadopt").workers) == 1  # type: ignore[union-attr]


@pytest.mark.docker
def test_rescale_checkpoints_and_resumes(executor: Executor) -> None:
    spec = step_job_spec("exscale")
    executor.launch(spec, {"node1": ["0"]})
    wait_for(lambda: _steps(executor, "exscale") >= 3)
    res = executor.rescale(spec, {"node1": ["0", "1"]})
    assert (res.old_gpus, res.new_gpus) == (1, 2)
    assert res.stop_seconds < 5.0, res  # SIGTERM handled at once, far below the 10 s grace
    resumed = wait_for(lambda: _from(executor, "exscale"))
    assert resumed >= 3  # continues from the checkpoint written on SIGTERM
    wait_for(lambda: _steps(executor, "exscale") > resumed)
    job = executor.job("exscale")
    assert job is not None
    assert job.gpus == 2
    assert len(job.workers) == 1


@pytest.mark.docker
def test_killed_container_is_restarted_from_checkpoint(executor: Executor, docker_client) -> None:
    spec = step_job_spec("exkill")
    (w,) = executor.launch(spec, {"node2": ["1"]})
    wait_for(lambda: _steps(executor, "exkill") >= 6)  # a periodic checkpoint at step 5
    docker_client.containers.get(w.id).kill()  # SIGKILL: no checkpoint on the way out
    wait_for(lambda: executor.job("exkill").status == "failed")  # type: ignore[union-attr]
    events = executor.reconcile()
    assert [(e.job, e.kind) for e in events] == [("exkill", "restarted")]
    assert "exit 137" in events[0].detail
    wait_for(lambda: executor.job("exkill").status == "running")  # type: ignore[union-attr]
    assert docker_client.containers.get(w.id).attrs["RestartCount"] == 0  # the executor did it
    # the restarted container's log holds both runs: the second start resumes from step 5
    starts = [ln for ln in executor.logs("exkill") if ln.startswith("start ")]
    wait_for(lambda: len([ln for ln in executor.logs("exkill") if ln.startswith("start ")]) == 2)
    starts = [ln for ln in executor.logs("exkill") if ln.startswith("start ")]
    assert starts[-1].endswith("from=5"), starts


@pytest.mark.docker
def test_restart_limit_reports_failed(docker_client, labeled, test_run_id) -> None:
    ex = Executor(
        EngineBackend(docker_client), None, ExecutorOptions(max_restarts=1, extra_labels=labeled())
    )
    try:
        spec = step_job_spec("excrash", command=["sh", "-c", "echo boom; exit 3"])
        ex.launch(spec, {"n": ["g0"]})
        wait_for(lambda: ex.job("excrash").status == "failed")  # type: ignore[union-attr]
        assert ex.reconcile()[0].kind == "restarted"
        wait_for(lambda: ex.job("excrash").status == "failed")  # type: ignore[union-attr]
        (event,) = ex.reconcile()
        assert event.kind == "failed"
        assert "exit 3" in event.detail
    finally:
        sweep(docker_client, f"flowcon.test={test_run_id}")


@pytest.mark.docker
def test_completion_and_preempted_exit_code(executor: Executor) -> None:
    spec = step_job_spec("exdone", iterations=3)
    executor.launch(spec, {"node1": ["0"]})
    wait_for(lambda: executor.job("exdone").status == "completed")  # type: ignore[union-attr]
    assert [(e.job, e.kind) for e in executor.reconcile()] == [("exdone", "completed")]
    executor.remove("exdone")
    assert executor.job("exdone") is None
    # a suspended job exits 143 after its checkpoint; the container is gone afterwards
    spec2 = step_job_spec("exsusp")
    (w,) = executor.launch(spec2, {"node1": ["0"]})
    wait_for(lambda: _steps(executor, "exsusp") >= 1)
    c = executor.backend.client.containers.get(w.id)  # type: ignore[attr-defined]
    c.stop(timeout=10)
    c.reload()
    assert c.attrs["State"]["ExitCode"] == EXIT_PREEMPTED


@pytest.mark.docker
def test_bad_input_creates_nothing(executor: Executor, docker_client, test_run_id) -> None:
    with pytest.raises(JobSpecError) as err:
        parse_jobspec({"name": "Bad_Name", "image": "x", "command": "x", "iterations": 1})
    assert err.value.field == "name"
    spec = step_job_spec("exbad")
    with pytest.raises(ExecutorError, match="node9"):
        executor.launch(spec, {"node9": ["0"]})
    with pytest.raises(ExecutorError, match="no GPU"):
        executor.launch(spec, {"node1": ["7"]})
    bad_image = step_job_spec("exbad", image="flowcon/does-not-exist:1")
    with pytest.raises(ExecutorError, match="not found"):
        executor.launch(bad_image, {"node1": ["0"], "node2": ["0"]})
    left = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"flowcon.test={test_run_id}"}
    )
    assert left == []


@pytest.mark.docker
def test_profile_prerun_reads_step_rate(executor: Executor) -> None:
    from flowcon.testing.stepjob import STEP_JOB

    # a job whose speed is known per GPU count: 2.5 it/s on 1, 5 on 2, 3.3 on 4 (concave,
    # then worse), so the pre-run must stop at 4 and never try 8
    scaling = 'case "$LOCAL_WORLD_SIZE" in 1) t=0.4;; 2) t=0.2;; *) t=0.3;; esac\n'
    spec = step_job_spec("exprof", command=["sh", "-c", scaling + "STEP_SECONDS=$t\n" + STEP_JOB])
    tried: list[int] = []

    def placement_for(n: int) -> dict[str, list[str]] | None:
        tried.append(n)
        return pack_placement(executor.inventory, n)

    prof = executor.profile(spec, placement_for, counts=[1, 2, 4, 8], max_seconds=30, min_points=5)
    rates = prof.as_dict()
    assert tried == [1, 2, 4], (tried, rates)
    assert sorted(rates) == [1, 2, 4], (tried, rates)
    assert 1.0 < rates[1] < 2.7, rates
    assert rates[2] > 1.5 * rates[1], rates
    assert rates[4] < rates[2], rates
    assert executor.backend.list_workers(executor._selector(None, None)) == []  # all removed
