"""The allocator's decisions over the stored state, without touching any container.

The planner turns the stored records into the core's ``ClusterState`` (jobs with their
measured curves, current GPUs, attained GPU-seconds) and drives the same ``Policy`` object
the simulator drives (``flowcon.alloc.types.Policy``: ``on_submit``, ``schedule``, ``on_finish``,
``next_wakeup``; for ElasticFlow admission by minimum satisfactory share, Algorithm 1, and
marginal-return allocation, Algorithm 2), then places the GPU counts (buddy allocation,
section 4.3) and writes every decision back to the store. The daemon then asks the executor
to make the containers match.

Time: decisions are taken at the request time ``now``; the slot grid is absolute (slot k =
[k*slot, (k+1)*slot)), the simulator's grid. A submit is answered at once, evaluated from
``now``: inside a slot the ledger counts only the slot's remainder. The simulator batches
arrivals at the next slot boundary; a live submit that arrives on a boundary is decided
exactly as the simulator decides it (tests/allocator/test_planner_matches_simulator.py).

Measurements (the closed loop) are ``flowcon.allocator.intake``; records (spec <-> JSON)
are ``flowcon.allocator.records``.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from flowcon.alloc.driver import is_tick, slot_boundary
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.alloc.operations import GpuId, Operations, free_block_on_node, honour_pins
from flowcon.alloc.placement import PlacementError, PlacementPlan
from flowcon.alloc.types import AdmissionDecision, ClusterState, Policy
from flowcon.allocator.intake import MeasurementIntake
from flowcon.allocator.ports import Placer
from flowcon.allocator.records import core_job, planned_speed
from flowcon.allocator.store import JobRecord, Store, new_record
from flowcon.contract import SCALING_RESTART, SCALING_STOPFREE, Measurement
from flowcon.jobspec.spec import JobSpec
from flowcon.policy_registry import make_policy

log = logging.getLogger(__name__)


class PlanError(Exception):
    """A request the planner refuses; ``status`` is the HTTP status the API returns."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SubmitResult:
    name: str
    admitted: bool
    reason: str
    gpus: int
    min_share: dict[str, int] | None  # GPUs each hard-deadline job needs now
    measured_jobs: tuple[str, ...]  # admitted jobs whose measured speed entered the decision
    revoked: tuple[str, ...] = ()  # admitted jobs whose guarantee this decision gave up

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["decision"] = "admitted" if self.admitted else "dropped"
        out["measured_jobs"] = list(self.measured_jobs)
        out["revoked"] = list(self.revoked)
        return out


@dataclass(frozen=True)
class DryRunResult:
    """What a submit would decide now (``Planner.dry_run``); nothing was created."""

    name: str
    admitted: bool
    reason: str
    gpus: int  # GPUs it would hold now (0: admitted but queued for spare GPUs)
    min_share: dict[str, int] | None
    predicted_finish: float | None  # if it kept those GPUs; None when it would wait
    deadline: float | None
    now: float
    revoked: tuple[str, ...] = ()  # admitted jobs whose guarantee a submit would give up
    # the node-side checks this dry run could not make: they happen when the job starts
    checked_at_start: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["decision"] = "admitted" if self.admitted else "dropped"
        out["dry_run"] = True
        out["revoked"] = list(self.revoked)
        out["checked_at_start"] = list(self.checked_at_start)
        return out


@dataclass(frozen=True)
class Change:
    """One job whose GPU count or placement changed in a plan."""

    job: str
    old_gpus: int
    new_gpus: int
    placement: list[list[int]]  # [[node index, GPU index], ...]


@dataclass
class Plan:
    ts: float
    allocation: dict[str, int]
    placement: dict[str, list[list[int]]]
    changes: list[Change] = field(default_factory=list)
    gpus: dict[str, int] = field(default_factory=dict)  # every active job's GPUs now


class Planner:
    """Admission, allocation and placement over one ``Store``, by one ``Policy``.

    ``policy``: a name from ``flowcon.policy_registry.POLICIES`` (made with ``make_policy``,
    ElasticFlow with sticky slot ticks) or a ready ``Policy``.
    ``complete_on_progress``: mark a job completed when its estimated progress reaches its
    iterations (the simulator/dry-run path; with real containers the executor reports
    completion instead).
    """

    def __init__(
        self,
        store: Store,
        total_gpus: int,
        slot_seconds: float,
        placer: Placer | None = None,
        ewma_alpha: float = 0.3,
        min_measurements: int = 2,
        complete_on_progress: bool = False,
        clock: Callable[[], float] = time.time,
        policy: str | Policy = "elasticflow",
        nodes: Sequence[tuple[str, int]] = (),
    ) -> None:
        self.store = store
        self.total_gpus = total_gpus
        # the inventory's GPU nodes in the core's node order: (name, GPU count)
        self.nodes = [(str(n), int(c)) for n, c in nodes]
        # what operators asked beside the policy (flowcon.alloc.operations): pins, drained
        # nodes, GPUs avoided after a straggler; kept in the store's meta table
        self.ops, skipped = Operations.from_json(store.get_meta(OPERATIONS_KEY))
        for why in skipped:
            log.warning("stored operator requests: skipped %s", why)
        # nodes the executor refuses to run jobs on (a Swarm node that lacks hardening the
        # operator requires): their GPUs leave the capacity, as a drained node's
        self.refused_nodes: frozenset[str] = frozenset()
        self._capacity = self._capacity_now(clock())
        self._policy_capacity: int | None = None  # the capacity the policy's plans assume
        self._shrunk_said: dict[str, tuple[int, int]] = {}  # placement_shrunk told, per job
        self.slot = slot_seconds
        self.placer = placer
        self.alpha = ewma_alpha
        self.complete_on_progress = complete_on_progress
        self.clock = clock
        self.intake = MeasurementIntake(store, ewma_alpha, min_measurements, clock)
        self.policy: Policy = (
            make_policy(policy, sticky=True) if isinstance(policy, str) else policy
        )
        # seconds a rescale costs, as measured by the executor (EWMA) per scaling mode
        # (restart: checkpoint-restart, stopfree: the stop-free pause); the policy's
        # overhead, charged once per job in admission and minimum shares, is the largest
        # of the modes the active jobs scale by (``charged_overhead``)
        self.overheads: dict[str, float] = {}
        self.overhead = 0.0
        self._modes: dict[str, str] = {}  # job -> the mode it scales by, as launched
        self._restored = False  # the policy has seen the stored jobs (after a restart)
        # GPU-seconds served per job since this process started (Tiresias' priority)
        self._attained: dict[str, float] = {}
        # admissions counted, and how many of them the last plan saw: a submit answers
        # with a plan made after its admission, and submits that arrive together share
        # one (each plan covers every active job: thousands of submits must not make one
        # each, queued on the store's one writer)
        self._admitted = 0
        self._planned = 0
        self._last_plan: Plan | None = None
        self._plan_lock = threading.Lock()
        self._planned_cv = threading.Condition()  # notified when a plan was made
        # set while a planning loop runs (the daemon's: it wakes that loop): a submit
        # then waits for the loop's next plan instead of making one of its own beside it
        # (the loop would plan again for the same admission), up to ``loop_wait_s`` or
        # three times the last plan's duration if longer (a loop held up by a slow
        # container stop does not hold submits for longer than that)
        self.wake_loop: Callable[[], None] | None = None
        self.loop_wait_s = 1.0
        self._plan_s = 0.0  # how long the last plan took

    # -- the job as the core sees it --------------------------------------------------

    def guaranteed_shares(self, now: float) -> dict[str, int]:
        """Each admitted deadline job's minimum satisfactory share now, where the policy
        keeps reservations (ElasticFlow, EDF with admission); empty otherwise."""
        with self.store.transaction():  # the planning loop changes reservations under it
            return self._shares(now)

    def trusted_measurements(self, rec: JobRecord) -> dict[int, float]:
        return self.intake.trusted_measurements(rec)

    def curve(self, rec: JobRecord) -> ThroughputCurve:
        return self.intake.curve(rec)

    def speed(self, rec: JobRecord, gpus: int | None = None) -> float:
        """Iterations of the submitted batch per second (samples/s over the submitted
        batch) of ``rec`` on ``gpus`` GPUs (its current ones by default), at the batch it
        runs at there (``flowcon.allocator.records.planned_speed``): the speed its
        progress and predicted finish move at, the policy's speed of the job."""
        return planned_speed(rec.spec, self.curve(rec), rec.gpus if gpus is None else gpus)

    def core_job(self, rec: JobRecord) -> Job:
        """The policy's job: the stored spec with the measured curve and the progress."""
        return core_job(rec.spec, self.curve(rec), min(rec.done_iterations, rec.iterations))

    def cluster_state(self, active: Iterable[JobRecord], now: float) -> ClusterState:
        """The policy's view of the stored active jobs. The first one after a (re)start
        lets the policy rebuild what it keeps between decisions (``Policy.restore``)."""
        state = self._state_of(active)
        if not self._restored:
            self._restored = True
            self.policy.set_overhead(self.overhead)
            if state.total_gpus > 0:
                self.policy.restore(now, state)
                self._policy_capacity = state.total_gpus
        elif state.total_gpus > 0 and state.total_gpus != self._policy_capacity:
            self._capacity_changed(now, state)
        return state

    # -- capacity: drained nodes and avoided GPUs (flowcon.alloc.operations) -------------

    def blocked(self, now: float) -> frozenset[GpuId]:
        """GPUs placement must not use now: drained nodes' and avoided ones, and those of
        the nodes the executor refuses (``refuse_nodes``)."""
        found = self.ops.blocked(self.nodes, now)
        if not self.refused_nodes:
            return found
        refused = {
            (i, g)
            for i, (name, count) in enumerate(self.nodes)
            if name in self.refused_nodes
            for g in range(count)
        }
        return found | refused

    def refuse_nodes(self, nodes: frozenset[str], now: float) -> None:
        """Place no worker on ``nodes`` (the executor would refuse it there); the next
        round plans with the smaller capacity, as after a drain."""
        self.refused_nodes = frozenset(nodes)
        self._capacity = self._capacity_now(now)

    def _capacity_now(self, now: float) -> int:
        return self.total_gpus - len(self.blocked(now))

    def save_operations(self, now: float) -> None:
        """Store the operator requests and take their capacity from the next decision on
        (call inside a store transaction)."""
        self.store.put_meta(OPERATIONS_KEY, self.ops.to_json())
        self._capacity = self._capacity_now(now)

    def _capacity_changed(self, now: float, state: ClusterState) -> None:
        """The schedulable GPUs changed (a drain, an undrain, an avoidance ran out): the
        policy's reservations are rebuilt for the new capacity as after a restart
        (``Policy.restore``, deadline order); a job that no longer fits loses its
        guarantee, with an event."""
        before = set(self._shares(now))
        self.policy.restore(now, state)
        self._policy_capacity = state.total_gpus
        lost = sorted(before - set(self._shares(now)))
        for name in lost:
            self.store.append_event(
                "guarantee_lost",
                name,
                ts=now,
                reason=f"the schedulable GPUs fell to {state.total_gpus}",
            )
        self.store.append_event(
            "capacity_changed", None, ts=now, gpus=state.total_gpus, guarantees_lost=lost
        )

    def _shares(self, now: float) -> dict[str, int]:
        """``guaranteed_shares`` inside a transaction the caller holds."""
        shares = getattr(self.policy, "guaranteed_shares", None)
        return dict(shares(now)) if callable(shares) else {}

    def _state_of(self, active: Iterable[JobRecord]) -> ClusterState:
        recs = list(active)
        return ClusterState(
            total_gpus=self._capacity,
            slot=self.slot,
            jobs={r.name: self.core_job(r) for r in recs},
            allocation={r.name: r.gpus for r in recs if r.gpus > 0},
            attained={r.name: self._attained.get(r.name, 0.0) for r in recs},
        )

    # -- submit / cancel / complete ----------------------------------------------------

    def begin_profiling(self, spec: JobSpec, counts: list[int], now: float | None = None) -> None:
        """A ``profile: auto`` job waits in state "profiling" while its pre-run measures its
        curve; ``submit`` then decides on it (section 5: profile first, then admit)."""
        now = self.clock() if now is None else now
        with self.store.transaction():
            old = self.store.get_job(spec.name)
            if old is not None and (old.active or old.pending):
                raise PlanError(409, f"job {spec.name!r} exists and is {old.state}")
            rec = new_record(
                spec, "profiling", {}, reason=f"profiling at {', '.join(map(str, counts))} GPUs"
            )
            self.store.put_job(rec)
            self.store.append_event(
                "profiling_started", spec.name, ts=now, counts=counts, deadline=spec.deadline
            )

    def profiling_failed(self, name: str, reason: str, now: float | None = None) -> bool:
        """The pre-run measured nothing usable: the job is dropped (no curve, no guarantee)."""
        now = self.clock() if now is None else now
        with self.store.transaction():
            rec = self.store.get_job(name)
            if rec is None or not rec.pending:
                return False
            why = f"profiling failed: {reason}"
            self.store.record_admission(name, False, why, None, False, now)
            self.store.append_event("profiling_failed", name, ts=now, reason=reason)
            rec.state = "dropped"
            rec.reason = why
            rec.finish_time = now
            self.store.put_job(rec)
            self.store.append_event("dropped", name, ts=now, reason=why)
        return True

    def submit(self, spec: JobSpec, now: float | None = None) -> SubmitResult:
        """Admission control for one new job; admitted jobs are re-planned at once. A job
        whose pre-run just finished replaces its "profiling" record."""
        now = self.clock() if now is None else now
        if spec.profile is None:
            raise PlanError(400, "profile: no throughput profile yet (run the pre-run first)")
        with self.store.transaction():
            old = self.store.get_job(spec.name)
            if old is not None and old.active:
                raise PlanError(409, f"job {spec.name!r} exists and is {old.state}")
            if old is not None and old.pending and spec.submit_time != old.submit_time:
                raise PlanError(409, f"job {spec.name!r} exists and is {old.state}")
            # the active jobs at ``now`` for the decision; the plan that follows stores
            # them (writing thousands of rows here as well cost as much as a round)
            active = self._advance(now, write=False, account=False)[1]
            rec = new_record(spec, "admitted", spec.profile.as_dict())
            state = self.cluster_state(active, now)
            decision = self.policy.on_submit(self.core_job(rec), now, state)
            measured = tuple(r.name for r in active if self.trusted_measurements(r))
            reason = decision_reason(decision, spec)
            min_share = dict(decision.min_share) or None
            self.store.record_admission(
                spec.name, decision.admitted, reason, min_share, bool(measured), now
            )
            rec.reason = reason
            if not decision.admitted:
                rec.state = "dropped"
                rec.finish_time = now
            self.store.put_job(rec)
            if decision.admitted:
                self._admitted += 1
                seq = self._admitted
            self._guarantees_lost(decision.revoked, spec.name, now)
            self.store.append_event(
                "admitted" if decision.admitted else "dropped",
                spec.name,
                ts=now,
                reason=reason,
                min_share=min_share,
                measured_jobs=list(measured),
                restart_overhead=self.overhead,
                overheads=dict(self.overheads),
                deadline=spec.deadline,
                submitted_by=rec.owner,
            )
        gpus = 0
        if decision.admitted:
            gpus = self._plan_since(seq, now).allocation.get(spec.name, 0)
        return SubmitResult(
            spec.name, decision.admitted, reason, gpus, min_share, measured, decision.revoked
        )

    def _plan_since(self, seq: int, now: float) -> Plan:
        """A plan made after admission number ``seq`` was stored: the last one when it
        saw that admission (another submit's, or a round's), else the planning loop's next
        one when a loop runs and plans within ``loop_wait_s``, else a new one."""
        wake = self.wake_loop
        if wake is not None:
            wake()
            deadline = time.monotonic() + max(self.loop_wait_s, 3 * self._plan_s)
            with self._planned_cv:
                while self._planned < seq and time.monotonic() < deadline:
                    self._planned_cv.wait(timeout=max(0.0, deadline - time.monotonic()))
        with self._plan_lock:
            last = self._last_plan
            if last is not None and self._planned >= seq:
                return last
            return self.plan(now)

    def _guarantees_lost(self, names: tuple[str, ...], newcomer: str, now: float) -> None:
        """Admitted jobs whose deadline guarantee admission gave up while it decided on
        ``newcomer`` (``SlotLedger.try_admit``): they fell behind their reservation and
        no plan meets their deadline any more. They keep running on spare GPUs, or wait
        for some with none now: their record's reason says "at risk" from here on (also
        while they hold no GPU and have no predicted finish); the event says when and why
        the guarantee went."""
        why = (
            "deadline guarantee lost: behind its reservation and no plan meets its "
            f"deadline any more (given up while admitting {newcomer})"
        )
        for name in names:
            self.store.append_event("guarantee_lost", name, ts=now, reason=why, newcomer=newcomer)
            log.warning("job %s: %s", name, why)
            rec = self.store.get_job(name)
            if rec is not None and rec.active and not rec.reason.startswith("at risk"):
                rec.reason = f"at risk: {why}"
                self.store.put_job(rec)

    def dry_run(self, spec: JobSpec, now: float | None = None) -> DryRunResult:
        """What ``submit`` would decide now, creating nothing (``sbatch --test-only``).

        The same policy class decides, on a deep copy of the policy (its reservations)
        and of the stored active jobs moved to ``now`` in memory: nothing is written to
        the store and the live policy is not touched."""
        now = self.clock() if now is None else now
        if spec.profile is None:
            raise PlanError(400, "profile: no throughput profile yet (run the pre-run first)")
        with self.store.transaction():  # the planning loop holds this lock while it plans
            old = self.store.get_job(spec.name)
            active = self.store.active_jobs()
            policy = copy.deepcopy(self.policy)
            restored = self._restored
        if old is not None and (old.active or old.pending):
            raise PlanError(409, f"job {spec.name!r} exists and is {old.state}")
        served = {r.name: self._progress_to(r, now)[1] for r in active}  # copies, not written
        if self.complete_on_progress:  # what advance would complete before deciding
            for r in [r for r in active if r.done_iterations >= r.iterations - 1e-6]:
                policy.on_finish(r.name, now, ClusterState(self.total_gpus, self.slot))
                active.remove(r)
        state = self._state_of(active)
        for name in state.attained:
            state.attained[name] += served.get(name, 0.0)
        if not restored:
            policy.set_overhead(self.overhead)
            policy.restore(now, state)
        rec = new_record(spec, "admitted", spec.profile.as_dict())
        job = self.core_job(rec)
        decision = policy.on_submit(job, now, state)
        reason = decision_reason(decision, spec)
        gpus = 0
        finish: float | None = None
        if decision.admitted:
            state.jobs[spec.name] = job
            allocation = policy.schedule(now, state)
            gpus = max(0, int(allocation.get(spec.name, 0)))
            rec.gpus = gpus
            finish = self._predict(rec, now)
        return DryRunResult(
            name=spec.name,
            admitted=decision.admitted,
            reason=reason,
            gpus=gpus,
            min_share=dict(decision.min_share) or None,
            predicted_finish=finish,
            deadline=spec.deadline,
            now=now,
            revoked=decision.revoked,
        )

    def cancel(self, name: str, now: float | None = None, by: str | None = None) -> JobRecord:
        now = self.clock() if now is None else now
        with self.store.transaction():
            rec = self.store.get_job(name)
            if rec is None:
                raise PlanError(404, f"no job {name!r}")
            if not rec.active and not rec.pending:
                raise PlanError(409, f"job {name!r} is already {rec.state}")
            self.advance(now)
            rec = self.store.get_job(name)
            assert rec is not None
            self._finish(rec, "cancelled", now, f"cancelled by {by or 'user'}")
        return rec

    def finish(
        self,
        name: str,
        state: str,
        reason: str,
        now: float | None = None,
        at: float | None = None,
    ) -> None:
        """The executor saw the job end: ``completed`` (exit 0) or ``failed``. ``at``: when
        it really ended (its last metric line), if known; polling notices it later."""
        now = self.clock() if now is None else now
        with self.store.transaction():
            rec = self.store.get_job(name)
            if rec is None or not rec.active:
                return
            if state == "completed":
                rec.done_iterations = rec.iterations
            self._finish(rec, state, now, reason, at)

    def _finish(
        self, rec: JobRecord, state: str, now: float, reason: str, at: float | None = None
    ) -> None:
        old = rec.gpus
        rec.state = state
        rec.reason = reason
        rec.finish_time = at if at is not None and at <= now else now
        rec.gpus = 0
        rec.placement = []
        rec.predicted_finish = None
        self.store.put_job(rec)
        self._attained.pop(rec.name, None)
        self.policy.on_finish(rec.name, now, ClusterState(self.total_gpus, self.slot))
        if old:
            self.store.record_allocation(rec.name, 0, [], now)
        self.store.append_event(
            state,
            rec.name,
            ts=now,
            reason=reason,
            deadline=rec.deadline,
            deadline_met=rec.deadline_met,
            done_iterations=rec.done_iterations,
        )

    # -- progress ----------------------------------------------------------------------

    def advance(self, now: float) -> list[str]:
        """Move estimated progress of running jobs to ``now`` at their curve's speed;
        returns jobs that completed (only with ``complete_on_progress``)."""
        return self._advance(now)[0]

    def _advance(
        self, now: float, write: bool = True, account: bool = True
    ) -> tuple[list[str], list[JobRecord]]:
        """``advance``: (jobs completed, the active records moved to ``now``). With
        ``write=False`` the active records are left for the caller to store (a plan
        stores each once, with its new allocation, instead of twice). ``account=False``
        with it: the moved records are a look only (a submit's admission), nothing
        stored, the GPU-seconds served not counted (the next plan counts them from the
        stored progress, to the same ``now``: the same arithmetic, one step)."""
        done: list[str] = []
        still: list[JobRecord] = []
        with self.store.transaction():
            for rec in self.store.active_jobs():
                finished_at, served = self._progress_to(rec, now)
                if served and account:
                    self._attained[rec.name] = self._attained.get(rec.name, 0.0) + served
                if self.complete_on_progress and rec.done_iterations >= rec.iterations - 1e-6:
                    self._finish(rec, "completed", finished_at, "iterations done")
                    done.append(rec.name)
                    continue
                if write:
                    self.store.put_job(rec)
                still.append(rec)
        return done, still

    def _progress_to(self, rec: JobRecord, now: float) -> tuple[float, float]:
        """Move ``rec``'s estimated progress to ``now`` (in memory); (when its last
        iteration ran or ``now``, GPU-seconds served since its last update)."""
        last = rec.progress_ts if rec.progress_ts is not None else now
        finished_at = now
        served = 0.0
        if rec.gpus > 0 and now > last:
            speed = self.speed(rec)
            remaining = rec.iterations - rec.done_iterations
            if speed > 0 and remaining <= speed * (now - last):
                finished_at = last + remaining / speed  # when the last iteration ran
            rec.done_iterations = min(rec.iterations, rec.done_iterations + speed * (now - last))
            served = rec.gpus * (min(finished_at, now) - last)
        rec.progress_ts = now
        return finished_at, served

    # -- planning ----------------------------------------------------------------------

    def plan(self, now: float | None = None, force: bool = True) -> Plan:
        """The policy's allocation for the next slot and its placement; records changes.

        ``force=False`` is the periodic slot tick (``ClusterState.tick``, unless a job
        completed on its estimated progress just now): a sticky policy then keeps the
        current allocation while it still guarantees every minimum share; events (submit,
        completion, cancel, a refined curve) always re-plan.
        """
        now = self.clock() if now is None else now
        t0 = time.monotonic()
        with self.store.transaction():
            seen = self._admitted  # admissions commit under this lock: all before are in
            if self.ops.expire(now):  # an avoidance ran out: its GPU is placed again
                self.save_operations(now)
            ended, active = self._advance(now, write=False)  # each is stored by _record
            state = self.cluster_state(active, now)
            state.tick = is_tick(completed=bool(ended), event=force)  # the simulator's rule
            schedulable = active and state.total_gpus > 0
            allocation = self.policy.schedule(now, state) if schedulable else {}
            allocation = {j: int(n) for j, n in allocation.items() if n > 0 and j in state.jobs}
            allocation = self._pinned(allocation, state, now)
            blocked = self.blocked(now)
            moving = self._moving(active, blocked)
            if allocation == state.allocation and not moving:
                placement = {r.name: r.placement for r in active if r.gpus > 0}
            else:
                allocation, placement = self._placeable(allocation, active, blocked, moving, now)
            plan = Plan(now, allocation, placement)
            for rec in active:
                self._record(rec, plan, now)
            self._migrations_done(plan, now)
            plan.gpus = {rec.name: rec.gpus for rec in active}
            self._planned, self._last_plan = max(self._planned, seen), plan
        self._plan_s = time.monotonic() - t0
        with self._planned_cv:
            self._planned_cv.notify_all()
        return plan

    def next_decision(self, now: float) -> float | None:
        """When the planner wants to decide next without an outside event, on the slot
        grid: the policy's wakeup or the first predicted completion (the simulator's
        decision times). None: nothing is running and the policy waits for events."""
        best = math.inf
        active = self.store.active_jobs(copies=False)  # read only
        for rec in active:
            if rec.gpus > 0 and rec.predicted_finish is not None:
                best = min(best, rec.predicted_finish)
        wake = self.policy.next_wakeup(now, self.cluster_state(active, now))
        if wake is not None:
            best = min(best, wake)
        if math.isinf(best):
            return None
        nxt = slot_boundary(best, self.slot)
        if nxt <= now:
            nxt = slot_boundary(now, self.slot)
            if nxt <= now:
                nxt += self.slot
        return nxt

    def _record(self, rec: JobRecord, plan: Plan, now: float) -> None:
        """Store one job's new GPUs/placement, its predicted finish and at-risk state."""
        new = int(plan.allocation.get(rec.name, 0))
        where = plan.placement.get(rec.name, [])
        if new != rec.gpus or where != rec.placement:
            plan.changes.append(Change(rec.name, rec.gpus, new, where))
            self.store.record_allocation(rec.name, new, where, now)
            self.store.append_event(
                "rescaled", rec.name, ts=now, old_gpus=rec.gpus, new_gpus=new, placement=where
            )
        rec.gpus = new
        rec.placement = where
        rec.state = "running" if new > 0 else "admitted"
        rec.predicted_finish = self._predict(rec, now)
        if (
            rec.deadline is not None
            and rec.predicted_finish is not None
            and rec.predicted_finish > rec.deadline
            and not rec.reason.startswith("at risk")
        ):
            rec.reason = "at risk: predicted finish after the deadline"
            self.store.append_event(
                "deadline_at_risk",
                rec.name,
                ts=now,
                predicted_finish=rec.predicted_finish,
                deadline=rec.deadline,
            )
        self.store.put_job(rec)

    def observe_overhead(self, seconds: float, mode: str = SCALING_RESTART) -> None:
        """A measured rescale cost of some job scaling by ``mode``: for restarts the
        downtime from the stop request to its first metric line in the new containers (or
        stop + start when it prints none), for stop-free events the job's no-progress gap
        across the switch. Tracked per mode (EWMA)."""
        if math.isfinite(seconds) and seconds >= 0:
            a = self.alpha
            old = self.overheads.get(mode)
            self.overheads[mode] = seconds if not old else a * seconds + (1 - a) * old
            self._charge()

    def set_scaling(self, job: str, mode: str | None) -> None:
        """How ``job`` scales now (the executor's launch decided it); None: it ended."""
        if mode is None:
            self._modes.pop(job, None)
        else:
            self._modes[job] = mode
        self._charge()

    def _charge(self) -> None:
        charged = charged_overhead(self.overheads, self._modes.values())
        if charged != self.overhead:
            self.overhead = charged
            self.policy.set_overhead(self.overhead)  # charged in plans made from now on

    def _place(
        self,
        allocation: Mapping[str, int],
        active: Iterable[JobRecord],
        blocked: frozenset[GpuId] = frozenset(),
        moving: Mapping[str, tuple[GpuId, ...]] | None = None,
    ) -> dict[str, list[list[int]]]:
        """The placer's answer for ``allocation``: jobs stay where they are unless resized,
        in the way, on a ``blocked`` GPU, or ``moving`` (a migration: the job is offered
        the block on its target node as its current place, which the placer keeps)."""
        if self.placer is None:
            return {}
        current = {
            r.name: tuple((int(n), int(g)) for n, g in r.placement) for r in active if r.placement
        }
        for name, block in (moving or {}).items():
            if len(block) == allocation.get(name, 0):
                current[name] = block
        if blocked:
            result = self.placer.place(dict(allocation), current, blocked=blocked)
        else:
            result = self.placer.place(dict(allocation), current)
        return placement_lists(result)

    def _placeable(
        self,
        allocation: dict[str, int],
        active: list[JobRecord],
        blocked: frozenset[GpuId],
        moving: Mapping[str, tuple[GpuId, ...]],
        now: float,
    ) -> tuple[dict[str, int], dict[str, list[list[int]]]]:
        """The allocation and its placement. The policy counts GPUs, not nodes: on nodes
        of different sizes, or with GPUs blocked, a count may fit no block (8 + 8 on
        nodes of 8, 4, 2, 2). Then the largest job that does not fit is halved until the
        plan can be placed, with a ``placement_shrunk`` event, rather than failing the
        round."""
        alloc = dict(allocation)
        for _ in range(64):
            try:
                return alloc, self._place(alloc, active, blocked, moving)
            except PlacementError as exc:
                if not alloc:
                    raise
                name = max(alloc, key=lambda j: (alloc[j], j))
                old = alloc[name]
                if old > 1:
                    alloc[name] = old // 2
                else:
                    del alloc[name]
                said = (old, alloc.get(name, 0))
                if self._shrunk_said.get(name) == said:
                    continue  # said at an earlier round: once per change, not per round
                self._shrunk_said[name] = said
                self.store.append_event(
                    "placement_shrunk",
                    name,
                    ts=now,
                    gpus=old,
                    placed=alloc.get(name, 0),
                    reason=str(exc),
                )
                log.warning(
                    "job %s: %d GPUs cannot be placed (%s): %d", name, old, exc, alloc.get(name, 0)
                )
        raise PlacementError("no placeable allocation found")

    # -- operator requests (flowcon.allocator.elasticity makes them) ---------------------

    def _pinned(
        self, allocation: dict[str, int], state: ClusterState, now: float
    ) -> dict[str, int]:
        """The policy's allocation with operator pins (``flowcon scale``) honoured, fitted
        into the schedulable GPUs (``honour_pins``)."""
        pins = {j: int(p.gpus) for j, p in self.ops.pins.items() if p.gpus and j in state.jobs}
        if not pins and sum(allocation.values()) <= state.total_gpus:
            return allocation
        out, short = honour_pins(allocation, pins, self._shares(now), state.total_gpus)
        for name, missing in short.items():
            self.store.append_event(
                "scale_short",
                name,
                ts=now,
                pinned=pins[name],
                gpus=out.get(name, 0),
                reason=f"{missing} GPUs short: the schedulable GPUs are guaranteed to others",
            )
        return out

    def _moving(
        self, active: Iterable[JobRecord], blocked: frozenset[GpuId]
    ) -> dict[str, tuple[GpuId, ...]]:
        """Jobs to move this round: those on a blocked GPU (a drained node, an avoided GPU)
        map to () (placed afresh), those with a migration to a free block on its node."""
        if not blocked and not any(p.node for p in self.ops.pins.values()):
            return {}  # every round: nothing to look at unless an operator asked
        recs = list(active)
        out: dict[str, tuple[GpuId, ...]] = {}
        taken: set[GpuId] = set(blocked)
        for r in recs:
            taken.update((int(n), int(g)) for n, g in r.placement)
        names = [n for n, _ in self.nodes]
        for r in recs:
            where = [(int(n), int(g)) for n, g in r.placement]
            if any(p in blocked for p in where):
                out[r.name] = ()
            pin = self.ops.pins.get(r.name)
            if pin is None or pin.node is None or pin.node not in names or not where:
                continue
            node = names.index(pin.node)
            if all(n == node for n, _ in where):
                continue
            block = free_block_on_node(node, self.nodes[node][1], len(where), taken)
            if block is not None:
                out[r.name] = block
                taken.update(block)
        return out

    def _migrations_done(self, plan: Plan, now: float) -> None:
        """A job that now runs on the node it was asked to move to: the request is done."""
        names = [n for n, _ in self.nodes]
        changed = False
        for job, pin in list(self.ops.pins.items()):
            if pin.node is None or pin.node not in names:
                continue
            where = plan.placement.get(job) or []
            if where and all(names[int(n)] == pin.node for n, _ in where):
                self.ops.clear_node_pin(job)
                self.store.append_event("migrated", job, ts=now, node=pin.node, placement=where)
                changed = True
        if changed:
            self.save_operations(now)

    def _predict(self, rec: JobRecord, now: float) -> float | None:
        """When the job ends if it keeps its GPUs now (the next re-plan revises it)."""
        remaining = max(0.0, rec.iterations - rec.done_iterations)
        if remaining == 0:
            return now
        if rec.gpus <= 0:
            return None
        speed = self.speed(rec)
        return now + remaining / speed if speed > 0 else None

    # -- closed loop -------------------------------------------------------------------

    def ingest(self, node: str, m: Measurement, now: float | None = None) -> str:
        """One agent measurement (``MeasurementIntake.ingest``); a refined curve re-plans
        the job's reservation at once (``Policy.on_curve_change``)."""
        now = self.clock() if now is None else now
        outcome = self.intake.ingest(node, m, now)
        job = m.get("job")
        if outcome == "refined" and job:
            with self.store.transaction():
                state = self.cluster_state(self.store.active_jobs(), now)
                self.policy.on_curve_change(str(job), now, state)
        return outcome

    def observe_progress(self, name: str, step: float, ts: float) -> bool:
        """Progress read from the job's own metric lines (the executor's logs)."""
        return self.intake.observe_progress(name, step, ts)


OPERATIONS_KEY = "operations"  # the store's meta key of the operator requests


def charged_overhead(overheads: Mapping[str, float], modes: Iterable[str]) -> float:
    """The rescale overhead admission charges (one number for all jobs, the policy's): the
    largest measured cost among the modes the active jobs scale by, restart's when no job's
    mode is known. A stop-free mode not measured yet costs what a restart does (stop-free
    falls back to checkpoint-restart when it cannot do an event), so a job is never
    admitted on a pause nobody has seen."""
    wanted = set(modes) or {SCALING_RESTART}
    costs = []
    for mode in wanted:
        cost = overheads.get(mode)
        if cost is None and mode == SCALING_STOPFREE:
            cost = overheads.get(SCALING_RESTART)
        costs.append(cost or 0.0)
    return max(costs)


def placement_lists(plan: PlacementPlan) -> dict[str, list[list[int]]]:
    """The placer's plan as JSON: job -> [[node index, GPU index], ...]."""
    return {str(job): [[n, g] for n, g in where] for job, where in plan.placements.items()}


def decision_reason(decision: AdmissionDecision, spec: JobSpec) -> str:
    """The reason stored (and answered) with an admission decision."""
    if decision.reason:
        return str(decision.reason)
    if spec.deadline is None:
        return "best effort: runs on spare GPUs"
    return (
        "deadline guaranteed, minimum satisfactory share "
        f"{min_share_of(decision, spec.name)} GPUs now, "
        f"peak {peak_share_of(decision, spec.name)}"
    )


def min_share_of(decision: AdmissionDecision, name: str) -> int:
    return int(decision.min_share.get(name, 0))


def peak_share_of(decision: AdmissionDecision, name: str) -> int:
    plan = decision.plans.get(name)
    return max((plan.gpus if plan is not None else ()) or (0,))
