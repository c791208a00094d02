"""Resource allocation for the next slot (ElasticFlow Algorithm 2).

Every hard-deadline job first gets its minimum satisfactory share a_i(0); the spare GPUs then
go, one power-of-two step at a time, to the job with the highest marginal return (the loop
of a heap, computed as one sort in its pop order, see ``distribute_spare``). The marginal
return of growing a job from ``cur`` to ``nxt`` GPUs is the extra iterations it does in the
next slot per extra GPU, normalised by its single-GPU throughput:

    (min(R, T(nxt)*slot) - min(R, T(cur)*slot)) / (nxt - cur) / (T(1)*slot)

i.e. the GPUs' contribution to cluster efficiency (Eq 8), capped by the remaining work R so
GPUs are not piled onto a job that finishes early in the slot anyway. With concave curves
this greedy choice is the paper's "least extra GPU time" choice: extra GPU time per extra
iteration is the inverse of this ratio.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import cast

from flowcon.alloc.ledger import FinishProbe, SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve, floor_power_of_two


def _next_step(job: Job, cur: int, cap: int) -> int | None:
    """Next power-of-two count above ``cur`` that makes the job faster, if any."""
    if cur <= 0:
        first = max(1, job.min_gpus)
        first = 1 << (first - 1).bit_length()  # round min_gpus up to a power of two
        return first if first <= cap else None
    return job.curve.next_faster(cur, cap)


def _tier(job: Job) -> tuple[int, float, float, str]:
    """Tie-break: hard deadlines first (earliest first), then soft, then best-effort (FIFO)."""
    if job.deadline is None:
        return (2, math.inf, job.submit_time, job.job_id)
    return (1 if job.soft_deadline else 0, job.deadline, job.submit_time, job.job_id)


def marginal_return(job: Job, cur: int, nxt: int, slot: float) -> float:
    return _return(job.curve.at, job.remaining, cur, nxt, slot)


def _return(at: Callable[[int], float], r: float, cur: int, nxt: int, slot: float) -> float:
    t1 = at(1) or at(max(1, cur))
    if t1 <= 0 or nxt <= cur:
        return 0.0
    gain = min(r, at(nxt) * slot) - min(r, at(cur) * slot)
    return gain / (nxt - cur) / (t1 * slot)


# (next step, T(next)*slot, T(cur)*slot, T(1)*slot (T(cur)*slot when T(1) is 0)) or None
_Step = tuple[int, float, float, float] | None


def _steps(curve: ThroughputCurve, cap: int, slot: float) -> dict[int, _Step]:
    """The step table of one curve under one cap and slot, filled lazily by ``_step``;
    kept on the (immutable) curve, so jobs of one model and batch size share it."""
    key = ("alloc-steps", cap, slot)
    table = curve.tables.get(key)
    if table is None:
        table = curve.tables[key] = {}
    return cast("dict[int, _Step]", table)


def _step(
    curve: ThroughputCurve, cap: int, slot: float, cur: int, table: dict[int, _Step]
) -> _Step:
    """The greedy loop's next step from ``cur`` GPUs and the products its return needs."""
    nxt = curve.next_faster(cur, cap)
    out: _Step = None
    if nxt is not None:
        at = curve.at
        t_cur = at(cur)
        t1 = at(1) or t_cur
        if t1 > 0:
            out = (nxt, at(nxt) * slot, t_cur * slot, t1 * slot)
    table[cur] = out
    return out


# a curve's steps from one GPU count on with no cap by the remaining work, as (order key,
# next count) with the order key of ``_job_steps``, and the largest T(next)*slot among them
_Chain = tuple[list[tuple[float, int]], float]


def _chain(
    curve: ThroughputCurve, cap: int, slot: float, cur: int, table: dict[int, _Step]
) -> _Chain:
    """The steps the greedy loop would give a job from ``cur`` GPUs on when its remaining
    work caps no step (R >= T(next)*slot on each: then min(R, x) is x and the return the
    same float); cached on the curve beside its step table."""
    chains = cast("dict[int, _Chain]", curve.tables.setdefault(("alloc-chains", cap, slot), {}))
    got = chains.get(cur)
    if got is None:
        steps: list[tuple[float, int]] = []
        top = 0.0
        c = cur
        while True:
            e = table[c] if c in table else _step(curve, cap, slot, c, table)
            if e is None:
                break
            nxt, tn_s, tc_s, t1_s = e
            top = max(top, tn_s)
            pr = (tn_s - tc_s) / (nxt - c) / t1_s
            if not pr > 0:
                break
            key = -pr if not steps or -pr > steps[-1][0] else steps[-1][0]
            steps.append((key, nxt))
            c = nxt
        got = chains[cur] = (steps, top)
    return got


def _chain_from_zero(
    curve: ThroughputCurve, cap: int, slot: float, first: int | None, table: dict[int, _Step]
) -> _Chain:
    """``_chain`` for a job that holds no GPU: its first step to ``first`` (its minimum
    GPU count as a power of two; None: over its cap), then the curve's steps from there.
    The first return is the loop's with T(0) = 0: min(R, 0.0) is 0.0 whatever R."""
    if first is None:
        return [], 0.0
    chains = cast("dict[int, _Chain]", curve.tables.setdefault(("alloc-chains", cap, slot), {}))
    got = chains.get(-first)  # keys >= 1 are chains from a count, -first from zero
    if got is None:
        at = curve.at
        t1 = at(1) or at(1)  # _return's T(1), T(max(1, cur)) as its fallback
        tn_s = at(first) * slot
        pr = (tn_s - at(0) * slot) / first / (t1 * slot) if t1 > 0 else 0.0
        if not pr > 0:
            got = ([], tn_s)
        else:
            rest, top = _chain(curve, cap, slot, first, table)
            key0 = -pr
            steps = [(key0, first), *((k if k > key0 else key0, n) for k, n in rest)]
            got = (steps, max(tn_s, top))
        chains[-first] = got
    return got


def _job_steps(
    curve: ThroughputCurve, cap: int, slot: float, first: tuple[float, int], r: float,
    table: dict[int, _Step],
) -> list[tuple[float, int]]:  # fmt: skip
    """Every step the greedy loop would give one job, in order, as (order key, next
    count), from its ``first`` step on. The order key of a step is the largest -return
    of it and the job's earlier steps: the heap pops a step whose return is better than
    its predecessor's right after that predecessor (it is then better than everything
    left in the heap), so sorting by these keys (ties: tier, then the count) gives the
    heap's own pop order."""
    key0, cur = first
    steps, top = _chain(curve, cap, slot, cur, table)
    if r >= top:
        return [first, *((k if k > key0 else key0, n) for k, n in steps)]
    out = [first]
    while True:  # the remaining work caps a step: the loop's own formula with R
        e = table[cur] if cur in table else _step(curve, cap, slot, cur, table)
        if e is None:
            break
        nxt, tn_s, tc_s, t1_s = e
        pr = (min(r, tn_s) - min(r, tc_s)) / (nxt - cur) / t1_s
        if not pr > 0:
            break
        last = out[-1][0]
        out.append((-pr if -pr > last else last, nxt))
        cur = nxt
    return out


# what a job's steps from zero GPUs are made of: its curve, GPU limits, tie-break fields,
# the cluster size and the slot
_ZeroSource = tuple[ThroughputCurve, int | None, int, float | None, bool, float, int, float]
# job id -> (its _ZeroSource, its tier, its chain from zero GPUs, that chain's top)
_Zero = tuple[_ZeroSource, tuple[int, float, float, str], list[tuple[float, int]], float]
SpareMemo = dict[str, _Zero]


def _from_zero(job: Job, total_gpus: int, slot: float, memo: SpareMemo) -> _Zero:
    """The memo's entry for a job that holds no GPU, made afresh when anything it is made
    of changed: ``_chain_from_zero``'s chain and ``_tier``, as ``distribute_spare`` makes
    them for such a job."""
    src: _ZeroSource = (
        job.curve, job.max_gpus, job.min_gpus, job.deadline, job.soft_deadline,
        job.submit_time, total_gpus, slot,
    )  # fmt: skip
    m = memo.get(job.job_id)
    if m is None or m[0] != src:
        cap = job.gpu_cap(total_gpus)
        table = _steps(job.curve, cap, slot)
        chain, top = _chain_from_zero(job.curve, cap, slot, _next_step(job, 0, cap), table)
        m = memo[job.job_id] = (src, _tier(job), chain, top)
    return m


def distribute_spare(
    jobs: Sequence[Job],
    base: Mapping[str, int],
    total_gpus: int,
    slot: float,
    memo: SpareMemo | None = None,
) -> dict[str, int]:
    """Algorithm 2's greedy loop: start from ``base`` (minimum shares), hand out the rest.

    Each step's return is ``(min(R, T(nxt)*slot) - min(R, T(cur)*slot)) / (nxt - cur) /
    (T(1)*slot)`` with the products looked up in the curve's step table (``_steps``): the
    same floating-point operations on the same operands as computing them afresh. The
    loop's heap is replaced by one sort of every job's steps in the heap's own pop order
    (``_job_steps``, ``_merge``); ``flowcon.repro.paper_reference.distribute_spare_reference``
    is the loop as written and the tests hold the two equal.

    ``memo`` (kept by the caller between calls): the tier and the chain of a job that holds
    no GPU, reused while everything they are made of is the same (the same values)."""
    ids = [j.job_id for j in jobs]
    held = list(map(base.get, ids, repeat(0)))  # GPUs per job, in the order of ``jobs``
    if len(set(ids)) != len(ids):
        raise ValueError("distribute_spare: job ids must be distinct")
    spare = total_gpus - sum(held)
    if spare < 0:
        raise ValueError(f"minimum shares ({sum(held)}) exceed {total_gpus} GPUs")
    if spare == 0:
        return dict(zip(ids, held, strict=True))  # nothing to hand out (common under load)
    stepping: list[_Stepping] = []
    demand = 0  # GPUs every step of every job would take: the last step's count less cur
    for idx, job in enumerate(jobs):
        cur = held[idx]
        r = job.remaining
        if r <= 0:
            continue
        zero = _from_zero(job, total_gpus, slot, memo) if cur <= 0 and memo is not None else None
        steps = _entries(job, cur, r, total_gpus, slot, zero)
        if steps:
            demand += steps[-1][1] - cur
            stepping.append((_tier(job) if zero is None else zero[1], idx, steps))
    if demand <= spare:
        # every step fits whatever the order: the loop takes them all and each job ends
        # at its last step (a job's steps come in rising counts)
        for _, idx, steps in stepping:
            held[idx] = steps[-1][1]
    else:
        _merge(stepping, held, spare)
    return dict(zip(ids, held, strict=True))


def _entries(
    job: Job, cur: int, r: float, total_gpus: int, slot: float, zero: _Zero | None = None
) -> list[tuple[float, int]]:
    """One job's steps for ``_merge`` (``distribute_spare``) as (order key, next count):
    the cached chain unless its remaining work ``r`` caps a step (the cached lists are
    shared: read, never changed). ``zero``: the memo's entry of a job that holds no GPU
    (``_from_zero``: its tier and its chain from zero GPUs), used instead of looking it up."""
    if zero is not None and r >= zero[3]:
        return zero[2]
    cap = job.gpu_cap(total_gpus)
    curve = job.curve
    table = _steps(curve, cap, slot)
    if zero is None:
        if cur > 0:
            chain, top = _chain(curve, cap, slot, cur, table)
        else:
            chain, top = _chain_from_zero(curve, cap, slot, _next_step(job, 0, cap), table)
        if r >= top:
            return chain
    nxt = _next_step(job, cur, cap)
    if nxt is None:
        return []
    pr = _return(curve.at, r, cur, nxt, slot)
    if not pr > 0:
        return []
    return _job_steps(curve, cap, slot, (-pr, nxt), r, table)


# one job's part of the greedy loop: (its tie-break tier, its index, its steps as (order
# key, the GPU count the step brings it to), in rising counts)
_Stepping = tuple[tuple[int, float, float, str], int, list[tuple[float, int]]]


def _merge(stepping: list[_Stepping], held: list[int], spare: int) -> None:
    """The greedy loop over every job's steps in its pop order (``_job_steps``): by order
    key, ties by the job's tier, a job's own steps in rising counts. The steps are laid out
    job after job in tier order, each job's in rising counts, and then sorted by the key
    alone: the sort is stable, so that is the same order, with float comparisons only.
    A step that does not fit is passed over, as the loop does; the job's later steps,
    larger still, do not fit either (the loop would not even have pushed them)."""
    stepping.sort(key=itemgetter(0))  # tiers are unique (they end with the job id)
    steps: list[tuple[float, int]] = []
    owner: list[int] = []
    for _, idx, mine in stepping:
        steps += mine
        owner += [idx] * len(mine)
    key: Callable[[int], float] = list(map(itemgetter(0), steps)).__getitem__
    for i in sorted(range(len(steps)), key=key):
        idx = owner[i]
        step = steps[i][1] - held[idx]
        if step <= spare:
            held[idx] += step
            spare -= step
            if spare <= 0:
                break


def _gpu_time(job: Job, n: int, now: float, slot: float, probe: FinishProbe) -> float:
    """GPU-seconds the job takes to finish when it runs on ``n`` GPUs in the slot from
    ``now`` and then on its re-filled minimum satisfactory plan (no plan: it keeps ``n``);
    ``probe``: the job's ``SlotLedger.finish_probe``."""
    at = job.curve.at
    r = job.remaining
    rate = at(n)
    if rate <= 0:
        return math.inf
    if rate * slot >= r:
        return n * r / rate
    rest = r - rate * slot
    nxt = (math.floor(now / slot + 1e-9) + 1) * slot
    later = probe(rest, nxt) if job.deadline is not None else None
    if later is None:
        later = n * rest / rate
    return n * slot + later


def paper_rank(
    ledger: SlotLedger,
    job: Job,
    cur: int,
    nxt: int,
    now: float,
    slot: float,
    gpu_time: Callable[[int], float] | None = None,
) -> float:
    """Algorithm 2's priority: GPU time saved (negative: spent) per extra GPU when the job
    gets one more GPU step now, its minimum satisfactory share re-planned afterwards.
    ``gpu_time``: ``_gpu_time`` of this job by GPU count, if the caller keeps its answers."""
    if nxt <= cur:
        return -math.inf
    if gpu_time is None:
        gpu_time = _gpu_times(ledger, job, now, slot)
    before = gpu_time(cur) if cur > 0 else math.inf
    after = gpu_time(nxt)
    if math.isinf(before):
        return math.inf if not math.isinf(after) else 0.0
    return (before - after) / (nxt - cur)


def distribute_spare_paper(
    jobs: Sequence[Job],
    base: Mapping[str, int],
    total_gpus: int,
    slot: float,
    now: float,
    ledger: SlotLedger,
) -> dict[str, int]:
    """Algorithm 2 with the paper's priority (``paper_rank``); same greedy loop, same
    tie-break and the same stop rule as ``distribute_spare``.

    The spare GPUs only shrink, so a step larger than them now is never taken: the loop
    would pop it and pass over it. Such a step is not pushed, and its priority (a re-run
    of progressive filling) is not computed; with no spare GPU nothing is computed.
    ``flowcon.repro.paper_reference.distribute_spare_paper_reference`` is the loop pushing
    every step, and the tests hold the two equal.

    A job's GPU time at a count (``_gpu_time``, one re-run of progressive filling) is
    computed once per call and shared by the two priorities it enters (a step's "after"
    is the next step's "before"); the ledger does not change within the call."""
    alloc = {j.job_id: int(base.get(j.job_id, 0)) for j in jobs}
    spare = total_gpus - sum(alloc.values())
    if spare < 0:
        raise ValueError(f"minimum shares ({sum(alloc.values())}) exceed {total_gpus} GPUs")
    if spare == 0:
        return alloc  # a full cluster: no step fits
    times: dict[int, Callable[[int], float]] = {}

    def rank(idx: int, cur: int, nxt: int) -> float:
        gpu_time = times.get(idx)
        if gpu_time is None:
            gpu_time = times[idx] = _gpu_times(ledger, jobs[idx], now, slot)
        return paper_rank(ledger, jobs[idx], cur, nxt, now, slot, gpu_time)

    heap: list[tuple[float, tuple[int, float, float, str], int, int, int]] = []
    for idx, job in enumerate(jobs):
        if job.remaining <= 0:
            continue
        cap = job.gpu_cap(total_gpus)
        cur = alloc[job.job_id]
        nxt = _next_step(job, cur, cap)
        if nxt is not None and nxt - cur <= spare:
            heap.append((-rank(idx, cur, nxt), _tier(job), idx, nxt, cap))
    heapq.heapify(heap)
    while spare > 0 and heap:
        _, tier, idx, cur, cap = heapq.heappop(heap)
        job = jobs[idx]
        step = cur - alloc[job.job_id]
        if step > spare:
            continue
        alloc[job.job_id] = cur
        spare -= step
        nxt = job.curve.next_faster(cur, cap)
        if nxt is not None and nxt - cur <= spare:
            heapq.heappush(heap, (-rank(idx, cur, nxt), tier, idx, nxt, cap))
    return alloc


def _gpu_times(ledger: SlotLedger, job: Job, now: float, slot: float) -> Callable[[int], float]:
    """``_gpu_time`` of one job by GPU count, each count computed once (one probe)."""
    probe = ledger.finish_probe(job)
    known: dict[int, float] = {}

    def gpu_time(n: int) -> float:
        t = known.get(n)
        if t is None:
            t = known[n] = _gpu_time(job, n, now, slot, probe)
        return t

    return gpu_time


def allocate(jobs: Sequence[Job], now: float, total_gpus: int, slot: float) -> dict[str, int]:
    """GPU counts (powers of two, 0 = paused) for the slot starting at ``now``.

    Minimum satisfactory shares come from Algorithm 1 run from scratch over the hard-deadline
    jobs in deadline order; a job that no longer fits is served like a soft-deadline job.
    """
    ledger = SlotLedger(total_gpus, slot, origin=now)
    by_id = {j.job_id: j for j in jobs}
    for j in sorted(
        (j for j in jobs if j.needs_guarantee and j.remaining > 0),
        key=lambda j: (j.deadline, j.submit_time, j.job_id),
    ):
        ledger.try_admit(j, by_id, now)
    alloc = distribute_spare(jobs, ledger.shares(now), total_gpus, slot)
    assert all(n == 0 or n == floor_power_of_two(n) for n in alloc.values())
    return alloc
