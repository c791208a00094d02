"""Building blocks the added baselines share (Themis, Chronus, Pollux, elastic Tiresias,
E-FIFO / E-BF): leases, keeping the running jobs where they are, and growing jobs by
power-of-two steps in order of a gain per extra GPU. Pure, no I/O."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from flowcon.alloc.model import Job
from flowcon.alloc.types import ClusterState

# gain(job, current GPUs, next GPUs) -> benefit of the step (divided by the extra GPUs here)
Gain = Callable[[Job, int, int], float]


class LeaseClock:
    """Rounds on an absolute grid of ``lease`` seconds (lease k = [k*lease, (k+1)*lease)).
    ``new_round(now)`` is True at the first decision of each lease; between rounds the
    lease-based baselines only hand out GPUs that are free (running jobs keep theirs)."""

    def __init__(self, lease: float) -> None:
        if not lease > 0:
            raise ValueError(f"lease must be > 0 seconds, got {lease}")
        self.lease = float(lease)
        self._next: float | None = None

    def new_round(self, now: float) -> bool:
        if self._next is not None and now < self._next - 1e-6:
            return False
        self._next = (math.floor(now / self.lease + 1e-9) + 1) * self.lease
        return True

    def next_round(self, state: ClusterState) -> float | None:
        return self._next if state.jobs else None


def keep_running(state: ClusterState) -> tuple[dict[str, int], int]:
    """The running jobs at their current counts, and the GPUs left free."""
    out = {jid: n for jid, n in state.allocation.items() if n > 0 and jid in state.jobs}
    return out, state.total_gpus - sum(out.values())


def grow(jobs: Sequence[Job], alloc: dict[str, int], free: int, gain: Gain, total: int) -> int:
    """Greedy growth of running jobs (count >= 1) by power-of-two steps: the step with the
    largest positive ``gain / extra GPUs`` first, until no step fits or gains. A job whose
    next step does not fit stops growing. Returns the GPUs left free."""
    heap: list[tuple[float, int, int]] = []

    def push(i: int) -> None:
        j = jobs[i]
        cur = alloc.get(j.job_id, 0)
        if cur <= 0:
            return
        nxt = j.curve.next_faster(cur, j.gpu_cap(total))
        if nxt is None:
            return
        g = gain(j, cur, nxt) / (nxt - cur)
        if g > 0:
            heapq.heappush(heap, (-g, i, nxt))

    for i in range(len(jobs)):
        push(i)
    while heap and free > 0:
        _, i, nxt = heapq.heappop(heap)
        jid = jobs[i].job_id
        step = nxt - alloc[jid]
        if step > free:
            continue
        alloc[jid] = nxt
        free -= step
        push(i)
    return free


def time_saved(job: Job, cur: int, nxt: int) -> float:
    """Seconds of remaining run time saved by going from ``cur`` to ``nxt`` GPUs (the
    marginal gain of Optimus, which Elan's allocation rule refers to)."""
    a, b = job.curve.at(cur), job.curve.at(nxt)
    if a <= 0 or b <= 0:
        return 0.0
    return job.remaining / a - job.remaining / b


def relative_speedup(job: Job, cur: int, nxt: int) -> float:
    """(S(nxt) - S(cur)) / S(cur): EDL's expansion gain."""
    a = job.curve.at(cur)
    return (job.curve.at(nxt) - a) / a if a > 0 else 0.0


def ceil_power_of_two(x: float) -> int:
    """Smallest power of two >= x (1 for x <= 1)."""
    n = 1
    while n < x - 1e-9:
        n <<= 1
    return n
