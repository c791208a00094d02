"""`flowcon allocator` on a real engine with no GPUs and none declared: one clear line that
says what to declare, exit 1, no traceback (it was a ValueError traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.docker
def test_allocator_with_engine_but_no_gpus_says_what_to_declare(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("FLOWCON_LOG_LEVEL", "FLOWCON_ALLOCATOR_CONFIG", "DOCKER_HOST"):
        env.pop(name, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flowcon",
            "allocator",
            "--state-dir",
            str(tmp_path / "st"),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, out.stderr
    assert "no GPUs to allocate" in errors[0]
    assert "gpus: {declared:" in errors[0]
    # the only other line is the GPU probe's one-line note (NVML absent on this machine)
    others = [ln for ln in out.stderr.splitlines() if not ln.startswith("Error: ")]
    assert len(others) <= 1, out.stderr
    assert all("NVML" in ln for ln in others), out.stderr
