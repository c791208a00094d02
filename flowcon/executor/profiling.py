"""The pre-run (ElasticFlow section 5): how fast a job runs at 1, 2, 4, ... GPUs.

The executor runs each GPU count briefly as a ``profile`` role job; this module reads the
speed from the job's metric lines (parsed by ``flowcon.core.metric_lines``, the one parser
of metric lines) and decides when to stop. It drives a ``Backend`` only to list a pre-run's
workers and read their logs; launching and removing them stays with the executor.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from flowcon.alloc.batch import model_batch
from flowcon.core.batch_search import MAX_LOCAL_BATCH_KEY, largest_fitting
from flowcon.core.metric_lines import regex_step_points, step_points
from flowcon.executor.backend import Backend, ExecutorError, LogLine, Worker
from flowcon.executor.workers import Placement
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import DERIVED_SEP, JobSpec, ThroughputProfile

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


def derived_name(job: str, suffix: str) -> str:
    """The name of a job FlowCon derives from ``job`` (a pre-run): ``job_suffix``. The
    separator is one no submitted name holds (``flowcon.jobspec.spec.DERIVED_SEP``), so a
    derived name, and the containers, checkpoint volume, network and host folder named
    after it, never belong to another job; ``_`` is valid in Docker's container, volume
    and network names and in Swarm's service names (a DNS component there)."""
    return f"{job}{DERIVED_SEP}{suffix}"


def profile_spec(spec: JobSpec, gpus: int) -> JobSpec:
    """The pre-run job of ``spec`` at ``gpus`` GPUs (its own name, so its own checkpoint)."""
    env = {**dict(spec.env), ENV_PROFILE: "1"}
    return replace(spec, name=derived_name(spec.name, f"p{gpus}"), env=env)


def prerun_refusal(gpus: int, free: int, allowance: int | None) -> str | None:
    """Why a pre-run at ``gpus`` GPUs cannot run now (None: it can): more than the ``free``
    GPUs (held by no job and no other pre-run; a busy GPU is never lent to a pre-run), or
    more than the owner's quota leaves it (``allowance``; None: no GPU quota)."""
    if allowance is not None and gpus > allowance:
        return f"{gpus} GPUs exceed what the owner's quota leaves ({allowance}, max_gpus)"
    if gpus > free:
        return f"{gpus} GPUs wanted, {free} free (held by no job or pre-run)"
    return None


def measure(
    backend: Backend,
    selector: Mapping[str, str],
    max_seconds: float,
    min_points: int,
    poll_s: float,
    cancelled: Callable[[], bool] | None = None,
    min_steps: int = 20,
    metric: MetricSpec | None = None,
    *,
    since: float | None = None,
    skip: int = 1,
    any_exit_ends: bool = True,
) -> float | None:
    """Poll the rank-0 logs of the workers ``selector`` finds until the step rate is steady
    (``min_points`` lines, ``min_steps`` steps), they exit, or ``max_seconds`` pass.

    ``since``: only lines printed after it (epoch seconds: a running job just rescaled);
    ``skip``: lines left out first (the start-up line, the step that carried a switch);
    ``any_exit_ends``: one exited worker ends the measurement (a pre-run), else all (a
    running job's leavers exit while it goes on). Workers that left are not read."""
    deadline = time.monotonic() + max_seconds
    rate: float | None = None
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        if cancelled is not None and cancelled():
            return None
        ws = sorted(
            (w for w in backend.list_workers(selector) if not w.left), key=lambda w: w.node_rank
        )
        if not ws:
            return rate
        points = [
            (ts, step)
            for step, ts in worker_points(backend, ws[0], metric)
            if since is None or ts >= since
        ][skip:]
        rate, n = rate_of(points)
        # enough lines, and enough steps that one step of rounding is <= 5 %
        if n >= min_points and points[-1][1] - points[0][1] >= min_steps:
            return rate
        ended = [w.state in ("exited", "dead") for w in ws]
        if any(ended) if any_exit_ends else all(ended):
            return rate
    return rate


class CurvePoints:
    """The points a profiling measures, one count at a time, and its stop rule: a count
    not ``min_gain`` (relative) faster than the best so far is the last (section 6.6;
    ``stop_early=False`` measures every count, as a descending run must)."""

    def __init__(
        self,
        name: str,
        min_gain: float,
        on_point: Callable[[int, float | None], None] | None,
        cancelled: Callable[[], bool] | None,
        stop_early: bool = True,
    ) -> None:
        self.name, self.min_gain, self.stop_early = name, min_gain, stop_early
        self.on_point, self.cancelled = on_point, cancelled
        self.points: dict[int, float] = {}
        self.best = 0.0

    def check_cancelled(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise ExecutorError(f"profiling {self.name}: cancelled")

    def add(self, n: int, rate: float | None, how: str = "") -> bool:
        """Record the rate at ``n`` GPUs (None: nothing measured); True: stop here."""
        self.check_cancelled()
        if self.on_point is not None:
            self.on_point(n, rate)
        if rate is None:
            log.warning("profile %s at %d GPUs: no steady step rate measured", self.name, n)
            return False
        self.points[n] = rate
        log.info("profile %s%s: %d GPUs -> %.3f it/s", self.name, how, n, rate)
        if self.stop_early and rate <= self.best * (1.0 + self.min_gain):
            return True
        self.best = rate
        return False

    def profile(self) -> ThroughputProfile:
        if not self.points:
            raise ExecutorError(f"profiling {self.name}: no GPU count produced metric lines")
        return ThroughputProfile(tuple(sorted(self.points.items())))


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
    curve = CurvePoints(spec.name, min_gain, on_point, cancelled)
    for n in counts:
        curve.check_cancelled()
        placement = placement_for(n)
        if placement is None:
            continue
        if curve.add(n, rate_at(profile_spec(spec, n), placement)):
            break
    return curve.profile()


# ---------------------------------------------------------------- the batch dimension

# exit status of a container the kernel's OOM killer ended (SIGKILL), as the engine says it
EXIT_OOM = 137


def oom_killed(workers: Iterable[Worker]) -> bool:
    """Whether a worker ran out of memory: the engine marked it OOMKilled (a "dead"
    worker, ``flowcon.executor.backends.engine.worker_from_container``) or it exited 137."""
    return any(w.state == "dead" or w.exit_code == EXIT_OOM for w in workers)


def reported_local_batch(lines: Iterable[str]) -> int | None:
    """The largest local batch a job's own probe reported (``flowcon.elastic.largest_batch``
    then ``report_largest_batch``: a metric line ``{"max_local_batch": b}``), the last one
    printed; None when it printed none."""
    found: int | None = None
    for line in lines:
        text = line.strip()
        if MAX_LOCAL_BATCH_KEY not in text or not text.startswith("{"):
            continue
        try:
            value = json.loads(text).get(MAX_LOCAL_BATCH_KEY)
        except (ValueError, AttributeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            found = value
    return found


def batches_to_profile(spec: JobSpec, gpus: int, max_local: int | None = None) -> list[int]:
    """The global batches other than the submitted one the pre-run measures at ``gpus``
    GPUs for a job with a batch range: the range's ends, their geometric middle and the
    weak-scaling batch there (``flowcon.alloc.batch.model_batch``), each splittable over
    ``gpus`` and, with ``max_local``, at most ``max_local`` samples per worker; none for
    a job without a range."""
    rng = spec.batch_range
    if rng is None:
        return []
    low, high = rng
    middle = int(round(math.sqrt(low * high)))
    weak = model_batch(spec.global_batch_size, spec.min_gpus, low, high, gpus, max_local)
    out = set()
    for b in (low, middle, high, weak):
        if max_local is not None:
            b = min(b, max_local * gpus)
        b -= b % gpus  # equal shares
        if low <= b <= high and b >= gpus and b != spec.global_batch_size:
            out.add(b)
    return sorted(out)


def prerun_batches(
    spec: JobSpec,
    counts: Sequence[int],
    placement_for: Callable[[int], Placement | None],
    rate_at: Callable[[JobSpec, Placement], float | None],
    max_local: int | None = None,
    on_point: Callable[[int, int, float | None], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict[int, dict[int, float]]:
    """The speed of ``spec`` at the batches ``batches_to_profile`` names, at each of
    ``counts`` (the GPU counts its profile measured): ``rate_at`` runs the pre-run job at
    global batch ``b`` (``run_batch``) and reads its step rate, which a job with a batch
    range counts in iterations of its submitted batch (samples / the reference batch,
    docs/jobs.md). Returns batch -> GPU count -> that rate (the spec's ``batch_profile``);
    ``on_point(gpus, batch, rate)`` is told each result."""
    rows: dict[int, dict[int, float]] = {}
    for n in counts:
        for b in batches_to_profile(spec, n, max_local):
            if cancelled is not None and cancelled():
                raise ExecutorError(f"profiling {spec.name}: cancelled")
            placement = placement_for(n)
            if placement is None:
                continue
            name = derived_name(spec.name, f"p{n}b{b}")
            pspec = replace(profile_spec(spec, n), name=name, run_batch=b)
            rate = rate_at(pspec, placement)
            if on_point is not None:
                on_point(n, b, rate)
            if rate is not None and rate > 0:
                rows.setdefault(b, {})[n] = rate
                log.info("profile %s: %d GPUs at batch %d -> %.3f it/s", spec.name, n, b, rate)
    return rows


def search_local_batch(
    spec: JobSpec, runs_at: Callable[[int], bool], lo: int | None = None, hi: int | None = None
) -> int | None:
    """The largest per-worker batch of ``spec`` that fits its worker's memory, found by
    running it on one worker at local batches between ``lo`` (default: the range's lowest
    batch over ``max_gpus`` workers, at least 1) and ``hi`` (default: its highest batch):
    ``runs_at(b)`` is False when the worker was OOM-killed at local batch ``b`` (exit
    137 / OOMKilled from the engine). Halves from ``hi``, then bisects
    (``flowcon.core.batch_search.largest_fitting``); None when not even ``lo`` fits."""
    rng = spec.batch_range
    if rng is None:
        return None
    top = rng[1] if hi is None else hi
    bottom = max(1, rng[0] // (spec.max_gpus or rng[0])) if lo is None else lo
    return largest_fitting(bottom, max(bottom, top), runs_at)


# the pre-run's request to a job's own probe: "LO:HI", the local batches to search (the
# job's script runs ``flowcon.elastic.largest_batch`` over them and reports the result)
ENV_PROBE_LOCAL_BATCH = "FLOWCON_PROBE_LOCAL_BATCH"


def probe_outcome(
    backend: Backend,
    selector: Mapping[str, str],
    max_seconds: float,
    poll_s: float,
    cancelled: Callable[[], bool] | None = None,
) -> tuple[bool, int | None]:
    """(it fit, the largest local batch the job reported) of one probe run: polls until
    a worker is OOM-killed (False), the job's own probe reported its largest local batch,
    the job printed two steps (it runs at this batch: True) or exited, or ``max_seconds``
    pass (no OOM seen: True)."""
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        if cancelled is not None and cancelled():
            raise ExecutorError("profiling: cancelled")
        ws = sorted(backend.list_workers(selector), key=lambda w: w.node_rank)
        if oom_killed(ws):
            return False, None
        if not ws:
            return True, None
        lines = backend.logs(ws[0])
        reported = reported_local_batch(lines)
        if reported is not None:
            return True, reported
        if len(step_points(lines)) >= 2 or any(w.state == "exited" for w in ws):
            return True, None
    return True, None
