"""flowcon/agent/gpu_share.py: the MPS control daemon check, the share files, and the
job side that reads them (flowcon.elastic.devices.apply_gpu_share)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from flowcon.agent.gpu_share import MpsDaemon, read_share, share_file, write_share
from flowcon.core.gpu_share import MIB, Share


def _exe(folder: Path, body: str) -> None:
    p = folder / "nvidia-cuda-mps-control"
    p.write_text(f"#!/bin/sh\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


def test_mps_daemon_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert MpsDaemon().running() == (False, "nvidia-cuda-mps-control not found")
    _exe(tmp_path, 'read cmd; [ "$cmd" = get_server_list ] && [ -n "$CUDA_MPS_PIPE_DIRECTORY" ]')
    assert MpsDaemon(pipe_dir=str(tmp_path)).running() == (True, "")
    _exe(tmp_path, "echo 'Cannot find MPS control daemon process' >&2; exit 1")
    ok, why = MpsDaemon().running()
    assert not ok
    assert "Cannot find MPS control daemon process" in why


def test_share_file_round_trip(tmp_path: Path) -> None:
    path = share_file(tmp_path, "abcdef1234567890")
    assert path.name == "abcdef123456.json"  # the short id: the container's hostname
    write_share(path, Share(30, 2048 * MIB), "GPU-x")
    assert read_share(path) == Share(30, 2048 * MIB)
    body = json.loads(path.read_text())
    assert body["env"] == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M",
    }
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # readable in the container
    path.write_text("{")
    assert read_share(path) is None


def test_the_job_takes_its_share_before_cuda_starts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from flowcon.elastic.devices import apply_gpu_share, share_path

    path = tmp_path / "me.json"
    write_share(path, Share(25, 1024 * MIB), "GPU-x")
    env = {"FLOWCON_GPU_SHARE_FILE": str(path)}
    assert share_path(env) == path
    assert apply_gpu_share(env) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",
    }
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    mine = {"FLOWCON_GPU_SHARE_FILE": str(path), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "90"}
    apply_gpu_share(mine)
    assert mine["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "90"  # the user's own setting wins
    assert apply_gpu_share({"FLOWCON_GPU_SHARE_FILE": str(tmp_path / "none.json")}) == {}
    assert str(share_path({})).startswith("/flowcon/gpu-share/")
