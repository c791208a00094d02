"""Short real replays of two tiny testbox jobs on the local engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flowcon.replay.plots import plot_cpu, plot_jct
from flowcon.replay.recorder import comparison, read_run, write_comparison, write_run
from flowcon.replay.runner import REPLAY_LABEL, Replay, ReplayError, agent_available
from flowcon.replay.scenario import parse_scenario

pytestmark = pytest.mark.docker

TESTBOX = "flowcon/testbox:latest"
# Busy steps (shell arithmetic) so the jobs really compete for the CPU, plus a 50 ms
# pause so a job lasts at least iterations x 50 ms however fast the CPU is: the jobs,
# started 1.5 s apart, must overlap for the agent to have anything to divide (on a quiet
# machine 80 busy-only steps took 1.3 s, and the agent never acted). Loss 1000/i
# converges at once; 1000 - 5 i keeps growing at the same rate.
STEP = "j=0; while [ $j -lt 15000 ]; do j=$((j+1)); done; sleep 0.05"
CONVERGING = (
    f"i=0; while [ $i -lt $FLOWCON_ITERATIONS ]; do i=$((i+1)); {STEP}; "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((1000/i)); done'
)
LINEAR = (
    f"i=0; while [ $i -lt $FLOWCON_ITERATIONS ]; do i=$((i+1)); {STEP}; "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((1000-5*i)); done'
)


def tiny(iterations: int = 60, itval: float = 2) -> dict[str, object]:
    return {
        "name": "tiny",
        "alpha": 0.05,
        "itval": itval,
        "jobs": [
            {
                "name": "conv",
                "image": TESTBOX,
                "start": 0,
                "iterations": iterations,
                "command": CONVERGING,
            },
            {
                "name": "lin",
                "image": TESTBOX,
                "start": 1.5,
                "iterations": iterations,
                "command": LINEAR,
            },
        ],
    }


def leftovers(client, run_id: str) -> list[str]:
    found = client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{REPLAY_LABEL}={run_id}"}
    )
    return [c.name for c in found]


def check_completed(result, iterations: int) -> None:
    assert [j.name for j in result.jobs] == ["conv", "lin"]
    for j in result.jobs:
        assert j.ok, j
        assert j.submitted is not None
        assert j.finished is not None
        assert j.jct is not None
        assert 0 < j.jct < 300
        assert j.steps == iterations
    lin = result.jobs[1]
    assert lin.submitted >= 1.5
    assert result.makespan is not None
    assert result.makespan >= max(j.jct for j in result.jobs) - 0.01
    sampled = {s.job for s in result.samples}
    assert sampled == {"conv", "lin"}
    assert all(s.cpu >= 0 for s in result.samples)


def test_replay_none_records_times(docker_client, labeled, cleanup_containers, tmp_path) -> None:
    sc = parse_scenario(tiny())
    run = Replay(
        docker_client, sc, "none", tmp_path, labels=labeled(), sample_interval=0.5, timeout=240
    )
    result = run.run()
    check_completed(result, 60)
    assert not result.limits_changed(), "a dry-run agent ran, yet a container had a CPU limit"
    assert result.agent == {} or result.agent["dry_run"] is True
    assert leftovers(docker_client, result.run_id) == []
    assert (tmp_path / "logs" / "conv.log").read_text().count('"step"') == 60

    paths = write_run(result, tmp_path)
    back = read_run(tmp_path)
    assert [j.jct for j in back.jobs] == pytest.approx([j.jct for j in result.jobs], abs=0.01)
    assert len(back.samples) == len(result.samples)
    data = json.loads(paths["json"].read_text())
    assert data["makespan"] == pytest.approx(result.makespan)
    assert plot_cpu(result, tmp_path / "cpu.png").stat().st_size > 5000
    assert plot_jct({"none": result}, tmp_path / "jct.png").stat().st_size > 5000


def test_replay_flowcon_agent_acts(docker_client, labeled, cleanup_containers, tmp_path) -> None:
    if not agent_available():
        pytest.skip("the FlowCon agent (flowcon.agent.cli) is not installed yet")
    sc = parse_scenario(tiny(iterations=80))
    result = Replay(
        docker_client,
        sc,
        "flowcon",
        tmp_path / "flowcon",
        labels=labeled(),
        sample_interval=0.5,
        timeout=300,
        agent_config={"control": "quota"},  # testbox jobs report no threads: quota asked
    ).run()
    check_completed(result, 80)
    assert result.limits_changed(), "the agent never set a CPU limit on the replay's containers"
    limited = {s.job for s in result.samples if s.limit_cpus is not None}
    assert limited, "no sample shows a limit"
    assert result.agent["exit_code"] == 0, Path(result.agent["log"]).read_text()[-2000:]
    assert result.agent["died_at"] is None
    cfg = yaml.safe_load((tmp_path / "flowcon" / "agent.yaml").read_text())
    assert cfg["alpha"] == 0.05
    assert cfg["itval"] == 2
    assert leftovers(docker_client, result.run_id) == []

    none = Replay(
        docker_client, sc, "none", tmp_path / "none", labels=labeled(), sample_interval=0.5
    ).run()
    cmp = comparison(none, result)
    assert [r["job"] for r in cmp["jobs"]] == ["conv", "lin"]
    assert all(r["change_pct"] is not None for r in cmp["jobs"])
    assert cmp["flowcon_limits_changed"]
    assert not cmp["none_limits_changed"]
    paths = write_comparison(cmp, tmp_path)
    assert "(makespan)" in paths["csv"].read_text()


def test_missing_image_is_a_clear_error(docker_client, labeled, tmp_path) -> None:
    data = tiny()
    data["jobs"][1]["image"] = "flowcon/no-such-image:latest"  # type: ignore[index]
    run = Replay(docker_client, parse_scenario(data), "none", tmp_path, labels=labeled())
    with pytest.raises(ReplayError, match=r"no-such-image.*never pull"):
        run.run()
    assert leftovers(docker_client, run.run_id) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_removes_containers(docker_client, test_run_id, tmp_path, sig) -> None:
    """Ctrl-C (SIGINT) or SIGTERM in the middle: the CLI exits 130, nothing is left."""
    data = tiny()
    for job in data["jobs"]:  # type: ignore[attr-defined]
        job["command"] = "sleep 120"
    scenario = tmp_path / "long.yaml"
    scenario.write_text(yaml.safe_dump(data))
    label = f"flowcon.test={test_run_id}"
    cmd = [sys.executable, "-m", "flowcon.cli", "replay", str(scenario), "--policy", "none"]
    cmd += ["--out", str(tmp_path / "out"), "--label", label, "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            running = docker_client.containers.list(ignore_removed=True, filters={"label": label})
            if len(running) == 2:
                break
            time.sleep(0.3)
        else:
            pytest.fail("the replay did not start both containers in 60 s")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out.decode()
        assert b"containers removed" in out
        assert (
            docker_client.containers.list(ignore_removed=True, all=True, filters={"label": label})
            == []
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        for c in docker_client.containers.list(
            ignore_removed=True, all=True, filters={"label": label}
        ):
            c.remove(force=True)
