"""``profile: auto`` on the real engine: submit answers "profiling" at once, the daemon
pre-runs the job (flowcon.testing.ratejob on testbox) at 1, 2, 4 GPUs, builds the curve
from the measured step rates, records it, and only then decides.

The rate job runs at known speeds (RATE_<gpus>), so the measured profile can be checked
against the truth; nothing in the spec tells the allocator those speeds.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.allocator_daemon import containers, daemon_env, engine_config, wait_for

from flowcon.cli import main
from flowcon.client.http import AllocatorClient
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

TRUE_SPEED = {1: 20.0, 2: 36.0, 4: 64.0, 8: 100.0}

CONFIG = engine_config(profile_seconds=20, profile_min_lines=6)


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, CONFIG)


def auto_spec(name: str, iterations: int, deadline: float, **extra: object) -> dict[str, Any]:
    spec = rate_job_spec(name, iterations, deadline, {1: 1.0}, actual=TRUE_SPEED, **extra)
    spec["profile"] = "auto"
    return spec


def test_profile_auto_prerun_then_admission(env, docker_client, tmp_path):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    fits, huge = f"p{rid}", f"q{rid}"

    # the HTTP answer comes at once; a second pre-run (max 2 GPUs) runs at the same time
    t0 = time.monotonic()
    out = client.submit(auto_spec(huge, 100000, 40, max_gpus=2))
    assert time.monotonic() - t0 < 5
    assert out["decision"] == "profiling"
    assert out["admitted"] is None
    assert out["counts"] == [1, 2]
    assert client.job(huge)["state"] == "profiling"

    # the CLI waits for the decision and shows each profiled point
    spec_file = tmp_path / "fits.yaml"
    spec_file.write_text(yaml.safe_dump(auto_spec(fits, 600, 120, max_gpus=4)))
    cfg_file = tmp_path / "client.yaml"
    cfg_file.write_text(f"allocator:\n  url: {alloc.url}\n  token: {alloc.token}\n")
    res = CliRunner().invoke(main, ["submit", str(spec_file), "--config", str(cfg_file)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"profiling {fits} at 1, 2, 4 GPUs")
    assert sum(1 for ln in lines if "GPU(s):" in ln and "it/s" in ln) == 3
    assert lines[-1].startswith(f"admitted {fits}:"), res.output

    job = client.job(fits)
    # the curve is what the pre-run measured, close to the job's true speed
    assert sorted(job["profile"]) == ["1", "2", "4"]
    for g, v in job["profile"].items():
        assert v == pytest.approx(TRUE_SPEED[int(g)], rel=0.15), job["profile"]
    kinds = [e["kind"] for e in job["events"]]
    assert kinds[:5] == [
        "profiling_started",
        "profile_point",
        "profile_point",
        "profile_point",
        "profiled",
    ]
    assert "admitted" in kinds
    profiled = next(e for e in job["events"] if e["kind"] == "profiled")
    assert profiled["points"] == job["profile"]
    assert job["admissions"][-1]["admitted"] is True

    # the huge job is dropped after its pre-run, with its measured speed in the reason
    wait_for(lambda: client.job(huge)["state"] != "profiling", 60)
    h = client.job(huge)
    assert h["state"] == "dropped", h
    assert "unsatisfiable" in h["reason"]
    assert h["profile"]["2"] == pytest.approx(TRUE_SPEED[2], rel=0.15)
    assert not containers(docker_client, rid, huge)

    # the admitted job runs with the GPUs it was given and completes by its deadline
    done = wait_for(lambda: (j := client.job(fits))["state"] == "completed" and j, 60)
    assert done["deadline_met"] is True
    # pre-run containers and volumes are gone; only checkpoints of live jobs may remain
    assert not [
        c.name for c in containers(docker_client, rid) if c.labels.get("flowcon.role") == "profile"
    ]
    vols = docker_client.volumes.list(filters={"label": f"flowcon.test={rid}"})
    assert not [v.name for v in vols if "-p" in v.name.rsplit(rid, 1)[-1]]


def test_cancel_while_profiling_and_restart_resumes(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"c{rid}"
    client.submit(auto_spec(name, 600, 120, max_gpus=4))
    # a restart while profiling: the pre-run is interrupted, its containers removed, and
    # the next daemon profiles the job again
    wait_for(lambda: containers(docker_client, rid), 20, every=0.2)
    alloc.stop()
    assert not containers(docker_client, rid)
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    assert alloc.store.events(job=name, kind="profiling_restarted")
    wait_for(lambda: containers(docker_client, rid), 20, every=0.2)
    client.cancel(name)
    assert client.job(name)["state"] == "cancelled"
    wait_for(lambda: not containers(docker_client, rid), 20)
    time.sleep(1)
    job = client.job(name)
    assert job["state"] == "cancelled"
    assert not job["admissions"]
    assert "profiled" not in [e["kind"] for e in job["events"]]
