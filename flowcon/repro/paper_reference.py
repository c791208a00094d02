"""ElasticFlow's ProgressiveFilling (Algorithm 1, section 4.2) slot by slot, as printed.

This is the slow reference for ``SlotLedger._fill`` (flowcon/alloc/ledger.py), which
computes the same minimum satisfactory share on step functions with a bisection over the
GPU cap. It walks every slot for every cap ``j`` (O(G * slots)); only the tests use it.
The line numbers cite the paper's Algorithm 1:

    11: function ProgressiveFilling(i, startTime)
    12:   isSatisfied <- False
    13:   for j from 1 to G do
    14:     for t from D_i to startTime do
    15:       x_i(t) <- min(j, G - sum_{k<i} x_k(t))
    16:       // Check if the job can be satisfied
    17:       if sum_{t=0}^{D_i} T_i(x_i(t)) >= M_i then
    18:         isSatisfied <- True
    19:         Break
    20:   if isSatisfied is True then
    21:     Break
    22:   return isSatisfied

What FlowCon adds to the printed algorithm, the same in both versions:

* x_i(t) is rounded down to the GPU count that is worth having (the smallest count, a power
  of two unless ``power_of_two=False``, reaching the best throughput at most x_i(t)).
* Time is continuous: ``now`` and the deadline may fall inside a slot, so the first and the
  last slot count only their usable seconds, and M_i is iterations, T_i iterations/s.
* ``overhead``: line 17 also asks for 2 * overhead seconds of work at the cap's speed (a
  rescale at the start and one at the end).
* Where the share is held. Lines 13-19 decide whether the job fits and at which cap j;
  as printed, x_i(t) then holds min(j, free) from the slot where the walk back from D_i
  stopped up to D_i: the share waits for the deadline and ends on it. FlowCon holds the
  same cap from startTime forward instead, min(j, free) slot by slot until line 17's sum
  is reached, so the share ends as early as the free GPUs allow and the slack before the
  deadline lies at its end (see "How the core works" in docs/simulator.md). The last
  reserved slot keeps only the smallest level that covers what the earlier slots leave
  over (the share is minimal also there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, powers_of_two

_EPS = 1e-9  # the same slack as the ledger: a deadline on a boundary is that boundary


def _usable(job: Job, cap: int, x: int, power_of_two: bool) -> tuple[int, float]:
    """(GPUs worth using when ``x`` are offered, T_i there): the smallest allowed count up to
    min(x, cap) that reaches the best throughput; (0, 0.0) when none fits."""
    counts = powers_of_two(cap) if power_of_two else range(1, cap + 1)
    best_n, best_t = 0, 0.0
    for n in counts:
        if n > x:
            break
        t = job.curve.at(n)
        if t > best_t * (1.0 + 1e-12):
            best_n, best_t = n, t
    return best_n, best_t


def _seconds(
    job: Job, now: float, now_k: int, end_k: int, origin: float, slot: float
) -> list[float]:
    """Usable seconds of slots now_k .. end_k - 1 (``now`` cuts the first, D_i the last)."""
    assert job.deadline is not None
    n = end_k - now_k
    w_last = min(slot, ((job.deadline - origin) / slot - (end_k - 1)) * slot)
    cut = max(0.0, now - (origin + now_k * slot))
    w = [slot] * n
    w[-1] = w_last
    w[0] = (w_last if n == 1 else slot) - cut
    return w


def progressive_filling_reference(
    job: Job,
    now: float,
    occupied: Sequence[int],
    total_gpus: int,
    slot: float,
    *,
    origin: float = 0.0,
    overhead: float = 0.0,
    power_of_two: bool = True,
) -> list[int] | None:
    """x_i(t) for the slots from the one holding ``now`` to the one holding the deadline,
    or None when the job cannot be satisfied (line 22 returns False).

    ``occupied[t]``: GPUs the earlier-deadline jobs hold in the t-th of those slots
    (sum_{k<i} x_k(t) of line 15); it must cover every slot up to the deadline.
    """
    assert job.deadline is not None
    G = total_gpus
    now_k = int(math.floor((now - origin) / slot + _EPS))
    if job.remaining <= 0:
        return []
    end_k = int(math.ceil((job.deadline - origin) / slot - _EPS))  # D_i: first slot after it
    if end_k <= now_k:
        return None
    n_slots = end_k - now_k
    if len(occupied) < n_slots:
        raise ValueError(f"occupied covers {len(occupied)} slots, the deadline needs {n_slots}")
    w = _seconds(job, now, now_k, end_k, origin, slot)
    cap = job.gpu_cap(G)
    M = job.remaining * (1.0 - _EPS)
    is_satisfied = False  # line 12
    x: list[int] = [0] * n_slots
    target = M
    for j in range(1, G + 1):  # line 13
        _, j_t = _usable(job, cap, j, power_of_two)  # a j between two levels acts as the lower
        target = M + 2 * overhead * j_t
        x = [0] * n_slots
        total = 0.0  # sum_t T_i(x_i(t)) w(t) over the slots filled so far
        for t in range(n_slots - 1, -1, -1):  # line 14: from D_i back to startTime
            free = G - occupied[t]
            x[t], tp = _usable(job, cap, min(j, free), power_of_two)  # line 15
            total += tp * w[t]
            if tp > 0 and total >= target:  # line 17
                is_satisfied = True  # line 18
                break  # line 19
        if is_satisfied:  # line 20
            break  # line 21
    if not is_satisfied:
        return None  # line 22
    # where the share is held: the satisfied cap j, min(j, free) from startTime forward
    # until line 17's sum is reached (FlowCon's placement, see the module docstring)
    x = [0] * n_slots
    total = 0.0
    for t in range(n_slots):
        free = G - occupied[t]
        x[t], tp = _usable(job, cap, min(j, free), power_of_two)
        earlier = total
        total += tp * w[t]
        if tp > 0 and total >= target:
            x[t] = _smallest_covering(job, cap, x[t], w[t], target - earlier, power_of_two)
            break
    return x


def _smallest_covering(
    job: Job, cap: int, x: int, w: float, residual: float, power_of_two: bool
) -> int:
    """The earliest reserved slot: the smallest worthwhile count up to ``x`` whose
    iterations in its ``w`` seconds cover ``residual`` (``x`` itself if none does)."""
    counts = powers_of_two(cap) if power_of_two else range(1, cap + 1)
    for n in counts:
        if n > x:
            break
        u, tp = _usable(job, cap, n, power_of_two)
        if u == n and tp * w >= residual:
            return n
    return x


def distribute_spare_reference(
    jobs: Sequence[Job], base: dict[str, int], total_gpus: int, slot: float
) -> dict[str, int]:
    """Algorithm 2's greedy loop as written, the slow reference for
    ``flowcon.alloc.allocation.distribute_spare`` (which looks the products up in per-curve
    step tables and sorts the steps instead of using a heap when no job's return rises):
    a heap of each job's next power-of-two step, keyed by the marginal return
    ``(min(R, T(nxt)*slot) - min(R, T(cur)*slot)) / (nxt - cur) / (T(1)*slot)``, ties by
    tier (hard deadline, soft, best-effort; then deadline, submission, id); a step that no
    longer fits in the spare GPUs is dropped with the job's later steps."""

    def ret(j: Job, cur: int, nxt: int) -> float | None:
        at = j.curve.at
        t1 = at(1) or at(max(1, cur))
        if t1 <= 0 or nxt <= cur:
            return None
        r = j.remaining
        pr = (min(r, at(nxt) * slot) - min(r, at(cur) * slot)) / (nxt - cur) / (t1 * slot)
        return pr if pr > 0 else None  # a step that adds nothing is not pushed

    return _greedy(jobs, base, total_gpus, ret)


def distribute_spare_paper_reference(
    jobs: Sequence[Job],
    base: dict[str, int],
    total_gpus: int,
    slot: float,
    now: float,
    ledger: SlotLedger,
) -> dict[str, int]:
    """Algorithm 2's greedy loop with the paper's priority as written, the reference for
    ``flowcon.alloc.allocation.distribute_spare_paper`` (which does not push, nor rank, a
    step larger than the spare GPUs): every job's next step is pushed with its priority
    (``paper_rank``: GPU time saved per extra GPU, progressive filling re-run), ties by
    tier; a popped step that no longer fits is passed over."""
    from flowcon.alloc.allocation import paper_rank

    def rank(j: Job, cur: int, nxt: int) -> float:
        return paper_rank(ledger, j, cur, nxt, now, slot)

    return _greedy(jobs, base, total_gpus, rank)


def _greedy(
    jobs: Sequence[Job],
    base: dict[str, int],
    total_gpus: int,
    priority: Callable[[Job, int, int], float | None],
) -> dict[str, int]:
    """The greedy loop both references share: each job's next power-of-two step (from zero
    GPUs: its minimum count rounded up) pushed with ``priority`` (None: not pushed), the
    best popped first, ties by tier; a step that no longer fits is passed over."""
    import heapq

    def tier(j: Job) -> tuple[int, float, float, str]:
        if j.deadline is None:
            return (2, math.inf, j.submit_time, j.job_id)
        return (1 if j.soft_deadline else 0, j.deadline, j.submit_time, j.job_id)

    def push(idx: int, t: tuple[int, float, float, str], cur: int, nxt: int | None) -> None:
        pr = None if nxt is None else priority(jobs[idx], cur, nxt)
        if nxt is not None and pr is not None:
            heapq.heappush(heap, (-pr, t, idx, nxt))

    alloc = {j.job_id: int(base.get(j.job_id, 0)) for j in jobs}
    spare = total_gpus - sum(alloc.values())
    heap: list[tuple[float, tuple[int, float, float, str], int, int]] = []
    for idx, j in enumerate(jobs):
        if j.remaining <= 0:
            continue
        cap = j.gpu_cap(total_gpus)
        cur = alloc[j.job_id]
        if cur <= 0:
            first = 1 << (max(1, j.min_gpus) - 1).bit_length()
            push(idx, tier(j), cur, first if first <= cap else None)
        else:
            push(idx, tier(j), cur, j.curve.next_faster(cur, cap))
    while spare > 0 and heap:
        _, t, idx, n = heapq.heappop(heap)
        j = jobs[idx]
        if n - alloc[j.job_id] > spare:
            continue
        spare -= n - alloc[j.job_id]
        alloc[j.job_id] = n
        push(idx, t, n, j.curve.next_faster(n, j.gpu_cap(total_gpus)))
    return alloc
