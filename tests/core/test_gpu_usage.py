"""A container's GPU use from one NVML sample and its PIDs; R over CPU and GPU."""

from __future__ import annotations

import pytest

from flowcon.core.gpu_usage import (
    GpuDevice,
    GpuProcess,
    GpuSample,
    attribute,
    gpu_share,
    per_process,
)
from flowcon.core.growth import GrowthTracker, resource_share


def sample(*procs: GpuProcess, util: tuple[float | None, ...] = (0.9, 0.5)) -> GpuSample:
    devices = tuple(GpuDevice(i, f"GPU-{i}", u, 0, 80 << 30) for i, u in enumerate(util))
    return GpuSample(1.0, devices, procs)


def test_processes_are_matched_by_pid_and_summed_per_gpu() -> None:
    s = sample(
        GpuProcess(10, 0, 1 << 30, 0.25),
        GpuProcess(11, 0, 2 << 30, 0.5),
        GpuProcess(10, 1, 3 << 30, 0.125),  # the same process on a second GPU
        GpuProcess(99, 1, 4 << 30, 0.25),  # someone else's
    )
    used = attribute(s, {10, 11, 12})
    assert [(u.gpu, u.uuid, u.util, u.mem_bytes, u.pids) for u in used] == [
        (0, "GPU-0", 0.75, 3 << 30, (10, 11)),
        (1, "GPU-1", 0.125, 3 << 30, (10,)),
    ]
    assert gpu_share(used, 2) == pytest.approx(0.875 / 2)
    assert [p["pid"] for p in per_process(used, s)] == [10, 11, 10]
    assert attribute(s, {5}) == ()
    assert gpu_share((), 2) is None  # on no GPU: no GPU share at all


def test_without_per_process_figures_only_a_sole_tenant_gets_the_gpus_utilisation() -> None:
    alone = attribute(sample(GpuProcess(10, 0, 1, None), GpuProcess(11, 0, 1, None)), {10, 11})
    assert alone[0].util == 0.9  # the GPU's own figure: nobody else is on it
    shared = attribute(sample(GpuProcess(10, 0, 1, None), GpuProcess(99, 0, 1, None)), {10})
    assert shared[0].util is None  # two tenants and no split: unknown, not guessed
    assert gpu_share(shared, 2) is None


def test_utilisation_of_one_gpu_is_capped_at_one() -> None:
    used = attribute(sample(GpuProcess(1, 0, 0, 0.7), GpuProcess(2, 0, 0, 0.7)), {1, 2})
    assert used[0].util == 1.0


def test_r_is_the_weighted_mean_of_the_cpu_and_gpu_shares() -> None:
    assert resource_share(0.2, None, 1.0) == 0.2  # a CPU job: the paper's R
    assert resource_share(0.2, 0.6, 1.0) == pytest.approx(0.4)
    assert resource_share(0.2, 0.6, 3.0) == pytest.approx((0.2 + 1.8) / 4)
    assert resource_share(0.2, 0.6, 0.0) == 0.2  # gpu_weight 0: GPU term off
    assert resource_share(None, 0.6, 1.0) is None  # no CPU figure: no R, as before


def test_g_of_a_gpu_job_divides_by_its_gpu_time_too() -> None:
    """The same progress on twice the GPU time (and the same CPU) is a smaller raw G."""

    def raw_g(gpu: float) -> float | None:
        tr = GrowthTracker(reference_intervals=1)
        for t, v in ((0.0, 10.0), (10.0, 9.0)):
            tr.add_sample(t, v)
            tr.close_interval(resource_share(0.1, gpu, 1.0))
        return tr.raw_g

    lo, hi = raw_g(0.3), raw_g(0.7)
    assert lo == pytest.approx(0.1 / 0.2)
    assert hi == pytest.approx(0.1 / 0.4)
