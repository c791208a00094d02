"""The allocator's decisions over the stored state, without touching any container.

The planner turns stored jobs into the core's ``Job`` objects, asks the core for
admission (minimum satisfactory share, Algorithm 1), allocation (Algorithm 2) and
placement (buddy allocation), and writes every decision back to the store. The daemon
then asks the executor to make the containers match.

Closed loop (beyond the paper): each job keeps an EWMA of the iterations/s the agents
measured at each GPU count. Once a GPU count has ``min_measurements`` samples, that value
replaces the profile at that point (``ThroughputCurve.with_measurement``), so admission of
later jobs and the deadline guarantees of admitted ones use the speed the job really has.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from flowcon.alloc.admission import AdmissionDecision, SlotLedger
from flowcon.alloc.allocation import distribute_spare
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.service.jobspec import JobSpec, ThroughputProfile
from flowcon.service.store import ACTIVE_STATES, JobRecord, Store

log = logging.getLogger(__name__)

# A refined speed that moved less than this (relative) is not worth a re-plan or an event.
REPLAN_CHANGE = 0.05


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
    min_share: Any
    measured_jobs: tuple[str, ...]  # admitted jobs whose measured speed entered the decision

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["decision"] = "admitted" if self.admitted else "dropped"
        out["measured_jobs"] = list(self.measured_jobs)
        return out


@dataclass(frozen=True)
class Change:
    """One job whose GPU count or placement changed in a plan."""

    job: str
    old_gpus: int
    new_gpus: int
    placement: list[Any]


@dataclass
class Plan:
    ts: float
    allocation: dict[str, int]
    placement: dict[str, list[Any]]
    changes: list[Change] = field(default_factory=list)


# ------------------------------------------------------------------ spec <-> record


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    """The parsed spec as JSON (deadline already absolute), for the store and the executor."""
    return {
        "name": spec.name,
        "image": spec.image,
        "command": list(spec.command),
        "global_batch_size": spec.global_batch_size,
        "iterations": spec.iterations,
        "submit_time": spec.submit_time,
        "deadline": spec.deadline,
        "best_effort": spec.best_effort,
        "min_gpus": spec.min_gpus,
        "max_gpus": spec.max_gpus,
        "profile": {str(g): v for g, v in spec.profile.points} if spec.profile else None,
        "env": dict(spec.env),
    }


def spec_from_dict(data: Mapping[str, Any]) -> JobSpec:
    profile = data.get("profile")
    return JobSpec(
        name=data["name"],
        image=data["image"],
        command=tuple(data["command"]),
        global_batch_size=int(data["global_batch_size"]),
        iterations=int(data["iterations"]),
        submit_time=float(data["submit_time"]),
        deadline=data.get("deadline"),
        best_effort=bool(data.get("best_effort", False)),
        min_gpus=int(data.get("min_gpus", 1)),
        max_gpus=data.get("max_gpus"),
        profile=ThroughputProfile.from_mapping({int(k): v for k, v in profile.items()})
        if profile
        else None,
        env=dict(data.get("env") or {}),
    )


def new_record(spec: JobSpec, state: str, profile: dict[str, Any], reason: str = "") -> JobRecord:
    """A job's first record: nothing done yet, hard deadline or best effort from its spec."""
    return JobRecord(
        name=spec.name,
        spec=spec_to_dict(spec),
        state=state,
        submit_time=spec.submit_time,
        deadline=spec.deadline,
        soft_deadline=False,
        iterations=float(spec.iterations),
        done_iterations=0.0,
        progress_ts=None,
        profile=profile,
        reason=reason,
    )


def _finite_positive(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) and out >= 0 else None


class Planner:
    """Admission, allocation, placement and the closed loop over one ``Store``.

    ``complete_on_progress``: mark a job completed when its estimated progress reaches its
    iterations (the simulator/dry-run path; with real containers the executor reports
    completion instead).
    """

    def __init__(
        self,
        store: Store,
        total_gpus: int,
        slot_seconds: float,
        placer: Any | None = None,
        ewma_alpha: float = 0.3,
        min_measurements: int = 2,
        complete_on_progress: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.total_gpus = total_gpus
        self.slot = slot_seconds
        self.placer = placer
        self.alpha = ewma_alpha
        self.min_measurements = min_measurements
        self.complete_on_progress = complete_on_progress
        self.clock = clock
        # seconds a checkpoint-restart costs, as measured by the executor (EWMA); charged
        # once per job in admission and minimum shares (SlotLedger's overhead)
        self.overhead = 0.0
        # job -> container ids the executor runs for it now (None = unknown, accept all)
        self.containers: dict[str, set[str]] = {}
        # container id -> the job's GPU count (world size) that container runs with: a
        # measurement belongs to the count it was taken at, even if a re-plan already
        # changed the job's allocation and the rescale has not happened yet
        self.container_gpus: dict[str, int] = {}
        self._speed_ts: dict[str, float] = {}  # container id -> ts of its last counted rate
        self._ledger: SlotLedger | None = None  # built on first use (see _ledger_for)

    # -- the job as the core sees it --------------------------------------------------

    def trusted_measurements(self, rec: JobRecord) -> dict[int, float]:
        return {
            g: v
            for g, v in rec.measured.items()
            if rec.measured_n.get(g, 0) >= self.min_measurements and v > 0
        }

    def curve(self, rec: JobRecord) -> ThroughputCurve:
        curve = ThroughputCurve(rec.profile)
        for gpus, speed in sorted(self.trusted_measurements(rec).items()):
            curve = curve.with_measurement(gpus, speed)
        return curve

    def core_job(self, rec: JobRecord) -> Job:
        spec = rec.spec
        return Job(
            job_id=rec.name,
            submit_time=rec.submit_time,
            iterations=rec.iterations,
            deadline=rec.deadline,
            soft_deadline=rec.soft_deadline,
            curve=self.curve(rec),
            min_gpus=int(spec.get("min_gpus") or 1),
            max_gpus=spec.get("max_gpus"),
            requested_gpus=int(spec.get("min_gpus") or 1),
            done_iterations=min(rec.done_iterations, rec.iterations),
            model=str(spec.get("model") or ""),
            batch_size=int(spec.get("global_batch_size") or 0),
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
            self.advance(now)
            active = self.store.active_jobs()
            rec = new_record(spec, "admitted", spec.profile.as_dict())
            decision = self._admit(self.core_job(rec), [self.core_job(r) for r in active], now)
            measured = tuple(r.name for r in active if self.trusted_measurements(r))
            reason = decision.reason or (
                "deadline guaranteed, minimum satisfactory share "
                f"{min_share_of(decision, spec.name)} GPUs now, "
                f"peak {peak_share_of(decision, spec.name)}"
                if spec.deadline is not None
                else "best effort: runs on spare GPUs"
            )
            min_share = _jsonable(getattr(decision, "min_share", None))
            self.store.record_admission(
                spec.name, decision.admitted, reason, min_share, bool(measured), now
            )
            rec.reason = reason
            if not decision.admitted:
                rec.state = "dropped"
                rec.finish_time = now
            self.store.put_job(rec)
            self.store.append_event(
                "admitted" if decision.admitted else "dropped",
                spec.name,
                ts=now,
                reason=reason,
                min_share=min_share,
                measured_jobs=list(measured),
                restart_overhead=self.overhead,
                deadline=spec.deadline,
            )
        gpus = 0
        if decision.admitted:
            plan = self.plan(now)
            gpus = plan.allocation.get(spec.name, 0)
        return SubmitResult(spec.name, decision.admitted, reason, gpus, min_share, measured)

    def cancel(self, name: str, now: float | None = None) -> JobRecord:
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
            self._finish(rec, "cancelled", now, "cancelled by user")
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
        done: list[str] = []
        with self.store.transaction():
            for rec in self.store.active_jobs():
                last = rec.progress_ts if rec.progress_ts is not None else now
                finished_at = now
                if rec.gpus > 0 and now > last:
                    speed = self.curve(rec).at(rec.gpus)
                    remaining = rec.iterations - rec.done_iterations
                    if speed > 0 and remaining <= speed * (now - last):
                        finished_at = last + remaining / speed  # when the last iteration ran
                    rec.done_iterations = min(
                        rec.iterations, rec.done_iterations + speed * (now - last)
                    )
                rec.progress_ts = now
                self.store.put_job(rec)
                if self.complete_on_progress and rec.done_iterations >= rec.iterations - 1e-6:
                    self._finish(rec, "completed", finished_at, "iterations done")
                    done.append(rec.name)
        return done

    # -- planning ----------------------------------------------------------------------

    def plan(self, now: float | None = None, force: bool = True) -> Plan:
        """Allocation for the next slot (Algorithm 2) and its placement; records changes.

        ``force=False`` is the periodic slot tick: the current allocation is kept unless
        some job now holds less than its minimum satisfactory share (it fell behind, or its
        share steps up now). Re-planning from scratch every slot would rescale jobs for
        marginal gains, and each rescale is a checkpoint-restart that costs real time;
        events (submit, completion, cancel, a refined curve) always re-plan.
        """
        now = self.clock() if now is None else now
        with self.store.transaction():
            self.advance(now)
            active = self.store.active_jobs()
            jobs = [self.core_job(r) for r in active]
            if not force and self._current_still_guarantees(jobs, active, now):
                allocation = {r.name: r.gpus for r in active if r.gpus > 0}
                placement = {r.name: r.placement for r in active if r.gpus > 0}
            else:
                allocation = self._allocate(jobs, now) if jobs else {}
                placement = self._place(allocation, active)
            plan = Plan(now, allocation, placement)
            for rec in active:
                new = int(allocation.get(rec.name, 0))
                where = placement.get(rec.name, [])
                if new != rec.gpus or where != rec.placement:
                    plan.changes.append(Change(rec.name, rec.gpus, new, where))
                    self.store.record_allocation(rec.name, new, where, now)
                    self.store.append_event(
                        "rescaled",
                        rec.name,
                        ts=now,
                        old_gpus=rec.gpus,
                        new_gpus=new,
                        placement=where,
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
        return plan

    def observe_overhead(self, seconds: float) -> None:
        """A measured (re)start cost of some job: the downtime from the stop request to
        its first metric line in the new containers (or stop + start when it prints none)."""
        if math.isfinite(seconds) and seconds >= 0:
            a = self.alpha
            self.overhead = seconds if self.overhead == 0 else a * seconds + (1 - a) * self.overhead
            if self._ledger is not None:
                self._ledger.overhead = self.overhead  # charged in plans made from now on

    def _ledger_for(self, jobs: Mapping[str, Job], now: float) -> SlotLedger:
        """The persistent minimum-satisfactory-share ledger (Algorithm 1), as the simulator's
        ElasticFlow policy keeps it: a job's reservation is made at admission and kept (and
        refreshed when the job falls behind it), not re-derived from scratch at every
        re-plan. Re-deriving fills every plan from its deadline backwards again, which
        keeps postponing the work of the jobs with near deadlines until they need many GPUs
        at the end; one restart then makes them miss. A restarted daemon rebuilds the
        ledger from the jobs' progress, in deadline order."""
        if self._ledger is None:
            self._ledger = SlotLedger(
                self.total_gpus, self.slot, origin=now, overhead=self.overhead
            )
            for j in sorted(
                (j for j in jobs.values() if j.needs_guarantee and j.remaining > 0),
                key=lambda j: (j.deadline, j.submit_time, j.job_id),
            ):
                self._ledger.try_admit(j, jobs, now)
        ledger = self._ledger
        for jid in [jid for jid in ledger.jobs() if jid not in jobs]:
            ledger.remove(jid)  # finished, cancelled or failed
        return ledger

    def _admit(self, job: Job, admitted: list[Job], now: float) -> AdmissionDecision:
        """Core Algorithm 1 on the ledger (it charges the measured restart overhead)."""
        jobs = {j.job_id: j for j in admitted}
        ledger = self._ledger_for(jobs, now)
        d = ledger.try_admit(job, {**jobs, job.job_id: job}, now)
        return AdmissionDecision(d.admitted, d.reason, ledger.shares(now), ledger.plans())

    def _shares(self, jobs: Mapping[str, Job], now: float) -> dict[str, int]:
        """Minimum shares now; jobs that fell behind their reservation (restart overheads,
        slower than profiled) are re-planned first, as the simulator's policy does."""
        ledger = self._ledger_for(jobs, now)
        behind = ledger.behind(jobs, now)
        if behind and ledger.refresh(behind, jobs, now):
            # no room next to the others' (possibly stale) reservations: re-plan everyone
            # from current progress, kept only if all still fit
            ledger.replan(jobs, now, lossless=True)
        return {jid: ledger.share(jid, now) for jid in jobs}

    def _allocate(self, jobs: list[Job], now: float) -> dict[str, int]:
        """Core Algorithm 2 on top of the minimum shares."""
        shares = self._shares({j.job_id: j for j in jobs}, now)
        return distribute_spare(jobs, shares, self.total_gpus, self.slot)

    def _current_still_guarantees(
        self, jobs: list[Job], active: list[JobRecord], now: float
    ) -> bool:
        if not active or sum(r.gpus for r in active) > self.total_gpus:
            return not active
        shares = self._shares({j.job_id: j for j in jobs}, now)
        return all(r.gpus >= shares.get(r.name, 0) for r in active)

    def _place(
        self, allocation: Mapping[str, int], active: Iterable[JobRecord]
    ) -> dict[str, list[Any]]:
        if self.placer is None:
            return {}
        current = {
            r.name: tuple((int(n), int(g)) for n, g in r.placement) for r in active if r.placement
        }
        result = self.placer.place(dict(allocation), current)
        return placement_lists(result)

    def _predict(self, rec: JobRecord, now: float) -> float | None:
        """When the job ends if it keeps its GPUs now (the next re-plan revises it)."""
        remaining = max(0.0, rec.iterations - rec.done_iterations)
        if remaining == 0:
            return now
        if rec.gpus <= 0:
            return None
        speed = self.curve(rec).at(rec.gpus)
        return now + remaining / speed if speed > 0 else None

    # -- closed loop -------------------------------------------------------------------

    def ingest(self, node: str, m: Mapping[str, Any], now: float | None = None) -> str:
        """Store one agent measurement and fold it into its job; returns what happened:
        "refined" (curve changed enough to re-plan), "applied", "stored" or "skipped: ..."."""
        now = self.clock() if now is None else now
        cid = str(m.get("container_id") or "")
        if not cid:
            return "skipped: no container_id"
        ts = _finite_positive(m.get("ts")) or now
        step = _finite_positive(m.get("step"))
        # the agent says iterations_per_second; iterations_per_s is this API's older name
        raw_speed = m.get("iterations_per_second", m.get("iterations_per_s"))
        speed = _finite_positive(raw_speed)
        value = m.get("value")
        value_f = _finite_positive(value) if value is not None else None
        job = m.get("job")
        job = str(job) if job else None
        with self.store.transaction():
            rec = self.store.get_job(job) if job else None
            gpus = (self._gpus_of(cid) or rec.gpus) if rec is not None else None
            self.store.add_measurement(
                ts=ts,
                node=str(node),
                job=job,
                container_id=cid,
                name=str(m.get("name") or ""),
                step=step,
                its_per_s=speed,
                metric=_str_or_none(m.get("metric")),
                value=value_f,
                gpus=gpus,
            )
            if rec is None or rec.state not in ACTIVE_STATES or rec.gpus <= 0:
                return "stored"
            known = self.containers.get(rec.name)
            if (
                known is not None
                and cid not in known
                and not any(k.startswith(cid) or cid.startswith(k) for k in known)
            ):
                return "stored"  # an old container of this job (before a rescale)
            outcome = "stored"
            if self._observe(rec, step, ts):
                outcome = "applied"
            if speed is not None and speed > 0 and ts <= self._speed_ts.get(cid, -1.0):
                speed = None  # the agent repeats its last rate when no new step came
            if speed is not None and speed > 0:
                self._speed_ts[cid] = ts
                g = self._gpus_of(cid) or rec.gpus
                n = int(rec.measured_n.get(g, 0))
                old = rec.measured.get(g)
                new = (
                    speed if old is None or n == 0 else self.alpha * speed + (1 - self.alpha) * old
                )
                before = self.curve(rec).at(g)
                rec.measured[g] = new
                rec.measured_n[g] = n + 1
                after = self.curve(rec).at(g)
                outcome = "applied"
                if n + 1 >= self.min_measurements and (
                    n + 1 == self.min_measurements or abs(after - before) > REPLAN_CHANGE * before
                ):
                    self.store.append_event(
                        "curve_refined",
                        rec.name,
                        ts=now,
                        gpus=g,
                        profile=rec.profile.get(g),
                        measured=new,
                        samples=n + 1,
                        before=before,
                        after=after,
                        node=node,
                    )
                    outcome = "refined"
            self.store.put_job(rec)
            if outcome == "refined" and self._ledger is not None and rec.name in self._ledger:
                # its reservation was planned with the old curve: re-plan it now, before
                # the next admission relies on it
                jobs = {r.name: self.core_job(r) for r in self.store.active_jobs()}
                self._ledger_for(jobs, now).refresh([rec.name], jobs, now)
        return outcome

    def _gpus_of(self, cid: str) -> int | None:
        for known, gpus in self.container_gpus.items():
            if known.startswith(cid) or cid.startswith(known):
                return gpus
        return None

    def _observe(self, rec: JobRecord, step: float | None, ts: float) -> bool:
        """A step the job reported replaces the estimate; the estimate then runs on from
        ``ts``. Older reports than the last one are ignored."""
        if step is None or (rec.observed_ts is not None and ts <= rec.observed_ts):
            return False
        rec.done_iterations = min(rec.iterations, step)
        rec.progress_ts = ts
        rec.observed_ts = ts
        return True

    def observe_progress(self, name: str, step: float, ts: float) -> bool:
        """Progress read from the job's own metric lines (the executor's logs)."""
        with self.store.transaction():
            rec = self.store.get_job(name)
            if rec is None or not rec.active or not self._observe(rec, step, ts):
                return False
            self.store.put_job(rec)
            return True


def placement_lists(result: Any) -> dict[str, list[Any]]:
    """Normalise the core's PlacementPlan to job -> JSON list of (node, gpu) slots."""
    raw: Any = result
    for attr in ("assignments", "placements", "placement", "jobs"):
        if hasattr(result, attr):
            raw = getattr(result, attr)
            break
    out: dict[str, list[Any]] = {}
    if isinstance(raw, Mapping):
        for job, where in raw.items():
            out[str(job)] = _jsonable(list(where) if not isinstance(where, list) else where)
    return out


def min_share_of(decision: Any, name: str) -> int:
    shares = getattr(decision, "min_share", None) or {}
    return int(shares.get(name, 0)) if isinstance(shares, Mapping) else 0


def peak_share_of(decision: Any, name: str) -> int:
    plans = getattr(decision, "plans", None) or {}
    plan = plans.get(name) if isinstance(plans, Mapping) else None
    return max(getattr(plan, "gpus", ()) or (0,))


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return _jsonable(asdict(value))
    return str(value)
