"""The closed loop end to end: the REAL FlowCon agent feeds the allocator.

The allocator daemon runs with the real executor on the engine (declared 2 x 4 GPUs). Job
A is admitted with a profile twice as fast as it really runs (the rate job runs at half
the profile's rate). The agent runs as a subprocess (``flowcon agent --config X``, itval
1 s, scoped to this test's label, its own state file) and POSTs each round to the
allocator; the allocator must refine A's curve to the measured speed, log it, and decide a
later marginal job B with it: dropped, where the profile alone admits it (checked with the
core's admit() on the same progress at the same moment).

Credentials are split as an operator deploys them: the agent holds only the agent token,
read from a file (``allocator.token_file``); the user submits with the user token.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml
from support.allocator_daemon import daemon_env, engine_config, wait_for
from support.session import REPO, TEST_LABEL

from flowcon.alloc.admission import admit
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.client.http import AllocatorClient, ClientError
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

PROFILE = {1: 20.0, 2: 36.0, 4: 64.0, 8: 100.0}
ACTUAL = {g: v / 2 for g, v in PROFILE.items()}
# Chosen (by a search over the core's admit()) so that B is admitted next to A's profile
# and dropped next to A's measured speed for any submission time of B in 4-40 s and A's
# progress anywhere in 30-130 % of its true speed: the test does not hinge on timing.
A_ITERATIONS, A_DEADLINE, A_MAX_GPUS = 4800, 180, 4
B_ITERATIONS, B_DEADLINE = 4200, 45

AGENT_TOKEN, USER_TOKEN = "agent-token-closed-loop", "user-token-closed-loop"
CONFIG = engine_config(min_measurements=2, agent_token=AGENT_TOKEN, user_token=USER_TOKEN)


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, CONFIG)


@pytest.fixture
def agent(tmp_path, test_run_id):
    """Start ``flowcon agent`` against an allocator; stopped (SIGTERM) after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, token: str) -> tuple[subprocess.Popen[bytes], object]:
        secret = tmp_path / "agent-token"
        secret.write_text(token + "\n")
        conf = tmp_path / "agent.yaml"
        conf.write_text(
            yaml.safe_dump(
                {
                    "itval": 1,
                    "itval_max": 2,
                    "state_file": str(tmp_path / "agent-state.json"),
                    "match_labels": {TEST_LABEL: test_run_id},
                    "allocator": {"url": url, "token_file": str(secret), "timeout": 5},
                }
            )
        )
        log = (tmp_path / "agent.log").open("wb")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowcon.cli", "agent", "--config", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        procs.append(proc)
        return proc, tmp_path / "agent.log"

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def core_decision(rec, curve: dict[int, float], b_spec: dict[str, Any], now: float) -> bool:
    """admit() of B next to A (its recorded progress) with A's curve set to ``curve``."""
    a = Job(
        rec["name"],
        rec["submit_time"],
        rec["iterations"],
        rec["deadline"],
        ThroughputCurve(curve),
        max_gpus=A_MAX_GPUS,
        done_iterations=rec["done_iterations"],
    )
    b = Job(b_spec["name"], now, float(B_ITERATIONS), now + B_DEADLINE, ThroughputCurve(PROFILE))
    return admit(b, [a], now, 8, 2.0).admitted


def test_agent_measurements_refine_the_curve_and_drive_admission(env, agent, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, USER_TOKEN)
    proc, log_path = agent(alloc.url, AGENT_TOKEN)
    a_name, b_name = f"slow{rid}", f"late{rid}"

    out = client.submit(
        rate_job_spec(a_name, A_ITERATIONS, A_DEADLINE, PROFILE, actual=ACTUAL, max_gpus=A_MAX_GPUS)
    )
    assert out["admitted"] is True, out
    assert out["gpus"] == A_MAX_GPUS, out

    # the agent's rows arrive, and A's curve converges to the measured speed
    def refined():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        job = client.job(a_name)
        m = job["measured"].get(str(A_MAX_GPUS))
        n = job["measured_samples"].get(str(A_MAX_GPUS), 0)
        return job if m is not None and n >= 3 else None

    job = wait_for(refined, 60, every=0.5)
    rows = [r for r in alloc.store.measurements(a_name) if r["its_per_s"] is not None]
    assert rows, "no throughput row from the agent"
    assert {r["gpus"] for r in rows} == {A_MAX_GPUS}
    assert all(r["node"] for r in rows)
    true_speed = ACTUAL[A_MAX_GPUS]
    assert job["measured"][str(A_MAX_GPUS)] == pytest.approx(true_speed, rel=0.15)
    assert job["curve"][str(A_MAX_GPUS)] == pytest.approx(true_speed, rel=0.15)
    # the shape of the profile is kept, its level corrected
    assert job["curve"]["1"] == pytest.approx(ACTUAL[1], rel=0.15)
    refined_events = [e for e in job["events"] if e["kind"] == "curve_refined"]
    assert refined_events, job["events"]
    first = refined_events[0]
    assert first["gpus"] == A_MAX_GPUS
    assert first["profile"] == PROFILE[A_MAX_GPUS]
    assert first["after"] == pytest.approx(true_speed, rel=0.2)
    # progress came from the job's own steps (agent rows and/or its logs)
    assert job["done_iterations"] > 0

    # B: the profile alone would admit it; the measured speed must drop it
    b_spec = rate_job_spec(b_name, B_ITERATIONS, B_DEADLINE, PROFILE)
    now = time.time()
    rec = client.job(a_name)
    assert core_decision(rec, PROFILE, b_spec, now) is True
    measured_curve = {int(g): v for g, v in rec["curve"].items()}
    assert core_decision(rec, measured_curve, b_spec, now) is False
    with pytest.raises(ClientError) as err:  # the agent's token only reports
        AllocatorClient(alloc.url, AGENT_TOKEN).submit(b_spec)
    assert err.value.status == 403
    res = client.submit(b_spec)
    assert res["decision"] == "dropped", res
    assert res["measured_jobs"] == [a_name]
    adm = client.job(b_name)["admissions"][-1]
    assert adm["measured"] is True
    assert adm["admitted"] is False
    assert alloc.store.events(job=b_name, kind="dropped")[-1].data["measured_jobs"] == [a_name]

    client.cancel(a_name)
    wait_for(
        lambda: (
            not docker_client.containers.list(
                ignore_removed=True,
                all=True,
                filters={"label": [f"{TEST_LABEL}={rid}", f"flowcon.job={a_name}"]},
            )
        ),
        30,
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    text = log_path.read_text()
    assert "allocator report failed" not in text, text[-2000:]
