"""benchmarks/gpu_check.py: its CPU dry run (fake NVML, gloo on the CPU) passes end to end.

The dry run proves the script's steps and the plumbing they go through (the inventory as the
allocator reads it, a restart-mode job killed and resumed bit for bit, a stop-free join and
leave, the agent's GPU match against the processes NVML lists); the GPU run proves the
hardware (docs/agent.md, "GPUs").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from benchmarks import gpu_check

REPO = Path(__file__).resolve().parents[2]


def test_cpu_dry_run_passes_and_says_what_it_proved(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--cpu",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    last = proc.stdout.strip().splitlines()[-1]
    got = json.loads(last)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert got["ok"] is True
    assert got["mode"] == "cpu"
    inv = got["inventory"]
    assert inv["source"] == "nvml"  # the fake NVML, read by the allocator's discover()
    assert inv["topology"] == {"nodes": 1, "gpus_per_node": 1}
    r = got["restart"]
    assert r["bit_identical"] is True
    assert r["device"] == "cpu"
    assert r["killed_at_step"] >= gpu_check.KILL_AFTER
    assert r["resumed_from_step"] == 20  # the last checkpoint before the kill
    assert r["first_step_s"]["fresh"] > 0
    assert r["first_step_s"]["resumed"] > 0
    sf = got["stopfree"]
    assert sf["exit_codes"] == {"a": 143, "b": 144}  # stopped after a checkpoint; left
    assert [e["world_size"] for e in sf["events"]] == [2, 1]
    assert sf["backend"] == "gloo"
    assert sf["join_gap_s"] is not None
    assert sf["leave_gap_s"] is not None
    m = got["measure"]
    assert m["matches"] is True
    assert m["nvidia_smi_source"] == "fake NVML"
    assert {v["mem_mib"] for v in m["agent"].values()} == {200, 250}
    assert got["mps"]["available"] is False


def test_the_gap_is_the_longest_pause_between_step_lines() -> None:
    steps = [(t, {"step": i}) for i, t in enumerate([0.0, 0.1, 0.2, 0.9, 1.0, 5.0])]
    assert gpu_check._gap(steps, 0.0, 1.0) == pytest.approx(0.7)
    assert gpu_check._gap(steps, 4.0, 6.0) is None  # one line: no gap to measure


def test_the_digest_changes_with_one_bit_of_the_optimizer_state() -> None:
    import torch

    model = gpu_check._model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gpu_check._step(torch, model, opt, torch.device("cpu"))
    before = gpu_check._digest(torch, model, opt)
    st = next(iter(opt.state.values()))
    st["exp_avg"].view(-1)[0] = torch.nextafter(st["exp_avg"].view(-1)[0], torch.tensor(1.0))
    assert gpu_check._digest(torch, model, opt) != before


# ---------------------------------------------------------------- the isolation section


def test_isolation_skips_with_the_reason_where_gpus_engine_or_runtime_are_missing(
    tmp_path: Path,
) -> None:
    assert gpu_check.check_isolation("cpu", ["GPU-a"], tmp_path)["reason"].startswith("CPU dry run")
    no_gpu = gpu_check.check_isolation("gpu", [], tmp_path)
    assert no_gpu["ok"] is True
    assert no_gpu["skipped"] is True
    assert "no GPU" in no_gpu["reason"]

    def no_engine():
        raise ConnectionError("connection refused")

    gone = gpu_check.check_isolation("gpu", ["GPU-a"], tmp_path, connect=no_engine)
    assert gone["skipped"] is True
    assert "no engine" in gone["reason"]

    class RuncOnly:
        def info(self):
            return {"Runtimes": {"runc": {}, "io.containerd.runc.v2": {}}}

    plain = gpu_check.check_isolation("gpu", ["GPU-a"], tmp_path, connect=RuncOnly)
    assert plain["skipped"] is True
    assert "no nvidia runtime" in plain["reason"]
    assert "runc" in plain["reason"]


def test_isolation_verdict_reads_nvidia_smi() -> None:
    text = "NVD=GPU-a\nGPU 0: NVIDIA H200 (UUID: GPU-a)\n  MIG 1g.18gb Device 0: (UUID: MIG-x)\n"
    assert gpu_check.listed_uuids(text) == ["GPU-a", "MIG-x"]
    own = {"own": ["GPU-a"], "visible": "GPU-a", "device_request": True}
    assert gpu_check.isolated({"a": {**own, "listed": ["GPU-a"]}})
    assert not gpu_check.isolated({"a": {**own, "listed": ["GPU-a", "GPU-b"]}})
    env_only = {"own": ["GPU-b"], "visible": "GPU-b", "device_request": False, "listed": []}
    assert gpu_check.isolated({"b": env_only})  # the runtime is not the default: none seen
    assert not gpu_check.isolated({"b": {**env_only, "visible": "all"}})
