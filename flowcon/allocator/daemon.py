"""The allocator daemon: HTTP API + planning loop + executor, around one SQLite store.

Threads: the HTTP server handles requests (submit/cancel/measurements go through the
planner under one lock); the planning loop wakes every slot, or at once when a submit,
cancel, completion or a refined curve asks for it, and makes the executor's containers
match the stored plan. The store is written before containers are touched, so a crash
between the two is repaired by the next round (the executor's state is compared with the
store every round, not patched incrementally).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import FrameType
from typing import Any, TypeVar, cast

from flowcon.alloc.operations import OperationError
from flowcon.allocator.api import ApiError, ApiServer
from flowcon.allocator.auth import Credentials, Principal
from flowcon.allocator.config import AllocatorConfig, ConfigError, ensure_token
from flowcon.allocator.elasticity import Elasticity
from flowcon.allocator.metrics import AllocatorMetrics
from flowcon.allocator.planner import Plan, PlanError, Planner
from flowcon.allocator.quota import prerun_allowance, spec_quota_problem
from flowcon.allocator.store import (
    ACTIVE_STATES,
    PENDING_STATES,
    SCHEMA_VERSION,
    JobRecord,
    Store,
    write_failure,
)
from flowcon.allocator.target import ExecutorTarget, build_placer, build_target
from flowcon.allocator.views import (
    AdmissionView,
    AllocationView,
    Answer,
    EventView,
    JobDetail,
    JobView,
    LogLineView,
    LogPage,
    NodeView,
    ProfilingAnswer,
    SpecTexts,
)
from flowcon.contract import SCALING_RESTART, SCALING_STOPFREE, TOOLKIT_STATES, Measurement
from flowcon.executor.backend import ExecutorError
from flowcon.executor.container_spec import settings_for
from flowcon.executor.node_fs import node_checks
from flowcon.executor.profiling import prerun_refusal
from flowcon.executor.reach import Reach
from flowcon.jobspec.spec import JobSpec, JobSpecError, ThroughputProfile, parse_jobspec
from flowcon.tls import server_context
from flowcon.web.health import Liveness
from flowcon.web.history import History

T = TypeVar("T")

# How old a job list may be when a call answers with it while another call encodes the
# list afresh (``Allocator.jobs_body``).
LIST_STALE_S = 1.0

log = logging.getLogger(__name__)


class Allocator:
    """The service behind the HTTP API (``flowcon.allocator.api.Service``)."""

    def __init__(
        self,
        cfg: AllocatorConfig,
        target: ExecutorTarget | None = None,
        total_gpus: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.store = Store(cfg.db_path)
        self.token = ensure_token(cfg)  # the operator's: valid for every role
        self.credentials = Credentials(
            operator=self.token,
            user=cfg.user_token,
            read=cfg.read_token,
            agent=cfg.agent_token,
            users=cfg.users,
        )
        self.target = target
        # what a job's containers may reach: checked at submit and its dry run
        self.reach = Reach.from_config(cfg.section("executor"))
        inventory = target.inventory if target is not None else None
        if total_gpus is None:
            if inventory is None:
                raise ValueError("need an executor target (GPU inventory) or total_gpus")
            total_gpus = inventory.total_gpus
        if total_gpus < 1:
            # a configuration problem the operator fixes, said in one line (not a traceback)
            raise ConfigError(
                "no GPUs to allocate: NVML found none on this host and the config declares"
                " none; declare the cluster's GPUs (gpus: {declared: {nodes: [{name: node1,"
                " gpus: 4}]}}, docs/allocator.md)"
            )
        self.total_gpus = total_gpus
        self.planner = Planner(
            self.store,
            total_gpus,
            cfg.slot_seconds,
            placer=build_placer(inventory) if inventory is not None else None,
            ewma_alpha=cfg.ewma_alpha,
            min_measurements=cfg.min_measurements,
            complete_on_progress=target is None,
            clock=clock,
            policy=cfg.policy,
            nodes=[(n.name, n.count) for n in inventory.nodes if n.count > 0] if inventory else (),
        )
        self.elasticity = Elasticity(self.planner)
        # the restart cost measured before a daemon restart still holds
        for mode, cost in overhead_costs(self.store)[-20:]:
            self.planner.observe_overhead(cost, mode)
        self.metrics = AllocatorMetrics(self.store, total_gpus)
        # one planning round at a time; HTTP calls only touch the store (its own lock)
        # and wake the loop, so a slow container stop never blocks a submit
        self._lock = threading.RLock()
        self.poll_seconds = min(2.0, cfg.slot_seconds / 4)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self.server: ApiServer | None = None
        self.rounds = 0
        self.last_round_error: str | None = None
        # /healthz: the loop polls every poll_seconds and plans every slot; unhealthy when
        # no iteration completed for 3 slots, or the last one failed (engine, executor)
        self.liveness = Liveness(max(cfg.slot_seconds, 10.0))
        # /api/v1/history: GPUs per job after each planning round (the store keeps the rest)
        self.gpu_history = History()
        self._profilers: dict[str, threading.Thread] = {}
        # node -> its NVIDIA toolkit's state, as its agent last reported (flowcon nodes)
        self._toolkit: dict[str, str] = {}
        # the GPUs each job's pre-run (or profiling by scaling) holds now: lent to no other
        self._prerun_held: dict[str, set[str]] = {}
        self._prerun_lock = threading.Lock()
        # GET /api/v1/jobs bodies by (store generation, whose view); one encodes at a time
        self._jobs_bodies: dict[tuple[int, str | None], bytes] = {}
        # per kind of caller: the last list, when it was last known current, and the
        # count of requests that changed jobs (submits, cancels, operations) before it
        self._last_bodies: dict[str | None, tuple[float, bytes, int]] = {}
        self._requests = 0
        self._jobs_lock = threading.Lock()
        self._spec_texts = SpecTexts()  # each spec's JSON in the list, encoded once
        self._job_parts: dict[int, tuple[JobRecord, str | None, str | None]] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def start(
        self, host: str | None = None, port: int | None = None, plan_loop: bool = True
    ) -> None:
        """Adopt what runs, plan once, serve the API and start the planning loop
        (``plan_loop=False``: no loop; whoever started it calls ``plan_round``)."""
        self.store.append_event(
            "allocator_started",
            None,
            total_gpus=self.total_gpus,
            slot=self.cfg.slot_seconds,
            executor=self.target.kind if self.target else "none",
        )
        with self._lock:
            if self.target is not None:
                self._refuse_weak_nodes()
                self.target.reconcile_on_start(self.store, self.planner)
            self._round()
        self.liveness.beat()
        for rec in self.store.list_jobs(("profiling",)):
            # interrupted pre-run (its containers were removed above): run it again
            if self.target is None:
                self.planner.profiling_failed(rec.name, "the daemon has no executor now")
                continue
            spec = rec.spec
            self.store.append_event("profiling_restarted", rec.name)
            self._start_profiling(spec, spec.gpu_counts_to_profile(self.total_gpus))
        tls = None
        if self.cfg.tls_cert_file and self.cfg.tls_key_file:
            tls = server_context(self.cfg.tls_cert_file, self.cfg.tls_key_file)
        self.server = ApiServer(
            self,
            self.credentials,
            host=host or self.cfg.host,
            port=self.cfg.port if port is None else port,
            tls=tls,
        )
        self.server.start()
        if plan_loop:
            self._loop = threading.Thread(target=self._run, name="allocator-plan", daemon=True)
            self._loop.start()
            self.planner.wake_loop = self.wake  # a submit's plan is the loop's next one
        log.info(
            "allocator on %s: %d GPUs, slot %.0f s, db %s",
            self.server.url,
            self.total_gpus,
            self.cfg.slot_seconds,
            self.cfg.db_path,
        )

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def stop(self, stop_jobs: bool = False) -> None:
        """Stop serving. Job containers keep running (a restart adopts them) unless
        ``stop_jobs``."""
        self._stop.set()
        self._wake.set()
        self.planner.wake_loop = None
        if self.server is not None:
            self.server.stop()
        if self._loop is not None:
            self._loop.join(timeout=30)
        for th in list(self._profilers.values()):
            th.join(timeout=30)  # a pre-run stops at its next poll and removes its containers
        if self.target is not None:
            if stop_jobs:
                for rec in self.store.active_jobs():
                    self.target.stop_job(rec.name)
            self.target.close()
        self.store.append_event("allocator_stopped", None, stop_jobs=stop_jobs)
        self.store.close()

    def wake(self) -> None:
        self._wake.set()

    def plan_round(self, force: bool = True) -> Plan:
        """One iteration of the planning loop, now: poll the executor, plan, make the
        containers match (``force=False``: a slot tick, ``force=True``: an event)."""
        with self._lock:
            ended = self._poll()
            return self._round(polled=True, force=force or bool(ended))

    def _run(self) -> None:
        """Poll the executor every few seconds (completions, dead workers, progress); plan
        every slot, or at once when woken or when a job ended."""
        next_plan = time.monotonic() + self.cfg.slot_seconds
        while not self._stop.is_set():
            timeout = max(0.0, min(self.poll_seconds, next_plan - time.monotonic()))
            woken = self._wake.wait(timeout=timeout)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                with self._lock:
                    ended = self._poll()
                    if woken or ended or time.monotonic() >= next_plan:
                        self._round(polled=True, force=woken or bool(ended))
                        next_plan = time.monotonic() + self.cfg.slot_seconds
                self.last_round_error = None
                self.liveness.engine_ok()
                self.liveness.beat()
            except Exception as exc:  # keep planning; the next round retries
                failed = write_failure(exc)
                error = str(exc) if failed is None else f"the store cannot be written: {failed[1]}"
                if failed is None:
                    log.exception("planning round failed")
                elif error != self.last_round_error:  # once per outage, not every slot
                    log.error("planning round failed: %s (retried every slot)", error)
                self.last_round_error = error
                self.liveness.engine_failed(error)
                self.metrics.round_error()

    def _poll(self) -> list[str]:
        """Jobs that ended (completed or failed for good) since the last poll; progress of
        running jobs from their own metric lines."""
        if self.target is None:
            return []
        now = self.clock()
        ended = []
        for name, state, reason in self.target.poll(self.store, self.metrics, self._left):
            at = None
            rec = self.store.get_job(name)
            metric = rec.spec.metric if rec is not None else None
            seen = self.target.progress(name, metric) if state == "completed" else None
            if seen is not None and rec is not None and seen[0] >= rec.iterations:
                at = seen[1]  # the job's own "last iteration done" line
            self.planner.finish(name, state, reason, now, at=at)
            log.info("job %s %s: %s", name, state, reason)
            ended.append(name)
        for rec in self.store.active_jobs(copies=False):  # read only
            if rec.gpus > 0:
                since = self.target.resume_pending(rec.name)
                first, seen = self.target.progress_since(rec.name, since, rec.spec.metric)
                if seen is not None:
                    self.planner.observe_progress(rec.name, *seen)
                if since is not None:
                    self.target.note_resumed(self.store, self.planner, rec.name, first, now)
        return ended

    def _left(self, job: str, node: str, gpus: tuple[str, ...], reason: str) -> None:
        """A stop-free worker left: a straggler's GPUs are avoided by placement for
        ``straggler_avoid_seconds`` (EDL 5.2 removes it; this keeps it from coming back)."""
        if reason == "straggler" and node and gpus:
            seconds = self.cfg.straggler_avoid_seconds
            indices = self._gpu_indices(node, gpus)
            avoided = self.elasticity.avoid(job, node, indices, reason, seconds, self.clock())
            if avoided:
                log.info("job %s: avoiding %s GPUs %s for %.0f s", job, node, avoided, seconds)

    def _gpu_indices(self, node: str, gpus: tuple[str, ...]) -> tuple[str, ...]:
        """The containers' GPU ids (UUIDs, as their labels carry them) as the indices
        placement uses on ``node``; an id the inventory does not know is left out."""
        if self.target is None:
            return gpus
        try:
            nd = self.target.inventory.node(node)
        except KeyError:
            return ()
        index_of = {u: str(i) for i, u in enumerate(nd.uuids(list(range(nd.count))))}
        return tuple(index_of.get(g, g) for g in gpus if g in index_of or g.isdigit())

    def _round(self, polled: bool = False, force: bool = True) -> Plan:
        """One slot: collect finished/dead jobs, re-plan, make containers match."""
        t0 = time.perf_counter()
        if not polled:
            self._poll()
        plan = self.planner.plan(self.clock(), force=force)
        if self.target is not None:
            self.target.apply(self.store, self.planner)
        self.rounds += 1
        self.metrics.observe_round(time.perf_counter() - t0)
        self.gpu_history.append(self.clock(), jobs=dict(plan.gpus))
        return plan

    # -- Service (HTTP) ----------------------------------------------------------------

    def health(self) -> dict[str, object]:
        """``status`` "ok" (HTTP 200) or "unhealthy" (503): the planning loop completed no
        iteration for 3 slots, or its last one failed."""
        body = self.liveness.check(
            component="allocator",
            schema_version=SCHEMA_VERSION,
            total_gpus=self.total_gpus,
            slot_seconds=self.cfg.slot_seconds,
            executor=self.target.kind if self.target else "none",
            last_round_error=self.last_round_error,
        ).body
        body["rounds"] = self.rounds
        return body

    def history(self, since: float | None = None) -> dict[str, object]:
        """What the live view polls: jobs (no spec, no env), GPUs per job over time and
        the admission decisions with their reasons."""
        keep = (
            "name",
            "state",
            "submit_time",
            "deadline",
            "soft_deadline",
            "predicted_finish",
            "finish_time",
            "iterations",
            "done_iterations",
            "progress",
            "gpus",
            "reason",
        )
        views = (JobView.fields_of(r) for r in self.store.list_jobs(copies=False))
        jobs = [{k: v[k] for k in keep} for v in views]
        return {
            "now": self.clock(),
            "total_gpus": self.total_gpus,
            "slot_seconds": self.cfg.slot_seconds,
            "jobs": jobs,
            "gpus": self.gpu_history.points(since),
            "admissions": self.store.admissions()[-200:],
        }

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def _may(self, rec: JobRecord, who: Principal | None) -> bool:
        """Whether ``who`` may act on ``rec``: its owner or the operator (None: a call from
        inside the process). Without named users (the shared-token set-up, not
        multi-tenant: docs/security.md) every token with the role may, as before."""
        return (
            who is None
            or who.operator
            or rec.owner == who.name
            or not self.credentials.multi_tenant
        )

    def _own(self, rec: JobRecord, who: Principal | None, what: str) -> None:
        """403 unless ``who`` may ``what`` ``rec`` (``_may``)."""
        if self._may(rec, who):
            return
        raise ApiError(
            403,
            f"job {rec.name!r} belongs to {rec.owner}: only its owner or the operator may"
            f" {what} it",
            owner=rec.owner,
        )

    def list_jobs(self, who: Principal | None = None) -> list[JobView]:
        """Every job's name, state, owner and GPUs; another user's spec is left out for
        a caller who may not see its detail."""
        recs = self.store.list_jobs(copies=False)  # read only
        views = [(JobView.of(rec), self._may(rec, who)) for rec in recs]
        return [view if may else replace(view, spec={}) for view, may in views]

    def jobs_body(self, who: Principal | None = None) -> bytes:
        """``GET /api/v1/jobs``'s JSON, encoded once per change of the store and kind of
        caller (with named users each sees other users' specs as ``{}``), not once per
        call: 50 clients listing 2,000 jobs otherwise starve the planning loop.

        While another call encodes the list afresh, a call answers at once with the last
        list (for the same kind of caller) if that one was current at most
        ``LIST_STALE_S`` ago, instead of queueing behind the encoding: every round changes
        every running job, and listing would otherwise wait for an encoding of the whole
        list after each round. Only rounds' changes lag so: a list from before a submit,
        cancel or operator request is not served after it (a client sees its own submit
        in its next list); with nothing being encoded the answer is always current."""
        mine = self.credentials.multi_tenant and who is not None and not who.operator
        whose = who.name if mine and who is not None else None
        key = (self.store.generation, whose)
        requests = self._requests  # before the rows
        body = self._jobs_bodies.get(key)
        if body is not None:
            last = self._last_bodies.get(whose)
            if last is not None and last[1] is body:
                self._last_bodies[whose] = (time.monotonic(), body, last[2])  # current now
            return body
        if not self._jobs_lock.acquire(blocking=False):
            last = self._last_bodies.get(whose)
            if (
                last is not None
                and last[2] == requests
                and time.monotonic() - last[0] <= LIST_STALE_S
            ):
                return last[1]  # only rounds changed jobs since: it lags them at most that
            self._jobs_lock.acquire()
        try:
            body = self._jobs_bodies.get(key)
            if body is None:
                body = self._encode_jobs(who)
                bodies = {k: v for k, v in self._jobs_bodies.items() if k[0] == key[0]}
                bodies[key] = body
                self._jobs_bodies = bodies  # replaced whole: read above without the lock
                self._last_bodies[whose] = (time.monotonic(), body, requests)
        finally:
            self._jobs_lock.release()
        return body

    def _encode_jobs(self, who: Principal | None) -> bytes:
        """The job list's JSON. Each job's part is kept by record object (the store hands
        out the same object until the row is written again), with its spec shown and
        hidden: a round re-encodes the jobs it wrote, a submit one job, not the list."""
        old = self._job_parts
        parts: dict[int, tuple[JobRecord, str | None, str | None]] = {}
        out = []
        for rec in self.store.list_jobs(copies=False):
            known = old.get(id(rec))
            _, shown, hidden = known if known is not None and known[0] is rec else (rec, None, None)
            if self._may(rec, who):
                if shown is None:
                    shown = JobView.encoded(rec, self._spec_texts(rec.spec))
                out.append(shown)
            else:
                if hidden is None:
                    hidden = JobView.encoded(rec, "{}")
                out.append(hidden)
            parts[id(rec)] = (rec, shown, hidden)
        self._job_parts = parts
        return ('{"jobs": [' + ", ".join(out) + "]}").encode()

    def get_job(self, name: str, who: Principal | None = None) -> JobDetail:
        rec = self.store.get_job(name)
        if rec is None:
            raise ApiError(404, f"no job {name!r}")
        self._own(rec, who, "read")
        curve = self.planner.curve(rec).points if rec.profile else {}  # none while profiling
        return JobDetail(
            **JobView.fields_of(rec),
            curve={str(g): v for g, v in curve.items()},
            admissions=[AdmissionView(**a) for a in self.store.admissions(name)],
            allocations=[
                AllocationView(a["ts"], a["gpus"], a["placement"])
                for a in self.store.allocations(name)
            ],
            events=[EventView.of(e) for e in self.store.events(job=name)],
            containers=self.planner.intake.containers_of(name),
            pin=self.elasticity.pins_of(name),
            avoided=self.elasticity.avoided_by(name, self.clock()),
        )

    def _parse(self, spec: Mapping[str, object], now: float) -> JobSpec:
        """The spec, checked, and within what the operator lets a job reach (400 naming
        the field and the rule otherwise: flowcon/executor/reach.py)."""
        try:
            parsed = parse_jobspec(spec, now=now, allow_files=False)
        except JobSpecError as exc:
            raise ApiError(400, str(exc), field=exc.field, errors=exc.problems) from None
        refused = self.reach.problems(parsed)
        if refused:
            errors = [f"{f}: {m}" for f, m in refused]
            raise ApiError(400, errors[0], field=refused[0][0], errors=errors)
        return parsed

    def _owned_spec(
        self,
        spec: Mapping[str, object],
        who: Principal | None,
        now: float,
        later: list[str] | None = None,
    ) -> JobSpec:
        """The parsed spec with its owner (the caller; the operator for in-process calls);
        a name that exists may be reused or tried only by its owner (or the operator).
        The node-side checks run too where the engine is the node (``later`` gets the ones
        that happen only when the job starts)."""
        parsed = self._parse(spec, now)
        old = self.store.get_job(parsed.name)
        if old is not None:
            self._own(old, who, "reuse the name of")
        owner = who.name if who is not None else "operator"
        quota = self.cfg.quotas.get(owner)
        if quota is not None:
            mine = self.store.list_jobs(PENDING_STATES + ACTIVE_STATES)
            shares = self.planner.guaranteed_shares(now)
            why = spec_quota_problem(owner, quota, mine, parsed, shares)
            if why:
                raise ApiError(403, why, field="quota")
        owned = replace(parsed, owner=owner)
        refused = self.reach.problems(owned)  # the owner's own uid/gid ranges
        deferred: list[str] = []
        if not refused:
            refused, deferred = self._node_checks(owned)
        if refused:
            errors = [f"{f}: {m}" for f, m in refused]
            raise ApiError(400, errors[0], field=refused[0][0], errors=errors)
        if later is not None:
            later += deferred
        return owned

    def _node_checks(self, spec: JobSpec) -> tuple[list[tuple[str, str]], list[str]]:
        """What the executor checks on a worker's node before its container is made, run
        now on the engine backend (the local engine is every node): a host path's links,
        the user's uid:gid in the image (flowcon/executor/node_fs.py). Elsewhere (Swarm, no
        executor) they happen at start: the second list says which."""
        target = self.target
        backend = target.executor.backend if target is not None else None
        client = getattr(backend, "client", None) if target and target.kind == "engine" else None
        options = getattr(target.executor, "options", None) if target is not None else None
        labels = dict(getattr(options, "extra_labels", None) or {})  # a test's label
        return node_checks(client, spec.image, settings_for(spec, 1, self.reach), labels)

    def submit(
        self, spec: Mapping[str, object], who: Principal | None = None
    ) -> tuple[int, Answer]:
        now = self.clock()
        parsed = self._owned_spec(spec, who, now)
        try:
            if parsed.profile_auto:
                return self._submit_auto(parsed, now)
            result = self.planner.submit(parsed, now)
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        finally:
            self._requests += 1  # a list from before it is not served to anyone (jobs_body)
        self.metrics.admission(result.admitted)
        if result.admitted:
            self.wake()  # start its containers now, not at the next slot
        return (201 if result.admitted else 200), result

    def dry_run(self, spec: Mapping[str, object], who: Principal | None = None) -> Answer:
        """What ``submit`` would answer now, creating nothing (``sbatch --test-only``): the
        planner's policy decides on a copy of its state."""
        now = self.clock()
        later: list[str] = []
        parsed = self._owned_spec(spec, who, now, later)
        if parsed.profile_auto:
            counts = self._profile_counts(parsed)
            return ProfilingAnswer(
                parsed.name,
                f"valid; profile: auto: a submit pre-runs it at "
                f"{', '.join(map(str, counts))} GPUs, admission is decided after",
                counts,
                dry_run=True,
            )
        try:
            result = self.planner.dry_run(parsed, now)
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        return replace(result, checked_at_start=tuple(later))

    def job_logs(
        self,
        name: str,
        rank: int | None = None,
        after_ns: int = 0,
        tail: int | None = None,
        who: Principal | None = None,
    ) -> LogPage:
        """Output lines of the job's worker containers (services on Swarm), newer than
        ``after_ns``; ``cursor`` is what the next page asks ``after``."""
        rec = self.store.get_job(name)
        if rec is None:
            raise ApiError(404, f"no job {name!r}")
        self._own(rec, who, "read the logs of")
        ranks: list[int] = []
        lines: list[LogLineView] = []
        note = None
        if self.target is not None:
            try:
                ranks, lines = self.target.job_logs(name, rank, after_ns, tail)
            except Exception as exc:  # engine down: say so, the next page retries
                raise ApiError(502, f"logs of {name}: {exc}") from None
        else:
            note = "this allocator runs no executor: no containers, no logs"
        cursor = str(max((ln.ts_ns for ln in lines), default=after_ns))
        return LogPage(name, rec.state, ranks, lines, cursor, note)

    # -- profile: auto -----------------------------------------------------------------

    def _submit_auto(self, spec: JobSpec, now: float) -> tuple[int, Answer]:
        """202 "profiling": the pre-run runs on its own thread (it takes seconds to
        minutes); the decision follows in the job's record, events and admissions."""
        counts = self._profile_counts(spec)
        try:
            self.planner.begin_profiling(spec, counts, now)
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        self._start_profiling(spec, counts)
        reason = f"profiling at {', '.join(map(str, counts))} GPUs, then admission"
        return 202, ProfilingAnswer(
            spec.name, reason, counts, profile_seconds=self.cfg.profile_seconds
        )

    def _profile_counts(self, spec: JobSpec) -> list[int]:
        """The GPU counts a ``profile: auto`` job is pre-run at; 400 when it cannot be."""
        if self.target is None:
            raise ApiError(
                400, "'auto' needs the executor to pre-run the job; give a profile", field="profile"
            )
        counts = spec.gpu_counts_to_profile(self.total_gpus)
        if not counts:
            msg = f"min_gpus {spec.min_gpus} exceeds the {self.total_gpus} GPUs"
            raise ApiError(400, msg, field="min_gpus")
        return counts

    def _start_profiling(self, spec: JobSpec, counts: list[int]) -> None:
        th = threading.Thread(
            target=self._profile_then_release,
            args=(spec, counts),
            name=f"allocator-profile-{spec.name}",
            daemon=True,
        )
        self._profilers[spec.name] = th
        th.start()

    def _profile_then_release(self, spec: JobSpec, counts: list[int]) -> None:
        """The profiling thread: the GPUs it held are free again once the job is admitted
        or dropped (a job profiled by scaling runs on them until then)."""
        try:
            self._profile_and_admit(spec, counts)
        finally:
            with self._prerun_lock:
                self._prerun_held.pop(spec.name, None)

    def _profiling_cancelled(self, name: str) -> bool:
        if self._stop.is_set():
            return True
        rec = self.store.get_job(name)
        return rec is None or not rec.pending

    def _busy_gpus(self, except_job: str | None = None) -> set[str]:
        """The GPU UUIDs the active jobs' placements hold, and those the pre-runs of jobs
        other than ``except_job`` hold."""
        from flowcon.allocator.target import placement_by_node

        assert self.target is not None
        busy: set[str] = set()
        for job, held in self._prerun_held.items():
            if job != except_job:
                busy |= held
        for rec in self.store.active_jobs():
            if rec.placement:
                busy.update(
                    self.target.uuids(placement_by_node(self.target.inventory, rec.placement))
                )
        return busy

    def _prerun_allowance(self, spec: JobSpec) -> int | None:
        """The GPUs the owner's quota leaves ``spec``'s pre-run (None: no GPU quota)."""
        owner = spec.owner or "operator"
        quota = self.cfg.quotas.get(owner)
        if quota is None or quota.max_gpus is None:
            return None
        records = self.store.list_jobs(PENDING_STATES + ACTIVE_STATES)
        shares = self.planner.guaranteed_shares(self.clock())
        return prerun_allowance(owner, quota, records, shares, skip=spec.name)

    def _profile_placement(self, spec: JobSpec, n: int) -> dict[str, list[str]] | None:
        """``n`` GPUs for ``spec``'s pre-run: only free ones (held by no job and no other
        pre-run), and no more than the owner's quota leaves; None (the count is skipped,
        logged and a ``profile_skipped`` event) when they are not there now. A GPU another
        job holds is never lent: the tenant's code would reach that job's device."""
        from flowcon.executor.workers import pack_placement

        assert self.target is not None
        inv = self.target.inventory
        with self._prerun_lock:
            busy = self._busy_gpus(except_job=spec.name)
            known = {u for nd in inv.nodes for u in nd.uuids(list(range(nd.count)))}
            why = prerun_refusal(n, len(known - busy), self._prerun_allowance(spec))
            placement = pack_placement(inv, n, busy) if why is None else None
            if placement is None:
                self._prerun_held.pop(spec.name, None)
            else:
                self._prerun_held[spec.name] = {g for ids in placement.values() for g in ids}
        if placement is None:
            why = why or f"no placement of {n} free GPUs"
            log.info("job %s: pre-run at %d GPUs skipped: %s", spec.name, n, why)
            self.store.append_event("profile_skipped", spec.name, gpus=n, reason=why)
        return placement

    def _profile_and_admit(self, spec: JobSpec, counts: list[int]) -> None:
        assert self.target is not None
        name = spec.name
        t0 = time.monotonic()

        def on_point(gpus: int, rate: float | None) -> None:
            elapsed = time.monotonic() - t0
            self.store.append_event(
                "profile_point", name, gpus=gpus, iterations_per_s=rate, seconds=elapsed
            )

        by_scaling = self._profiles_by_scaling(spec)
        if by_scaling:
            spec = self._with_master_port(spec)
        try:
            profile = self._measure_curve(spec, counts, by_scaling, on_point)
        except Exception as exc:
            self._remove_profiled(name, by_scaling)
            if self._stop.is_set():
                return  # the next start profiles it again
            if self.planner.profiling_failed(name, str(exc), self.clock()):
                self.metrics.admission(False)
                log.warning("job %s: %s", name, exc)
            return
        finally:
            self._profilers.pop(name, None)
        if self._profiling_cancelled(name):
            self._remove_profiled(name, by_scaling)
            return
        profiled: JobSpec | None = spec.with_profile(profile)
        if spec.batch_range is not None:  # the batch dimension: batches and memory
            profiled = self._profile_batches(spec.with_profile(profile), t0)
        if profiled is None:
            return
        seconds = time.monotonic() - t0
        points = {str(g): v for g, v in profile.points}
        self.store.append_event(
            "profiled",
            name,
            points=points,
            seconds=seconds,
            method="scaling" if by_scaling else "prerun",
            **self._batch_points(profiled),
        )
        log.info("job %s profiled in %.1f s: %s", name, seconds, points)
        try:
            result = self.planner.submit(profiled, self.clock())
        except PlanError as exc:
            self.planner.profiling_failed(name, str(exc), self.clock())
            return
        self.metrics.admission(result.admitted)
        log.info("job %s %s: %s", name, "admitted" if result.admitted else "dropped", result.reason)
        if result.admitted:
            self.wake()  # a job profiled by scaling: the next round rescales it to its plan
        else:
            self._remove_profiled(name, by_scaling)

    def _measure_curve(
        self,
        spec: JobSpec,
        counts: list[int],
        by_scaling: bool,
        on_point: Callable[[int, float | None], None],
    ) -> ThroughputProfile:
        """The job's throughput curve: by scaling the running job, or by the pre-run."""
        assert self.target is not None
        name = spec.name
        if by_scaling:
            return self.target.executor.profile_by_scaling(
                spec,
                counts,
                placement_for=lambda n, now: self._scaling_placement(spec, n, now),
                max_seconds=self.cfg.profile_seconds,
                min_points=self.cfg.profile_min_lines,
                on_point=on_point,
                cancelled=lambda: self._profiling_cancelled(name),
            )
        return self.target.executor.profile(
            spec,
            placement_for=lambda n: self._profile_placement(spec, n),
            counts=counts,
            max_seconds=self.cfg.profile_seconds,
            min_points=self.cfg.profile_min_lines,
            on_point=on_point,
            cancelled=lambda: self._profiling_cancelled(name),
        )

    def _profiles_by_scaling(self, spec: JobSpec) -> bool:
        """A stop-free job is profiled by scaling it while it runs (EDL 3.3), unless the
        configuration asks for the pre-run for every job."""
        if self.target is None or not self.cfg.profile_by_scaling:
            return False
        try:
            return bool(self.target.executor.scaling_of(spec) == SCALING_STOPFREE)
        except Exception as exc:  # the image's labels unreadable: the pre-run is safe
            log.warning("job %s: scaling mode unknown (%s): pre-run profiling", spec.name, exc)
            return False

    def _with_master_port(self, spec: JobSpec) -> JobSpec:
        """The job's own master port and rendezvous secret for its containers (the ones the
        rounds keep)."""
        assert self.target is not None
        rec = self.store.get_job(spec.name)
        if rec is None:
            return spec
        port = self.target._master_port(self.store, rec)  # sets the record's port and secret
        return replace(spec, master_port=port, rendezvous_secret=rec.spec.rendezvous_secret)

    def _remove_profiled(self, name: str, by_scaling: bool) -> None:
        """The containers of a job profiled by scaling that is not admitted (or failed);
        a stopping daemon leaves them (the next start profiles the job again)."""
        assert self.target is not None
        if not by_scaling or self._stop.is_set():
            return
        try:
            self.target.executor.remove(name)
        except Exception as exc:
            log.warning("job %s: removing its profiling containers failed: %s", name, exc)

    def _scaling_placement(
        self, spec: JobSpec, n: int, current: dict[str, list[str]] | None
    ) -> dict[str, list[str]] | None:
        """``n`` GPUs for a job profiled by scaling: free ones (held by no job and no
        pre-run), keeping ``current``, within what the owner's quota leaves."""
        from flowcon.executor.scaling_profile import grow_placement

        assert self.target is not None
        inv = self.target.inventory
        allowance = self._prerun_allowance(spec)
        if allowance is not None and n > allowance:
            why = f"{n} GPUs exceed what the owner's quota leaves ({allowance}, max_gpus)"
            log.info("job %s: profiling by scaling at %d GPUs skipped: %s", spec.name, n, why)
            self.store.append_event("profile_skipped", spec.name, gpus=n, reason=why)
            return None
        with self._prerun_lock:
            busy = self._busy_gpus(except_job=spec.name)
            free = [
                (nd.name, [u for u in nd.uuids(list(range(nd.count))) if u not in busy])
                for nd in inv.nodes
            ]
            placement = grow_placement(current or {}, free, n)
            if placement is not None:
                self._prerun_held[spec.name] = {g for ids in placement.values() for g in ids}
        return placement

    def _profile_batches(self, spec: JobSpec, t0: float) -> JobSpec | None:
        """``spec`` (profiled) with its speeds at other batches and its largest local
        batch (``Executor.profile_batches``); None when the pre-run was cancelled or the
        daemon stops. A failure here keeps the GPU-count profile (the batch then follows
        the weak-scaling rule)."""
        assert self.target is not None
        assert spec.profile is not None
        name = spec.name

        def on_point(gpus: int, batch: int, rate: float | None) -> None:
            self.store.append_event(
                "profile_point",
                name,
                gpus=gpus,
                global_batch=batch,
                iterations_per_s=rate,
                seconds=time.monotonic() - t0,
            )

        try:
            rows, max_local = self.target.executor.profile_batches(
                spec,
                spec.profile,
                placement_for=lambda n: self._profile_placement(spec, n),
                max_seconds=self.cfg.profile_seconds,
                min_points=self.cfg.profile_min_lines,
                on_point=on_point,
                cancelled=lambda: self._profiling_cancelled(name),
            )
        except Exception as exc:
            if self._stop.is_set() or self._profiling_cancelled(name):
                return None
            log.warning(
                "job %s: batch pre-run failed, keeping its GPU-count profile: %s", name, exc
            )
            return spec
        if self._profiling_cancelled(name):
            return None
        return replace(spec, batch_profile=rows, max_local_batch=max_local)

    @staticmethod
    def _batch_points(spec: JobSpec) -> dict[str, Any]:
        """The batch pre-run's results for the "profiled" event (none for a fixed batch)."""
        if spec.batch_range is None:
            return {}
        rows = {
            str(b): {str(g): v for g, v in row.items()} for b, row in spec.batch_profile.items()
        }
        return {"batch_points": rows, "max_local_batch": spec.max_local_batch}

    def refused(self, reason: str) -> None:
        """An API call was refused (``flowcon_allocator_refused_calls_total{reason}``)."""
        self.metrics.refused(reason)

    def cancel(self, name: str, who: Principal | None = None) -> JobView:
        rec0 = self.store.get_job(name)
        if rec0 is not None:
            self._own(rec0, who, "cancel")
        try:
            rec = self.planner.cancel(name, self.clock(), by=who.name if who else "operator")
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        finally:
            self._requests += 1
        self.wake()
        return JobView.of(rec)

    # -- operator requests (flowcon.allocator.elasticity) -------------------------------

    def _operator_only(self, who: Principal | None, what: str) -> str:
        if who is not None and not who.operator:
            raise ApiError(403, f"only the operator may {what}")
        return who.name if who is not None else "operator"

    def _operation(self, call: Callable[[], T]) -> T:
        try:
            out = call()
        except OperationError as exc:
            extra = {"field": exc.field} if exc.field else {}
            raise ApiError(exc.status, str(exc), **extra) from None
        finally:
            self._requests += 1
        self.wake()
        return out

    def scale(self, name: str, gpus: int | None, who: Principal | None = None) -> JobDetail:
        """Pin a job's GPU count (None: back to the policy). The operator may; a job's
        owner too when ``owners_may_scale`` (within the job's bounds, like anyone)."""
        rec = self.store.get_job(name)
        if rec is None:
            raise ApiError(404, f"no job {name!r}")
        if who is not None and not who.operator:
            if not self.cfg.owners_may_scale:
                raise ApiError(403, "only the operator may scale jobs (owners_may_scale: false)")
            self._own(rec, who, "scale")
        by = who.name if who is not None else "operator"
        self._operation(lambda: self.elasticity.scale(name, gpus, by, self.clock()))
        return self.get_job(name, who)

    def migrate(self, name: str, node: str, who: Principal | None = None) -> JobDetail:
        by = self._operator_only(who, "migrate jobs")
        self._operation(lambda: self.elasticity.migrate(name, node, by, self.clock()))
        return self.get_job(name, who)

    def drain(self, node: str, force: bool = False, who: Principal | None = None) -> NodeView:
        by = self._operator_only(who, "drain nodes")
        return self._operation(lambda: self.elasticity.drain(node, force, by, self.clock()))

    def undrain(self, node: str, who: Principal | None = None) -> NodeView:
        by = self._operator_only(who, "undrain nodes")
        return self._operation(lambda: self.elasticity.undrain(node, by, self.clock()))

    def nodes(self, who: Principal | None = None) -> list[NodeView]:
        return [self._with_toolkit(n) for n in self.elasticity.nodes(self.clock())]

    def node(self, name: str, who: Principal | None = None) -> NodeView:
        try:
            return self._with_toolkit(self.elasticity._view(name, self.clock()))
        except OperationError as exc:
            raise ApiError(exc.status, str(exc)) from None

    def _with_toolkit(self, view: NodeView) -> NodeView:
        """The node's view with what its agent reported of its NVIDIA toolkit and, on
        Swarm, what its engine applies to a job's container (read once per node)."""
        return replace(
            view, toolkit=self._toolkit.get(view.name), hardening=self._hardening_of(view.name)
        )

    def _refuse_weak_nodes(self) -> None:
        """Nodes whose engine lacks hardening the operator requires (Swarm,
        ``executor.allow_weak_hardening`` off) take no worker: the planner leaves them out,
        with one event each."""
        weak = frozenset(
            name for name, _ in self.planner.nodes if self._hardening_of(name) == "weak-refused"
        )
        for node in sorted(weak):
            self.store.append_event("node_refused", None, node=node, why="weak-hardening")
        self.planner.refuse_nodes(weak, self.clock())

    def _hardening_of(self, node: str) -> str | None:
        target = self.target
        backend = getattr(getattr(target, "executor", None), "backend", None)
        of = getattr(backend, "node_hardening", None)
        if not callable(of):
            return None
        try:
            return str(of(node).state)
        except ExecutorError as exc:
            log.warning("node %s: hardening unknown: %s", node, exc)
            return None

    def ingest_measurements(self, body: Mapping[str, object]) -> dict[str, object]:
        node = body.get("node")
        items = body.get("measurements")
        if not isinstance(node, str) or not node:
            raise ApiError(400, "'node' must be a non-empty string", field="node")
        if not isinstance(items, list):
            raise ApiError(400, "'measurements' must be a list", field="measurements")
        toolkit = body.get("toolkit")
        if toolkit is not None and toolkit not in TOOLKIT_STATES:
            raise ApiError(
                400, f"'toolkit' must be one of {', '.join(TOOLKIT_STATES)}", field="toolkit"
            )
        if isinstance(toolkit, str):
            self._toolkit[node] = toolkit
        counts: dict[str, int] = {}
        replan = False
        now = self.clock()
        # one transaction for the report (one wait for the store's writer, not one a row)
        with self.store.transaction():
            for m in items:
                if not isinstance(m, Mapping):
                    outcome = "skipped: not an object"
                else:
                    try:
                        # untrusted JSON: ingest checks every field itself
                        outcome = self.planner.ingest(node, cast(Measurement, m), now)
                    except Exception as exc:  # one bad row must not lose the others
                        if write_failure(exc) is not None:
                            raise  # the store cannot be written: the report is refused
                        log.warning("measurement from %s skipped: %s", node, exc)
                        outcome = "skipped: error"
                key = outcome.split(":")[0]
                counts[key] = counts.get(key, 0) + 1
                self.metrics.measurement(key)
                replan = replan or outcome == "refined"
        if replan:
            self.wake()
        return {"node": node, "received": len(items), **counts, "replan": replan}


def restart_costs(store: Store) -> list[float]:
    """Measured (re)start costs, oldest first: the downtime to the first metric line
    ("resumed"), or the stop+start seconds where no metric line told more."""
    out = []
    for e in store.events(kind="resumed"):
        if str(e.data.get("mode") or SCALING_RESTART) != SCALING_RESTART:
            continue  # a stop-free pause (overhead_costs)
        cost = e.data.get("downtime_seconds")
        if cost is None:
            cost = e.data.get("charged_seconds")
        if cost is not None:
            out.append(float(cost))
    if not out:  # a database from before "resumed" events
        for e in store.events(kind="restarted_on_new_gpus"):
            out.append(float(e.data.get("stop_seconds", 0)) + float(e.data.get("start_seconds", 0)))
    return out


def overhead_costs(store: Store) -> list[tuple[str, float]]:
    """Measured rescale costs as (scaling mode, seconds), oldest first: checkpoint-restart
    downtimes (``restart_costs``'s) and stop-free pauses, each mode charged apart."""
    out = []
    for e in store.events(kind="resumed"):
        cost = e.data.get("downtime_seconds")
        mode = str(e.data.get("mode") or SCALING_RESTART)
        if cost is None and mode == SCALING_RESTART:
            cost = e.data.get("charged_seconds")
        if cost is not None:
            out.append((mode, float(cost)))
    if not out:  # a database from before "resumed" events
        out = [(SCALING_RESTART, c) for c in restart_costs(store)]
    return out


def run_daemon(cfg: AllocatorConfig) -> None:
    """``flowcon allocator``: run until SIGINT/SIGTERM."""
    why = cfg.listen_problem()
    if why:
        raise ConfigError(why)
    target = build_target(cfg)
    alloc = Allocator(cfg, target)
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    alloc.start()
    operator = "from the config" if cfg.token else f"in {cfg.token_path}"
    roles = [r for r in ("user", "read", "agent") if getattr(cfg, f"{r}_token")]
    print(
        f"flowcon allocator listening on {alloc.url} (operator token {operator}; "
        f"role tokens: {', '.join(roles) or 'none, the operator token serves every role'})",
        flush=True,
    )
    try:
        while not done.wait(1.0):
            pass
    finally:
        log.info("stopping allocator")
        alloc.stop()
