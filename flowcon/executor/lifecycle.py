"""The elastic training executor: makes a job's containers match its placement.

ElasticFlow's executor (sections 3.1 and 5) receives "job J runs on these GPUs" and scales
by checkpoint-restart: stop the job (SIGTERM), start it again on the new GPU set with a
local batch size that keeps the global batch size, and it resumes from its checkpoint (or
snapshot) on the job's checkpoint volume. How the command starts is the spec's
``launcher`` (``flowcon.executor.launchers``, docs/jobs.md): ``none`` (default) runs one
container per GPU with exactly torchrun's single-process environment, so a PyTorch DDP
script written for torchrun, or a one-process script, runs unchanged; ``torchrun`` runs
the command under the image's torchrun in one container per node; ``flowcon`` runs
``flowcon.elastic`` scripts once per node. A script resumes after a rescale only from what
it saved itself (in ``contract.CHECKPOINT_MOUNT``, kept across restarts).

Everything the executor needs to know about a running job is in its containers' labels, so
a restarted allocator adopts what it finds instead of starting duplicates; container and
service names are derived from job, node (and rank under ``none``), so even a race cannot
create two.

Placement: an ordered mapping ``node name -> GPU ids on that node``. The first node holds
rank 0. GPU ids are UUIDs (or indices, mapped to UUIDs through the inventory when given).

Environment of each container under ``launcher: flowcon`` (the others: see
``flowcon.executor.launchers``; the allocation is always visible)::

    WORLD_SIZE          total GPUs of the job (= worker processes)
    RANK                global rank of this container's first worker
    LOCAL_WORLD_SIZE    GPUs (workers) in this container
    GROUP_RANK, NODE_RANK, FLOWCON_NUM_NODES, MASTER_ADDR, MASTER_PORT
    FLOWCON_JOB, FLOWCON_NODE, FLOWCON_GPUS (this container's GPU ids), FLOWCON_PLACEMENT
    FLOWCON_GLOBAL_BATCH_SIZE, FLOWCON_LOCAL_BATCH_SIZE (= global // WORLD_SIZE; a job with
        a batch range: the batch picked for its GPU count, ``rescale(global_batch=)``)
    FLOWCON_REFERENCE_BATCH_SIZE (a job with a batch range: its submitted global batch)
    FLOWCON_ITERATIONS, FLOWCON_CHECKPOINT_DIR, FLOWCON_CHECKPOINT_EVERY

(names in ``flowcon.contract``; the checkpoint is mounted at ``contract.CHECKPOINT_MOUNT``).
MASTER_PORT on host networking is the job's own (``spec.master_port``, which the allocator
keeps unique among live jobs, else one no live worker of another job holds).

Modules, none importing back up this list:

- ``flowcon.executor.workers``: pure planning (slots, ranks, environment, ports);
- ``flowcon.executor.backend``: the ``Backend`` protocol, ``Worker``, ``WorkerRequest``,
  ``ExecutorError`` and what the backends share;
- ``flowcon.executor.profiling``: the pre-run's measurement (metric lines -> steps/s);
- this module: the ``Executor`` (launch, rescale, suspend, remove, reconcile, logs,
  profile) on any ``Backend``; it never imports a backend;
- ``flowcon.executor.backends.engine`` / ``executor_swarm``: the two backends;
- ``flowcon.executor.factory``: ``make_executor`` from the config section.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from flowcon.contract import (
    EXIT_LEFT,
    EXIT_PREEMPTED,
    LABEL_ELASTIC,
    LABEL_GPUS,
    LABEL_JOB,
    LABEL_LAUNCHER,
    LABEL_MANAGED_BY,
    LABEL_MASTER_PORT,
    LABEL_NODE,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_SCALING,
    LABEL_WORLD_SIZE,
    LEAVE_SIGNAL,
    MANAGED_BY_ALLOCATOR,
    ROLE_JOB,
    ROLE_PROFILE,
    SCALING_RESTART,
    SCALING_STOPFREE,
)
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import Backend, ExecutorError, LogLine, Worker, WorkerRequest
from flowcon.executor.container_spec import settings_for
from flowcon.executor.launchers import FLOWCON, container_suffix, launch_command, launch_env, layout
from flowcon.executor.profiling import measure, prerun, worker_points
from flowcon.executor.workers import (
    Placement,
    WorkerSlot,
    allocate_master_port,
    plan_workers,
    world_size,
)
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class RescaleResult:
    job: str
    old_gpus: int
    new_gpus: int
    # restart: SIGTERM -> every old container gone (includes the checkpoint);
    # stopfree: leave signal -> the leaving containers exited and removed
    stop_seconds: float
    start_seconds: float  # creating and starting the new containers
    workers: tuple[str, ...] = ()
    mode: str = SCALING_RESTART  # how it was done: restart or stopfree
    # the measured no-progress pause, when the executor knows it; None: the job's metric
    # lines tell (``Executor.switch_gap``, ExecutorTarget.note_resumed)
    pause_seconds: float | None = None
    fallback: str | None = None  # why a stop-free job was checkpoint-restarted
    joined: tuple[str, ...] = ()  # stop-free: the containers started into the running job
    left: tuple[str, ...] = ()  # stop-free: the containers that left
    # the global batch the containers this rescale started carry (FLOWCON_GLOBAL_BATCH_SIZE;
    # a stop-free job adopts a joiner's at the switch); None: none started, batch unchanged
    global_batch: int | None = None

    @property
    def total_seconds(self) -> float:
        return self.stop_seconds + self.start_seconds


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


def batch_problem(spec: JobSpec, global_batch: int, gpus: int) -> str | None:
    """Why ``spec`` cannot run at global batch ``global_batch`` on ``gpus`` GPUs (None:
    it can): outside the spec's ``batch_size_min``/``batch_size_max`` (a spec without them
    runs at its ``global_batch_size`` only), or fewer samples than GPUs."""
    rng = spec.batch_range
    if rng is None and global_batch != spec.global_batch_size:
        return (
            f"the spec has no batch range (batch_size_min/batch_size_max): its global batch "
            f"is global_batch_size {spec.global_batch_size}"
        )
    if rng is not None and not rng[0] <= global_batch <= rng[1]:
        return f"outside the spec's range batch_size_min {rng[0]} .. batch_size_max {rng[1]}"
    if global_batch < gpus:
        return f"cannot be split over {gpus} GPUs"
    return None


def lost_workers_only(state: JobState) -> bool:
    """A stop-free job whose dead containers do not include the store host (index 0),
    with a running container left: the job goes on without them."""
    dead = [w for w in state.workers if w.dead]
    if not dead or any(w.node_rank == stopfree.STORE_HOST_INDEX for w in dead):
        return False
    return any(w.state == "running" for w in state.workers)


@dataclass(frozen=True)
class ReconcileEvent:
    job: str
    kind: str  # completed | restarted | failed | unknown-job | left | lost
    detail: str = ""
    reason: str = ""  # left: why (stopfree.left_reason: straggler, signal, ...)


# ---------------------------------------------------------------- executor


@dataclass
class ExecutorOptions:
    grace_s: float = 30.0  # SIGTERM -> SIGKILL: time the job has to checkpoint
    max_restarts: int = 3  # restarts of a dead job before it is reported failed
    checkpoint_every: int | None = None  # FLOWCON_CHECKPOINT_EVERY for jobs (None: job's own)
    checkpoint_host_dir: str | None = None  # bind <dir>/<job> instead of a named volume
    extra_labels: Mapping[str, str] = field(default_factory=dict)  # e.g. the test label
    # stop-free scale-in: leave signal -> the leaving containers exited EXIT_LEFT; past it
    # the job is checkpoint-restarted on the new placement
    leave_timeout_s: float = 60.0
    leave_resend_s: float = 2.0  # the leave signal again while a leaver still runs
    poll_s: float = 0.1


class Executor:
    """Runs, rescales, adopts and repairs jobs on one backend (engine or swarm)."""

    def __init__(
        self,
        backend: Backend,
        inventory: Any | None = None,
        options: ExecutorOptions | None = None,
    ) -> None:
        self.backend = backend
        self.inventory = inventory
        self.options = options or ExecutorOptions()
        self._restarts: dict[str, int] = {}

    # -- naming

    @staticmethod
    def worker_name(job: str, node: str, role: str = ROLE_JOB, suffix: str = "") -> str:
        safe = "".join(c if c.isalnum() or c == "-" else "-" for c in node.lower())
        prefix = "flowcon" if role == ROLE_JOB else f"flowcon-{role}"
        return f"{prefix}-{job}--{safe}{suffix}"

    @staticmethod
    def volume_name(job: str) -> str:
        return f"flowcon-ckpt-{job}"

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
        return {
            j: JobState(j, tuple(sorted(ws, key=lambda w: w.node_rank))) for j, ws in out.items()
        }

    def job(self, name: str) -> JobState | None:
        ws = self.backend.list_workers(self._selector(name))
        return JobState(name, tuple(sorted(ws, key=lambda w: w.node_rank))) if ws else None

    # -- actions

    def launch(self, spec: JobSpec, placement: Placement, role: str = ROLE_JOB) -> list[Worker]:
        """Start ``spec`` on ``placement``; a no-op if it already runs exactly there.

        Containers of the job that run elsewhere are stopped (checkpointing) first. A job
        that scales stop-free (``scaling_of``) runs one container per GPU, the first of
        them the store host (``flowcon.executor.stopfree_plan``).
        """
        if role == ROLE_JOB and self.scaling_of(spec) == SCALING_STOPFREE:
            return self._launch_stopfree(spec, placement)
        slots = layout(spec.launcher, self._resolve(plan_workers(placement)))
        current = self.backend.list_workers(self._selector(spec.name, role))
        if current and self._matches(current, slots, spec):
            for w in current:
                if w.state in ("exited", "dead", "created"):
                    log.info("job %s: starting stopped worker %s", spec.name, w.name)
                    self.backend.restart(w)
            return sorted(
                self.backend.list_workers(self._selector(spec.name, role)),
                key=lambda w: w.node_rank,
            )
        if current:
            self._stop_all(current, self.options.grace_s)
        return self._create_all(spec, slots, role)

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

    def rescale(
        self, spec: JobSpec, placement: Placement, global_batch: int | None = None
    ) -> RescaleResult:
        """Move ``spec`` onto ``placement``: stop-free for a job launched that way (only the
        joining containers start, only the leaving ones stop; ``flowcon.executor.stopfree_plan``),
        else, or when stop-free cannot do it, checkpoint-restart; measures the stop time.

        ``global_batch``: the job's global batch on the new placement (Elan III's hybrid
        scaling; the allocator picks it from the spec's range, ``flowcon.alloc.batch.
        hybrid_batch``); None: ``spec.run_batch``, else ``spec.global_batch_size``. A batch
        outside the spec's range, or one that cannot be split over the new GPUs, raises
        ``ExecutorError`` before anything stops. The containers this rescale starts get it
        as FLOWCON_GLOBAL_BATCH_SIZE (and a range job FLOWCON_REFERENCE_BATCH_SIZE, the
        submitted batch its LR is meant for): a restart's resume from the checkpoint with
        it (the data position is in samples), a stop-free scale-out's joiners, whose batch
        the job adopts at the switch. A stop-free scale-in starts no container and cannot
        tell the running ones a new batch: the job keeps its batch (logged) until its next
        scale-out or restart; it is not restarted for it."""
        if global_batch is not None:
            gpus = sum(len(g) for g in placement.values())
            why = batch_problem(spec, global_batch, gpus)
            if why is not None:
                raise ExecutorError(f"job {spec.name}: global batch {global_batch} refused: {why}")
            spec = replace(spec, run_batch=global_batch)
        current = self.backend.list_workers(self._selector(spec.name))
        current = [w for w in current if not w.left]
        state = JobState(spec.name, tuple(current))
        if current and state.scaling == SCALING_STOPFREE:
            pairs = self._pairs(placement)
            plan = stopfree.plan_stopfree(current, pairs)
            if plan.fallback is None:
                if global_batch is not None and not plan.join:
                    log.info(
                        "job %s: a stop-free scale-in cannot change the global batch: the "
                        "job keeps its batch; %d applies from its next scale-out or restart",
                        spec.name,
                        global_batch,
                    )
                return self._rescale_stopfree(spec, plan, pairs)
            log.warning(
                "job %s: stop-free rescale impossible (%s): checkpoint-restart instead",
                spec.name,
                plan.fallback,
            )
            return self._restart(spec, placement, current, fallback=plan.fallback)
        return self._restart(spec, placement, current)

    def _restart(
        self,
        spec: JobSpec,
        placement: Placement,
        current: Sequence[Worker],
        fallback: str | None = None,
    ) -> RescaleResult:
        """Checkpoint-restart: SIGTERM every container, then start the new set."""
        old_gpus = sum(len(w.gpus) for w in current)
        t0 = time.monotonic()
        self._stop_all(current, self.options.grace_s)
        t1 = time.monotonic()
        if self.scaling_of(spec) == SCALING_STOPFREE:
            workers = self._launch_stopfree(spec, placement)
        else:
            workers = self._create_all(
                spec, layout(spec.launcher, self._resolve(plan_workers(placement))), ROLE_JOB
            )
        t2 = time.monotonic()
        new_gpus = sum(len(w.gpus) for w in workers)
        log.info(
            "job %s rescaled %d -> %d GPUs: stop %.2fs, start %.2fs",
            spec.name,
            old_gpus,
            new_gpus,
            t1 - t0,
            t2 - t1,
        )
        return RescaleResult(
            spec.name,
            old_gpus,
            new_gpus,
            t1 - t0,
            t2 - t1,
            tuple(w.name for w in workers),
            mode=SCALING_RESTART,
            fallback=fallback,
            global_batch=spec.run_batch or spec.global_batch_size,
        )

    def _pairs(self, placement: Placement) -> list[tuple[str, str]]:
        """(node, GPU id) of every GPU of ``placement`` in rank order (ids resolved)."""
        return [(s.node, g) for s in self._resolve(plan_workers(placement)) for g in s.gpus]

    def _launch_stopfree(self, spec: JobSpec, placement: Placement) -> list[Worker]:
        """A stop-free job's first start: one container per GPU, index 0 the store host.
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

    def _rescale_stopfree(
        self, spec: JobSpec, plan: stopfree.StopFreePlan, pairs: Sequence[tuple[str, str]]
    ) -> RescaleResult:
        """Scale-in: the leave signal to the leaving containers (highest index first; never
        the store host), wait for their EXIT_LEFT, remove them; past ``leave_timeout_s``
        (or another exit code) the job is checkpoint-restarted. Scale-out: start only the
        joiners (FLOWCON_JOIN=1, FLOWCON_TARGET_WORLD, the store host's MASTER_ADDR/PORT).
        The running containers are never touched."""
        t0 = time.monotonic()
        if plan.leave:
            why = self._leave(plan.leave)
            if why is not None:
                log.warning(
                    "job %s: stop-free scale-in failed (%s): checkpoint-restart instead",
                    spec.name,
                    why,
                )
                current = [
                    w for w in self.backend.list_workers(self._selector(spec.name)) if not w.left
                ]
                placement: dict[str, list[str]] = {}
                for node, gpu in pairs:
                    placement.setdefault(node, []).append(gpu)
                return self._restart(spec, placement, current, fallback=why)
        t1 = time.monotonic()
        joined: list[Worker] = []
        if plan.join:
            slots = stopfree.world_slots(plan.keep, plan.join)
            env = {
                s.node_rank: stopfree.stopfree_env(
                    s.node_rank, join=True, target_world=plan.join_world
                )
                for s in plan.join
            }
            joined = self._create_all(
                spec,
                slots,
                ROLE_JOB,
                stopfree_env=env,
                only=frozenset(s.node_rank for s in plan.join),
                store_host=plan.keep[0],
            )
        t2 = time.monotonic()
        log.info(
            "job %s rescaled stop-free %d -> %d GPUs: %d left (%.2fs), %d joined (%.2fs)",
            spec.name,
            plan.old_world,
            plan.new_world,
            len(plan.leave),
            t1 - t0,
            len(joined),
            t2 - t1,
        )
        return RescaleResult(
            spec.name,
            plan.old_world,
            plan.new_world,
            t1 - t0,
            t2 - t1,
            tuple(w.name for w in [*plan.keep, *joined]),
            mode=SCALING_STOPFREE,
            joined=tuple(w.name for w in joined),
            left=tuple(w.name for w in plan.leave),
            global_batch=(spec.run_batch or spec.global_batch_size) if joined else None,
        )

    def _leave(self, leaving: Sequence[Worker]) -> str | None:
        """Signal ``leaving`` in order and wait for each to exit EXIT_LEFT, then remove
        them; None when they all left, else why not."""
        for w in leaving:
            try:
                self.backend.kill(w, LEAVE_SIGNAL)
            except ExecutorError as exc:  # e.g. Swarm without access to the worker's node
                return f"cannot send {LEAVE_SIGNAL} to {w.name}: {exc}"
        ids = {w.id for w in leaving}
        deadline = time.monotonic() + self.options.leave_timeout_s
        resend = time.monotonic() + self.options.leave_resend_s
        job = leaving[0].job
        while True:
            now = {w.id: w for w in self.backend.list_workers(self._selector(job))}
            gone = [now[i] for i in ids if i in now and now[i].state in ("exited", "dead")]
            vanished = [i for i in ids if i not in now]
            if len(gone) + len(vanished) == len(ids):
                break
            if time.monotonic() >= resend:
                # a container's launcher handles the signal only once it has started (a
                # signal before that is lost on PID 1); a repeat is harmless after
                resend = time.monotonic() + self.options.leave_resend_s
                for w in leaving:
                    if w.id in now and now[w.id].state == "running":
                        with contextlib.suppress(ExecutorError):
                            self.backend.kill(now[w.id], LEAVE_SIGNAL)
            if time.monotonic() >= deadline:
                waiting = sorted(now[i].name for i in ids if i in now and now[i] not in gone)
                return (
                    f"{', '.join(waiting)} did not leave within "
                    f"{self.options.leave_timeout_s:.0f} s"
                )
            time.sleep(self.options.poll_s)
        bad = [f"{w.name} exit {w.exit_code}" for w in gone if w.exit_code != EXIT_LEFT]
        for w in gone:
            self.backend.remove(w)
        if vanished:
            bad.append(f"{len(vanished)} container(s) vanished")
        return f"leaving containers did not exit {EXIT_LEFT}: {', '.join(bad)}" if bad else None

    def suspend(self, job: str, grace_s: float | None = None) -> float:
        """Stop a job (it checkpoints) and remove its containers; the checkpoint stays."""
        current = self.backend.list_workers(self._selector(job))
        t0 = time.monotonic()
        self._stop_all(current, self.options.grace_s if grace_s is None else grace_s)
        return time.monotonic() - t0

    def remove(self, job: str, keep_checkpoint: bool = False, grace_s: float | None = None) -> None:
        """Stop and remove a job (cancel or completion), with its checkpoint unless kept."""
        self.suspend(job, grace_s)
        self._restarts.pop(job, None)
        volume = None if keep_checkpoint else self.volume_name(job)
        self.backend.cleanup(job, volume)

    def reconcile(self, known: Iterable[str] | None = None) -> list[ReconcileEvent]:
        """Look at every managed job: report completions, restart dead jobs from checkpoint.

        A dead worker (exited non-zero, killed, stopped by someone else) makes the whole job
        restart, because its peers would hang in the next collective: all its workers are
        stopped and started again with their configuration, and the job resumes from its
        checkpoint. After ``max_restarts`` the job is reported ``failed`` and left stopped.
        Jobs not in ``known`` (when given) are reported ``unknown-job`` and left alone.
        """
        events: list[ReconcileEvent] = []
        names = set(known) if known is not None else None
        for name, state in self.jobs().items():
            if names is not None and name not in names:
                events.append(ReconcileEvent(name, "unknown-job", "not in the allocator's store"))
                continue
            for w in [w for w in state.workers if w.left]:
                # left on its own (straggler removal) or after a scale-in the executor did
                # not see through: the job runs on without it; the next plan re-places it
                reason = self._left_reason(w)
                self.backend.remove(w)
                events.append(ReconcileEvent(name, "left", w.name, reason))
            status = state.status
            if status == "completed":
                events.append(ReconcileEvent(name, "completed"))
            elif status == "failed":
                events.append(self._dead(name, state))
            elif status == "mixed":
                stopped = [w for w in state.workers if w.state == "created"]
                for w in stopped:
                    self.backend.restart(w)
        return events

    def _dead(self, name: str, state: JobState) -> ReconcileEvent:
        """A job with a dead worker: restarted from its checkpoint (stop-free: the lost
        workers go and the others re-form), or ``failed`` after ``max_restarts``."""
        dead = [w for w in state.workers if w.dead]
        why = ", ".join(
            f"{w.name} {'lost with its node' if w.node_lost else f'exit {w.exit_code}'}"
            for w in dead
        )
        # Stopped with SIGTERM after writing its checkpoint (exit 143) by someone other
        # than us (an engine restart without --live-restore, docker stop, a drained node):
        # preempted, not failed, so no restart is used up.
        # A swarm node whose engine went away (node_lost) preempted its containers the same way.
        preempted = all(w.exit_code == EXIT_PREEMPTED or w.node_lost for w in dead)
        n = self._restarts.get(name, 0)
        if n >= self.options.max_restarts and not preempted:
            last = self._last_output(dead)
            detail = f"{why}; {n} restarts used" + (f"; last output: {last}" if last else "")
            return ReconcileEvent(name, "failed", detail)
        if not preempted:
            self._restarts[name] = n + 1
        if state.scaling == SCALING_STOPFREE and lost_workers_only(state):
            # EDL's consistent recovery: the others re-form from their in-memory state; the
            # dead containers go, and the next round (its placement differs now) starts
            # joiners in their place (a stop-free scale-out)
            for w in dead:
                self.backend.remove(w)
            log.warning("job %s: removed %s; the job goes on without it", name, why)
            return ReconcileEvent(name, "lost", why)
        if state.scaling == SCALING_STOPFREE:
            # the store host died (or every worker): joiners carry FLOWCON_JOIN, so
            # restarting the containers as they are would not re-form the job; removed, it
            # is launched afresh by the next round (ExecutorTarget.apply) and resumes from
            # its checkpoint
            self._stop_all(list(state.workers), self.options.grace_s)
            log.warning("job %s: removed for a relaunch after %s", name, why)
            return ReconcileEvent(name, "restarted", why)
        live = [w for w in state.workers if w.state in ("running", "starting")]
        self._parallel(lambda w: self.backend.stop(w, self.options.grace_s), live)
        self._parallel(self.backend.restart, [w for w in state.workers if not w.left])
        what = "preempted (exit 143)" if preempted else why
        log.warning("job %s: restarted from checkpoint after %s", name, what)
        return ReconcileEvent(name, "restarted", why)

    def _left_reason(self, w: Worker) -> str:
        """Why ``w`` left, from its last lines (before it is removed with them)."""
        try:
            lines = [ln.text for ln in self.backend.read_logs(w, tail=50)]
        except Exception:  # the reason is a label; the event is reported anyway
            lines = []
        return stopfree.left_reason(lines)

    def _last_output(self, dead: Sequence[Worker]) -> str:
        """The last line a dead worker wrote (stdout or stderr; a Python traceback's last
        line names the error), so a failed job says why in its reason."""
        for w in dead:
            try:
                lines = [ln.text.strip() for ln in self.backend.read_logs(w, tail=20)]
            except Exception:  # the reason is a courtesy; the failure is reported anyway
                continue
            lines = [ln for ln in lines if ln]
            if lines:
                return lines[-1][:300]
        return ""

    def logs(self, job: str) -> list[str]:
        """Output lines of the job's rank-0 container (where flowcon.elastic reports)."""
        ws = self.backend.list_workers(self._selector(job))
        ws.sort(key=lambda w: w.node_rank)
        return self.backend.logs(ws[0]) if ws else []

    def points(self, job: str, metric: MetricSpec | None = None) -> list[tuple[float, float]]:
        """(step, ts) of the metric lines of the job's rank-0 container, read in the job's
        own format when its spec has ``metric.regex`` (``profiling.worker_points``)."""
        ws = self.backend.list_workers(self._selector(job))
        ws.sort(key=lambda w: w.node_rank)
        return worker_points(self.backend, ws[0], metric) if ws else []

    def switch_gap(self, job: str, began: float, world: int) -> float | None:
        """The no-progress gap of a stop-free event begun at ``began`` (wall time) to
        world size ``world``, from the metric lines of the job's containers (rank 0 reports;
        it is the store host's worker until that one leaves) in time order
        (``stopfree.switch_gap``); None until the job reports a step at that size."""
        lines = {
            (ln.step, ln.ts): ln
            for w in self.backend.list_workers(self._selector(job))
            for ln in stopfree.step_lines(self.backend.logs(w))
        }
        ordered = sorted(lines.values(), key=lambda ln: ln.ts)
        return stopfree.switch_gap(ordered, began, world)

    def job_logs(
        self, job: str, rank: int | None = None, after_ns: int = 0, tail: int | None = None
    ) -> tuple[list[int], list[tuple[Worker, LogLine]]]:
        """(the node ranks of the job's workers, their output lines newer than
        ``after_ns`` in time order); only rank ``rank``'s when given, the last ``tail``
        lines of each worker when given."""
        ws = sorted(self.backend.list_workers(self._selector(job)), key=lambda w: w.node_rank)
        ranks = [w.node_rank for w in ws]
        if rank is not None:
            ws = [w for w in ws if w.node_rank == rank]
        out = [(w, ln) for w in ws for ln in self.backend.read_logs(w, after_ns, tail)]
        out.sort(key=lambda p: (p[1].ts_ns, p[0].node_rank))
        return ranks, out

    def profile(
        self,
        spec: JobSpec,
        placement_for: Callable[[int], Placement | None],
        counts: Sequence[int] | None = None,
        max_seconds: float = 60.0,
        min_points: int = 4,
        poll_s: float = 0.5,
        min_gain: float = 0.05,
        on_point: Callable[[int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ThroughputProfile:
        """Pre-run (section 5): run the job briefly at 1, 2, 4, ... GPUs and read its speed.

        Each count runs as a ``profile`` role job with its own throw-away checkpoint volume,
        until it printed ``min_points`` metric lines after the first or ``max_seconds``
        passed. Profiling stops early when more GPUs stop adding throughput (section 6.6):
        a count that is not ``min_gain`` (relative) faster than the best so far is the last.
        ``on_point(gpus, rate)`` is told each result (rate None: nothing measured);
        ``cancelled()`` true stops the pre-run at the next poll (raises ``ExecutorError``).
        See ``flowcon.executor.profiling``.
        """
        total = self.inventory.total_gpus if self.inventory is not None else 1
        counts = list(counts) if counts is not None else spec.gpu_counts_to_profile(total)

        def rate_at(pspec: JobSpec, placement: Placement) -> float | None:
            selector = self._selector(pspec.name, ROLE_PROFILE)
            try:
                self.launch(pspec, placement, role=ROLE_PROFILE)
                return measure(
                    self.backend,
                    selector,
                    max_seconds,
                    min_points,
                    poll_s,
                    cancelled,
                    metric=spec.metric,
                )
            finally:
                self._stop_all(self.backend.list_workers(selector), grace_s=2.0)
                self.backend.cleanup(pspec.name, self.volume_name(pspec.name))

        return prerun(spec, counts, placement_for, rate_at, min_gain, on_point, cancelled)

    def free_master_port(self, job: str) -> int:
        """A master port no live worker of another job holds (their ``flowcon.master-port``
        labels), for a job the allocator gave none (pre-runs, the executor on its own)."""
        taken = []
        for w in self.backend.list_workers(self._selector(None, None)):
            raw = w.labels.get(LABEL_MASTER_PORT, "")
            if w.job != job and raw.isdigit():
                taken.append(int(raw))
        return allocate_master_port(job, taken)

    # -- internals

    def orphans(self) -> set[str]:
        """Jobs whose network or checkpoint volume is left without any container (an
        allocator killed between a removal's containers and its network and volume)."""
        held = self.backend.job_objects(self._selector(None, None))
        return held - set(self.jobs()) - {w.job for w in self.backend.list_workers(
            self._selector(None, ROLE_PROFILE))}  # fmt: skip

    def remove_profiles(self) -> int:
        """Remove pre-run containers (and their throw-away volumes) an interrupted
        allocator left behind; returns how many containers went."""
        ws = self.backend.list_workers(self._selector(None, ROLE_PROFILE))
        self._stop_all(ws, grace_s=2.0)
        for job in {w.job for w in ws}:
            self.backend.cleanup(job, self.volume_name(job))
        return len(ws)

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

    def _create_all(
        self,
        spec: JobSpec,
        slots: list[WorkerSlot],
        role: str,
        *,
        stopfree_env: Mapping[int, Mapping[str, str]] | None = None,
        only: frozenset[int] | None = None,
        store_host: Worker | None = None,
    ) -> list[Worker]:
        """Create and start the containers of ``slots`` (all or nothing). Stop-free
        (``stopfree_env``: extra environment by container index): containers named by
        index, labelled ``flowcon.scaling=stopfree``; ``only`` the slots of those indices
        are created (the joiners; the others run), reaching the running ``store_host``."""
        job_labels = {
            **dict(self.options.extra_labels),
            LABEL_MANAGED_BY: MANAGED_BY_ALLOCATOR,
            LABEL_JOB: spec.name,
        }

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
        world = world_size(slots)
        host_dir = self.options.checkpoint_host_dir
        if host_dir:
            # the bind source must exist; on shared storage creating it here is enough
            try:
                os.makedirs(f"{host_dir.rstrip('/')}/{spec.name}", exist_ok=True)
            except OSError as exc:
                log.warning("cannot create checkpoint dir under %s: %s", host_dir, exc)
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
                    checkpoint_volume=self.volume_name(spec.name),
                    checkpoint_host_dir=f"{host_dir.rstrip('/')}/{spec.name}" if host_dir else None,
                    grace_s=self.options.grace_s,
                    network=network,
                    settings=settings_for(spec, len(s.gpus)),
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
