"""The agent on real engines of two API versions: this host's (Debian bookworm's
docker.io, Docker 20.10, API 1.41) and a private Debian trixie dockerd (Docker 26.1,
API 1.45; scripts/engine-trixie.sh). On each: the adapter negotiates the engine's own
version, `flowcon agent --once` limits a labelled container with docker update, and
`flowcon status` shows it with the engine's live figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.session import REPO, TESTBOX_IMAGE

from flowcon.engine.docker_engine import DockerEngine

pytestmark = pytest.mark.docker

NANO = 10**9
JOB = [
    "sh",
    "-c",
    'i=0; while true; do i=$((i+1)); printf \'{"step":%d,"loss":%d}\\n\' $i $((100000/i)); '
    "sleep 0.1; done",
]


@pytest.fixture(params=["bookworm", "trixie"])
def engine_url(request: pytest.FixtureRequest, docker_client: Any) -> tuple[str, str]:
    """(DOCKER_HOST, the API version FlowCon must speak there)."""
    if request.param == "bookworm":  # the engine every other test uses
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock", "1.41"
    return request.getfixturevalue("trixie_engine"), "1.45"


def _flowcon(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DOCKER_HOST", None)
    env.pop("FLOWCON_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-m", "flowcon", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def test_agent_limits_a_labelled_container(
    engine_url: tuple[str, str], labeled: Any, tmp_path: Path
) -> None:
    import docker

    url, api = engine_url
    eng = DockerEngine(url, cgroup_root=None)
    version = eng.version()
    eng.close()
    assert version.api == api
    assert version.engine_api == api  # both within 1.41..1.45

    client = docker.DockerClient(base_url=url, version="auto", timeout=60)
    labels = labeled(**{"flowcon.enable": "true", "flowcon.cpus.max": "0.5"})
    run_id = labels["flowcon.test"]
    box = client.containers.run(
        TESTBOX_IMAGE, JOB, detach=True, labels=labels, network_mode="none", name=f"fc-{run_id}"
    )
    try:
        cfg = tmp_path / "agent.yaml"
        conf = {
            "docker_host": url,
            "state_file": str(tmp_path / "state.json"),
            "match_labels": {"flowcon.test": run_id},
            "min_update_cpus": 0,
            "control": "quota",  # the docker update of a CFS quota, on each engine version
        }
        cfg.write_text(yaml.safe_dump(conf))
        out = _flowcon("agent", "--once", "--config", str(cfg), url=url, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert f"API {api})" in out.stderr
        box.reload()
        assert box.attrs["HostConfig"]["NanoCpus"] == NANO // 2  # docker update by the agent

        js = _flowcon("status", "--json", "--config", str(cfg), url=url, cwd=tmp_path)
        assert js.returncode == 0, js.stderr
        data = json.loads(js.stdout)
        assert data["engine"] == {"answered": True, "error": None}
        (row,) = data["containers"]
        assert row["container_id"] == box.id
        assert row["live"]["cpus_limit"] == 0.5
        table = _flowcon("status", "--config", str(cfg), url=url, cwd=tmp_path)
        assert table.returncode == 0, table.stdout
        assert f"fc-{run_id}" in table.stdout, table.stdout
        assert "live from the engine" in table.stdout
    finally:
        box.remove(force=True)
        client.close()
