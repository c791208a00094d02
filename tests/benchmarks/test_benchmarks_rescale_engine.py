"""benchmarks/bench_rescale.py on the real engine: a quick run (the shell job, restart mode)
measures its events, prints the JSON last line and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from support.session import REPO, SESSION_ID, SESSION_LABEL, TEST_LABEL, TESTBOX_IMAGE

pytestmark = pytest.mark.docker


def test_quick_run_on_the_engine(docker_client, test_run_id) -> None:
    """A smoke run with the shell job (restart mode: no torch, a few seconds)."""
    run = f"q{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    labels = [f"{TEST_LABEL}={test_run_id}", f"{SESSION_LABEL}={SESSION_ID}"]
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_rescale.py"), "--quick",
           "--image", TESTBOX_IMAGE, "--grace", "5", "--run-id", run,
           "--label", labels[0], "--label", labels[1]]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["events"] == {"restart": 2}
    assert last["restart_gap_p95_s"] > 0
    assert last["stopfree_gap_p95_s"] is None
    assert last["exactly_once"] is False
    selector = {"label": f"flowcon.bench={run}"}
    assert docker_client.containers.list(all=True, sparse=True, filters=selector) == []


@pytest.mark.slow
def test_quick_run_of_the_coordinator_moves(docker_client, test_run_id) -> None:
    """The example job (real torch) in the modes that move the coordinator, with the same
    run's restart baseline: every event stop-free, no fallback, each sample once per epoch,
    the JSON line carries each mode's gap; nothing left behind. ``FLOWCON_TEST_PREBUILT_IMAGE=1``
    runs the example image's test tag as it is (built beforehand)."""
    image = "flowcon/elastic-example:coordinator-test"
    if os.environ.get("FLOWCON_TEST_PREBUILT_IMAGE") != "1":
        build = REPO / "images" / "elastic-example" / "build.sh"
        res = subprocess.run(["bash", str(build), image], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-2000:]
    run = f"q{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    labels = [f"{TEST_LABEL}={test_run_id}", f"{SESSION_LABEL}={SESSION_ID}"]
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_rescale.py"), "--quick",
           "--modes", "migrate,drain,coordinator-leave", "--image", image, "--no-build",
           "--grace", "5", "--run-id", run, "--label", labels[0], "--label", labels[1]]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-3000:])
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["events"] == {"restart": 2, "migrate": 2, "drain": 2, "coordinator-leave": 2}
    assert last["restart_gap_p95_s"] > 0
    for key in ("migrate", "drain", "coordinator_leave"):
        assert last[f"{key}_fallbacks"] == 0, last
        assert 0 < last[f"{key}_gap_p95_s"] < last["restart_gap_p95_s"], last
        assert last[f"{key}_vs_restart"] < 1, last
    assert last["exactly_once"] is True
    selector = {"label": f"flowcon.bench={run}"}
    assert docker_client.containers.list(all=True, sparse=True, filters=selector) == []
