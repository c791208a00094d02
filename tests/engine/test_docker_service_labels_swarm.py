"""Swarm users put labels under deploy.labels, on the service: the agent reads them for
the service's task container (GET /services/{id}) and manages it. Two-node swarm of
scripts/swarm-up.sh; the task is placed on node 1, the manager, whose engine answers for
services (a worker's engine does not: see docs/deploy-agent.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.session import REPO, TESTBOX_IMAGE

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

NANO = 10**9


def test_agent_manages_a_task_opted_in_by_deploy_labels(
    swarm: Any, labeled: Any, tmp_path: Path
) -> None:
    from docker.types import RestartPolicy

    labels = labeled()
    run_id = labels["flowcon.test"]
    deploy_labels = {**labels, "flowcon.enable": "true", "flowcon.cpus.max": "0.5"}
    svc = swarm.manager.services.create(
        TESTBOX_IMAGE,
        command=[
            "sh",
            "-c",
            'i=0; while true; do i=$((i+1)); echo "{\\"step\\":$i}"; sleep 0.2; done',
        ],
        name=f"fc-{run_id}-svc",
        labels=deploy_labels,  # deploy.labels: on the service only
        container_labels=labels,  # labels: on the task container (the test's scope)
        constraints=["node.labels.flowcon.node==node1"],
        restart_policy=RestartPolicy(condition="none"),
        networks=["host"],
    )
    try:
        flt = {"label": [f"flowcon.test={run_id}", f"com.docker.swarm.service.id={svc.id}"]}
        (task,) = wait_for(
            lambda: swarm.manager.containers.list(ignore_removed=True, filters=flt), timeout=90
        )
        assert "flowcon.enable" not in task.labels  # only the service carries it
        cfg = tmp_path / "agent.yaml"
        conf = {
            "state_file": str(tmp_path / "state.json"),
            "match_labels": {"flowcon.test": run_id},
            "min_update_cpus": 0,
        }
        cfg.write_text(yaml.safe_dump(conf))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("FLOWCON_LOG_LEVEL", None)
        out = subprocess.run(
            [sys.executable, "-m", "flowcon", "agent", "--once", "--config", str(cfg)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert f"new container={task.name}" in out.stderr, out.stderr
        task.reload()
        # the limit is the service's flowcon.cpus.max
        assert task.attrs["HostConfig"]["NanoCpus"] == NANO // 2
    finally:
        svc.remove()
