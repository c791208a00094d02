"""benchmarks/bench_profile.py on the real engine: a quick run measures the example job both
ways (pre-run, by scaling), prints the JSON last line, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.session import REPO, SESSION_ID, SESSION_LABEL, TEST_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "flowcon/elastic-example:latest"


def test_quick_run_measures_both_ways(docker_client, test_run_id) -> None:
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"{IMAGE} not built (images/elastic-example/build.sh)")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    labels = [f"{TEST_LABEL}={test_run_id}", f"{SESSION_LABEL}={SESSION_ID}"]
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_profile.py"), "--quick",
           "--no-build", "--label", labels[0], "--label", labels[1]]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(last["prerun_points"]) == set(last["scaling_points"]) == {"1", "2"}
    assert last["prerun_s"] > 0
    assert last["scaling_s"] > 0
    assert last["prerun_steps_lost"] > 0  # the pre-run's work is thrown away
    assert last["scaling_steps_lost"] == 0  # the scaled job's is kept
    assert last["scaling_steps_kept"] > 0
    selector = {"label": f"{TEST_LABEL}={test_run_id}"}
    assert docker_client.containers.list(all=True, sparse=True, filters=selector) == []
