"""Policy none with the dry-run agent: G is recorded per job, no limit is changed."""

from __future__ import annotations

import csv

import pytest
import yaml

from flowcon.replay.cli import run_policy
from flowcon.replay.recorder import read_run
from flowcon.replay.runner import REPLAY_LABEL, agent_available
from flowcon.replay.scenario import parse_scenario

pytestmark = pytest.mark.docker

GRU = "flowcon/train-gru:latest"  # a real training image, a few of its iterations
TESTBOX = "flowcon/testbox:latest"
# Busy shell steps with a loss that keeps falling: a second job for the agent to share
# the host with (see test_runner_engine.py).
LINEAR = (
    "i=0; while [ $i -lt $FLOWCON_ITERATIONS ]; do i=$((i+1)); "
    "j=0; while [ $j -lt 15000 ]; do j=$((j+1)); done; sleep 0.05; "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((1000-5*i)); done'
)


def makespan_of(result) -> float:
    assert result.makespan is not None
    return float(result.makespan)


def test_none_records_growth_with_a_dry_run_agent(
    docker_client, labeled, cleanup_containers, tmp_path
) -> None:
    if not agent_available():
        pytest.skip("the FlowCon agent (flowcon.agent.cli) is not installed")
    try:
        docker_client.images.get(GRU)
    except Exception:
        pytest.skip(f"{GRU} is not built on this engine")
    sc = parse_scenario(
        {
            "name": "tiny-growth",
            "alpha": 0.05,
            "itval": 2,
            "jobs": [
                {"name": "gru", "image": GRU, "start": 0, "iterations": 40},
                {"name": "lin", "image": TESTBOX, "start": 1, "iterations": 150, "command": LINEAR},
            ],
        }
    )
    out = tmp_path / "none"
    result = run_policy(
        docker_client,
        sc,
        "none",
        out,
        show_progress=False,
        labels=labeled(),
        sample_interval=0.5,
        timeout=150,
    )
    assert all(j.ok for j in result.jobs), [j.error for j in result.jobs]
    assert not result.limits_changed(), "the dry-run agent changed a CPU limit"
    assert {s.limit_cpus for s in result.samples} == {None}
    assert result.agent["dry_run"] is True
    assert result.agent["exit_code"] == 0
    # the agent's own CPU is recorded, and small next to the jobs'
    agent_cpu = result.agent["cpu_seconds"]
    assert agent_cpu is not None
    assert 0 < agent_cpu < 0.2 * makespan_of(result)
    assert yaml.safe_load((out / "agent.yaml").read_text())["dry_run"] is True
    # the agent decided (it would have limited both jobs) but acted on nothing
    outcomes = {p.outcome for p in result.growth}
    assert "dry-run" in outcomes, outcomes
    assert outcomes <= {"dry-run", "unchanged"}, outcomes
    assert {p.job for p in result.growth} == {"gru", "lin"}
    assert all(p.list in ("NL", "WL", "CL") for p in result.growth)
    makespan = result.makespan
    assert makespan is not None
    assert all(-5 < p.t < makespan + 5 for p in result.growth)
    rows = list(csv.DictReader((out / "growth.csv").open()))
    assert len(rows) == len(result.growth) > 0
    assert read_run(out).growth == result.growth
    assert (out / "growth.png").stat().st_size > 5000
    left = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{REPLAY_LABEL}={result.run_id}"}
    )
    assert left == []
