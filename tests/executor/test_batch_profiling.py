"""The pre-run's batch dimension: the batches it measures, the largest local batch search
(the engine's OOM kill on CPU, the job's own probe on CUDA), with fakes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from flowcon.core.batch_search import largest_fitting
from flowcon.elastic.probe import largest_batch, report_largest_batch
from flowcon.executor.backend import Worker
from flowcon.executor.profiling import (
    batches_to_profile,
    oom_killed,
    prerun_batches,
    reported_local_batch,
    search_local_batch,
)
from flowcon.jobspec.spec import JobSpec, ThroughputProfile


def spec(**over: Any) -> JobSpec:
    base = JobSpec(
        name="j",
        image="img",
        command=("train",),
        global_batch_size=16,
        iterations=100,
        submit_time=0.0,
        best_effort=True,
        profile=ThroughputProfile.from_mapping({1: 10.0, 2: 18.0, 4: 30.0}),
        batch_size_min=16,
        batch_size_max=128,
    )
    return replace(base, **over)


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 8, 9, 31, 47, 63, 64])
def test_largest_fitting_finds_the_limit_with_few_tries(limit: int) -> None:
    tried: list[int] = []

    def fits(b: int) -> bool:
        tried.append(b)
        return b <= limit

    assert largest_fitting(1, 64, fits) == limit
    assert tried[0] == 64  # the top first: a job that fits costs one try
    assert len(tried) == len(set(tried))  # never twice
    assert len(tried) <= 2 * 6 + 1


def test_largest_fitting_none_when_nothing_fits() -> None:
    assert largest_fitting(4, 64, lambda b: False) is None
    assert largest_fitting(4, 4, lambda b: True) == 4
    with pytest.raises(ValueError, match="lo <= hi"):
        largest_fitting(8, 4, lambda b: True)


class FakeOOM(RuntimeError):
    pass


def test_largest_batch_catches_out_of_memory_and_halves() -> None:
    """A fake step that runs out of memory above 40 samples (as torch.cuda.OutOfMemoryError
    would); other errors are the job's own and propagate."""
    ran: list[int] = []

    def step(b: int) -> None:
        ran.append(b)
        if b > 40:
            raise FakeOOM("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert largest_batch(step, 1, 128) == 40
    assert ran[:2] == [128, 64]  # halves first

    def broken(b: int) -> None:
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug"):
        largest_batch(broken, 1, 8)

    def host(b: int) -> None:
        if b > 5:
            raise MemoryError

    assert largest_batch(host, 1, 16) == 5


def test_the_probe_reports_a_metric_line_the_pre_run_reads() -> None:
    said: list[dict[str, Any]] = []
    report_largest_batch(48, lambda **m: said.append(m))
    report_largest_batch(None, lambda **m: said.append(m))
    assert said == [{"max_local_batch": 48}]
    lines = ['{"step": 1, "ts": 1.0}', "noise max_local_batch", '{"max_local_batch": 48}']
    assert reported_local_batch(lines) == 48
    assert reported_local_batch(['{"max_local_batch": true}', '{"step": 2}']) is None


def _worker(state: str, code: int | None) -> Worker:
    return Worker("i", "n", "j", "node1", 0, (), state, code, {})


def test_an_oom_kill_is_seen_from_the_engine() -> None:
    assert oom_killed([_worker("dead", 137)])  # OOMKilled
    assert oom_killed([_worker("exited", 137)])
    assert not oom_killed([_worker("exited", 0), _worker("running", None)])


def test_the_batches_measured_stay_in_the_range_and_the_memory() -> None:
    s = spec()
    # ends 16 (the submitted one: measured already) and 128, middle 45 -> 44 on 4 GPUs,
    # weak scaling 64 on 4 GPUs
    assert batches_to_profile(s, 1) == [45, 128]
    assert batches_to_profile(s, 4) == [44, 64, 128]
    assert batches_to_profile(s, 4, max_local=12) == [44, 48]  # at most 12 per worker
    assert batches_to_profile(spec(batch_size_min=None, batch_size_max=None), 4) == []


def test_prerun_batches_measures_each_count_at_each_batch() -> None:
    s = spec()
    runs: list[tuple[str, int | None]] = []

    def rate_at(pspec: JobSpec, placement: Any) -> float | None:
        runs.append((pspec.name, pspec.run_batch))
        assert pspec.env["FLOWCON_PROFILE"] == "1"
        return None if pspec.run_batch == 128 else 100.0 / (pspec.run_batch or 1)

    points: list[tuple[int, int, float | None]] = []
    rows = prerun_batches(
        s,
        [1, 2],
        lambda n: {"node1": [str(i) for i in range(n)]},
        rate_at,
        on_point=lambda g, b, r: points.append((g, b, r)),
    )
    assert rows == {
        45: {1: pytest.approx(100 / 45)},
        44: {2: pytest.approx(100 / 44)},
        32: {2: pytest.approx(100 / 32)},  # weak scaling on 2 GPUs
    }
    assert ("j_p1b45", 45) in runs
    assert len(points) == len(runs) == 5  # 128 measured nothing at either count


def test_search_local_batch_backs_off_from_oom_kills() -> None:
    s = spec(memory=2**30)
    tried: list[int] = []

    def runs_at(b: int) -> bool:  # the container's limit is reached above 50 samples
        tried.append(b)
        return b <= 50

    assert search_local_batch(s, runs_at, 16, 127) == 50
    assert tried[0] == 127
    assert search_local_batch(spec(batch_size_min=None, batch_size_max=None), runs_at) is None


def test_torch_cuda_out_of_memory_is_caught() -> None:
    """The real exception class (no GPU needed to raise it): the default ``is_oom``."""
    torch = pytest.importorskip("torch")
    from flowcon.elastic.probe import is_out_of_memory

    def step(b: int) -> None:
        if b > 24:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")

    assert is_out_of_memory(torch.cuda.OutOfMemoryError("x"))
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert largest_batch(step, 1, 100) == 24
