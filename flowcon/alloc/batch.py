"""Batch-size ranges of jobs and T(b, k), the throughput at global batch ``b`` on ``k`` GPUs
(Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads", section III-B).

Pure data, no I/O. The range itself (``BatchRange``) is part of the job model
(flowcon/alloc/model.py); here: building ranges, the curves derived from them and the batch
a job runs at. The throughput tables give iterations per second per (batch, GPU count);
a job that may run at any batch of its range counts its work in samples (iterations x the
batch it was submitted with), so a batch change keeps the work left. ``equivalent(b)``
expresses the speed at batch ``b`` in iterations *of the submitted batch* per second, the
unit ``Job.iterations`` and the simulator's progress keep: switching a job's curve to it is
all a batch change takes.
"""

from __future__ import annotations

from collections.abc import Mapping

from flowcon.alloc.model import BatchRange, Job, ThroughputCurve, powers_of_two

# model -> global batch size -> curve (flowcon.sim.loaders.Tables)
Tables = Mapping[str, Mapping[int, ThroughputCurve]]


def throughput(tables: Tables, model: str, batch: int, gpus: int) -> float:
    """T(b, k): samples per second of ``model`` at global batch ``batch`` on ``gpus`` GPUs,
    from the measured cell of its throughput table; 0.0 where the table has no such row or
    cell (not measured = not runnable)."""
    row = tables.get(model, {}).get(batch)
    if row is None:
        return 0.0
    return row.points.get(gpus, 0.0) * batch


def envelope(brange: BatchRange) -> ThroughputCurve:
    """The best the range reaches at each GPU count, in submitted-batch iterations per
    second: max over feasible batches b of T(b, k) / submitted. A job whose batch follows
    its GPU count (``best_batch``) runs at exactly this curve."""
    got = brange._equiv.get(0)  # key 0: no batch is 0, the envelope's slot in the cache
    if got is None:
        pts: dict[int, float] = {}
        for b in brange.batches:
            for k in brange.gpu_counts(b):
                pts[k] = max(pts.get(k, 0.0), brange.rate(b, k) / brange.submitted)
        got = brange._equiv[0] = ThroughputCurve(pts)
    return got


def best_batch(brange: BatchRange, gpus: int) -> int:
    """The batch of the range with the highest samples/s on ``gpus`` GPUs (ties: the
    smaller batch); the submitted batch where none is feasible there."""
    best, rate = brange.submitted, 0.0
    for b in brange.batches:
        r = brange.rate(b, gpus)
        if r > rate:
            best, rate = b, r
    return best


def make_range(
    rows: Mapping[int, ThroughputCurve],
    low: int,
    high: int,
    submitted: int,
    max_per_gpu: int | None = None,
) -> BatchRange:
    """The range [low, high] over the table ``rows`` of the job's model."""
    curves = {b: c for b, c in rows.items() if low <= b <= high}
    return BatchRange(low, high, submitted, curves, max_per_gpu)


# the rule for traces without a range (the published ElasticFlow traces): from half to twice
# the job's batch size, limited to the rows of its model's throughput table
RANGE_FACTOR = 2


def default_range(rows: Mapping[int, ThroughputCurve], batch: int) -> BatchRange:
    """``[batch / RANGE_FACTOR, batch * RANGE_FACTOR]`` narrowed to the table rows in it
    (the A100 tables have 2-3 rows per model: e.g. resnet50 at 128 gets 64..256)."""
    inside = [b for b in rows if batch // RANGE_FACTOR <= b <= batch * RANGE_FACTOR]
    return make_range(rows, min(inside), max(inside), batch)


def with_default_ranges(jobs: list[Job], tables: Tables) -> list[Job]:
    """Give every job without a range ``default_range`` of its table rows (in place)."""
    for job in jobs:
        rows = tables.get(job.model)
        if job.batch_range is None and rows and job.batch_size in rows:
            job.batch_range = default_range(rows, job.batch_size)
    return jobs


def set_batch(job: Job, batch: int) -> None:
    """Run ``job`` at ``batch`` from now on: its curve becomes that batch's equivalent."""
    if job.batch_range is None:
        raise ValueError(f"job {job.job_id} has no batch-size range")
    job.curve = job.batch_range.equivalent(batch)


def reset_batch(job: Job) -> None:
    """Back to the submitted batch (a new simulation run starts from it)."""
    if job.batch_range is not None:
        job.curve = job.batch_range.equivalent(job.batch_range.submitted)


def hybrid_batch(submitted: int, submitted_gpus: int, low: int, high: int, gpus: int) -> int:
    """The global batch for ``gpus`` GPUs of a job submitted at global batch ``submitted``
    on ``submitted_gpus`` GPUs with the range [``low``, ``high``]: the live allocator's
    rule (Elan, shared/papers/elan.txt, section III).

    Elan's Algorithm 1 prefers weak scaling when GPUs are added (it keeps the per-GPU batch,
    because throughput grows linearly that way) and bounds what the batch does to the
    model; without the strong-scaling optimum ``N_opt`` of line 9 (the live profile has one
    batch only) the rule here is its weak-scaling line 15 within the job's range: the
    per-GPU batch of submission (``submitted / submitted_gpus``) times ``gpus``, never
    above ``high`` nor below ``low`` (so never below the submitted batch at or above
    ``submitted_gpus``), and a multiple of ``gpus`` where the range holds one (equal
    shares), else at least ``gpus`` (every GPU gets a sample) when the range allows it.
    A range that does not reach ``gpus`` gives ``high``; the caller decides whether such a
    placement can run (``Executor.rescale`` refuses it).
    """
    if min(submitted, submitted_gpus, low, gpus) < 1 or high < low:
        raise ValueError(
            f"need positive batches and GPU counts and low <= high, got submitted={submitted} "
            f"on {submitted_gpus} GPUs, range [{low}, {high}], gpus={gpus}"
        )
    per_gpu = max(1, submitted // submitted_gpus)
    want = min(high, max(low, per_gpu * gpus))
    if want % gpus == 0:
        return want
    down = want - want % gpus
    if down >= max(low, gpus):
        return down
    up = down + gpus
    if up <= high:
        return up
    return min(high, max(want, gpus))


# -- the live allocator's range: measured rows plus the weak-scaling rule --------------


def model_batch(
    submitted: int,
    submitted_gpus: int,
    low: int,
    high: int,
    gpus: int,
    max_per_gpu: int | None = None,
) -> int:
    """``hybrid_batch`` bounded by memory: the weak-scaling batch on ``gpus`` GPUs, never
    above ``max_per_gpu`` samples per GPU (the largest local batch that fits) when the range
    still allows it."""
    top = high if max_per_gpu is None else min(high, max(low, max_per_gpu * gpus))
    return hybrid_batch(submitted, submitted_gpus, low, top, gpus)


def live_range(
    curve: ThroughputCurve,
    submitted: int,
    submitted_gpus: int,
    low: int,
    high: int,
    rows: Mapping[int, Mapping[int, float]] | None = None,
    max_per_gpu: int | None = None,
    counts: tuple[int, ...] = (),
    base: ThroughputCurve | None = None,
) -> BatchRange:
    """The batch range of a live job: what its plan and its containers run at.

    ``curve``: the job's speed in iterations of the submitted batch per second per GPU
    count (the profile corrected by measurements); ``base``: the profile alone (default:
    ``curve``); ``rows``: its speed at other global batches the pre-run measured (batch ->
    GPU count -> iterations of the submitted batch per second, samples/s over
    ``submitted``: the unit a ranged job reports its progress in).

    At each GPU count k of the curve (and the powers of two up to its largest, and
    ``counts``) the candidates are the batches the pre-run measured at k and the
    weak-scaling batch ``model_batch`` (at the samples/s ``base`` gives at k: a batch
    change that was not measured is assumed to move no samples/s, the conservative side),
    those that split over k and fit ``max_per_gpu``; the one with the most samples/s
    (ties: the smaller) is the batch of k, and the range holds that one cell at k. The
    choice depends on the pre-run only, so the closed loop never moves a running job's
    batch under it; the cell's speed is the curve's where the job was measured at k (it
    ran at that batch there) or where the batch is the weak-scaling one, else the
    pre-run's. ``best_batch`` of the range is then the batch both the policy plans with
    and the executor runs, ``envelope`` its speed."""
    base = curve if base is None else base
    measured: dict[int, dict[int, float]] = {}  # batch -> k -> samples/s, from the pre-run
    for b, row in (rows or {}).items():
        if low <= b <= high:
            for k, v in row.items():
                if v > 0 and k >= 1:
                    measured.setdefault(int(b), {})[int(k)] = float(v) * submitted
    top = max(max(curve.points), *counts) if counts else max(curve.points)
    ks = sorted(set(curve.points) | set(base.points) | set(powers_of_two(top)) | set(counts))
    cells: dict[int, dict[int, float]] = {}  # batch -> k -> its own iterations/s
    for k in ks:
        cand = {b: row[k] for b, row in measured.items() if k in row}
        weak = model_batch(submitted, submitted_gpus, low, high, k, max_per_gpu)
        if weak not in cand and base.at(k) > 0:
            cand[weak] = base.at(k) * submitted
        cand = {
            b: r
            for b, r in cand.items()
            if b >= k and (max_per_gpu is None or -(-b // k) <= max_per_gpu)
        }
        if not cand:
            continue
        batch = max(sorted(cand), key=lambda b: cand[b])  # first of the best: the smallest
        if k in curve.measured or k not in measured.get(batch, {}):
            rate = curve.at(k) * submitted  # the closed loop's (or the corrected profile's)
        else:
            rate = cand[batch]
        if rate > 0:
            cells.setdefault(batch, {})[k] = rate / batch
    if submitted not in cells:
        # the range needs a row of the submitted batch: a placeholder cell it cannot run
        # at (more GPUs than samples), so it is never picked nor in the envelope
        cells[submitted] = {submitted + 1: 1.0}
    curves = {b: ThroughputCurve(pts, frozenset(pts)) for b, pts in cells.items()}
    return BatchRange(low, high, submitted, curves, max_per_gpu)


def speed_at(brange: BatchRange, gpus: int) -> float:
    """Iterations of the submitted batch per second on ``gpus`` GPUs when the job runs at
    ``best_batch(brange, gpus)``: that batch's samples/s over the submitted batch (the
    envelope's conservative lookup where no batch is feasible at ``gpus``)."""
    rate = brange.rate(best_batch(brange, gpus), gpus)
    return rate / brange.submitted if rate > 0 else envelope(brange).at(gpus)
