"""The pre-run (ElasticFlow section 5): how fast a job runs at 1, 2, 4, ... GPUs.

The executor runs each GPU count briefly as a ``profile`` role job; this module reads the
speed from the job's metric lines (parsed by ``flowcon.core.metric_lines``, the one parser
of metric lines) and decides when to stop. It drives a ``Backend`` only to list a pre-run's
workers and read their logs; launching and removing them stays with the executor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from flowcon.core.metric_lines import regex_step_points, step_points
from flowcon.executor.backend import Backend, ExecutorError, LogLine, Worker
from flowcon.executor.workers import Placement
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

log = logging.getLogger(__name__)

ENV_PROFILE = "FLOWCON_PROFILE"  # set to "1" in a pre-run's containers


def metric_points(lines: Iterable[str], skip_first: int = 1) -> list[tuple[float, float]]:
    """(ts, step) of the metric lines ({"step":..,"ts":..}), event lines and NaN left out,
    without the first ``skip_first`` (start-up, not steady speed)."""
    return [(ts, float(step)) for step, ts in step_points(lines)][skip_first:]


def step_rate(lines: Iterable[str], skip_first: int = 1) -> tuple[float | None, int]:
    """Iterations/s from metric lines ({"step":..,"ts":..}); None if too few. Returns (rate, n).

    The first ``skip_first`` lines are dropped: they include start-up, not steady speed.
    """
    return rate_of(metric_points(lines, skip_first))


def rate_of(points: Sequence[tuple[float, float]]) -> tuple[float | None, int]:
    """(steps/s between the first and last point or None, number of points)."""
    if len(points) < 2:
        return None, len(points)
    (t0, s0), (t1, s1) = points[0], points[-1]
    if t1 <= t0 or s1 <= s0:
        return None, len(points)
    return (s1 - s0) / (t1 - t0), len(points)


def worker_points(
    backend: Backend, worker: Worker, metric: MetricSpec | None
) -> list[tuple[float, float]]:
    """(step, ts) of a worker's metric lines: flowcon's JSON lines, or, for a spec with
    ``metric.regex``, the lines the regex matches on stdout and stderr, timed by the engine
    (``flowcon.core.metric_lines.regex_step_points`` says how steps are counted)."""
    if metric is None or metric.compiled() is None:
        return [(float(step), ts) for step, ts in step_points(backend.logs(worker))]
    try:  # stdout and stderr, each line with the engine's timestamp
        lines = backend.read_logs(worker)
    except ExecutorError as exc:
        log.warning("logs of %s: %s", worker.name, exc)
        return []
    return line_points(lines, metric)


def line_points(lines: Sequence[LogLine], metric: MetricSpec | None) -> list[tuple[float, float]]:
    """(step, ts) of output lines already read: flowcon's JSON lines, or, for a spec with
    ``metric.regex``, the lines the regex matches, timed by the engine."""
    regex = metric.compiled() if metric is not None else None
    if metric is None or regex is None:
        return [(float(step), ts) for step, ts in step_points(ln.text for ln in lines)]
    timed = [(ln.ts_ns / 1e9, ln.text) for ln in lines]
    return regex_step_points(timed, regex, metric.steps_per_line, metric.steps_per_epoch)


def profile_spec(spec: JobSpec, gpus: int) -> JobSpec:
    """The pre-run job of ``spec`` at ``gpus`` GPUs (its own name, so its own checkpoint)."""
    return replace(spec, name=f"{spec.name}-p{gpus}", env={**dict(spec.env), ENV_PROFILE: "1"})


def measure(
    backend: Backend,
    selector: Mapping[str, str],
    max_seconds: float,
    min_points: int,
    poll_s: float,
    cancelled: Callable[[], bool] | None = None,
    min_steps: int = 20,
    metric: MetricSpec | None = None,
) -> float | None:
    """Poll the rank-0 logs of the workers ``selector`` finds until the step rate is steady
    (``min_points`` lines, ``min_steps`` steps), they exit, or ``max_seconds`` pass."""
    deadline = time.monotonic() + max_seconds
    rate: float | None = None
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        if cancelled is not None and cancelled():
            return None
        ws = sorted(backend.list_workers(selector), key=lambda w: w.node_rank)
        if not ws:
            return rate
        points = [(ts, step) for step, ts in worker_points(backend, ws[0], metric)][1:]
        rate, n = rate_of(points)
        # enough lines, and enough steps that one step of rounding is <= 5 %
        if n >= min_points and points[-1][1] - points[0][1] >= min_steps:
            return rate
        if any(w.state in ("exited", "dead") for w in ws):
            return rate
    return rate


def prerun(
    spec: JobSpec,
    counts: Sequence[int],
    placement_for: Callable[[int], Placement | None],
    rate_at: Callable[[JobSpec, Placement], float | None],
    min_gain: float = 0.05,
    on_point: Callable[[int, float | None], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> ThroughputProfile:
    """Run ``rate_at(profile_spec(spec, n), placement)`` for each count ``n`` until more GPUs
    stop adding throughput: a count not ``min_gain`` (relative) faster than the best so far
    is the last. Counts without a placement are skipped; ``on_point`` is told each result."""

    def check_cancelled() -> None:
        if cancelled is not None and cancelled():
            raise ExecutorError(f"profiling {spec.name}: cancelled")

    points: dict[int, float] = {}
    best = 0.0
    for n in counts:
        check_cancelled()
        placement = placement_for(n)
        if placement is None:
            continue
        rate = rate_at(profile_spec(spec, n), placement)
        check_cancelled()
        if on_point is not None:
            on_point(n, rate)
        if rate is None:
            log.warning("profile %s at %d GPUs: no steady step rate measured", spec.name, n)
            continue
        points[n] = rate
        log.info("profile %s: %d GPUs -> %.3f it/s", spec.name, n, rate)
        if rate <= best * (1.0 + min_gain):
            break
        best = rate
    if not points:
        raise ExecutorError(f"profiling {spec.name}: no GPU count produced metric lines")
    return ThroughputProfile(tuple(sorted(points.items())))
