"""The maths of progressive filling (ElasticFlow Algorithm 1, ``SlotLedger._fill`` in
flowcon/alloc/ledger.py) on step functions (flowcon/alloc/admission_steps.py): the usable
horizon before a deadline, the free GPUs as runs, the seconds each level gets, the
smallest level that covers a job's work, and the reservation held forward from now.
Pure, no I/O.
"""

from __future__ import annotations

import bisect
import math
import operator
from itertools import compress

from flowcon.alloc.admission_steps import _EPS, _Plan, _Profile, _Run

# -- the steps of progressive filling (SlotLedger._fill) -------------------------------------
# (start, end, level index (-1: none), seconds per slot); the first and last slot split off
_Seg = tuple[int, int, int, float]


def _horizon(
    deadline: float, now_k: int, now: float, origin: float, slot: float
) -> tuple[int, float, float, tuple[tuple[int, float], ...]] | None:
    """Slots [now_k, end_k) before the deadline, the seconds usable in the first (``now``
    inside it) and the last (deadline inside it), and the partial slots; None: no slot."""
    end_exact = (deadline - origin) / slot
    end_k = int(math.ceil(end_exact - _EPS))
    if end_k <= now_k:
        return None
    w_last = min(slot, (end_exact - (end_k - 1)) * slot)
    cut = max(0.0, now - (origin + now_k * slot))
    w_first = (w_last if end_k - now_k == 1 else slot) - cut
    partial = ((now_k, w_first),) if end_k - now_k == 1 else ((now_k, w_first), (end_k - 1, w_last))
    return end_k, w_first, w_last, partial


def _free_runs(
    by_used: list[int], used: _Profile, now_k: int, end_k: int
) -> tuple[list[int], list[int]]:
    """Steps of the free profile over [now_k, end_k) merged by the level they buy: run x
    covers [starts[x], starts[x+1]) at level index levs[x]; starts ends with end_k."""
    keys, vals = used.keys, used.vals
    i = bisect.bisect_right(keys, now_k) - 1
    j = bisect.bisect_left(keys, end_k, max(i, 0))
    # by_used is non-increasing in the reserved count, so the steps buy one level when the
    # most and the least reserved step buy the same one: that is one run (the usual case)
    # (negative counts never occur; they would index by_used from its end, so not here)
    vs = vals[i:j] if i >= 0 else vals[:j]
    if i >= 0:
        lo = min(vs)
        if lo >= 0 and by_used[lo] == by_used[max(vs)]:
            return [now_k, end_k], [by_used[lo]]
    elif j == 0 or (min(vs) >= 0 and by_used[0] == by_used[max(vs)]):
        return [now_k, end_k], [by_used[0]]  # 0 reserved before keys[0]
    return _free_runs_steps(by_used, keys, vs, i, j, now_k, end_k)


def _free_runs_steps(
    by_used: list[int], keys: list[int], vs: list[int], i: int, j: int, now_k: int, end_k: int
) -> tuple[list[int], list[int]]:
    """``_free_runs`` step by step (``vs``: the values of keys[i:j], or keys[:j] when the
    horizon starts before the first key, i = -1): every step's level, merged."""
    if i >= 0:
        ks = keys[i:j]
        ks[0] = now_k
        lis = list(map(by_used.__getitem__, vs))
    else:
        ks = [now_k, *keys[:j]]
        lis = [by_used[0], *map(by_used.__getitem__, vs)]
    # keep a step where its level differs from the previous one (C-level loops: this runs
    # once per progressive filling, over every step of the horizon)
    changed = list(map(operator.ne, lis[1:], lis[:-1]))
    starts = [ks[0], *compress(ks[1:], changed), end_k]
    levs = [lis[0], *compress(lis[1:], changed)]
    return starts, levs


def _segments(
    starts: list[int],
    levs: list[int],
    now_k: int,
    end_k: int,
    w_first: float,
    w_last: float,
    slot: float,
) -> list[_Seg]:
    """The runs with their seconds per slot; the first and the last slot split off."""
    segs: list[_Seg] = []
    for x, li in enumerate(levs):
        a, b = starts[x], starts[x + 1]
        if a == now_k:
            segs.append((a, a + 1, li, w_first))
            a += 1
            if a >= b:
                continue
        if b == end_k:
            if b - 1 > a:
                segs.append((a, b - 1, li, slot))
            segs.append((b - 1, b, li, w_last))
        else:
            segs.append((a, b, li, slot))
    return segs


def _level_seconds(segs: list[_Seg], nl: int) -> list[float]:
    """Seconds of each free level over the horizon: sum(x(t) * w(t)) for any cap j."""
    secs = [0.0] * nl
    for a, b, li, w in segs:
        if li >= 0:
            secs[li] += w * (b - a)
    return secs


def _gain(tps: list[float], nz: list[tuple[int, float]], j: int) -> float:
    """Iterations over the horizon with x(t) capped at level ``j`` (line 17's sum); ``nz``:
    (level index, seconds) of the levels with nonzero seconds, in level order."""
    return sum([tps[i if i < j else j] * s for i, s in nz])


def _smallest_level(tps: list[float], secs: list[float], need: float, extra: float) -> int | None:
    """Lines 13-19: the smallest level ``j`` whose gain covers ``need`` plus ``extra``
    seconds at that level (bisection: with extra = 0 the test is monotone in j)."""
    lo, hi = 0, len(tps) - 1
    nz = [(i, s) for i, s in enumerate(secs) if s]
    if len(nz) == 1:  # one level over the whole horizon (the usual case): _gain is one product
        return _smallest_level_one(tps, nz[0][0], nz[0][1], need, extra)
    if _gain(tps, nz, hi) < need + extra * tps[hi]:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if _gain(tps, nz, mid) >= need + extra * tps[mid]:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _smallest_level_one(
    tps: list[float], i0: int, s0: float, need: float, extra: float
) -> int | None:
    """``_smallest_level`` when one level, index ``i0``, has all ``s0`` seconds: the gain at
    cap j is one product, tps[min(i0, j)] * s0."""
    lo, hi = 0, len(tps) - 1
    if tps[i0 if i0 < hi else hi] * s0 < need + extra * tps[hi]:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if tps[i0 if i0 < mid else mid] * s0 >= need + extra * tps[mid]:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _reserve_forward(
    segs: list[_Seg], levels: list[int], tps: list[float], hi: int, target: float
) -> list[_Run]:
    """Where the share is held: x(t) = level min(free, ``hi``) from the first slot on, until
    the iterations reach ``target``; in the last of those slots only the smallest level that
    covers what the earlier ones leave over (the share is minimal also there). The share
    ends as early as the free GPUs allow, so the slack before the deadline lies at its end
    (see "How the core works" in docs/simulator.md)."""
    runs: list[_Run] = []
    acc = 0.0
    for a, b, li, w in segs:
        if li < 0:
            continue
        k = li if li < hi else hi
        per = tps[k] * w
        n = b - a
        if per > 0 and acc + per * n >= target:
            m = min(n, max(1, math.ceil((target - acc) / per)))
            while m > 1 and acc + (m - 1) * per >= target:
                m -= 1
            while m < n and acc + m * per < target:
                m += 1
            if m > 1:
                runs.append((a, a + m - 1, levels[k], tps[k]))
            residual = target - (acc + (m - 1) * per)
            kk = 0  # the first level that covers the residual; k when none below does
            while kk < k and not tps[kk] * w >= residual:
                kk += 1
            runs.append((a + m - 1, a + m, levels[kk], tps[kk]))
            return runs
        runs.append((a, b, levels[k], tps[k]))
        acc += per * n
    return runs  # rounding: every slot (the level check said it suffices)


def _rise(new: _Plan, old: _Plan, floor: int) -> int:
    """The most GPUs ``new`` reserves above ``old`` in one slot from ``floor`` on (0: it
    never reserves more): for each run of ``new``, its GPUs less the fewest ``old`` holds in
    that run's slots (0 where ``old`` leaves a slot of it out)."""
    if new is old:
        return 0
    most = 0
    for a, b, g, _ in new.runs:
        if b <= floor:
            continue
        if a < floor:
            a = floor
        fewest = g
        covered = 0
        for oa, ob, og, _ in old.runs:
            lo = oa if oa > a else a
            hi = ob if ob < b else b
            if lo < hi:
                covered += hi - lo
                if og < fewest:
                    fewest = og
        if covered < b - a:
            fewest = 0
        if g - fewest > most:
            most = g - fewest
    return most
