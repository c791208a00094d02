"""GpuSampler: per-round NVML samples (a fake pynvml with per-process accounting), and
the containers' PIDs from cgroup.procs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flowcon.engine.cgroups import CgroupReader, parse_procs
from flowcon.engine.gpus import GpuSampler, discover
from flowcon.testing.fake_nvml import FakeNvml


def test_sample_reads_devices_processes_and_per_process_utilisation() -> None:
    nvml = FakeNvml(gpus=2, memory_bytes=16 << 30)
    nvml.util = {0: 0.4, 1: 0.0}
    nvml.run(pid=5, gpu=0, mem_bytes=2 << 30, sm_util=0.3)
    nvml.run(pid=6, gpu=0, mem_bytes=None)  # NVML cannot tell its memory (MIG, Windows)
    s = GpuSampler(nvml, clock=lambda: 42.0)
    assert s.available
    assert s.count == 2
    assert nvml.inits == 1
    got = s.sample()
    assert got is not None
    assert got.at == 42.0
    assert [(d.index, d.util, d.mem_used, d.mem_total) for d in got.devices] == [
        (0, 0.4, 2 << 30, 16 << 30),
        (1, 0.0, 0, 16 << 30),
    ]
    assert [(p.pid, p.gpu, p.mem_bytes, p.sm_util) for p in got.processes] == [
        (5, 0, 2 << 30, 0.3),
        (6, 0, 0, None),
    ]
    assert nvml.shutdowns == 0  # kept initialised between rounds
    s.close()
    assert nvml.shutdowns == 1
    assert s.sample() is None


def test_a_driver_without_per_process_samples_gives_none() -> None:
    nvml = FakeNvml(per_process=False)
    nvml.run(pid=5, sm_util=0.5)
    got = GpuSampler(nvml).sample()
    assert got is not None
    assert got.processes[0].sm_util is None


@pytest.mark.parametrize(
    ("nvml", "why"),
    [
        (FakeNvml(loaded=False), "nvmlInit failed"),
        (FakeNvml(gpus=0), "NVML reports 0 GPUs"),
    ],
)
def test_absent_nvml_says_why_once(
    nvml: FakeNvml, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        s = GpuSampler(nvml)
        assert s.sample() is None
        assert s.sample() is None
    assert not s.available
    assert why in s.reason
    assert caplog.text.count("GPU measurement off") == 1


def test_a_failing_sample_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml()
    s = GpuSampler(nvml)

    def broken(h: int) -> list[object]:
        raise nvml.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    nvml.nvmlDeviceGetComputeRunningProcesses = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert s.sample() is None
    assert "GPU sample failed" in caplog.text
    del nvml.nvmlDeviceGetComputeRunningProcesses
    assert s.sample() is not None


def test_the_fake_answers_the_inventory_calls_too() -> None:
    inv = discover({}, nvml=FakeNvml(gpus=2), hostname="h")
    assert inv.source == "nvml"
    assert inv.node("h").count == 2


def test_pids_from_cgroup_procs(tmp_path: Path) -> None:
    assert parse_procs("12\n0\n13\n\nx\n") == {12, 13}  # 0: outside our namespace
    root = tmp_path / "cg"
    d = root / "docker" / "abc"
    d.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (d / "cpu.stat").write_text("usage_usec 5\n")
    (d / "cgroup.procs").write_text("101\n102\n")
    reader = CgroupReader(root)
    files = reader.locate("abc")
    assert files is not None
    assert reader.pids(files) == {101, 102}
    (d / "cgroup.procs").unlink()
    with pytest.raises(FileNotFoundError):
        reader.pids(files)
