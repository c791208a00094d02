"""A real PyTorch job (flowcon/elastic-example, DDP over gloo) through the allocator.

Declared inventory 2 nodes x 4 GPUs. Three testbox rate jobs with hard deadlines take 4 + 2
+ 1 GPUs (Algorithm 2 serves hard deadlines first), so the best-effort PyTorch job starts on
the one GPU left. Once it has trained a few dozen steps, the 1-GPU rate job is cancelled:
the allocator re-plans, the PyTorch job is checkpointed (SIGTERM) and restarted with 2
workers, continues from its checkpoint's step, and completes.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from support.allocator_daemon import CONFIG, containers, daemon_env, env_of, wait_for
from support.session import REPO

from flowcon.client.http import AllocatorClient
from flowcon.testing.ratejob import rate_job_spec

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "flowcon/elastic-example:latest"
ITERATIONS = 300
LINEAR = {1: 10.0, 2: 20.0, 4: 40.0}


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        build = REPO / "images" / "elastic-example" / "build.sh"
        res = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            pytest.skip(f"{IMAGE} cannot be built: {res.stderr[-500:]}")
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, CONFIG, IMAGE)


def metric_lines(container) -> list[dict[str, Any]]:
    out = []
    for line in container.logs().decode(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_pytorch_job_rescales_from_its_checkpoint_and_completes(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    fillers = {f"f4{rid}": 4, f"f2{rid}": 2, f"f1{rid}": 1}
    for name, gpus in fillers.items():
        out = client.submit(rate_job_spec(name, 5000, 600, LINEAR, max_gpus=gpus))
        assert out["admitted"] is True, out
    torch_job = f"torch{rid}"
    out = client.submit(
        {
            "name": torch_job,
            "image": IMAGE,
            "command": ["python3", "/opt/train.py"],
            "global_batch_size": 64,
            "iterations": ITERATIONS,
            "best_effort": True,
            "max_gpus": 2,
            "profile": {1: 10.0, 2: 15.0},
            "env": {"STEP_SLEEP": "0.05"},
            "launcher": "flowcon",
            "scaling": "restart",  # this test is about checkpoint-restart
        }
    )
    assert out["admitted"] is True, out
    assert out["gpus"] == 1, out
    assert {n: client.job(n)["gpus"] for n in fillers} == fillers

    # one container, one worker: torchrun's environment and the batch split
    (c1,) = wait_for(lambda: containers(docker_client, rid, torch_job), 30)
    e = env_of(c1)
    assert (e["WORLD_SIZE"], e["RANK"], e["LOCAL_WORLD_SIZE"]) == ("1", "0", "1")
    assert e["MASTER_ADDR"] == "127.0.0.1"
    assert int(e["MASTER_PORT"]) > 0
    assert e["FLOWCON_GLOBAL_BATCH_SIZE"] == "64"
    assert e["FLOWCON_LOCAL_BATCH_SIZE"] == "64"
    assert e["FLOWCON_CHECKPOINT_DIR"] == "/flowcon/checkpoint"
    assert e["FLOWCON_ITERATIONS"] == str(ITERATIONS)

    def steps(c):
        return [m["step"] for m in metric_lines(c) if "step" in m and "loss" in m]

    def trained(n: int):
        c1.reload()
        assert c1.status == "running", c1.logs().decode()[-2000:]
        s = steps(c1)
        return s if s and s[-1] >= n else None

    wait_for(lambda: trained(30), 90)
    assert all(m["local_batch"] == 64 for m in metric_lines(c1) if "local_batch" in m)

    # a GPU frees up: checkpoint-restart onto 2 GPUs (2 DDP workers in one container)
    client.cancel(f"f1{rid}")
    try:
        wait_for(lambda: alloc.store.events(job=torch_job, kind="restarted_on_new_gpus"), 60)
    except BaseException:
        tail = [(e.kind, e.job, e.data) for e in alloc.store.events()][-8:]
        pytest.fail(f"no rescale: events {tail}, round error {alloc.last_round_error}")
    ev = alloc.store.events(job=torch_job, kind="restarted_on_new_gpus")[0].data
    assert (ev["old_gpus"], ev["new_gpus"]) == (1, 2)
    c2 = wait_for(
        lambda: [c for c in containers(docker_client, rid, torch_job) if c.id != c1.id], 30
    )[0]
    e2 = env_of(c2)
    assert (e2["WORLD_SIZE"], e2["RANK"], e2["LOCAL_WORLD_SIZE"]) == ("2", "0", "2")
    assert e2["FLOWCON_LOCAL_BATCH_SIZE"] == "32"
    assert e2["FLOWCON_GLOBAL_BATCH_SIZE"] == "64"

    seen: list[int] = []

    def finished():
        j = client.job(torch_job)
        assert j["state"] in ("running", "admitted", "completed"), j.get("reason")
        if j["state"] == "completed":
            return j
        try:  # the container is removed once the job completed: read it while it runs
            s = steps(c2)
        except Exception:
            return None
        if len(s) > len(seen):
            seen[:] = s
        return None

    done = wait_for(finished, 120, every=1)
    assert done["progress"] == 1.0
    assert done["done_iterations"] == ITERATIONS
    # rank 0 of the 2-worker container resumed after the checkpointed step (at least the
    # 30 steps seen before the rescale) and counted on without a gap
    assert seen, "no metric line after the rescale"
    assert seen[0] > 30, seen[:5]
    assert seen == list(range(seen[0], seen[0] + len(seen)))
    kinds = [e.kind for e in alloc.store.events(job=torch_job)]
    assert kinds[-1] == "completed"
    assert "failed" not in kinds
    assert "restarted" not in kinds
    wait_for(lambda: not containers(docker_client, rid, torch_job), 30)
    for n in (f"f4{rid}", f"f2{rid}"):
        client.cancel(n)
