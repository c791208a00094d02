"""`flowcon allocator` where no Docker engine answers: one line naming the engine, exit 1,
no traceback and nothing before it (the GPU probe's note comes after the engine check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowcon.executor.backend import EngineConnectError, connect_engine

REPO = Path(__file__).resolve().parents[2]


def test_allocator_without_engine_is_one_line(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'missing.sock'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOCKER_HOST": url}
    env.pop("FLOWCON_LOG_LEVEL", None)
    out = subprocess.run(
        [sys.executable, "-m", "flowcon", "allocator", "--state-dir", str(tmp_path / "st")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        f"Error: cannot connect to the Docker engine at {url}: [Errno 2] No such file or directory"
    ], out.stderr


def test_connect_engine_names_the_engine(tmp_path: Path, monkeypatch) -> None:
    import docker

    def refuse(**kwargs: object) -> None:
        assert kwargs.get("version") == "auto"  # the engine's version, never a pin
        raise docker.errors.DockerException("Error while fetching server API version") from (
            ConnectionRefusedError(111, "Connection refused")
        )

    monkeypatch.setattr(docker, "from_env", refuse)
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.9:2375")
    with pytest.raises(EngineConnectError) as exc:
        connect_engine()
    assert str(exc.value) == (
        "cannot connect to the Docker engine at tcp://10.0.0.9:2375: [Errno 111] Connection refused"
    )
