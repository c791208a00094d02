"""Elastic versions of the static baselines, from the elastic-training papers.

Elastic Tiresias (EDL, section 5.1, Algorithm 1): Tiresias' 2D-LAS plan (queues by
attained GPU-seconds, FIFO inside a queue, preemptive, requested GPU counts), then

- compaction, when more than ``waiting_threshold`` jobs wait (N = 10 in EDL): each
  waiting job in priority order is started on GPUs freed by scaling in running jobs of
  the lower-priority queues (not queue 0), none below ``min_fraction`` (r = 0.5) of its
  requested count; the waiting job gets the largest power of two between r x its request
  and its request that the free and freeable GPUs allow, and the jobs scaled in are
  those that lose the smallest share of their throughput per GPU given up;
- expansion, when no job waits: idle GPUs go to the running job whose throughput grows
  most relative to its current one ((S(p') - S(p)) / S(p)) per extra GPU.

Deviations from EDL: GPU counts are powers of two (EDL adds one GPU at a time), the
queue thresholds are those of ``tiresias`` here (3,600 / 36,000 GPU-seconds, EDL used
500 / 10,000) so the two compare directly, no starvation promotion back to queue 0 (as in
``tiresias``), and no locality rule for the GPUs handed over (the buddy placer decides).

E-FIFO and E-BF (Elan, section VI.C): each job has ``min_res`` (its ``min_gpus``, at least
its smallest profiled count, as a power of two) and ``max_res`` (the largest count that
still speeds it up, at most its ``max_gpus``).

- admission rule: in arrival order, a waiting job starts when its ``min_res`` fits next to
  the ``min_res`` of the running jobs (those can be scaled in to make room); E-FIFO stops
  at the first job that does not fit, E-BF lets a later job start when it does not delay
  that first job (EASY backfilling: it ends, at ``min_res``, before the first job's
  estimated start, or it fits in what the first job leaves over then);
- allocation rule: every running job ``min_res``, then power-of-two steps to the job with
  the largest marginal gain (run time saved per extra GPU, Optimus' gain) up to
  ``max_res``, while the gain is positive.

Deviations from Elan: the admission rule's second clause ("adding the job will not
increase the average JCT") is replaced by the ``min_res`` test above (starting at
``min_res`` instead of waiting); steps are powers of two, not one worker; batch size and
learning rate follow the GPU count in Elan (hybrid scaling), here the job's iterations
per second come from its throughput table at its fixed batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flowcon.alloc.model import Job, floor_power_of_two
from flowcon.alloc.types import AdmissionDecision, ClusterState
from flowcon.baselines.static import Stateless, TiresiasPolicy, static_gpus
from flowcon.baselines.steps import (
    ceil_power_of_two,
    grow,
    keep_running,
    relative_speedup,
    time_saved,
)


class ElasticTiresiasPolicy(TiresiasPolicy):
    name = "elastic-tiresias"

    def __init__(
        self,
        queue_limits: Sequence[float] = (3600.0, 36000.0),
        *,
        waiting_threshold: int = 10,
        min_fraction: float = 0.5,
    ) -> None:
        super().__init__(queue_limits)
        if not 0 < min_fraction <= 1:
            raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction}")
        self.waiting_threshold = waiting_threshold
        self.min_fraction = min_fraction

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        alloc = super().schedule(now, state)
        total = state.total_gpus
        free = total - sum(alloc.values())
        queue = {j: self._queue(state.attained.get(j, 0.0)) for j in state.jobs}
        order = sorted(state.jobs.values(), key=lambda j: (queue[j.job_id], j.submit_time))
        waiting = [j for j in order if alloc.get(j.job_id, 0) == 0]
        if len(waiting) > self.waiting_threshold:
            for j in waiting:
                free = self._compact(j, alloc, free, queue, state)
        elif not waiting and free > 0:
            running = [j for j in order if alloc[j.job_id] > 0]
            grow(running, alloc, free, relative_speedup, total)
        return alloc

    def _floor(self, job: Job, total: int) -> int:
        return ceil_power_of_two(self.min_fraction * static_gpus(job, total))

    def _compact(
        self, job: Job, alloc: dict[str, int], free: int, queue: dict[str, int], st: ClusterState
    ) -> int:
        """Start ``job`` on free GPUs plus GPUs taken from running lower-queue jobs."""
        total = st.total_gpus
        want, least = static_gpus(job, total), self._floor(job, total)
        donors = [
            d for jid, n in alloc.items()
            if n > 0 and queue[jid] > 0 and n > self._floor(d := st.jobs[jid], total)
        ]  # fmt: skip
        freeable = sum(alloc[d.job_id] - self._floor(d, total) for d in donors)
        size = min(want, floor_power_of_two(free + freeable))
        if size < least:
            return free
        while free < size and donors:  # donors always suffice: halving reaches the floor
            d = min(donors, key=lambda d: (_halving_loss(d, alloc[d.job_id]), d.job_id))
            half = alloc[d.job_id] // 2
            free += alloc[d.job_id] - half
            alloc[d.job_id] = half
            if half <= self._floor(d, total):
                donors.remove(d)
        if free < size:
            return free
        alloc[job.job_id] = size
        return free - size


def _halving_loss(job: Job, n: int) -> float:
    """Share of its throughput a job loses per GPU given up when halved."""
    t = job.curve.at(n)
    return (t - job.curve.at(n // 2)) / t / (n - n // 2) if t > 0 else 0.0


def min_res(job: Job, total: int) -> int:
    """Elan's ``min_res``: the job's ``min_gpus``, at least its smallest profiled count, as
    a power of two no larger than the cluster."""
    first = min(job.curve.points)
    return min(ceil_power_of_two(max(job.min_gpus, first)), floor_power_of_two(total))


def max_res(job: Job, total: int) -> int:
    return max(min_res(job, total), job.gpu_cap(total))


class ElanPolicy(Stateless):
    """E-FIFO (``backfill=False``) and E-BF (``backfill=True``)."""

    def __init__(self, backfill: bool = False) -> None:
        self.backfill = backfill
        self.name = "e-bf" if backfill else "e-fifo"

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return AdmissionDecision(True, None)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        total = state.total_gpus
        running, _ = keep_running(state)
        room = total - sum(min_res(state.jobs[j], total) for j in running)
        waiting = sorted(
            (j for j in state.jobs.values() if j.job_id not in running),
            key=lambda j: (j.submit_time, j.job_id),
        )
        start: list[Job] = []
        for i, j in enumerate(waiting):
            m = min_res(j, total)
            if m <= room:
                start.append(j)
                room -= m
            elif not self.backfill:
                break
            else:
                start += self._backfill(now, state, start, waiting[i], waiting[i + 1 :], room)
                break
        jobs = [state.jobs[j] for j in running] + start
        jobs.sort(key=lambda j: (j.submit_time, j.job_id))
        alloc = {j.job_id: min_res(j, total) for j in jobs}
        grow(jobs, alloc, total - sum(alloc.values()), time_saved, total)
        return alloc

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None

    def _backfill(
        self,
        now: float,
        state: ClusterState,
        started: list[Job],
        head: Job,
        rest: list[Job],
        room: int,
    ) -> list[Job]:
        """EASY backfilling behind ``head``: its start time is when enough running jobs
        (at their current rates; those ``started`` in this decision at ``min_res``) have
        ended for its ``min_res``; a later job starts now if it fits and ends before then
        at ``min_res``, or fits in the GPUs ``head`` leaves over then."""
        total = state.total_gpus
        need = min_res(head, total)
        sizes = {jid: n for jid, n in state.allocation.items() if n > 0 and jid in state.jobs}
        sizes.update({j.job_id: min_res(j, total) for j in started})
        ends = sorted(
            (now + j.remaining / r, min_res(j, total))
            for jid, n in sizes.items()
            for j in [state.jobs[jid]]
            if (r := j.curve.at(n)) > 0
        )
        shadow, avail = math.inf, room
        for t, m in ends:
            avail += m
            if avail >= need:
                shadow = t
                break
        extra = avail - need if shadow < math.inf else 0
        out: list[Job] = []
        for j in rest:
            m = min_res(j, total)
            if m > room:
                continue
            rate = j.curve.at(m)
            if rate > 0 and now + j.remaining / rate <= shadow:
                out.append(j)
                room -= m
            elif m <= extra:
                out.append(j)
                room -= m
                extra -= m
        return out
