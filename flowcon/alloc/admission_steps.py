"""The step functions admission control works on (flowcon/alloc/admission.py): a job's
curve as the levels worth having, a job's plan as runs of equal GPUs over slots (``_Plan``),
and the GPUs reserved per slot over all plans (``_Profile``). A horizon of thousands of
slots has only tens of steps, so progressive filling costs O(steps + levels^2) per job in
plain Python. Pure, no I/O.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

_EPS = 1e-9


@dataclass(frozen=True)
class _Curve:
    """The GPU counts at which the job gets faster (``levels``, ascending), its throughput
    there, and ``by_used[v]``: index of the largest level <= the GPUs left free when ``v``
    are reserved (-1: none); ``thr``: the most GPUs that may be reserved in a slot while it
    still buys ``by_used[0]`` (by_used[v] == by_used[0] for every v in [0, thr])."""

    levels: list[int]
    tps: list[float]
    by_used: list[int]
    thr: int


# (first slot, end slot (exclusive), GPUs > 0, iterations/s at that count)
_Run = tuple[int, int, int, float]


@dataclass(slots=True)
class _Plan:
    start: int  # absolute slot index of the first reserved slot
    runs: list[_Run]
    breaks: list[int]  # absolute slot indices where the reservation changes value
    partial: tuple[tuple[int, float], ...] = ()  # (slot, seconds) for slots shorter than one
    _full: tuple[float, float] | None = field(default=None, repr=False, compare=False)
    _peak: int = field(default=-1, repr=False, compare=False)
    # ``SlotLedger.behind``'s terms while the plan has not started: (curve, overhead, slot,
    # the margin, the whole plan's iterations with the tolerance), for those three
    _behind: tuple[object, float, float, float, float] | None = field(
        default=None, repr=False, compare=False
    )

    def at(self, k: int) -> int:
        for a, b, g, _ in self.runs:
            if k < a:
                return 0
            if k < b:
                return g
        return 0

    def provides(self, k: int, slot: float) -> float:
        """Iterations the reservation delivers from absolute slot ``k`` to its end."""
        runs = self.runs
        if runs and k <= runs[0][0]:  # the whole plan: the same sum for every such k
            full = self._full
            if full is None or full[0] != slot:
                full = self._full = (slot, self._provides(runs[0][0], slot))
            return full[1]
        return self._provides(k, slot)

    def _provides(self, k: int, slot: float) -> float:
        total = 0.0
        for a, b, _, tp in self.runs:
            if b <= k:
                continue
            lo = a if a > k else k
            total += (b - lo) * slot * tp
            for s, w in self.partial:
                if lo <= s < b:
                    total += (w - slot) * tp
        return total

    @property
    def peak(self) -> int:  # runs are never changed once the plan is made: cached
        pk = self._peak
        if pk < 0:
            pk = self._peak = max([g for _, _, g, _ in self.runs], default=0)
        return pk

    def gpus(self) -> tuple[int, ...]:
        if not self.runs:
            return ()
        out = [0] * (self.runs[-1][1] - self.start)
        for a, b, g, _ in self.runs:
            out[a - self.start : b - self.start] = [g] * (b - a)
        return tuple(out)


def _make_plan(start: int, runs: list[_Run], partial: tuple[tuple[int, float], ...]) -> _Plan:
    """Drop empty runs, merge equal neighbours, derive the break points."""
    merged: list[_Run] = []
    for a, b, g, tp in runs:
        if g <= 0 or b <= a:
            continue
        if merged and merged[-1][1] == a and merged[-1][2] == g:
            merged[-1] = (merged[-1][0], b, g, tp)
        else:
            merged.append((a, b, g, tp))
    breaks: list[int] = []
    for a, b, _, _ in merged:
        if not breaks or breaks[-1] != a:
            breaks.append(a)
        breaks.append(b)
    return _Plan(merged[0][0] if merged else start, merged, breaks, partial)


class _Profile:
    """GPUs reserved per slot as a step function: ``vals[i]`` holds on
    [keys[i], keys[i+1]), 0 before keys[0]; the last value holds to infinity.

    ``fits(thr)`` answers whether every value (the 0 before keys[0] included) lies in
    [0, thr], in O(1) where it can: the profile keeps ``hi``, an upper bound of the values
    (None: not known), ``nonneg``, True when no value is negative (False or None: not
    known), and ``exact``, whether both are exact; ``add_runs`` keeps them true and they are
    computed afresh only when the cheap answer is no. ``SlotLedger._fill`` asks it whether
    every slot buys a job its top level (``_Curve.thr``)."""

    __slots__ = ("exact", "hi", "keys", "nonneg", "vals")

    def __init__(self, keys: list[int] | None = None, vals: list[int] | None = None) -> None:
        self.keys: list[int] = keys if keys is not None else []
        self.vals: list[int] = vals if vals is not None else []
        self.hi: int | None = None
        self.nonneg: bool | None = None
        self.exact = False

    def copy(self) -> _Profile:
        other = _Profile(self.keys[:], self.vals[:])
        other.hi, other.nonneg, other.exact = self.hi, self.nonneg, self.exact
        return other

    def fits(self, thr: int) -> bool:
        """Every value, the 0 before keys[0] included, lies in [0, thr]."""
        hi = self.hi
        if hi is not None and self.nonneg and hi <= thr:
            return True
        if hi is None or not self.exact:
            hi = self._measure()
        return bool(self.nonneg) and hi <= thr

    def ceiling(self) -> int | None:
        """The largest value (the 0 before keys[0] included); None: some value is negative."""
        hi = self.hi if self.hi is not None and self.exact else self._measure()
        return hi if self.nonneg else None

    def _measure(self) -> int:
        """``hi`` and ``nonneg`` made exact; returns ``hi``."""
        vals = self.vals
        hi = self.hi = max(0, max(vals, default=0))
        self.nonneg = min(vals, default=0) >= 0
        self.exact = True
        return hi

    def add_all(self, plans: Iterable[tuple[list[_Run], int]], floor: int) -> None:
        """``add_runs(runs, floor, sign)`` for every (runs, sign) in one sweep over the steps;
        equal neighbouring steps come out merged, a leading 0 dropped (the same function in
        fewer steps)."""
        delta: dict[int, int] = {}
        for runs, sign in plans:
            for a, b, g, _ in runs:
                if b > floor:
                    a = a if a > floor else floor
                    delta[a] = delta.get(a, 0) + sign * g
                    delta[b] = delta.get(b, 0) - sign * g
        keys, vals = self.keys, self.vals
        nk: list[int] = []
        nv: list[int] = []
        i, n = 0, len(keys)
        cur = acc = 0  # the profile's value and the sum of the deltas so far
        last = 0  # the value before the first step
        for k in sorted(delta):
            while i < n and keys[i] < k:
                v = vals[i] + acc
                if v != last:
                    nk.append(keys[i])
                    nv.append(v)
                    last = v
                cur = vals[i]
                i += 1
            if i < n and keys[i] == k:
                cur = vals[i]
                i += 1
            acc += delta[k]
            v = cur + acc
            if v != last:
                nk.append(k)
                nv.append(v)
                last = v
        for x in range(i, n):
            v = vals[x] + acc
            if v != last:
                nk.append(keys[x])
                nv.append(v)
                last = v
        self.keys, self.vals = nk, nv
        self._measure()

    def _bound(self, new: list[int], g: int) -> None:
        """Keep ``hi`` and ``nonneg`` true after ``g`` was added to the values ``new``."""
        if g > 0:
            if self.hi is not None:
                m = max(new)
                if m > self.hi:
                    self.hi = m  # exact stays exact: the largest value rose or did not
            if not self.nonneg:
                self.exact = False  # a negative value may have risen to 0 or above
        else:
            self.exact = False  # hi may be above the largest value now: still a bound
            if self.nonneg and min(new) < 0:
                self.nonneg = False

    def add_runs(self, runs: list[_Run], floor: int, sign: int) -> None:
        """``sign`` * GPUs more reserved in the slots of each run (a, b, GPUs, _) of a
        plan, clipped to slots >= floor."""
        keys, vals = self.keys, self.vals
        for a, b, g, _ in runs:
            if b <= floor:
                continue
            if a < floor:
                a = floor
            if a >= b or g == 0:
                continue
            g *= sign
            i = bisect.bisect_left(keys, a)
            if i == len(keys) or keys[i] != a:
                keys.insert(i, a)
                vals.insert(i, vals[i - 1] if i else 0)
            j = bisect.bisect_left(keys, b, i)
            if j == len(keys) or keys[j] != b:
                keys.insert(j, b)
                vals.insert(j, vals[j - 1])
            new = list(map(operator.add, vals[i:j], repeat(g)))
            vals[i:j] = new
            self._bound(new, g)

    def segments(self, a: int, b: int) -> list[tuple[int, int, int]]:
        """(start, end, value) steps covering [a, b)."""
        keys, vals = self.keys, self.vals
        i = bisect.bisect_right(keys, a) - 1
        v = vals[i] if i >= 0 else 0
        i += 1
        cur = a
        out: list[tuple[int, int, int]] = []
        n = len(keys)
        while i < n and keys[i] < b:
            if vals[i] != v:
                out.append((cur, keys[i], v))
                cur, v = keys[i], vals[i]
            i += 1
        out.append((cur, b, v))
        return out

    def forget_before(self, k: int) -> None:
        """Drop the steps before slot ``k`` and merge equal neighbours (keeps it short)."""
        keys, vals = self.keys, self.vals
        i = bisect.bisect_right(keys, k) - 1
        nk: list[int] = []
        nv: list[int] = []
        for x in range(max(i, 0), len(keys)):
            if not nv or vals[x] != nv[-1]:
                nk.append(keys[x])
                nv.append(vals[x])
        self.keys, self.vals = nk, nv
        self.exact = False  # values before k are gone: hi is still a bound, maybe loose
