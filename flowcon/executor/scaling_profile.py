"""Profiling by scaling: a stop-free job's throughput curve measured on the running job.

The pre-run (``flowcon.executor.profiling.prerun``) starts the job afresh at each GPU count
and throws that work away; EDL (section 3.3) profiles by scaling the running job instead,
at about a tenth of the cost, and keeps the progress made meanwhile. Here: the job starts
as itself (its own name and checkpoint) at one count, its step rate is read from its
metric lines once the switch settled, then it is rescaled stop-free to the next count:

* **down** when the largest count can be placed at once: start there and scale in one
  count at a time (a scale-in starts nothing, so it is the cheapest move; EDL's order);
* **up** otherwise: start at the smallest count and grow while GPUs are free, stopping
  when more GPUs stop adding throughput (the pre-run's ``min_gain`` rule).

The job keeps running at the last count; the allocator then admits it on the measured
curve and rescales it to its plan. A rescale the runtime cannot do stop-free falls back to
checkpoint-restart inside ``Executor.rescale``, which also keeps the progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from flowcon.executor.backend import Backend, ExecutorError, Worker
from flowcon.executor.profiling import CurvePoints, measure
from flowcon.executor.restart import RescaleResult
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

log = logging.getLogger(__name__)

Placement = dict[str, list[str]]  # node -> GPU ids, in rank order


class Executor(Protocol):
    """What profiling by scaling drives (``flowcon.executor.lifecycle.Executor``)."""

    @property
    def backend(self) -> Backend: ...
    def _selector(self, job: str | None = None) -> dict[str, str]: ...
    def launch(self, spec: JobSpec, placement: Placement) -> list[Worker]: ...
    def rescale(self, spec: JobSpec, placement: Placement) -> RescaleResult: ...


def placement_size(p: Mapping[str, Sequence[str]]) -> int:
    return sum(len(g) for g in p.values())


def shrink_placement(current: Mapping[str, Sequence[str]], n: int) -> Placement:
    """The first ``n`` GPUs of ``current`` in rank order: the store host's GPU (the first)
    stays, so a scale-in to it is stop-free."""
    out: Placement = {}
    left = n
    for node, gpus in current.items():
        if left <= 0:
            break
        take = list(gpus)[:left]
        if take:
            out[node] = take
            left -= len(take)
    return out


def grow_placement(
    current: Mapping[str, Sequence[str]],
    free: Sequence[tuple[str, Sequence[str]]],
    n: int,
) -> Placement | None:
    """``current`` plus free GPUs up to ``n`` in all, from ``current``'s nodes first (the
    nearest), then the others in order; None when too few are free. Every GPU of
    ``current`` stays, so the scale-out is stop-free."""
    out: Placement = {node: list(g) for node, g in current.items()}
    need = n - placement_size(out)
    if need < 0:
        return None
    held = {(node, g) for node, gs in out.items() for g in gs}
    ordered = sorted(free, key=lambda nf: 0 if nf[0] in out else 1)
    for node, gpus in ordered:
        for g in gpus:
            if need == 0:
                break
            if (node, g) in held:
                continue
            out.setdefault(node, []).append(g)
            need -= 1
    return out if need == 0 else None


def profile_direction(counts: Sequence[int], largest_fits: bool) -> list[int]:
    """The counts in the order they are measured: descending when the largest can be
    placed at once (scale-in steps), else ascending."""
    ordered = sorted(set(counts))
    return ordered[::-1] if largest_fits else ordered


def profile_by_scaling(
    executor: Executor,
    spec: JobSpec,
    counts: Sequence[int],
    placement_for: Callable[[int, Placement | None], Placement | None],
    max_seconds: float = 60.0,
    min_points: int = 4,
    poll_s: float = 0.5,
    min_gain: float = 0.05,
    on_point: Callable[[int, float | None], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> tuple[ThroughputProfile, Placement]:
    """Measure ``spec`` at ``counts`` by scaling it while it runs (module docstring).

    ``placement_for(n, current)``: ``n`` GPUs for the job, keeping every GPU of
    ``current`` when it grows (None: not enough free). Returns the profile and the
    placement the job runs on now. On failure or cancel the job's containers are left
    to the caller (``Executor.remove``)."""

    if not counts:
        raise ExecutorError(f"profiling {spec.name}: no GPU count to measure")
    top = placement_for(max(counts), None)
    order = profile_direction(counts, top is not None)
    # the pre-run's stop rule holds going up; going down every count is measured
    curve = CurvePoints(spec.name, min_gain, on_point, cancelled, stop_early=order[0] < order[-1])
    current: Placement | None = None
    selector = executor._selector(spec.name)
    for n in order:
        curve.check_cancelled()
        moved = _move_to(
            executor, spec, n, current, top if n == max(counts) else None, placement_for
        )
        if moved is None:
            if current is None:
                continue
            log.info("profile %s by scaling: no %d GPUs free, stopping", spec.name, n)
            break
        current, since = moved
        rate = measure(
            executor.backend,
            selector,
            max_seconds,
            min_points,
            poll_s,
            cancelled,
            metric=spec.metric,
            since=since,
            skip=1,  # the first line carries the start-up or the switch
            any_exit_ends=False,
        )
        if curve.add(n, rate, " by scaling"):
            break
    profile = curve.profile()
    assert current is not None  # a point was measured: the job was started
    return profile, current


def _move_to(
    executor: Executor,
    spec: JobSpec,
    n: int,
    current: Placement | None,
    ready: Placement | None,
    placement_for: Callable[[int, Placement | None], Placement | None],
) -> tuple[Placement, float] | None:
    """Start ``spec`` on ``n`` GPUs (``ready`` when already found) or rescale it there
    from ``current``; (its placement, when the move began); None: no GPUs for it."""
    if current is None:
        where = ready if ready is not None else placement_for(n, None)
        if where is None:
            return None
        since = time.time()
        executor.launch(spec, where)
        return where, since
    grown = n > placement_size(current)
    where = placement_for(n, current) if grown else shrink_placement(current, n)
    if where is None:
        return None
    since = time.time()
    res = executor.rescale(spec, where)
    if res.mode != "stopfree":
        log.info("profile %s: %d GPUs by %s (%s)", spec.name, n, res.mode, res.fallback)
    return where, since
