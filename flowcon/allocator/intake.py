"""Measurement intake: what the agents and the jobs' own metric lines say about running jobs.

Closed loop (beyond the ElasticFlow paper, whose curves are profiled once, section 5): each
job keeps an EWMA of the iterations/s the agents measured at each GPU count. Once a GPU count
has ``min_measurements`` samples, that value replaces the profile at that point
(``ThroughputCurve.with_measurement``), so admission of later jobs and the deadline
guarantees of admitted ones use the speed the job really has. Progress reported by a job
(its step) replaces the allocator's estimate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import cast

from flowcon.alloc.model import ThroughputCurve
from flowcon.allocator.store import ACTIVE_STATES, JobRecord, Store
from flowcon.contract import Measurement

# A refined speed that moved less than this (relative) is not worth a re-plan or an event.
REPLAN_CHANGE = 0.05


def _finite_positive(value: object) -> float | None:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None  # JSON's null, lists and objects too
    try:
        out = float(value)
    except ValueError:
        return None
    return out if math.isfinite(out) and out >= 0 else None


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _matches(a: str, b: str) -> bool:
    """Container ids match when one is a prefix of the other (short and full ids)."""
    return a.startswith(b) or b.startswith(a)


class MeasurementIntake:
    """Agents' measurements and jobs' progress, folded into the stored job records."""

    def __init__(
        self,
        store: Store,
        ewma_alpha: float = 0.3,
        min_measurements: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.alpha = ewma_alpha
        self.min_measurements = min_measurements
        self.clock = clock
        # job -> container ids the executor runs for it now (absent = unknown, accept all)
        self._containers: dict[str, set[str]] = {}
        # container id -> the job's GPU count (world size) that container runs with: a
        # measurement belongs to the count it was taken at, even if a re-plan already
        # changed the job's allocation and the rescale has not happened yet
        self._container_gpus: dict[str, int] = {}
        self._speed_ts: dict[str, float] = {}  # container id -> ts of its last counted rate
        # container id -> (ts, its share of its node's GPUs) from the agents' reports, kept
        # beside the throughput it came with (not stored: the last figure is what counts)
        self._gpu_util: dict[str, tuple[float, float]] = {}
        # (profile, trusted measurements) -> the curve they make
        self._curves: dict[tuple[tuple[tuple[int, float], ...], ...], ThroughputCurve] = {}

    # -- containers (told by the executor target) ---------------------------------------

    def set_containers(self, job: str, gpus_by_container: Mapping[str, int]) -> None:
        """The containers that run ``job`` now, each with the world size it runs at."""
        self._containers[job] = set(gpus_by_container)
        self._container_gpus.update(gpus_by_container)

    def forget_job(self, job: str) -> None:
        """The job's containers are gone."""
        for cid in self._containers.pop(job, set()):
            self._container_gpus.pop(cid, None)
            self._speed_ts.pop(cid, None)
            self._gpu_util.pop(cid, None)

    def gpu_utilization(self, job: str) -> float | None:
        """The mean GPU utilisation the agents last reported for the job's current
        containers (None: none reported one)."""
        known = self._containers.get(job, set())
        got = [
            u for cid, (_ts, u) in self._gpu_util.items() if any(_matches(k, cid) for k in known)
        ]
        return sum(got) / len(got) if got else None

    def containers_of(self, job: str) -> list[str]:
        return sorted(self._containers.get(job, set()))

    def _gpus_of(self, cid: str) -> int | None:
        exact = self._container_gpus.get(cid)  # the agents send the executor's own ids
        if exact is not None:
            return exact
        for known, gpus in self._container_gpus.items():
            if _matches(known, cid):
                return gpus
        return None

    def _current(self, job: str, cid: str) -> bool:
        known = self._containers.get(job)
        return known is None or cid in known or any(_matches(k, cid) for k in known)

    # -- the job's curve -----------------------------------------------------------------

    def trusted_measurements(self, rec: JobRecord) -> dict[int, float]:
        return {
            g: v
            for g, v in rec.measured.items()
            if rec.measured_n.get(g, 0) >= self.min_measurements and v > 0
        }

    def curve(self, rec: JobRecord) -> ThroughputCurve:
        """The profile corrected by the trusted measurements; a curve is immutable, so
        one object serves every round until the job's points change."""
        trusted = sorted(self.trusted_measurements(rec).items())
        key = (tuple(rec.profile.items()), tuple(trusted))
        curve = self._curves.get(key)
        if curve is None:
            curve = ThroughputCurve(rec.profile)
            for gpus, speed in trusted:
                curve = curve.with_measurement(gpus, speed)
            if len(self._curves) >= 50_000:
                self._curves.clear()
            self._curves[key] = curve
        return curve

    # -- intake --------------------------------------------------------------------------

    def ingest(self, node: str, m: Measurement, now: float | None = None) -> str:
        """Store one agent measurement and fold it into its job; returns what happened:
        "refined" (curve changed enough to re-plan), "applied", "stored" or "skipped: ..."."""
        now = self.clock() if now is None else now
        raw = cast(Mapping[str, object], m)
        cid = str(raw.get("container_id") or "")
        if not cid:
            return "skipped: no container_id"
        ts = _finite_positive(raw.get("ts")) or now
        step = _finite_positive(raw.get("step"))
        # the agent says iterations_per_second; iterations_per_s is this API's older name
        speed = _finite_positive(raw.get("iterations_per_second", raw.get("iterations_per_s")))
        job = str(raw["job"]) if raw.get("job") else None
        gpu_util = _finite_positive(raw.get("gpu_utilization"))  # absent from older agents
        if gpu_util is not None and ts >= self._gpu_util.get(cid, (-1.0, 0.0))[0]:
            self._gpu_util[cid] = (ts, gpu_util)
        with self.store.transaction():
            rec = self.store.get_job(job) if job else None
            value = raw.get("value")
            self.store.add_measurement(
                ts=ts,
                node=str(node),
                job=job,
                container_id=cid,
                name=str(raw.get("name") or ""),
                step=step,
                its_per_s=speed,
                metric=_str_or_none(raw.get("metric")),
                value=_finite_positive(value) if value is not None else None,
                gpus=(self._gpus_of(cid) or rec.gpus) if rec is not None else None,
            )
            if rec is None or rec.state not in ACTIVE_STATES or rec.gpus <= 0:
                return "stored"
            if not self._current(rec.name, cid):
                return "stored"  # an old container of this job (before a rescale)
            outcome = "applied" if self._observe(rec, step, ts) else "stored"
            if speed is not None and speed > 0 and ts > self._speed_ts.get(cid, -1.0):
                # (the agent repeats its last rate when no new step came: not counted)
                self._speed_ts[cid] = ts
                outcome = self._fold_speed(rec, cid, speed, node, now)
            if outcome != "stored":  # a row with neither step nor rate changes no job
                self.store.put_job(rec)
        return outcome

    def _fold_speed(self, rec: JobRecord, cid: str, speed: float, node: str, now: float) -> str:
        """EWMA of the measured speed at the container's GPU count; "refined" when the
        curve the planner uses changed enough (an event is logged)."""
        g = self._gpus_of(cid) or rec.gpus
        n = int(rec.measured_n.get(g, 0))
        old = rec.measured.get(g)
        new = speed if old is None or n == 0 else self.alpha * speed + (1 - self.alpha) * old
        before = self.curve(rec).at(g)
        rec.measured[g] = new
        rec.measured_n[g] = n + 1
        after = self.curve(rec).at(g)
        if n + 1 < self.min_measurements or (
            n + 1 != self.min_measurements and abs(after - before) <= REPLAN_CHANGE * before
        ):
            return "applied"
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
        return "refined"

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
