"""ElasticFlow as the published simulator runs it (pkusys/ElasticFlow, its
``ef-accessctrl`` schedule), for ``flowcon simulate --world published --policy
elasticflow-published``: its event loop, planner and spare-GPU rule re-implemented from a
reading of its code (Apache-2.0; no code copied), quirks included, so that its published
ratios can be reproduced and our ElasticFlow compared with it in the same world.

Its **planner** (``plan``) fills one job's minimum satisfactory share over *periods*: the
times where the cluster's planned free GPUs change (``free``: time -> free GPUs, a step
function). For the smallest GPU level first and then each larger one, the periods before
the job's slot-aligned deadline are walked back from the deadline at that level (or the
largest level that the period's free GPUs allow) until the work fits; the job then holds
that level from that period on and the previous level before it, from now, and ends in
the slot where its work is done. A job that fits at no level is planned past its
deadline. Its end is ``ceil``-ed to a whole second (``real_end``) and aligned to the
slot grid that starts now (``end``). After each plan the free map is merged (a period
whose free GPUs equal the previous one's disappears).

Its **loop**, at each event (arrivals, planned ends, one scale event: the earliest point
where any job's planned GPUs change):

1. every job runs since the last event at its current GPUs, less the overhead charged at
   the last event; a job that would finish before its planned end ends now;
2. jobs whose end event this is end if they were placed at the last event (a job its
   plan gave no GPUs then runs on to a later end event): they meet their deadline when
   their last plan's ``real_end`` is not after it (whatever work is left);
3. arrivals: every admitted job and the arrivals are re-planned from scratch in deadline
   order; if any plan misses its deadline, every arrival is declined and the admitted jobs
   are re-planned alone;
4. admitted jobs whose plan gives them GPUs now start (and count as accepted); spare GPUs
   go one GPU level at a time to the job whose re-plan at one more level saves the most
   GPU-time per added GPU (its ``allocate_free_gpus``; a waiting job first);
5. every running job is charged an overhead, added to its planned end (its end event
   moves): 2 s if the GPU ranks it gets in that simulator's layout were used since the
   last periodic restart, else 2 + 2 (log2 n + 1) s, plus 27 s at every 60th event (7 s
   and 47 s on 256+ GPUs; ``World.event_charges``);
6. the next event: one within a slot (60 s) of this one moves to this one + 60 s and
   takes in every event up to it. A job whose end event was moved this way keeps it:
   when its planned end later moves, the event is no longer found at its old time, and
   the job ends at the moved event even if its new plan is later.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from flowcon.alloc.model import Job, Topology
from flowcon.repro.published_baselines import Event, arrival_events, merge_near
from flowcon.repro.published_policies import ef_max_gpu
from flowcon.sim.engine import JobResult, SimResult
from flowcon.sim.published_layout import RankKey, published_rank_keys
from flowcon.sim.world import SLOT, published_world

BIG = 2**63 - 1  # its sys.maxsize: a waiting job's priority for its first GPU level

Free = dict[float, int]  # planned free GPUs from each time on (sorted by time)
Alloc = dict[float, int]  # a job's planned GPUs from each time on (sorted by time)


class PlanError(ValueError):
    """A state the published simulator asserts never happens: it would stop there, and
    so does this reproduction (the CLI reports it as an error)."""


def align(start: float, t: float, unit: float = SLOT) -> float:
    """``t`` rounded up to the grid of ``unit`` that starts at ``start``."""
    n = (t - start) // unit
    if (t - start) % unit > 0:
        n += 1
    return start + n * unit


def merged(d: dict[float, int]) -> dict[float, int]:
    """``d`` without the entries whose value equals the previous entry's."""
    out: dict[float, int] = {}
    last: int | None = None
    for k, v in d.items():
        if v != last:
            out[k] = v
            last = v
    return out


def gpu_time(alloc: Alloc, end: float) -> float:
    """GPU-seconds of ``alloc`` until ``end``."""
    total = 0.0
    last_t: float | None = None
    last_n = 0
    for t, n in alloc.items():
        if last_t is not None:
            total += last_n * (t - last_t)
        last_t, last_n = t, n
    assert last_t is not None
    return total + last_n * (end - last_t)


_FITS: dict[tuple[tuple[int, ...], int], list[int]] = {}


def _fits_table(levels: tuple[int, ...], total: int) -> list[int]:
    key = (levels, total)
    t = _FITS.get(key)
    if t is None:
        t = _FITS[key] = [0] * (total + 1)
        for f in range(total + 1):
            for lv in levels:
                if lv > f:
                    break
                t[f] = lv
    return t


@dataclass(eq=False)
class EJob:
    """One job's state in the published loop."""

    job: Job
    ddl: float
    max_gpu: int
    levels: tuple[int, ...]  # its profiled GPU counts up to max_gpu, ascending
    tp: dict[int, float]  # iterations per second at each level
    iter_left: float
    num_gpu: int = 0
    allocations: Alloc = field(default_factory=dict)
    end_time: float = 0.0
    real_end_time: float | None = None
    old_end_time: float | None = None
    overhead: float = 0.0
    placed: bool = False  # its "node_set": placed at the last event (only then can it end)
    pending: bool = False
    start: float | None = None
    finish: float | None = None
    declined: str | None = None
    next_level: int = 0
    marginal: float = 0.0
    _fits: list[int] | None = None

    @classmethod
    def of(cls, job: Job) -> EJob:
        if job.deadline is None:
            raise ValueError(f"job {job.job_id}: the published ElasticFlow needs a deadline")
        cap = ef_max_gpu(job)
        levels = tuple(n for n in job.curve.points if n <= cap)
        if not levels:
            raise ValueError(f"job {job.job_id}: no profiled GPU count up to {cap}")
        return cls(job, job.deadline, cap, levels, dict(job.curve.points), float(job.remaining))

    def next_level_of(self, n: int) -> int:
        """The level after ``n`` (the first level for 0); ``n`` itself at the top."""
        if n == 0:
            return self.levels[0]
        for i, lv in enumerate(self.levels):
            if lv == n:
                return self.levels[i + 1] if i + 1 < len(self.levels) else n
        return n

    def fits_table(self, total: int) -> list[int]:
        """``fits[f]``: the largest level that ``f`` free GPUs take (0: none), for
        ``f`` = 0 .. ``total`` (its ``get_last_level(f + 1)``)."""
        t = self._fits
        if t is None or len(t) != total + 1:
            t = self._fits = _fits_table(self.levels, total)
        return t


@dataclass
class Plan:
    ok: bool  # its real end is not after its deadline
    alloc: Alloc
    free: Free
    end: float  # slot-aligned
    real_end: float


def _sorted(d: dict[float, int]) -> dict[float, int]:
    keys = list(d)
    if keys == sorted(keys):
        return d
    return dict(sorted(d.items()))


def plan(
    ej: EJob, start: float, free: Free, total: int, assign: int | None = None,
    want_free: bool = True,
) -> Plan:  # fmt: skip
    """One job's plan from ``start`` on the free map ``free`` (not changed); ``assign``:
    the level it is tried at now (the spare-GPU rule), else its minimum satisfactory
    share (see module). ``want_free=False``: the plan's free map is left empty (a
    price, not a commitment)."""
    return _Planner(ej, start, free, total, want_free).run(assign)


class _Planner:
    """One run of its ``ef_sim_allocation``: its phases as methods over one state (the
    published function keeps one set of variables through all of them)."""

    def __init__(self, ej: EJob, start: float, free: Free, total: int, want_free: bool) -> None:
        if ej.iter_left <= 0:
            raise PlanError(f"job {ej.job.job_id}: planned with no work left")
        self.ej, self.start, self.free, self.total = ej, start, free, total
        self.want_free = want_free
        self.ddl, self.tp, self.fits = ej.ddl, ej.tp, ej.fits_table(total)
        self.iter_left = ej.iter_left
        self.event_time = start
        self.alloc: Alloc = {start: 0}
        self.new = dict(free)
        self.last_event_gpu: int | None = None
        self.aligned_ddl = align(start, ej.ddl)
        if self.aligned_ddl not in self.new and self.aligned_ddl >= start:
            keys = list(self.new)
            i = bisect_left(keys, self.aligned_ddl) - 1
            if i < 0:
                raise self._fail("no free count before its deadline")
            self.last_event_gpu = self.new[keys[i]]
            self.new[self.aligned_ddl] = self.last_event_gpu
            self.new = _sorted(self.new)

    def _fail(self, why: str) -> PlanError:
        return PlanError(f"job {self.ej.job.job_id}: {why}")

    def done(self, end: float, real_end: float) -> Plan:
        if min(self.new.values()) < 0:  # it asserts this after every subtraction
            raise self._fail("negative free GPUs")
        f = merged(_sorted(self.new)) if self.want_free else {}
        return Plan(real_end <= self.ddl, merged(_sorted(self.alloc)), f, end, real_end)

    def run(self, assign: int | None) -> Plan:
        if assign is not None:
            p = self.assigned(assign)
            if p is not None:
                return p
        p, last_quota = self.min_share()
        if p is not None:
            return p
        self.until_deadline(last_quota)
        return self.after_deadline(assign)

    def assigned(self, quota: int) -> Plan | None:
        """``quota`` GPUs in the first period: the plan if the work is done in it."""
        free, new, t0 = self.free, self.new, self.event_time
        available = new[self.start]
        if quota > available:
            raise self._fail(f"{quota} GPUs assigned, {available} free")
        future = None
        for t in free:
            if t < t0:
                available = free[t]
                del new[t]
                continue
            if t == t0:
                available = free[t]
                continue
            future = t
            break
        if future is None:
            future = self.aligned_ddl
        self.alloc[t0] = quota
        real_end = math.ceil(t0 + self.iter_left / self.tp[quota])
        end = align(self.start, real_end)
        if future >= end and self.ddl >= real_end:
            return self._done_in_first(quota, available, end, real_end)
        duration = self.ddl - t0 if future == self.aligned_ddl else future - t0
        self.iter_left -= duration * self.tp[quota]
        new[t0] -= quota
        if new[t0] < 0:
            raise self._fail("negative free GPUs")
        self.event_time = future
        self.alloc[future] = 0
        return None

    def _done_in_first(self, quota: int, available: int, end: float, real_end: float) -> Plan:
        free, new, t0 = self.free, self.new, self.event_time
        for t in free:
            if t0 <= t < end:
                self.last_event_gpu = new[t]
                new[t] -= quota
                if new[t] < 0:
                    raise self._fail("negative free GPUs")
        if t0 != end:
            new[t0] = available - quota
        if end not in free:
            assert self.last_event_gpu is not None
            new[end] = self.last_event_gpu
        return self.done(end, real_end)

    def min_share(self) -> tuple[Plan | None, tuple[int, int]]:
        """The smallest level that fits, walked back from the deadline period by period;
        else None and the last two levels tried."""
        ej, new, alloc = self.ej, self.new, self.alloc
        aligned_ddl, t0, ddl = self.aligned_ddl, self.event_time, self.ddl
        fits, tp, iter_left = self.fits, self.tp, self.iter_left
        quota = ej.next_level_of(0)
        last_quota = last_last_quota = 0
        if quota <= self.total and quota <= ej.max_gpu:
            for ps in new:
                if ps < aligned_ddl and ps not in alloc:
                    alloc[ps] = 0
        back = list(reversed(new))  # period starts, latest first
        while quota <= self.total and quota <= ej.max_gpu:
            period_end = aligned_ddl
            acc = 0.0
            for ps in back:
                if ps >= aligned_ddl:
                    continue
                if ps < t0:
                    break
                v = new[ps]
                n = quota if v >= quota else fits[v]
                if n == 0:
                    period_end = ps
                    continue
                duration = ddl - ps if period_end == aligned_ddl else period_end - ps
                acc += duration * tp[n]
                if acc >= iter_left:
                    return self.forward(ps, quota, last_quota), (0, 0)
                period_end = ps
            last_last_quota, last_quota = last_quota, quota
            quota = ej.next_level_of(quota)
            if quota == last_quota:
                break
        return None, (last_quota, last_last_quota)

    def _points_to_deadline(self) -> list[float]:
        """The free map's points from now (the first period's end, when assigned) to the
        aligned deadline, that one included."""
        return [t for t in self.new if self.event_time <= t <= self.aligned_ddl]

    def _level(self, t: float, point: float, quota: int, before: int) -> int:
        q = quota if t >= point else before
        f = self.fits[self.new[t]]
        return q if q <= f else f

    def forward(self, point: float, quota: int, before: int) -> Plan:
        """The plan once ``quota`` fits from period ``point`` on: ``before`` until it,
        ``quota`` from it, until the slot where the work is done."""
        new, alloc, tp = self.new, self.alloc, self.tp
        lat: float | None = None
        la = 0
        end: float | None = None
        real_end = 0.0
        for t in self._points_to_deadline():
            if lat is None:
                lat, la = t, self._level(t, point, quota, before)
                continue
            alloc[lat] = la
            new[lat] -= la
            if la == 0:
                lat, la = t, self._level(t, point, quota, before)
                continue
            duration = self.ddl - lat if t == self.aligned_ddl else t - lat
            its = duration * tp[la]
            if lat < point:
                if its >= self.iter_left:
                    raise self._fail("done before its share starts")
                self.iter_left -= its
            elif its < self.iter_left:
                self.iter_left -= its
            else:
                real_left = math.ceil(self.iter_left / tp[la])
                end = lat + align(0, real_left)
                real_end = lat + real_left
                if end > t:
                    raise self._fail("ends after its period")
                break
            lat, la = t, self._level(t, point, quota, before)
        if end is None:
            assert lat is not None
            end, real_end = self._last_period(lat, la)
        return self._close(end, real_end)

    def _close(self, end: float, real_end: float) -> Plan:
        """Its GPUs come back at ``end``: the free count of the last point before it
        (not before now; all GPUs: none)."""
        last = self.total
        keys = list(self.free)
        i = bisect_left(keys, end) - 1
        if i >= 0 and keys[i] >= self.event_time:
            last = self.free[keys[i]]
        if end not in self.free:
            self.new[end] = last
        return self.done(end, real_end)

    def _last_period(self, lat: float, la: int) -> tuple[float, float]:
        """The work not done before the last point up to the deadline is done from it
        at ``la``: (end, real end)."""
        self.alloc[lat] = la
        self.new[lat] -= la
        if la == 0:
            raise self._fail("no GPUs in its last period")
        real_left = math.ceil(self.iter_left / self.tp[la])
        return lat + align(0, real_left), lat + real_left

    def until_deadline(self, tried: tuple[int, int]) -> None:
        """No level fits: the largest level tried, as the free GPUs allow, until the
        deadline (its work is not done by then)."""
        last_quota, _ = tried  # every period is after its ``point`` (start - 1)
        new, alloc = self.new, self.alloc
        lat: float | None = None
        la = 0
        for t in self._points_to_deadline():
            if lat is not None:
                alloc[lat] = la
                new[lat] -= la
                if la != 0:
                    duration = self.ddl - lat if t == self.aligned_ddl else t - lat
                    its = duration * self.tp[la]
                    if its >= self.iter_left:
                        raise self._fail("fits although no level fitted")
                    self.iter_left -= its
            lat = t
            f = self.fits[new[t]]
            la = last_quota if last_quota <= f else f

    def _done_after(self, lat: float, quota: int) -> Plan:
        """The work is done in the period from ``lat`` (after the deadline)."""
        new, free = self.new, self.free
        real_end = math.ceil(lat + self.iter_left / self.tp[quota])
        end = align(self.start, real_end)
        for t1 in list(new):
            if t1 < self.aligned_ddl:
                continue
            if t1 < end and t1 in free:
                self.last_event_gpu = free[t1]
            if lat <= t1 < end:
                new[t1] -= quota
        if self.last_event_gpu is None:
            raise self._fail("no free count before its end")
        if lat != end:
            new[lat] = self.last_event_gpu - quota
        if end not in free:
            new[end] = self.last_event_gpu
        return self.done(end, real_end)

    def after_deadline(self, assign: int | None) -> Plan:
        """After the deadline: whatever is free, period by period, until the work is
        done; past every planned point, the whole cluster."""
        new, alloc, free, tp, ej = self.new, self.alloc, self.free, self.tp, self.ej
        lat = max(self.aligned_ddl, self.event_time)
        for t in list(new):
            if t <= self.aligned_ddl:
                continue
            f = self.fits[new[lat]]
            quota = f if f <= ej.max_gpu else ej.max_gpu
            alloc[lat] = quota
            if quota == 0:
                lat = t
                continue
            its = (t - lat) * tp[quota]
            if its >= self.iter_left:
                return self._done_after(lat, quota)
            self.iter_left -= its
            for t1 in free:
                if t1 < lat:
                    self.last_event_gpu = new[t1]
            for t1 in list(new):
                if lat <= t1 < t:
                    new[t1] -= quota
            lat = t
        quota = min(self.total, ej.max_gpu) if assign is None else assign
        alloc[lat] = quota
        real_end = math.ceil(lat + self.iter_left / tp[quota])
        end = align(self.start, real_end)
        new[lat] = self.total - quota
        new[end] = self.total
        return self.done(end, real_end)


# -- the loop ------------------------------------------------------------------------------


_Event = Event[EJob]


class _Events:
    """Its event list: searched by time (times are unique), sorted when it sorts."""

    def __init__(self, arrivals: list[_Event]) -> None:
        self.items: list[_Event] = arrivals
        self.by_time: dict[float, _Event] = {ev.time: ev for ev in arrivals}

    def find(self, t: float | None) -> _Event | None:
        return None if t is None else self.by_time.get(t)

    def add(self, ev: _Event) -> None:
        self.items.append(ev)
        self.by_time[ev.time] = ev

    def _unindex(self, ev: _Event, t: float) -> None:
        if self.by_time.get(t) is ev:
            del self.by_time[t]

    def remove(self, ev: _Event) -> None:
        self.items.remove(ev)
        self._unindex(ev, ev.time)

    def sort(self) -> None:
        self.items.sort(key=lambda e: e.time)

    def merge_near(self, now: float) -> float:
        """The published timing (``flowcon.repro.published_baselines.merge_near``) on this list,
        the index kept; returns the next event's time."""
        self.sort()
        first = self.items[0]
        was = first.time
        for ev in merge_near(self.items, now):
            self._unindex(ev, ev.time)
        if first.time != was:
            self._unindex(first, was)
            self.by_time[first.time] = first
        return first.time

    def add_end(self, j: EJob) -> None:
        ev = self.by_time.get(j.end_time)
        if ev is None:
            self.add(Event(j.end_time, [], [j]))
        elif j not in ev.end:
            ev.end.append(j)

    def change_end(self, j: EJob) -> None:
        if j.old_end_time == j.end_time:
            return
        ev = self.find(j.old_end_time)
        if ev is not None:
            if j in ev.end:
                ev.end.remove(j)
            if not ev.end and not ev.start:
                self.remove(ev)
        j.old_end_time = None
        self.add_end(j)


class PublishedElasticFlow:
    """The published ``ef-accessctrl`` loop on ``topo`` (see module)."""

    def __init__(self, jobs: Sequence[Job], topo: Topology) -> None:
        self.topo = topo
        self.total = topo.total_gpus
        self.ejobs = [EJob.of(j) for j in sorted(jobs, key=lambda j: j.submit_time)]
        self.events = _Events(arrival_events(self.ejobs))
        self.runnable: list[EJob] = []
        self.pending: list[EJob] = []
        self.running: list[EJob] = []
        self.free: Free = {}
        self.cache: set[RankKey] = set()
        self.world = published_world("elasticflow-published")
        self.count = 0
        self.decisions = 0
        self.timeline: list[tuple[float, int, float, int]] = []

    # its JOBS.run_all_jobs
    def _run_all(self, dt: float, now: float) -> None:
        for j in self.runnable:
            if j.num_gpu == 0:
                continue
            run = dt
            ref = j.real_end_time if j.real_end_time is not None else j.end_time
            if now > ref:
                run -= now - ref
            if run <= 0:
                raise PlanError(f"job {j.job.job_id}: ran past its end before {now}")
            run = 0.0 if run < j.overhead else run - j.overhead
            rate = j.tp[j.num_gpu]
            its = run * rate
            if j.iter_left <= its and j.end_time > now:
                j.old_end_time = j.end_time
                early = now - dt + math.ceil(j.iter_left / rate)
                its = (j.end_time - now + dt) * rate
                j.end_time = now
                self.events.change_end(j)
                j.end_time = early
            j.iter_left -= its
            j.overhead = 0.0

    def _commit(self, j: EJob, now: float) -> bool:
        p = plan(j, now, self.free, self.total)
        self.free = p.free
        j.end_time, j.real_end_time, j.allocations = p.end, p.real_end, p.alloc
        return p.ok

    def _estimate_all(self, jobs: list[EJob], now: float, record: bool = True) -> bool:
        self.free = {now: self.total}
        ok = True
        jobs = sorted(jobs, key=lambda e: e.ddl)
        if record:
            for j in jobs:
                j.old_end_time = j.end_time
        for j in jobs:
            if not self._commit(j, now):
                ok = False
        return ok

    def _marginal(self, j: EJob, spare: int, now: float) -> None:
        """Its ``get_marginal``: GPU-seconds saved per added GPU when ``j`` is re-planned
        one level up from now (a waiting job: first). A job that finishes within the
        first period of the free map at that level is priced without its re-plan (the
        re-plan would give exactly that; it is made when the job is chosen)."""
        if j.next_level - j.num_gpu > spare or j.next_level == j.num_gpu:
            j.marginal = -BIG
            return
        q = j.next_level
        real_end = math.ceil(now + j.iter_left / j.tp[q])
        end = align(now, real_end)
        tmp = self._given_back(j)
        it = iter(tmp)
        next(it)
        future = next(it, None)  # the first change after now
        if future is None:
            future = align(now, j.ddl)
        if future >= end and j.ddl >= real_end:
            new_time = q * (end - now)
        else:
            p = plan(j, now, tmp, self.total, assign=q, want_free=False)
            new_time = gpu_time(p.alloc, p.end)
        j.marginal = (new_time - gpu_time(j.allocations, j.end_time)) / (q - j.num_gpu)
        if j.num_gpu == 0:
            j.marginal = BIG

    def _given_back(self, j: EJob) -> Free:
        """The free map with ``j``'s planned GPUs given back until its planned end,
        merged (as its ``get_marginal`` builds it: ``j``'s allocation points and its end
        added as points, then merged)."""
        free, end = self.free, j.end_time
        ts, vs = list(free), list(free.values())
        steps = [(a, n) for a, n in j.allocations.items() if a < end] or [(ts[0], 0)]
        out: Free = {}
        last: int | None = None
        lo = 0
        if steps and steps[0][0] > ts[0]:  # before its first point: unchanged
            lo = bisect_left(ts, steps[0][0])
            for k in range(lo):
                if vs[k] != last:
                    out[ts[k]] = last = vs[k]
        for i, (a, n) in enumerate(steps):
            b = steps[i + 1][0] if i + 1 < len(steps) else end
            lo = bisect_left(ts, a, lo)
            hi = bisect_left(ts, b, lo)
            if lo == len(ts) or ts[lo] != a:
                v = vs[lo - 1] + n
                if v != last:
                    out[a] = last = v
            for k in range(lo, hi):
                v = vs[k] + n
                if v != last:
                    out[ts[k]] = last = v
            lo = hi
        hi = bisect_left(ts, end, lo)
        if hi == len(ts) or ts[hi] != end:
            v = vs[hi - 1]
            if v != last:
                out[end] = last = v
        else:
            if vs[hi] != last:
                out[end] = last = vs[hi]
            hi += 1
        # after its end the map is the free map, already merged
        out.update(zip(ts[hi:], vs[hi:], strict=True))
        return out

    def _marginal_plan(self, j: EJob, now: float) -> Plan:
        """``j`` re-planned one level up from now on the free map with its own GPUs
        given back."""
        return plan(j, now, self._given_back(j), self.total, assign=j.next_level)

    def _start(self, j: EJob, now: float) -> None:
        j.pending, j.start = False, now
        self.pending.remove(j)
        self.running.append(j)

    def _spare(self, now: float) -> None:
        """Its ``allocate_free_gpus``."""
        used = 0
        for j in self.runnable:
            j.next_level = j.next_level_of(j.num_gpu)
            used += j.num_gpu
        spare = self.total - used
        if not self.runnable:
            return  # (it asserts its plan's free count here; nothing to give)
        if self.free.get(now) != spare:
            raise PlanError(f"{now}: plan and allocation disagree on free GPUs")
        if spare == 0:
            return
        for j in self.runnable:
            self._marginal(j, spare, now)
        self.runnable.sort(key=lambda e: e.marginal, reverse=True)
        again = True
        while spare > 0 and again:
            again = False
            for j in self.runnable:
                if j.next_level - j.num_gpu > spare or j.next_level == j.num_gpu:
                    continue
                old = j.num_gpu
                p = self._marginal_plan(j, now)  # the same inputs as its price
                self.free = p.free
                j.allocations, j.num_gpu = p.alloc, j.next_level
                j.old_end_time, j.end_time = j.end_time, p.end
                if j.pending:
                    self._start(j, now)
                self.events.change_end(j)
                spare -= j.num_gpu - old
                again = True
                j.next_level = j.next_level_of(j.num_gpu)
                break
            for j in self.runnable:
                if j.next_level - j.num_gpu > 0:
                    self._marginal(j, spare, now)
            self.runnable.sort(key=lambda e: e.marginal, reverse=True)

    def _end(self, j: EJob, now: float) -> None:
        if j in self.running:
            self.running.remove(j)
        if j in self.runnable:
            self.runnable.remove(j)
        j.placed = False  # released: a second end event of its (a moved one) skips it
        j.finish = now

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        ev_list = self.events
        now = ev_list.items[0].time if ev_list.items else 0.0
        dt = 0.0
        while ev_list.items or self.pending or self.running:
            self.decisions += 1
            self._run_all(dt, now)
            for j in self.runnable:
                j.overhead = 0.0
            event = ev_list.find(now)
            if event is not None:
                ev_list.remove(event)
                if not (self.pending or self.running or event.end or event.start):
                    continue
                self._handle(event, now)
            self._start_pending(now)
            self._spare(now)
            order = self._place(now)
            self._record(now, order)
            self._charge(order)
            nxt = self.events.merge_near(now)  # step 6
            dt = float(int(nxt - now))
            if dt < 0:
                raise PlanError(f"{now}: next event {nxt} is in the past")
            now = nxt
            if nxt >= BIG:
                break
        return self._result(wall0)

    def _handle(self, event: _Event, now: float) -> None:
        """Ends, then the arrivals admitted or declined together, then every job
        re-planned (see module, steps 2-3)."""
        for j in event.end:
            if j.placed:
                self._end(j, now)
        for j in self.runnable:
            j.old_end_time = j.end_time
        new_job = False
        if event.start:
            old_free = self.free
            if not self._estimate_all(self.runnable + event.start, now):
                for j in event.start:
                    j.declined = "declined with its batch"
                self.free = old_free
            else:
                new_job = True
                for j in event.start:
                    j.pending = True
                    self.pending.append(j)
                    if j not in self.runnable:
                        self.runnable.append(j)
        if not new_job:
            self._estimate_all(self.runnable, now, record=not event.start)
        # it re-plans every job once more, from an empty map in the same deadline order
        # with the same work left: the same plans, so the last estimate's plans and free
        # map stand
        self.runnable.sort(key=lambda e: e.ddl)
        for j in self.runnable:
            j.num_gpu = j.allocations[now]
            self.events.change_end(j)
            j.old_end_time = j.end_time

    def _start_pending(self, now: float) -> None:
        """Admitted jobs whose plan gives them GPUs now start (every placement was
        released by the re-plan, so the cluster has room)."""
        starting = []
        for j in self.pending:
            later = False
            for t, n in j.allocations.items():
                if n == 0:
                    continue
                later = t > now
                break
            j.num_gpu = j.allocations[now]
            if not later:
                starting.append(j)
        for j in starting:
            self._start(j, now)
            self.events.add_end(j)

    def _place(self, now: float) -> list[EJob]:
        """The jobs laid out now (largest first, as placed), and the scale event: the
        earliest planned change of any job's GPUs, when it comes before the next event."""
        first_scale = float(BIG)
        self.runnable.sort(key=lambda e: e.num_gpu, reverse=True)
        for j in self.runnable:
            for t in j.allocations:
                if t > now:
                    first_scale = min(first_scale, t)
                    break
        # every job was released by the re-plan; those with GPUs now are placed again
        for j in self.runnable:
            j.placed = j.num_gpu > 0
        order = [j for j in self.runnable if j.placed]
        ev_list = self.events
        ev_list.sort()
        if not ev_list.items or first_scale < ev_list.items[0].time:
            if ev_list.find(first_scale) is None:
                ev_list.add(Event(first_scale, []))
            ev_list.sort()
        return order

    def _record(self, now: float, order: list[EJob]) -> None:
        """This decision in the timeline: GPUs given, cluster efficiency (Eq 8), jobs."""
        busy = sum(j.num_gpu for j in order)
        ce = sum(j.tp[j.num_gpu] / j.job.curve.at(1) for j in order) / self.total
        self.timeline.append((now, busy, ce, len(self.runnable)))

    def _charge(self, order: list[EJob]) -> None:
        """Every running job's overhead, added to its planned end (step 5)."""
        restart = self.count > 0 and self.count % SLOT == 0
        self.count += 1
        ids = [str(i) for i in range(len(order))]
        keys = published_rank_keys(
            [(i, j.num_gpu) for i, j in zip(ids, order, strict=True)],
            self.topo.nodes, self.topo.gpus_per_node,
        )  # fmt: skip
        charges = self.world.event_charges(
            {i: (j.num_gpu, keys.get(i)) for i, j in zip(ids, order, strict=True)},
            self.cache, restart, self.total,
        )  # fmt: skip
        for i, j in zip(ids, order, strict=True):
            j.overhead = charges[i]
            j.old_end_time = j.end_time
            j.end_time += j.overhead
            self.events.change_end(j)

    def _result(self, wall0: float) -> SimResult:
        results = []
        for ej in self.ejobs:
            r = JobResult(ej.job, admitted=ej.start is not None, start=ej.start)
            if ej.start is None:
                r.reason = ej.declined or "never started"
            else:
                r.finish = ej.finish
                r.checked_finish = ej.real_end_time
            results.append(r)
        return SimResult(
            policy="elasticflow-published",
            topology=self.topo,
            slot=float(SLOT),
            results=results,
            timeline=self.timeline,
            latencies=[0.0] * self.decisions,
            wall_seconds=time.perf_counter() - wall0,
            decisions=self.decisions,
        )


def simulate_elasticflow_published(jobs: Sequence[Job], topo: Topology) -> SimResult:
    """ElasticFlow as the published simulator runs it (see module)."""
    return PublishedElasticFlow(jobs, topo).run()
