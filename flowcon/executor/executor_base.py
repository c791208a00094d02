"""The executor's state and the container plumbing every part of it uses.

``ExecutorBase`` holds what the ``Executor`` (``flowcon.executor.lifecycle``) is made of:
its backend, inventory, options and restart counts; container and volume naming; the
label selectors; the jobs found on the backend (``JobState``); how a spec scales
(``scaling_of``); GPU id resolution through the inventory; and creating (all or nothing)
and stopping a job's containers, including a stop-free job's first start
(``_launch_stopfree``), which both a launch and a checkpoint-restart end in.

The other parts are mixins on this class, each in its own module: ``restart`` (the
checkpoint-restart rescale), ``stopfree_rescale`` (the stop-free rescale), ``reconcile``
(adoption, dead and left workers, orphans) and ``job_logs`` (logs and metric lines).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from flowcon.contract import (
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_STORE_ADDR,
    ENV_STORE_HOST,
    LABEL_ELASTIC,
    LABEL_GPUS,
    LABEL_JOB,
    LABEL_LAUNCHER,
    LABEL_MANAGED_BY,
    LABEL_MASTER_PORT,
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_SCALING,
    LABEL_STORE_ADDR,
    LABEL_WORLD_SIZE,
    MANAGED_BY_ALLOCATOR,
    ROLE_JOB,
    SCALING_RESTART,
    SCALING_STOPFREE,
    SHARED_PRINCIPALS,
)
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import Backend, ExecutorError, Worker, WorkerRequest
from flowcon.executor.container_spec import settings_for
from flowcon.executor.launchers import FLOWCON, container_suffix, launch_command, launch_env
from flowcon.executor.reach import Reach
from flowcon.executor.workers import (
    Placement,
    WorkerSlot,
    allocate_master_port,
    job_secret,
    plan_workers,
    world_size,
)
from flowcon.jobspec.spec import JobSpec

if TYPE_CHECKING:
    from flowcon.engine.gpus import Inventory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobState:
    """A job as found on the engine (what a restarted allocator adopts)."""

    job: str
    workers: tuple[Worker, ...]

    @property
    def placement(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for w in sorted(self.workers, key=lambda w: w.node_rank):
            if not w.left:  # several containers per node: none, stop-free
                out.setdefault(w.node, []).extend(w.gpus)
        return out

    @property
    def gpus(self) -> int:
        return sum(len(w.gpus) for w in self.workers if not w.left)

    @property
    def scaling(self) -> str:
        """stopfree when every container was launched for stop-free scaling, else restart."""
        live = [w for w in self.workers if not w.left]
        if live and all(w.labels.get(LABEL_SCALING) == SCALING_STOPFREE for w in live):
            return SCALING_STOPFREE
        return SCALING_RESTART

    @property
    def status(self) -> str:
        """running, completed, failed (a worker is dead), finishing (some workers exited
        0, the others not yet), starting, or mixed. A stop-free job's container that left
        (``Worker.left``) does not count: the job runs on without it."""
        ws = [w for w in self.workers if not w.left]
        if ws and all(w.completed for w in ws):
            return "completed"
        if any(w.dead for w in ws):
            return "failed"
        if any(w.completed for w in ws):
            return "finishing"
        if all(w.state == "running" for w in ws):
            return "running"
        if any(w.state in ("starting", "created") for w in ws):
            return "starting"
        return "mixed"


@dataclass
class ExecutorOptions:
    grace_s: float = 30.0  # SIGTERM -> SIGKILL: time the job has to checkpoint
    max_restarts: int = 3  # restarts of a dead job before it is reported failed
    checkpoint_every: int | None = None  # FLOWCON_CHECKPOINT_EVERY for jobs (None: job's own)
    # bind <dir>/<key> instead of a named volume (key: ExecutorBase.checkpoint_key)
    checkpoint_host_dir: str | None = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)  # e.g. the test label
    # stop-free scale-in: leave signal -> the leaving containers exited EXIT_LEFT; past it
    # the job is checkpoint-restarted on the new placement
    leave_timeout_s: float = 60.0
    leave_resend_s: float = 2.0  # the leave signal again while a leaver still runs
    poll_s: float = 0.1
    # what a job's containers may reach: host paths, images, capabilities, pids
    # (flowcon/executor/reach.py)
    reach: Reach = field(default_factory=Reach)


class ExecutorBase:
    """The executor's state, naming, queries and container creation and removal."""

    def __init__(
        self,
        backend: Backend,
        inventory: Inventory | None = None,
        options: ExecutorOptions | None = None,
    ) -> None:
        self.backend = backend
        self.inventory = inventory
        self.options = options or ExecutorOptions()
        self._restarts: dict[str, int] = {}
        # job -> owner, of the jobs this executor made or found (their checkpoint's key)
        self._owners: dict[str, str | None] = {}
        # derives the rendezvous secret of a job launched without a stored one
        self._secret_key = secrets.token_bytes(32)

    # -- naming

    @staticmethod
    def worker_name(job: str, node: str, role: str = ROLE_JOB, suffix: str = "") -> str:
        safe = "".join(c if c.isalnum() or c == "-" else "-" for c in node.lower())
        prefix = "flowcon" if role == ROLE_JOB else f"flowcon-{role}"
        return f"{prefix}-{job}--{safe}{suffix}"

    @staticmethod
    def checkpoint_key(job: str, owner: str | None = None) -> str:
        """What a job's checkpoint volume and host folder are named after: ``OWNER.JOB`` for
        a named user's job, the job's name for the operator's and the shared tokens' (and
        records from before owners). No job name holds a ``.``, so two owners never share
        a key, whatever names they choose."""
        if owner is None or owner in SHARED_PRINCIPALS:
            return job
        return f"{owner}.{job}"

    @staticmethod
    def volume_name(job: str, owner: str | None = None) -> str:
        return f"flowcon-ckpt-{ExecutorBase.checkpoint_key(job, owner)}"

    def checkpoint_dir(self, job: str, owner: str | None = None) -> str | None:
        """The host folder bound as the job's checkpoint (``checkpoint_host_dir``), or None."""
        root = self.options.checkpoint_host_dir
        if not root:
            return None
        return f"{root.rstrip('/')}/{self.checkpoint_key(job, owner)}"

    def owner_of(
        self, job: str, workers: Sequence[Worker] = (), owner: str | None = None
    ) -> str | None:
        """The owner of ``job``: ``owner`` when given, else its workers' owner label, else
        the one this executor saw when it made or found the job (None: the operator's)."""
        if owner is not None:
            return owner
        for w in workers:
            found = w.labels.get(LABEL_OWNER)
            if found:
                return str(found)
        return self._owners.get(job)

    def _selector(self, job: str | None = None, role: str | None = ROLE_JOB) -> dict[str, str]:
        sel = {LABEL_MANAGED_BY: MANAGED_BY_ALLOCATOR, **dict(self.options.extra_labels)}
        if job is not None:
            sel[LABEL_JOB] = job
        if role is not None:
            sel[LABEL_ROLE] = role
        return sel

    # -- queries

    def jobs(self) -> dict[str, JobState]:
        """Every job this executor manages, from container labels (adoption after restart)."""
        out: dict[str, list[Worker]] = {}
        for w in self.backend.list_workers(self._selector()):
            out.setdefault(w.job, []).append(w)
            if w.labels.get(LABEL_OWNER):
                self._owners[w.job] = str(w.labels[LABEL_OWNER])
        return {
            j: JobState(j, tuple(sorted(ws, key=lambda w: w.node_rank))) for j, ws in out.items()
        }

    def job(self, name: str) -> JobState | None:
        ws = self.backend.list_workers(self._selector(name))
        return JobState(name, tuple(sorted(ws, key=lambda w: w.node_rank))) if ws else None

    def scaling_of(self, spec: JobSpec) -> str:
        """How ``spec`` scales: its ``scaling`` key, else stop-free when it runs under the
        flowcon launcher and its image declares ``flowcon.elastic=stopfree``."""
        if spec.scaling in (SCALING_STOPFREE, SCALING_RESTART):
            return str(spec.scaling)
        if spec.launcher != FLOWCON:
            return SCALING_RESTART
        labels_of = getattr(self.backend, "image_labels", None)
        try:
            labels = labels_of(spec.image) if callable(labels_of) else {}
        except ExecutorError as exc:
            log.warning("labels of image %s unavailable: %s", spec.image, exc)
            labels = {}
        declared = labels.get(LABEL_ELASTIC) == SCALING_STOPFREE
        return SCALING_STOPFREE if declared else SCALING_RESTART

    def _pairs(self, placement: Placement) -> list[tuple[str, str]]:
        """(node, GPU id) of every GPU of ``placement`` in rank order (ids resolved)."""
        return [(s.node, g) for s in self._resolve(plan_workers(placement)) for g in s.gpus]

    def _launch_stopfree(self, spec: JobSpec, placement: Placement) -> list[Worker]:
        """A stop-free job's first start: one container per GPU, index 0 the coordinator.
        A no-op when exactly those GPUs run already."""
        pairs = self._pairs(placement)
        current = self.backend.list_workers(self._selector(spec.name))
        live = [w for w in current if not w.left]
        have = sorted((w.node, g) for w in live for g in w.gpus)
        stopfree_now = JobState(spec.name, tuple(live)).scaling == SCALING_STOPFREE
        if live and stopfree_now and have == sorted(pairs):
            same_image = all(not w.image or w.image == spec.image for w in live)
            if same_image:
                for w in live:
                    if w.state in ("exited", "dead", "created"):
                        log.info("job %s: starting stopped worker %s", spec.name, w.name)
                        self.backend.restart(w)
                return sorted(
                    self.backend.list_workers(self._selector(spec.name)),
                    key=lambda w: w.node_rank,
                )
        if current:
            self._stop_all(current, self.options.grace_s)
        slots = stopfree.gpu_slots(pairs)
        world = len(slots)
        return self._create_all(
            spec,
            slots,
            ROLE_JOB,
            stopfree_env={
                s.node_rank: stopfree.stopfree_env(s.node_rank, join=False, target_world=world)
                for s in slots
            },
        )

    def free_master_port(self, job: str) -> int:
        """A master port no live worker of another job holds (their ``flowcon.master-port``
        labels), for a job the allocator gave none (pre-runs, the executor on its own)."""
        taken = []
        for w in self.backend.list_workers(self._selector(None, None)):
            raw = w.labels.get(LABEL_MASTER_PORT, "")
            if w.job != job and raw.isdigit():
                taken.append(int(raw))
        return allocate_master_port(job, taken)

    def _resolve(self, slots: list[WorkerSlot]) -> list[WorkerSlot]:
        """Map GPU indices to UUIDs through the inventory (UUIDs pass through)."""
        if self.inventory is None:
            return slots
        out = []
        for s in slots:
            try:
                node = self.inventory.node(s.node)
            except KeyError:
                raise ExecutorError(
                    f"placement names node {s.node!r}, not in the inventory"
                ) from None
            known = {g.uuid for g in node.gpus}
            by_index = {str(g.index): g.uuid for g in node.gpus}
            ids = []
            for g in s.gpus:
                if g in known:
                    ids.append(g)
                elif g in by_index:
                    ids.append(by_index[g])
                else:
                    raise ExecutorError(f"node {s.node} has no GPU {g!r}")
            out.append(WorkerSlot(s.node, s.node_rank, s.first_rank, tuple(ids)))
        return out

    def _real(self, node: str) -> bool:
        if self.inventory is None:
            return False
        try:
            return bool(self.inventory.node(node).real)
        except KeyError:
            return False

    def _matches(
        self, current: Sequence[Worker], slots: Sequence[WorkerSlot], spec: JobSpec
    ) -> bool:
        world = str(world_size(slots))
        have = sorted((w.node_rank, w.node, w.gpus) for w in current)
        want = sorted((s.node_rank, s.node, s.gpus) for s in slots)
        same_world = all(w.labels.get(LABEL_WORLD_SIZE) == world for w in current)
        same_image = all(not w.image or w.image == spec.image for w in current)
        return have == want and same_world and same_image

    def _refuse_beyond_reach(self, spec: JobSpec) -> None:
        """ExecutorError when ``spec`` asks what the operator does not let a job reach (a
        spec admitted under an older config, or not through the allocator)."""
        refused = self.options.reach.problems(spec)
        if refused:
            where, why = refused[0]
            raise ExecutorError(f"job {spec.name}: {where}: {why}")

    def _create_all(
        self,
        spec: JobSpec,
        slots: list[WorkerSlot],
        role: str,
        *,
        stopfree_env: Mapping[int, Mapping[str, str]] | None = None,
        only: frozenset[int] | None = None,
        store_host: Worker | None = None,
        coordinator: tuple[str, int] | None = None,
    ) -> list[Worker]:
        """Create and start the containers of ``slots`` (all or nothing). Stop-free
        (``stopfree_env``: extra environment by container index): containers named by
        index, labelled ``flowcon.scaling=stopfree``, each with its own standby store's
        address (``FLOWCON_STORE_ADDR``, label ``flowcon.store``); ``only`` the slots of
        those indices are created (the joiners; the others run), reaching the running
        ``store_host`` (``coordinator``: at this MASTER_ADDR/MASTER_PORT instead)."""
        if not spec.rendezvous_secret:  # not from the allocator: this executor's own
            spec = replace(spec, rendezvous_secret=job_secret(self._secret_key, spec.name))
        job_labels = self._job_labels(spec)

        def name_of(s: WorkerSlot) -> str:
            if stopfree_env is not None:
                suffix = stopfree.container_suffix(s.node_rank)
            else:
                suffix = container_suffix(spec.launcher, s)
            return self.worker_name(spec.name, s.node, role, suffix)

        if store_host is not None and store_host.labels.get(LABEL_MASTER_PORT, "").isdigit():
            want = int(store_host.labels[LABEL_MASTER_PORT])
        else:
            want = spec.master_port or self.free_master_port(spec.name)
        if stopfree_env is not None:
            addr, port, network = self.backend.master_addr(
                spec.name, slots, name_of(slots[0]), job_labels, want, grow=True
            )
        else:
            addr, port, network = self.backend.master_addr(
                spec.name, slots, name_of(slots[0]), job_labels, want
            )
        addr, port = coordinator or (addr, port)
        world = world_size(slots)
        host_dir = self._make_checkpoint_dir(spec)
        self._refuse_beyond_reach(spec)
        reqs = []
        for s in slots:
            if only is not None and s.node_rank not in only:
                continue
            labels = {
                **job_labels,
                LABEL_RANK: str(s.node_rank),
                LABEL_NODE: s.node,
                LABEL_GPUS: ",".join(s.gpus),
                LABEL_WORLD_SIZE: str(world),
                LABEL_ROLE: role,
                LABEL_LAUNCHER: spec.launcher,
                LABEL_MASTER_PORT: str(port),
            }
            env = launch_env(spec, s, slots, addr, port, self.options.checkpoint_every)
            if stopfree_env is not None:
                labels[LABEL_SCALING] = SCALING_STOPFREE
                env.update(stopfree_env.get(s.node_rank, {}))
                own = self._own_store(spec, s, name_of(s), job_labels, network, env, port)
                env[ENV_STORE_ADDR] = labels[LABEL_STORE_ADDR] = own
            reqs.append(
                WorkerRequest(
                    name=name_of(s),
                    job=spec.name,
                    node=s.node,
                    image=spec.image,
                    command=launch_command(spec, s, slots, addr, port),
                    env=env,
                    labels=labels,
                    gpus=s.gpus,
                    real_gpus=self._real(s.node),
                    checkpoint_volume=self.volume_name(spec.name, spec.owner),
                    checkpoint_host_dir=host_dir,
                    grace_s=self.options.grace_s,
                    network=network,
                    settings=settings_for(spec, len(s.gpus), self.options.reach),
                    # an init as PID 1: a script without a SIGTERM handler still stops
                    init=spec.launcher != FLOWCON,
                )
            )
        created: list[Worker] = []
        try:
            for r in reqs:
                created.append(self.backend.create(r))
        except Exception:
            # all or nothing: a half-started DDP job would only hang
            self._stop_all(created, grace_s=2.0)
            raise
        return created

    def _job_labels(self, spec: JobSpec) -> dict[str, str]:
        """The labels every container, network and volume of ``spec`` carries: its name
        and, for a named user's job, its owner (a volume of another owner is never
        mounted: ``flowcon.executor.backend.volume_refusal``)."""
        labels = {
            **dict(self.options.extra_labels),
            LABEL_MANAGED_BY: MANAGED_BY_ALLOCATOR,
            LABEL_JOB: spec.name,
        }
        if spec.owner is not None and spec.owner not in SHARED_PRINCIPALS:
            labels[LABEL_OWNER] = spec.owner
        self._owners[spec.name] = spec.owner
        return labels

    def _make_checkpoint_dir(self, spec: JobSpec) -> str | None:
        """The job's checkpoint host folder, created (None: a named volume instead)."""
        host_dir = self.checkpoint_dir(spec.name, spec.owner)
        if host_dir:
            # the bind source must exist; on shared storage creating it here is enough
            try:
                os.makedirs(host_dir, exist_ok=True)
            except OSError as exc:
                log.warning("cannot create checkpoint dir %s: %s", host_dir, exc)
        return host_dir

    def _own_store(
        self,
        spec: JobSpec,
        slot: WorkerSlot,
        name: str,
        job_labels: Mapping[str, str],
        network: str | None,
        env: Mapping[str, str],
        port: int,
    ) -> str:
        """Where ``slot``'s launcher hosts its store ("host:port"): the job's MASTER_ADDR
        and MASTER_PORT for the first coordinator; on a job network its container name
        (each container has its own addresses, the same port); on host networking its
        node's address and port 0 (any free port: containers of a job share a node's
        ports; the launcher's ``launcher_started`` line says which)."""
        if env.get(ENV_STORE_HOST) == "1":
            return f"{env[ENV_MASTER_ADDR]}:{env[ENV_MASTER_PORT]}"
        host, own_port, _ = self.backend.master_addr(
            spec.name, [slot], name, job_labels, port, grow=True
        )
        return f"{host}:{0 if network == 'host' else own_port}"

    def _stop_all(self, workers: Sequence[Worker], grace_s: float) -> None:
        """SIGTERM every worker in parallel, wait (<= grace) for them to exit, remove them."""

        def stop_and_remove(w: Worker) -> None:
            if w.state in ("running", "starting"):
                self.backend.stop(w, grace_s)
            self.backend.remove(w)

        self._parallel(stop_and_remove, list(workers))

    @staticmethod
    def _parallel(fn: Callable[[Worker], None], workers: list[Worker]) -> None:
        if not workers:
            return
        if len(workers) == 1:
            fn(workers[0])
            return
        with ThreadPoolExecutor(max_workers=min(8, len(workers))) as pool:
            for f in [pool.submit(fn, w) for w in workers]:
                f.result()
