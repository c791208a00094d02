"""The published ElasticFlow simulator's world for its non-elastic baselines (``--world
published``): Gandiva and Tiresias as that simulator defines them, re-implemented from its
description (pkusys/ElasticFlow, Apache-2.0; no code copied).

Both baselines there do not run a job's iterations at a profiled throughput: a job runs for
the ``duration`` of its trace row (the seconds it took in the original cluster on
``num_gpu`` GPUs) and ends when its executed seconds reach it. Their clocks, overheads and
bookkeeping differ from ``flowcon.sim.engine`` and are reproduced here:

- **Gandiva**: nodes are grouped into *node sets* per job size (1, 2, 4, ... GPUs); a node
  set of ``n``-GPU jobs holds ``capacity = GPUs of its nodes / n`` jobs at a time and
  time-shares the rest (each job's memory use counts 1). Before every step the node sets
  are re-balanced between sizes in proportion to the GPU demand of each size (expand from
  free nodes, shrink by folding node sets onto the least loaded one). When the clock is on
  a whole minute the running jobs of an over-subscribed node set rotate to the back. Every
  scheduling event charges every running job ``overhead(n)`` seconds of its next step.
- **Tiresias** (2D-LAS on GPU time): three queues split at 3,250 and 7,200 GPU-seconds of
  executed service, FIFO inside a queue (pending jobs behind running ones), preemptive;
  a (re)started job is charged ``overhead(n)`` once.
- **Timing**: an event within one slot (60 s) of the current decision is moved to the
  current decision + 60 s and merged with the events up to it.
- **Deadline check**: a job meets its deadline when its end time (as that simulator
  computes it) is not after the deadline; the ratio is met / all jobs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from flowcon.alloc.model import Job, Topology
from flowcon.sim.engine import JobResult, SimResult
from flowcon.sim.world import SLOT, published_overhead

GANDIVA_CLASSES = (1, 2, 4, 8, 12, 16, 24, 32, 64)
TIRESIAS_LIMITS = (3250.0, 7200.0)  # GPU-seconds; its third limit (18,000) is never used


@dataclass(eq=False)
class _PJob:
    job: Job
    gpus: int
    duration: float
    executed: float = 0.0  # Gandiva: seconds run; Tiresias: seconds run in its queue
    total_executed: float = 0.0
    overhead: float = 0.0
    start: float | None = None
    end: float | None = None
    ever_pending: bool = False
    running: bool = False
    last_check: float = 0.0
    queue: int = 0


def _pjobs(jobs: Sequence[Job]) -> list[_PJob]:
    out = []
    for j in jobs:
        if j.duration is None:
            raise ValueError(f"job {j.job_id}: the published world needs the trace's duration")
        out.append(_PJob(j, max(1, j.requested_gpus), float(int(j.duration))))
    return out


class HasJob(Protocol):
    """A published loop's job state: it carries its trace job."""

    job: Job


J = TypeVar("J", bound=HasJob)


@dataclass(eq=False)
class Event(Generic[J]):
    """One event of a published loop: the jobs it starts (arrivals) and ends."""

    time: float
    start: list[J]
    end: list[J] = field(default_factory=list)


def arrival_events(jobs: Sequence[J]) -> list[Event[J]]:
    """One event per submission time, its jobs in the given order; sorted by time."""
    events: dict[float, Event[J]] = {}
    for p in jobs:
        t = p.job.submit_time
        ev = events.get(t)
        if ev is None:
            events[t] = ev = Event(t, [])
        ev.start.append(p)
    return sorted(events.values(), key=lambda e: e.time)


def merge_near(events: list[Event[J]], now: float, ends: bool = True) -> list[Event[J]]:
    """Events within one slot of ``now`` move to ``now + SLOT`` and merge (as published);
    ``ends=False``: only their starts merge (Tiresias keeps its end events apart).
    Returns the events merged into the first (removed from ``events``)."""
    gone: list[Event[J]] = []
    if not events:
        return gone
    nxt = events[0].time
    while int(nxt - now) <= SLOT and len(events) > 1:
        events[0].time = now + SLOT
        if events[1].time - now > SLOT:
            break
        nxt = events[1].time
        events[0].start.extend(events[1].start)
        if ends:
            events[0].end.extend(events[1].end)
        gone.append(events.pop(1))
    return gone


def _result(name: str, topo: Topology, pjobs: list[_PJob], wall0: float, n: int) -> SimResult:
    results = []
    for p in pjobs:
        r = JobResult(p.job, admitted=p.start is not None, start=p.start, finish=p.end)
        if p.start is None:
            r.reason = "never scheduled"
        results.append(r)
    return SimResult(
        policy=name,
        topology=topo,
        slot=float(SLOT),
        results=results,
        timeline=[],
        latencies=[0.0] * n,
        wall_seconds=time.perf_counter() - wall0,
        decisions=n,
    )


# -- Gandiva ------------------------------------------------------------------------------


@dataclass(eq=False)
class _NodeSet:
    nodes: int
    capacity: int
    jobs: list[_PJob]
    util: int = 0


class _GandivaCluster:
    def __init__(self, topo: Topology) -> None:
        self.gpn = topo.gpus_per_node
        self.total = topo.total_gpus
        self.free_nodes = topo.nodes
        self.groups: dict[int, list[_NodeSet]] = {g: [] for g in GANDIVA_CLASSES}

    def _group(self, p: _PJob) -> list[_NodeSet]:
        lst = self.groups.get(p.gpus)
        if lst is None:
            raise ValueError(f"job {p.job.job_id}: Gandiva has no node-set class of {p.gpus} GPUs")
        return lst

    def place(self, p: _PJob) -> bool:
        """First the least loaded node set with room, else a new node set from free nodes,
        else time-share the next least loaded one; False: no node set of this size."""
        lst = self._group(p)
        if lst:
            ns = lst.pop(0)
            if ns.util + 1 < ns.capacity:
                ns.util += 1
                ns.jobs.append(p)
                lst.append(ns)
                lst.sort(key=lambda s: s.util)
                return True
            lst.append(ns)
        nodes = math.ceil(p.gpus / self.gpn)
        if nodes <= self.free_nodes:
            self.free_nodes -= nodes
            lst.append(_NodeSet(nodes, int(nodes * self.gpn / p.gpus), [p], 1))
            lst.sort(key=lambda s: s.util)
            return True
        if lst:
            ns = lst.pop(0)
            ns.util += 1
            ns.jobs.append(p)
            lst.append(ns)
            lst.sort(key=lambda s: s.util)
            return True
        return False

    @staticmethod
    def _deal(lst: list[_NodeSet], jobs: list[_PJob]) -> None:
        for p in jobs:
            ns = lst[0]
            ns.util += 1
            ns.jobs.append(p)
            lst.sort(key=lambda s: s.util)

    def _shrink(self, lst: list[_NodeSet], count: int) -> None:
        count = min(count, len(lst) - 1)
        moved: list[_PJob] = []
        for _ in range(count):
            ns = lst.pop(0)
            moved.extend(ns.jobs)
            self.free_nodes += ns.nodes
        if count > 0:
            self._deal(lst, moved)

    def _expand(self, g: int, lst: list[_NodeSet], count: int) -> None:
        nodes = math.ceil(g / self.gpn)
        # the published loop re-deals the jobs only when its loop variable ends above 0:
        # when the last round added a node set it ends at (nodes per set - 1)
        last = 0
        for k in range(1, count + 1):
            last = k
            if nodes <= self.free_nodes:
                self.free_nodes -= nodes
                lst.append(_NodeSet(nodes, int(nodes * self.gpn / g), []))
                last = nodes - 1
        if last > 0:
            jobs: list[_PJob] = []
            for ns in lst:
                if ns.jobs:
                    jobs.extend(ns.jobs)
                    ns.jobs = []
                    ns.util = 0
            self._deal(lst, jobs)

    def adjust(self) -> None:
        """Node sets per size in proportion to each size's GPU demand."""
        demand = {g: sum(len(ns.jobs) for ns in lst) * g for g, lst in self.groups.items()}
        occupied = {g: sum(ns.nodes for ns in lst) * self.gpn for g, lst in self.groups.items()}
        total = sum(demand.values())
        if total == 0:
            return
        for g, lst in self.groups.items():
            if demand[g] == 0:
                continue
            plan = int(math.floor((demand[g] / total) * self.total))
            diff = min(plan, demand[g]) - occupied[g]
            if diff > 0:
                self._expand(g, lst, math.ceil(diff / g))
            elif diff < 0:
                self._shrink(lst, math.ceil(-diff / g))

    def execute(self, now: float, dt: float, running: list[_PJob]) -> bool:
        """``dt`` seconds for the jobs each node set runs; ends, rotation. True: a node set
        was released."""
        rotate = int(now % 60) == 0
        released = False
        for lst in self.groups.values():
            gone = []
            for ns in lst:
                conc = min(len(ns.jobs), ns.capacity)
                ended = []
                for p in ns.jobs[: max(conc, 1)]:
                    p.executed += max(dt - p.overhead, 0.0)
                    p.overhead = 0.0
                    if p.executed >= p.duration:
                        ended.append(p)
                        p.end = now - (p.executed - p.duration)
                if rotate and len(ns.jobs) > conc:
                    ns.jobs = ns.jobs[conc:] + ns.jobs[:conc]
                for p in ended:
                    ns.jobs.remove(p)
                    running.remove(p)
                if not ns.jobs:
                    self.free_nodes += ns.nodes
                    gone.append(ns)
                    released = True
            for ns in gone:
                lst.remove(ns)
        return released


def _retry_pending(
    cl: _GandivaCluster, pending: list[_PJob], running: list[_PJob], now: float
) -> None:
    """Pending jobs in order; the published loop removes from the list it iterates, so
    the job after each one it starts is skipped until the next release."""
    i = 0
    while i < len(pending):
        p = pending[i]
        if cl.place(p):
            pending.pop(i)
            p.start = now
            running.append(p)
        i += 1


def simulate_gandiva(jobs: Sequence[Job], topo: Topology) -> SimResult:
    """Gandiva as the published simulator runs it (time-sharing node sets, see module)."""
    wall0 = time.perf_counter()
    pjobs = _pjobs(jobs)
    events = arrival_events(pjobs)
    cl = _GandivaCluster(topo)
    running: list[_PJob] = []
    pending: list[_PJob] = []
    now = events[0].time if events else 0.0
    dt = 0.0
    count = 0
    decisions = 0
    while events or pending or running:
        decisions += 1
        cl.adjust()
        released = cl.execute(now, dt, running)
        for p in pjobs:
            if p.ever_pending:
                p.overhead = 0.0
        if events and events[0].time == now:
            for p in events.pop(0).start:
                if cl.place(p):
                    p.start = now
                    running.append(p)
                else:
                    p.ever_pending = True
                    pending.append(p)
        if released:
            _retry_pending(cl, pending, running, now)
        if not events:
            if not running:
                break  # pending jobs that no node set can ever take
            now += SLOT
            dt = float(SLOT)
            continue
        restart = count > 0 and count % SLOT == 0
        count += 1
        for p in running:
            p.overhead = published_overhead(p.gpus, restart, cl.total)
        merge_near(events, now)
        dt = float(int(events[0].time - now))
        now = events[0].time
    return _result("gandiva", topo, pjobs, wall0, decisions)


# -- Tiresias -----------------------------------------------------------------------------


def _tiresias_account(runnable: list[_PJob], queues: list[list[_PJob]], now: float) -> None:
    """Executed service up to ``now``; demotion by GPU-seconds."""
    for p in runnable:
        if p.running:
            tmp = max(int(now - p.last_check) - p.overhead, 0)
            p.total_executed = int(p.total_executed + tmp)
            p.executed = int(p.executed + tmp)
            p.last_check = now
            p.overhead = 0.0
            q = p.queue
            if q < len(TIRESIAS_LIMITS) and int(p.executed * p.gpus) >= TIRESIAS_LIMITS[q]:
                p.queue = q + 1
                queues[q + 1].append(p)
                queues[q].remove(p)
        else:
            p.last_check = now


def _tiresias_pick(queues: list[list[_PJob]], total: int, restart: bool) -> None:
    """Queue by queue, FIFO: a job runs if its GPUs are still free; others are preempted."""
    free = total
    for queue in queues:
        for p in queue:
            if free >= p.gpus:
                if not p.running:
                    p.overhead = published_overhead(p.gpus, restart, total)
                    p.running = True
                free -= p.gpus
            elif p.running:
                p.running = False
    for queue in queues:
        queue[:] = [p for p in queue if p.running] + [p for p in queue if not p.running]


def _tiresias_next_end(
    runnable: list[_PJob], now: float, restart: bool, total: int
) -> Event[_PJob] | None:
    best: Event[_PJob] | None = None
    for p in runnable:
        if not p.running:
            continue
        remaining = p.duration - p.total_executed
        if restart:
            p.overhead = published_overhead(p.gpus, restart, total)
            remaining += p.overhead
        end = int(now + remaining)
        at = max(now + SLOT, end)
        if best is None or at < best.time:
            best = Event(at, [], [p])
            p.end = end
        elif at == best.time:
            p.end = end
            best.end.append(p)
    return best


def _tiresias_next_jump(runnable: list[_PJob], now: float) -> float:
    nxt = math.inf
    for p in runnable:
        if p.running and p.queue < len(TIRESIAS_LIMITS):
            at = int(math.ceil((TIRESIAS_LIMITS[p.queue] - p.executed) / p.gpus) + now)
            nxt = min(nxt, at)
    return max(nxt, now + SLOT)


def simulate_tiresias(jobs: Sequence[Job], topo: Topology) -> SimResult:
    """Tiresias (2D-LAS on GPU time) as the published simulator runs it (see module)."""
    wall0 = time.perf_counter()
    pjobs = _pjobs(jobs)
    events = arrival_events(pjobs)
    total = topo.total_gpus
    queues: list[list[_PJob]] = [[] for _ in range(len(TIRESIAS_LIMITS) + 1)]
    runnable: list[_PJob] = []
    end_event: Event[_PJob] | None = None
    jump = math.inf
    count = decisions = 0
    while events or runnable:
        if not events and end_event is None:
            break  # jobs bigger than the cluster
        decisions += 1
        start_t = events[0].time if events else math.inf
        end_t = end_event.time if end_event is not None else math.inf
        ev: Event[_PJob] | None = None
        ending: list[_PJob] = []
        if end_t < start_t:
            now = end_t
            ending = end_event.end if end_event is not None else []
        else:
            now = start_t
            ev = events[0]
            if end_t == start_t and end_event is not None:
                ending = end_event.end
        if now > jump:
            now, ev, ending = jump, None, []
        for p in ending:
            runnable.remove(p)
            queues[p.queue].remove(p)
            p.running = False
        if ev is not None:
            for p in ev.start:
                p.last_check = p.job.submit_time
                runnable.append(p)
                queues[0].append(p)
            events.pop(0)
        _tiresias_account(runnable, queues, now)
        restart = count > 0 and count % SLOT == 0
        count += 1
        _tiresias_pick(queues, total, restart)
        for p in runnable:
            if p.running and p.start is None:
                p.start = now
        runnable.sort(key=lambda p: p.gpus, reverse=True)
        end_event = _tiresias_next_end(runnable, now, restart, total)
        jump = _tiresias_next_jump(runnable, now)
        merge_near(events, now, ends=False)
        if end_event is not None and end_event.time < now + SLOT:
            end_event.time = now + SLOT
    return _result("tiresias", topo, pjobs, wall0, decisions)
