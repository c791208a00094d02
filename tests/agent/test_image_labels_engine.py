"""An image's own ``LABEL flowcon.enable=true flowcon.cpus.min=9999`` does not hand its job's
CPU limit to a node agent: the executor blanks the image's flowcon.* labels on the job's
container, and a real agent measures that container for its job but never changes its
limit (the real engine; flowcon/executor/visibility.py, flowcon/agent/pool.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from flowcon.executor.lifecycle import Executor

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.session import REPO, TESTBOX_IMAGE  # noqa: E402
from support.swarm_fixtures import step_job_spec  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = pytest.mark.docker

IMAGE_LABELS = {"flowcon.enable": "true", "flowcon.cpus.min": "2", "flowcon.metric": "loss"}


@pytest.fixture
def opted_in_image(docker_client, labeled, test_run_id):
    """testbox that opts itself in to the agent's CPU control, labelled for the test."""
    tag = f"flowcon/test-opted-in:{test_run_id}"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {TESTBOX_IMAGE}\n".encode()),
        tag=tag,
        labels={**labeled(), **IMAGE_LABELS},
    )
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture
def agent(tmp_path: Path, test_run_id: str):
    """A real agent (``flowcon agent``) on this engine, limited to this test's containers."""
    state = tmp_path / "state.json"
    cfg = {
        "state_file": str(state),
        "itval": 1,
        "itval_max": 2,
        "min_update_cpus": 0,
        "control": "quota",
        "metrics_port": None,
        "match_labels": {"flowcon.test": test_run_id},
    }
    cfg_path = tmp_path / "agent.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "agent.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWCON_LOG_LEVEL": "INFO"}
    env.pop("DOCKER_HOST", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowcon.cli", "agent", "--config", str(cfg_path)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=env,
        cwd=str(REPO),
    )

    def record(cid: str) -> dict[str, Any] | None:
        try:
            return json.loads(state.read_text())["containers"].get(cid)  # type: ignore[no-any-return]
        except (OSError, ValueError, KeyError):
            return None

    yield record, log
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _nano(container) -> int:
    container.reload()
    return int(container.attrs["HostConfig"]["NanoCpus"] or 0)


def test_an_images_opt_in_labels_never_reach_the_agent(
    executor: Executor, docker_client, labeled, test_run_id, opted_in_image, agent
) -> None:
    record, log = agent
    spec = step_job_spec("imglabels", image=opted_in_image)
    (worker,) = executor.launch(spec, {"node1": ["0"]})
    job_box = docker_client.containers.get(worker.id)
    labels = job_box.labels
    assert labels["flowcon.enable"] == ""
    assert labels["flowcon.cpus.min"] == ""
    assert labels["flowcon.job"] == "imglabels"
    before = _nano(job_box)
    # the same image run by hand: the agent manages that one (its labels work)
    by_hand = docker_client.containers.run(
        opted_in_image,
        [
            "sh",
            "-c",
            'i=0; while true; do i=$((i+1)); echo "{\\"step\\":$i,\\"loss\\":1}"; sleep 0.1; done',
        ],
        detach=True,
        name=f"fc-{test_run_id}-byhand",
        labels=labeled(),
        network_mode="none",
    )
    mine = wait_for(lambda: record(by_hand.id), 30, 0.2, lambda: log.read_text()[-2000:])
    assert mine["managed"] is True
    assert mine["list"] is not None
    # the job's container is measured for its job, and its limit is left as it was
    rec = wait_for(lambda: record(worker.id), 30, 0.2, lambda: log.read_text()[-2000:])
    assert rec["managed"] is False
    assert rec["job"] == "imglabels"
    time.sleep(3)  # several of the agent's rounds
    assert _nano(job_box) == before
    assert worker.id[:12] not in "".join(
        ln for ln in log.read_text().splitlines() if "decision container=" in ln
    )
