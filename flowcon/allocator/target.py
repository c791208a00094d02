"""Where plans land: the GPU inventory, the buddy placer over it, and the executor that
runs the job containers. Kept apart from the daemon so the daemon reads as policy."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace

from flowcon.alloc.model import ThroughputCurve, Topology
from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.metrics import AllocatorMetrics
from flowcon.allocator.planner import Planner
from flowcon.allocator.ports import Executor, Inventory, NodeGpus, NodePlacement, RunningJob
from flowcon.allocator.records import run_batch
from flowcon.allocator.store import ACTIVE_STATES, PENDING_STATES, JobRecord, Store
from flowcon.allocator.views import LogLineView
from flowcon.contract import LABEL_MASTER_PORT, SCALING_RESTART, SCALING_STOPFREE
from flowcon.core.completion import Completion
from flowcon.engine.gpus import layout_of
from flowcon.executor.backend import ExecutorRefused
from flowcon.executor.workers import allocate_master_port, new_job_secret
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import JobSpec

log = logging.getLogger(__name__)


def batch_for(spec: JobSpec, gpus: int, curve: ThroughputCurve | None = None) -> int | None:
    """The global batch of ``spec`` on ``gpus`` GPUs when its spec has a batch range; None
    for a job without one (its batch never changes). The rule the policy plans with
    (``flowcon.allocator.records.run_batch``: ``flowcon.alloc.batch.best_batch`` over the
    job's range built on ``curve``, the planner's curve of the job): the best measured
    samples/s at ``gpus``, and where the pre-run measured no other batch, Elan III's weak
    scaling from the per-GPU batch at ``min_gpus``. Work is counted in samples
    (docs/jobs.md, "batch_size_min, batch_size_max")."""
    return run_batch(spec, gpus, curve)


def topology_of(inventory: Inventory) -> Topology | None:
    """The core's Topology for a homogeneous inventory (same power-of-two GPU count on every
    node); None otherwise (GPU counts are then allocated without a placement)."""
    counts = {n.count for n in inventory.nodes if n.count > 0}
    if len(counts) != 1:
        return None
    per_node = counts.pop()
    if per_node & (per_node - 1):
        return None
    nodes = sum(1 for n in inventory.nodes if n.count > 0)
    return Topology(nodes_per_switch=nodes, gpus_per_node=per_node)


def build_placer(inventory: Inventory) -> BuddyPlacer | None:
    """Buddy placement over the inventory's GPU nodes, of any sizes, each node's GPUs in
    the order its links give (``flowcon.engine.gpus.layout_of``); None without GPUs."""
    layout = layout_of(inventory)
    if not layout.total:
        log.warning("GPU inventory has no GPU: allocating GPU counts without placement")
        return None
    if not layout.uniform:
        log.info("buddy placement over nodes %s", layout.describe_blocks())
    return BuddyPlacer(layout)


def node_names(inventory: Inventory) -> list[str]:
    """Node index of a placement -> node name in the inventory (kept for the last
    inventory asked: every job's placement is translated every round)."""
    known = _names_of.get(id(inventory))
    if known is not None and known[0] is inventory:
        return known[1]
    names = [n.name for n in inventory.nodes if n.count > 0]
    _names_of.clear()
    _names_of[id(inventory)] = (inventory, names)
    return names


_names_of: dict[int, tuple[Inventory, list[str]]] = {}  # the last inventory's node names


def placement_by_node(inventory: Inventory, placement: list[list[int]]) -> dict[str, list[str]]:
    """Core placement [[node_index, gpu_index], ...] -> executor placement
    {node name: [gpu index, ...]} in node order (the first node hosts rank 0)."""
    names = node_names(inventory)
    out: dict[str, list[str]] = {}
    for n, g in sorted((int(n), int(g)) for n, g in placement):
        out.setdefault(names[n], []).append(str(g))
    return out


class LivePorts:
    """The master ports live jobs hold (their records' and their containers' labels), by
    job, counted, so "taken by a job other than X" is asked without copying the lot."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str | None], int] = {}  # (job, container) -> port
        self._count: Counter[int] = Counter()
        self._own: dict[str, Counter[int]] = {}

    def hold(self, job: str, port: int | None, container: str | None = None) -> None:
        """``job``'s record (or its ``container``) holds ``port`` now (None: none)."""
        old = self._held.pop((job, container), None)
        if old is not None:
            self._count[old] -= 1
            self._own[job][old] -= 1
        if port:
            self._held[(job, container)] = port
            self._count[port] += 1
            self._own.setdefault(job, Counter())[port] += 1

    def taken_by_others(self, job: str) -> AbstractSet[int]:
        return _TakenBy(self, self._own.get(job, Counter()))


class _TakenBy(AbstractSet[int]):
    """The ports some job other than one holds (a view of ``LivePorts``)."""

    def __init__(self, ports: LivePorts, own: Counter[int]) -> None:
        self._ports, self._own_ports = ports, own

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self._ports._count[port] > self._own_ports[port]

    def __iter__(self) -> Iterator[int]:
        return (p for p in list(self._ports._count) if p in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# how long a (re)started job may take to print its first metric line before its restart
# cost is taken as the stop+start seconds alone
RESUME_WAIT_S = 300.0


class ExecutorTarget:
    """The daemon's side of ``flowcon.executor.lifecycle.Executor``.

    Compares the stored plan with what runs on the engine every round (level-triggered),
    so a missed or failed action is simply redone next round.
    """

    def __init__(self, executor: Executor, inventory: Inventory, owns_client: bool = False) -> None:
        self.executor = executor
        self.inventory = inventory
        self.owns_client = owns_client
        self.kind = str(getattr(executor.backend, "kind", "engine"))
        self._unknown_logged: set[str] = set()
        self._outage: float | None = None  # when the engine stopped answering (logged once)
        self._failed_actions: dict[str, str] = {}
        # job -> (wall time its stop/launch began, "start"|"rescale", stop+start seconds,
        # scaling mode, new world size) until its metric lines show the real downtime:
        # the first line in the new containers (restart), the first line at the new world
        # size (stop-free)
        self._resuming: dict[str, tuple[float, str, float | None, str, int]] = {}
        self._ports: LivePorts | None = None  # master ports taken, within a round
        self._nodes: dict[str, NodeGpus] | None = None  # by name, made at the first lookup

    # -- helpers ---------------------------------------------------------------------

    def _uuids(self, placement: NodePlacement) -> dict[str, list[str]]:
        return {
            node: self._node(node).uuids([int(g) for g in gpus]) for node, gpus in placement.items()
        }

    def _node(self, name: str) -> NodeGpus:
        """The inventory's node by name, from an index (a cluster has hundreds)."""
        if self._nodes is None:
            # (an inventory that only answers node(): looked up there each time)
            self._nodes = {n.name: n for n in getattr(self.inventory, "nodes", ())}
        node = self._nodes.get(name)
        return node if node is not None else self.inventory.node(name)

    def uuids(self, placement: NodePlacement) -> list[str]:
        """Every GPU UUID of an executor placement."""
        return [u for ids in self._uuids(placement).values() for u in ids]

    def _note_containers(self, planner: Planner, name: str, state: RunningJob | None) -> None:
        """Which containers run the job now, and at which world size (for the closed loop:
        a measurement counts for the GPU count of the container that took it)."""
        if state is None:
            planner.intake.set_containers(name, {})
            return
        planner.intake.set_containers(name, {str(w.id): int(state.gpus) for w in state.workers})

    def _same(self, state: RunningJob | None, placement: NodePlacement) -> bool:
        if state is None or state.status not in ("running", "starting"):
            return False
        if getattr(state, "scaling", SCALING_RESTART) == SCALING_STOPFREE:
            # a stop-free job's containers come and go one by one: which container holds
            # which GPU of a node is no reason to rescale
            have = {n: sorted(g) for n, g in state.placement.items()}
            return have == {n: sorted(g) for n, g in self._uuids(placement).items()}
        return dict(state.placement) == self._uuids(placement)

    def _engine_trouble(self, what: str, exc: Exception) -> None:
        """Log an engine outage once (every poll and slot would repeat it), not each call."""
        if self._outage is None:
            log.warning("%s: %s (logged once until the engine answers again)", what, exc)
            self._outage = time.monotonic()

    def _engine_back(self) -> None:
        if self._outage is not None:
            log.info("the engine answers again after %.1f s", time.monotonic() - self._outage)
            self._outage = None

    # -- daemon hooks ----------------------------------------------------------------

    def reconcile_on_start(self, store: Store, planner: Planner) -> None:
        """Adopt the job containers that survived an allocator restart (never start a
        second copy: the executor names containers by job and node)."""
        try:
            leftovers = self.executor.remove_profiles()
        except Exception as exc:
            leftovers = 0
            log.warning("cannot remove leftover pre-run containers: %s", exc)
        if leftovers:
            log.info("removed %d pre-run container(s) of an interrupted profiling", leftovers)
        found = self.executor.jobs()
        for rec in store.active_jobs():
            state = found.get(rec.name)
            if state is None:
                continue
            self._note_containers(planner, rec.name, state)
            planner.set_scaling(rec.name, state.scaling)
            store.append_event(
                "adopted",
                rec.name,
                gpus=state.gpus,
                placement=state.placement,
                status=state.status,
            )
            log.info("adopted running job %s (%d GPUs, %s)", rec.name, state.gpus, state.status)
        active = {r.name for r in store.active_jobs()}
        for name in found:
            if name not in active:
                ended = store.get_job(name)
                if ended is not None:  # finished while we were down: clean up
                    log.info("removing containers of %s job %s", ended.state, name)
                    self._remove(name, ended.spec.owner)
        try:
            orphans = self.executor.orphans()
        except Exception as exc:
            orphans = set()
            log.warning("cannot list job networks and volumes: %s", exc)
        for name in sorted(orphans - active):
            ended = store.get_job(name)
            if ended is not None:  # ended, its removal cut short: its network and volume go
                log.info("removing the network and volume of %s job %s", ended.state, name)
                self._remove(name, ended.spec.owner)

    def poll(
        self,
        store: Store,
        metrics: AllocatorMetrics | None = None,
        on_left: Callable[[str, str, tuple[str, ...], str], object] | None = None,
    ) -> list[tuple[str, str, str]]:
        """Ended jobs as (name, completed|failed, reason); dead ones are restarted by the
        executor from their checkpoint and logged here. A stop-free worker that left on its
        own is stored as a ``worker_left`` event and counted in ``metrics``
        (``flowcon_allocator_workers_left_total{reason}``), and told to ``on_left``
        (job, node, GPU ids, reason): the daemon keeps placement off a straggler's GPUs."""
        active = store.active_names()
        out: list[tuple[str, str, str]] = []
        try:
            events = self.executor.reconcile(
                known=active, confirm=lambda name: self._completion(store, name)
            )
        except Exception as exc:
            self._engine_trouble("executor reconcile failed (engine down?)", exc)
            return out
        self._engine_back()
        for ev in events:
            if ev.kind == "completed":
                why = "all workers exited 0" + (f"; {ev.detail}" if ev.detail else "")
                out.append((ev.job, "completed", why))
            elif ev.kind == "failed":
                out.append((ev.job, "failed", ev.detail or "workers died"))
            elif ev.kind == "restarted":
                store.append_event("restarted", ev.job, detail=ev.detail)
            elif ev.kind == "lost":
                # a stop-free worker died; the others went on, the next round replaces it
                store.append_event("worker_lost", ev.job, detail=ev.detail)
            elif ev.kind == "left":
                # a stop-free worker left (straggler removal): the job runs on with fewer
                # GPUs until the next round re-places that share
                reason = ev.reason or "unknown"
                store.append_event("worker_left", ev.job, container=ev.detail, reason=reason)
                if metrics is not None:
                    metrics.worker_left(reason)
                if on_left is not None:
                    on_left(ev.job, ev.node, ev.gpus, reason)
            elif ev.kind == "unknown-job" and ev.job not in self._unknown_logged:
                self._unknown_logged.add(ev.job)
                rec = store.get_job(ev.job)
                if rec is None:
                    log.warning("job containers %s are not in the store: left alone", ev.job)
        return out

    def _completion(self, store: Store, name: str) -> Completion:
        """Did the job whose workers all exited 0 finish, by its own output
        (flowcon/core/completion.py)?"""
        rec = store.get_job(name)
        if rec is None:
            return Completion(True, "not in the store")
        # a job that reported progress before and shows none now lost its output
        before = rec.done_iterations if rec.observed_ts is not None else None
        return self.executor.completion(name, rec.iterations, rec.spec.metric, before)

    def progress(self, name: str, metric: MetricSpec | None = None) -> tuple[float, float] | None:
        """(step, ts) of the last metric line of the job's rank-0 container."""
        return self.progress_since(name, None, metric)[1]

    def progress_since(
        self, name: str, since: float | None, metric: MetricSpec | None = None
    ) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
        """(first metric line at or after ``since``, last metric line) of the job's rank-0
        container, each as (step, ts); one read of its log. ``metric``: the job spec's, whose
        ``regex`` reads the job's own format (``flowcon.executor.profiling.worker_points``)."""
        try:
            points = self.executor.points(name, metric)
        except Exception as exc:
            log.debug("logs of %s unavailable: %s", name, exc)
            return None, None
        first = next((p for p in points if p[1] >= since), None) if since is not None else None
        return first, (points[-1] if points else None)

    def resume_pending(self, name: str) -> float | None:
        """When the job's last (re)start began, while its first metric line is awaited."""
        pending = self._resuming.get(name)
        return pending[0] if pending is not None else None

    def note_resumed(
        self,
        store: Store,
        planner: Planner,
        name: str,
        first: tuple[float, float] | None,
        now: float,
    ) -> None:
        """The real cost of a (re)start: from the stop (or launch) request to the job's
        first metric line in its new containers. It includes what stop+start seconds do
        not: interpreter and framework start-up, data loading, checkpoint reading (seconds
        to minutes for real models). That is what admission charges per restart."""
        pending = self._resuming.get(name)
        if pending is None:
            return
        began, kind, fallback, mode, _world = pending
        if mode == SCALING_STOPFREE:
            self._note_switched(store, planner, name, pending, now)
            return
        if first is not None and first[1] >= began:
            downtime = first[1] - began
            planner.observe_overhead(downtime, SCALING_RESTART)
            store.append_event(
                "resumed",
                name,
                after=kind,
                mode=mode,
                downtime_seconds=downtime,
                step=first[0],
            )
            del self._resuming[name]
        elif now - began > RESUME_WAIT_S:
            # a job without metric lines: the stop+start time is all that is known
            if fallback is not None:
                planner.observe_overhead(fallback, SCALING_RESTART)
            store.append_event(
                "resumed",
                name,
                after=kind,
                mode=mode,
                downtime_seconds=None,
                charged_seconds=fallback,
            )
            del self._resuming[name]

    def _note_switched(
        self,
        store: Store,
        planner: Planner,
        name: str,
        pending: tuple[float, str, float | None, str, int],
        now: float,
    ) -> None:
        """A stop-free event's cost: the job's no-progress gap across the switch (its
        last step line before, its first at the new world size), what admission charges
        per stop-free rescale. A job without such lines is charged nothing more."""
        began, kind, _, mode, world = pending
        try:
            gap = self.executor.switch_gap(name, began, world)
        except Exception as exc:
            log.debug("logs of %s unavailable: %s", name, exc)
            gap = None
        if gap is not None:
            planner.observe_overhead(gap, SCALING_STOPFREE)
            store.append_event(
                "resumed", name, after=kind, mode=mode, downtime_seconds=gap, world_size=world
            )
            del self._resuming[name]
        elif now - began > RESUME_WAIT_S:
            store.append_event(
                "resumed", name, after=kind, mode=mode, downtime_seconds=None, world_size=world
            )
            del self._resuming[name]

    def apply(self, store: Store, planner: Planner) -> None:
        """Start, rescale (checkpoint-restart), pause or remove containers to match the
        stored plan."""
        try:
            found = self.executor.jobs()
        except Exception as exc:
            self._engine_trouble("cannot list job containers (engine down?)", exc)
            return
        self._engine_back()
        self._ports = None  # the master ports taken, read at this round's first launch
        for rec in store.active_jobs():
            self._apply_one(store, planner, rec, found.get(rec.name))
        active = set(store.active_names())
        for name in [n for n in self._resuming if n not in active]:
            del self._resuming[name]  # ended before it printed a metric line
        for name in found:
            if name in active:
                continue
            if store.get_job(name) is not None:  # cancelled/completed/failed: containers go
                self._remove(name)
                planner.intake.forget_job(name)
                planner.set_scaling(name, None)

    def _apply_one(
        self, store: Store, planner: Planner, rec: JobRecord, state: RunningJob | None
    ) -> None:
        """Match one active job's containers to its stored plan. A failed action is an
        ``executor_error`` event, retried next round; a refusal fails the job."""
        try:
            if rec.gpus <= 0:
                if state is not None:
                    self.executor.suspend(rec.name)
                    store.append_event("suspended", rec.name)
                planner.intake.set_containers(rec.name, {})
                return
            if state is not None and state.status in ("completed", "finishing", "failed"):
                # exited (or its workers are exiting one by one) since the last poll:
                # the next poll reports the completion or restarts it from its
                # checkpoint; rescaling it now would run a finished job again
                return
            self._match(store, planner, rec, state)
            self._failed_actions.pop(rec.name, None)
        except ExecutorRefused as exc:  # beyond the operator's limits: never retried
            log.warning("job %s: refused by the executor: %s", rec.name, exc)
            self._remove(rec.name, rec.spec.owner)
            planner.finish(rec.name, "failed", f"refused by the executor: {exc}")
        except Exception as exc:
            msg = str(exc)
            if self._failed_actions.get(rec.name) != msg:
                self._failed_actions[rec.name] = msg
                store.append_event("executor_error", rec.name, error=msg)
            log.warning("job %s: executor action failed: %s", rec.name, exc)

    def _match(
        self, store: Store, planner: Planner, rec: JobRecord, state: RunningJob | None
    ) -> None:
        """Launch or rescale (checkpoint-restart) the job onto its stored placement."""
        placement = placement_by_node(self.inventory, rec.placement)
        if self._same(state, placement):
            if state is not None:
                self._note_containers(planner, rec.name, state)
            return
        port = self._master_port(store, rec)  # sets the record's port and secret
        spec = replace(rec.spec, master_port=port)
        curve = planner.curve(rec) if spec.batch_range is not None else None
        batch = batch_for(spec, sum(len(g) for g in placement.values()), curve)
        said = {} if batch is None else {"global_batch": batch}  # in the job's events
        began = time.time()
        if state is None:
            if batch is not None:  # a (re)start at k GPUs runs at the batch picked for k
                spec = replace(spec, run_batch=batch)
            self.executor.launch(spec, placement)
            self._resuming[rec.name] = (began, "start", None, SCALING_RESTART, 0)
            store.append_event("started", rec.name, placement=placement, **said)
        else:
            # only a job with a batch range gets a batch: the others' rescale is unchanged
            res = self.executor.rescale(spec, placement, **said)
            # the batch the started containers carry (None: unchanged), range jobs only
            told = {} if batch is None else {"global_batch": res.global_batch}
            if res.mode == SCALING_STOPFREE:
                self._resuming[rec.name] = (began, "rescale", None, res.mode, res.new_gpus)
                store.append_event(
                    "rescaled_stop_free",
                    rec.name,
                    old_gpus=res.old_gpus,
                    new_gpus=res.new_gpus,
                    leave_seconds=res.stop_seconds,
                    start_seconds=res.start_seconds,
                    joined=list(res.joined),
                    left=list(res.left),
                    placement=placement,
                    **told,
                )
            else:
                self._resuming[rec.name] = (
                    began,
                    "rescale",
                    res.total_seconds,
                    res.mode,
                    res.new_gpus,
                )
                store.append_event(
                    "restarted_on_new_gpus",
                    rec.name,
                    old_gpus=res.old_gpus,
                    new_gpus=res.new_gpus,
                    stop_seconds=res.stop_seconds,
                    start_seconds=res.start_seconds,
                    placement=placement,
                    mode=res.mode,
                    fallback=res.fallback,
                    **told,
                )
        now_state = self.executor.job(rec.name)
        self._note_containers(planner, rec.name, now_state)
        if now_state is not None:
            planner.set_scaling(rec.name, now_state.scaling)

    def _master_port(self, store: Store, rec: JobRecord) -> int:
        """The job's master port, unique among live jobs: the live records' ports and the
        ports on live containers of other jobs (pre-runs) are taken. Kept in the job's
        record (``spec.master_port``), so an allocator restart keeps it."""
        if self._ports is None:  # once a round: a launch each would read every job
            self._ports = self._live_ports(store)
        taken = self._ports.taken_by_others(rec.name)
        current = rec.spec.master_port
        keep = current and current not in taken
        port = current if keep and current else allocate_master_port(rec.name, taken)
        self._ports.hold(rec.name, port)
        # the job's rendezvous secret is drawn once, with its first port, and kept
        secret = rec.spec.rendezvous_secret or new_job_secret()
        if port != current or secret != rec.spec.rendezvous_secret:
            with store.transaction():
                fresh = store.get_job(rec.name)
                if fresh is not None:
                    fresh.spec = replace(
                        fresh.spec,
                        master_port=port,
                        rendezvous_secret=fresh.spec.rendezvous_secret or secret,
                    )
                    secret = fresh.spec.rendezvous_secret or secret
                    store.put_job(fresh)
            rec.spec = replace(rec.spec, master_port=port, rendezvous_secret=secret)
        return port

    def _live_ports(self, store: Store) -> LivePorts:
        """The master ports taken: the live records' and those on live containers."""
        ports = LivePorts()
        for r in store.list_jobs(PENDING_STATES + ACTIVE_STATES, copies=False):
            ports.hold(r.name, r.spec.master_port)
        try:
            found = self.executor.jobs()
        except Exception as exc:
            log.debug("labels of live job containers unavailable: %s", exc)
            found = {}
        for name, state in found.items():
            for w in state.workers:
                raw = str(w.labels.get(LABEL_MASTER_PORT, ""))
                if raw.isdigit():
                    ports.hold(name, int(raw), container=w.name)
        return ports

    def _remove(self, name: str, owner: str | None = None) -> None:
        """Remove a job's containers, network and checkpoint (``owner``: whose, when its
        containers, which carry it, are gone)."""
        try:
            self.executor.remove(name, owner=owner)
        except Exception as exc:
            log.warning("removing job %s failed: %s", name, exc)

    def job_logs(
        self, name: str, rank: int | None, after_ns: int, tail: int | None
    ) -> tuple[list[int], list[LogLineView]]:
        """The job's workers' ranks and output lines (``Allocator.job_logs``)."""
        ranks, lines = self.executor.job_logs(name, rank, after_ns, tail)
        return list(ranks), [LogLineView(w.node_rank, w.node, ln.ts_ns, ln.text) for w, ln in lines]

    def stop_job(self, name: str) -> None:
        self._remove(name)

    def close(self) -> None:
        if not self.owns_client:
            return
        client = getattr(self.executor.backend, "client", None)
        close = getattr(client, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def build_target(
    cfg: AllocatorConfig,
    client: object | None = None,  # a docker.DockerClient (tests and benchmarks pass theirs)
    extra_labels: Mapping[str, str] | None = None,
) -> ExecutorTarget:
    """Inventory (NVML or ``gpus.declared``) + executor from the config."""
    from flowcon.engine.gpus import discover
    from flowcon.executor.backend import connect_engine
    from flowcon.executor.factory import make_executor

    owns_client = client is None
    if client is None:  # first: no engine is one clear line, before the GPU probe says more
        client = connect_engine()
    inventory = discover(cfg.section("gpus"))
    executor = make_executor(cfg.section("executor"), inventory, client, extra_labels)
    return ExecutorTarget(executor, inventory, owns_client=owns_client)
