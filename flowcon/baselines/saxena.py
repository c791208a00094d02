"""Batch-size-aware elastic scaling (Saxena et al., "Effective Elastic Scaling of Deep
Learning Workloads", section III-C/D) and its fixed-batch baselines (section IV-B/D).

The optimizer maximises the sum over jobs of the throughput scaling factor
T_j(b, k) / T_j(b_max, 1) (Eq. 1-3) with the dynamic program of Eq. 4:

    P(j, K) = max_k [ P(j-1, K-k) + max_b T_j(b, k) / T_j(b_max, 1) ],   P(0, .) = 0

over jobs (in the order they were added) x GPU totals x GPU counts per job; every job
gets at least one feasible (GPU count, batch) configuration, infeasible ones never count
(P stays -inf), so P(J, K) = -inf means infeasible. The autoscaler (Fig. 4) adds arrived
jobs one by one, each a new DP row on top of the running jobs' rows (O(K k_max) per trial,
O(J K k_max) when a completion forces a rebuild), and stops at the first infeasible one:
in ``drop`` mode it and the jobs arriving with it are rejected, in ``queue`` mode they
wait, in arrival order, for a later decision. The optimizer re-runs at the decisions the
driver makes (arrivals and completions, on the slot grid: Delta = the slot).

GPU counts are those the job's throughput table measured (powers of two here), at most
``k_max``; the baselines are the same optimizer with one batch per job: its range's
largest (Max-BS), smallest (Min-BS) or one drawn uniformly from its rows, seeded by job
id (Random-BS). A job without a range runs at its own batch only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flowcon.alloc.batch import set_batch
from flowcon.alloc.model import Job
from flowcon.alloc.types import AdmissionDecision, ClusterState

Row = npt.NDArray[np.float64]
MODES = ("drop", "queue")
BATCH_RULES = ("elastic", "max", "min", "random")


@dataclass(frozen=True)
class Option:
    """One way to run a job: ``gpus`` GPUs at global batch ``batch``, worth ``value``
    (its throughput scaling factor)."""

    gpus: int
    batch: int
    value: float


def job_options(job: Job, batches: list[int], total_gpus: int, k_max: int) -> list[Option]:
    """For each feasible GPU count, the best batch among ``batches`` (b_opt(k), Eq. 2;
    ties: the smaller batch), by ascending count. A job without a range: its own curve."""
    lo = max(1, job.min_gpus)
    hi = min(total_gpus, k_max, job.max_gpus if job.max_gpus is not None else total_gpus)
    rng = job.batch_range
    out: list[Option] = []
    if rng is None:
        base = job.curve.at(1) or max(v / k for k, v in job.curve.points.items())
        for k, v in job.curve.points.items():
            if lo <= k <= hi:
                out.append(Option(k, job.batch_size, v / base))
        return out
    base = rng.base_rate()
    if base <= 0:
        return out
    counts = sorted({k for b in batches for k in rng.gpu_counts(b) if lo <= k <= hi})
    for k in counts:
        best: Option | None = None
        for b in batches:
            v = rng.rate(b, k) / base
            if v > 0 and (best is None or v > best.value):
                best = Option(k, b, v)
        if best is not None:
            out.append(best)
    return out


def dp_row(prev: Row, options: list[Option]) -> tuple[Row, npt.NDArray[np.int64]]:
    """Eq. 4 for one more job: ``new[c] = max_i prev[c - k_i] + v_i`` over the job's
    options (-inf where none fits), and the index of the option chosen at each c."""
    size = prev.shape[0]
    if not options:
        return np.full(size, -np.inf), np.full(size, -1, dtype=np.int64)
    cand = np.full((len(options), size), -np.inf)
    for i, o in enumerate(options):
        if o.gpus < size:
            cand[i, o.gpus :] = prev[: size - o.gpus] + o.value
    choice = np.argmax(cand, axis=0)  # ties: the first option, the fewest GPUs
    new = cand[choice, np.arange(size)]
    choice[np.isneginf(new)] = -1
    return new, choice.astype(np.int64)


def solve(options: list[list[Option]], total_gpus: int) -> tuple[float, list[Option]] | None:
    """The optimum of Eq. 3 for jobs with these options on ``total_gpus`` GPUs and each
    job's chosen option; None: infeasible. The reference the policy's incremental rows
    follow (and the tests check against brute force)."""
    rows = [np.zeros(total_gpus + 1)]
    choices: list[npt.NDArray[np.int64]] = []
    for opts in options:
        r, c = dp_row(rows[-1], opts)
        rows.append(r)
        choices.append(c)
    if not np.isfinite(rows[-1][total_gpus]):
        return None
    return float(rows[-1][total_gpus]), backtrack(options, choices, total_gpus)


def backtrack(
    options: list[list[Option]], choices: list[npt.NDArray[np.int64]], total_gpus: int
) -> list[Option]:
    out: list[Option] = []
    c = total_gpus
    for opts, ch in zip(reversed(options), reversed(choices), strict=True):
        o = opts[int(ch[c])]
        out.append(o)
        c -= o.gpus
    out.reverse()
    return out


class SaxenaPolicy:
    """The autoscaler + DP optimizer; ``batch`` picks the batch rule (``elastic``: any batch
    of the range, the paper's method; ``max``/``min``/``random``: the fixed-batch
    baselines), ``mode`` what happens to a job that does not fit (``drop``/``queue``)."""

    def __init__(
        self, batch: str = "elastic", mode: str = "drop", *, k_max: int = 8, seed: int = 0
    ) -> None:
        if batch not in BATCH_RULES:
            raise ValueError(f"batch must be one of {', '.join(BATCH_RULES)}, got {batch!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be drop or queue, got {mode!r}")
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        self.batch, self.mode, self.k_max, self.seed = batch, mode, k_max, seed
        base = "saxena-dp" if batch == "elastic" else f"{batch}-bs"
        self.name = base if mode == "drop" else f"{base}-queue"
        self._order: list[str] = []  # executing jobs, in the order they were added
        self._opts: dict[str, list[Option]] = {}
        self._rows: list[Row] = []  # _rows[i]: P after the first i executing jobs
        self._choices: list[npt.NDArray[np.int64]] = []
        self._pending: list[str] = []  # queue mode: waiting, arrival order
        self._blocked_at: float | None = None  # drop mode: a job of this decision failed
        self.batch_of: dict[str, int] = {}  # the batch each executing job runs at

    # -- what a job may run at --------------------------------------------------------
    def batches(self, job: Job) -> list[int]:
        rng = job.batch_range
        if rng is None:
            return [job.batch_size]
        if self.batch == "elastic":
            return list(rng.batches)
        if self.batch == "max":
            return [rng.batches[-1]]
        if self.batch == "min":
            return [rng.batches[0]]
        return [random.Random(f"{self.seed}:{job.job_id}").choice(rng.batches)]

    def _options(self, job: Job, total: int) -> list[Option]:
        got = self._opts.get(job.job_id)
        if got is None:
            got = self._opts[job.job_id] = job_options(job, self.batches(job), total, self.k_max)
        return got

    # -- the incremental DP ------------------------------------------------------------
    def _sync(self, state: ClusterState) -> None:
        """Forget jobs that left; rebuild the rows after the first one that did."""
        keep = [j for j in self._order if j in state.jobs]
        if keep != self._order:
            first = next(i for i, j in enumerate(self._order) if j not in state.jobs)
            self._order = keep
            del self._rows[first + 1 :]
            del self._choices[first:]
        self._pending = [j for j in self._pending if j in state.jobs]
        if not self._rows or self._rows[0].shape[0] != state.total_gpus + 1:
            self._rows, self._choices = [np.zeros(state.total_gpus + 1)], []
        while len(self._rows) <= len(self._order):
            jid = self._order[len(self._rows) - 1]
            opts = self._options(state.jobs[jid], state.total_gpus)
            r, c = dp_row(self._rows[-1], opts)
            self._rows.append(r)
            self._choices.append(c)

    def _try_add(self, job: Job, state: ClusterState) -> bool:
        """Trial = executing + job: kept when the DP stays feasible."""
        r, c = dp_row(self._rows[-1], self._options(job, state.total_gpus))
        if not np.isfinite(r[state.total_gpus]):
            return False
        self._order.append(job.job_id)
        self._rows.append(r)
        self._choices.append(c)
        return True

    # -- the Policy interface ----------------------------------------------------------
    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        self._sync(state)
        if not self._options(job, state.total_gpus):
            return AdmissionDecision(False, f"no feasible (GPUs <= {self.k_max}, batch) at all")
        if self.mode == "queue":
            if self._pending or not self._try_add(job, state):
                self._pending.append(job.job_id)
            return AdmissionDecision(True, None)
        if self._blocked_at != now and self._try_add(job, state):
            return AdmissionDecision(True, None)
        self._blocked_at = now
        n = len(self._order)
        return AdmissionDecision(
            False,
            f"infeasible: no configuration next to {n} running jobs on {state.total_gpus} GPUs",
        )

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        self._sync(state)
        while self._pending and self._try_add(state.jobs[self._pending[0]], state):
            self._pending.pop(0)
        out = dict.fromkeys(state.jobs, 0)
        if not self._order:
            return out
        opts = [self._opts[j] for j in self._order]
        chosen = backtrack(opts, self._choices, state.total_gpus)
        self.batch_of = {}
        for jid, o in zip(self._order, chosen, strict=True):
            out[jid] = o.gpus
            job = state.jobs[jid]
            if job.batch_range is not None:
                set_batch(job, o.batch)
                self.batch_of[jid] = o.batch
        return out

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        self._opts.pop(job_id, None)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None

    def restore(self, now: float, state: ClusterState) -> None:
        """After a driver restart: the running jobs are re-added in arrival order."""
        self._order, self._rows, self._choices, self._pending = [], [], [], []
        self._sync(state)
        for job in sorted(state.jobs.values(), key=lambda j: (j.submit_time, j.job_id)):
            if self._pending or not self._try_add(job, state):
                self._pending.append(job.job_id)

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

    def set_overhead(self, seconds: float) -> None:
        return None
