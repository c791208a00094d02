"""Pollux (OSDI'21), goodput-based allocation with batch-size adaptation, as ElasticFlow's
evaluation uses it (section 6: "elastic but not deadline-aware").

Goodput of a job on n GPUs = max over its candidate batch sizes b of
throughput(b, n) x efficiency(b), in iterations of its submitted batch b0 per second:
``T_b(n) * b / b0 * E(b)`` with Pollux's statistical efficiency
``E(b) = (phi + b0) / (phi + b)`` and the gradient noise scale phi a fixed multiple of b0
(``noise_scale`` = phi / b0, 1 by default), so E(b0) = 1 and a larger batch gives more
samples per second but less progress per sample. The candidate batch sizes are the rows
of the job's throughput table from b0 / ``batch_span`` to b0 x ``batch_span`` (2 by
default); without the tables (``tables=None``, as the live allocator builds it) a job has
only its own batch and goodput is its throughput.

Allocation at every decision (arrivals, completions; goodput does not change while a job
runs here, so there are no periodic re-optimisations): every job first gets one GPU
(arrival order while they last), then GPUs go by power-of-two steps to the job whose
speedup (goodput(n) / goodput(1)) grows most per extra GPU, up to the count beyond which
it gets no faster.

In the simulator the batch reaches the job by its curve: a job's ``curve`` is replaced,
when it is admitted, by its goodput curve (the best batch at each GPU count), and put
back when it finishes.

Deviations from Pollux: no online fitting of phi or of the throughput model (the
profiled tables are the model, phi is a constant ratio), no genetic algorithm or
fitness with p = -1 (the greedy speedup steps above stand for it), no restart penalty
in the objective, GPU counts are powers of two, no per-GPU batch limit beyond the
table's measured cells.
"""

from __future__ import annotations

from collections.abc import Mapping

from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.alloc.types import AdmissionDecision, ClusterState
from flowcon.baselines.static import Stateless
from flowcon.baselines.steps import grow

# model -> global batch size -> curve (flowcon.sim.loaders.Tables)
BatchTables = Mapping[str, Mapping[int, ThroughputCurve]]


def efficiency(batch: int, base: int, noise_scale: float) -> float:
    """Pollux's statistical efficiency of ``batch`` relative to ``base``."""
    phi = noise_scale * base
    return (phi + base) / (phi + batch)


def goodput_curve(
    job: Job, tables: BatchTables | None, batch_span: float = 2.0, noise_scale: float = 1.0
) -> ThroughputCurve:
    """Best goodput per GPU count over the job's candidate batch sizes, in iterations of
    its submitted batch per second; its own curve when it has no other candidates."""
    rows = (tables or {}).get(job.model, {})
    b0 = job.batch_size
    if b0 <= 0 or not rows:
        return job.curve
    cands = {b: c for b, c in rows.items() if b0 / batch_span <= b <= b0 * batch_span and b != b0}
    if not cands:
        return job.curve
    counts = sorted(set(job.curve.points).union(*(c.points for c in cands.values())))
    pts: dict[int, float] = {}
    for n in counts:
        best = job.curve.at(n)
        for b, c in cands.items():
            best = max(best, c.at(n) * b / b0 * efficiency(b, b0, noise_scale))
        if best > 0:
            pts[n] = best
    return ThroughputCurve(pts)


def _speedup(job: Job, cur: int, nxt: int) -> float:
    one = job.curve.at(1) or job.curve.at(job.curve.max_useful_gpus)
    return (job.curve.at(nxt) - job.curve.at(cur)) / one if one > 0 else 0.0


class PolluxPolicy(Stateless):
    name = "pollux"

    def __init__(
        self,
        tables: BatchTables | None = None,
        *,
        batch_span: float = 2.0,
        noise_scale: float = 1.0,
    ) -> None:
        if batch_span < 1.0 or noise_scale <= 0.0:
            raise ValueError("batch_span must be >= 1 and noise_scale > 0")
        self.tables = tables
        self.batch_span = batch_span
        self.noise_scale = noise_scale
        self._own: dict[str, tuple[Job, ThroughputCurve]] = {}

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        if self.tables is not None:
            self._own[job.job_id] = (job, job.curve)
            job.curve = goodput_curve(job, self.tables, self.batch_span, self.noise_scale)
        return AdmissionDecision(True, None)

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        own = self._own.pop(job_id, None)
        if own is not None:
            own[0].curve = own[1]

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        total = state.total_gpus
        jobs = sorted(state.jobs.values(), key=lambda j: (j.submit_time, j.job_id))
        alloc: dict[str, int] = {}
        free = total
        for j in jobs:
            first = min((n for n in j.curve.points if n >= 1), default=1)
            n = 1 if first <= 1 else 1 << (first - 1).bit_length()
            alloc[j.job_id] = n if n <= free else 0
            free -= alloc[j.job_id]
        grow(jobs, alloc, free, _speedup, total)
        return alloc

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None
