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
- ``flowcon.executor.stopfree_plan``: the stop-free rescale's pure planning;
- ``flowcon.executor.executor_base``: ``ExecutorBase`` (state, naming, queries, container
  creation and removal) and ``JobState``, ``ExecutorOptions``;
- the parts of the ``Executor``, mixins on ``ExecutorBase``: ``flowcon.executor.restart``
  (checkpoint-restart rescale, ``RescaleResult``), ``flowcon.executor.stopfree_rescale``
  (the stop-free rescale), ``flowcon.executor.reconcile`` (adoption, dead and left
  workers, orphans, ``ReconcileEvent``), ``flowcon.executor.job_logs`` (logs, metric lines);
- this module: the ``Executor`` (launch, rescale, suspend, remove, profile, and the
  mixins' reconcile and logs) on any ``Backend``; it never imports a backend;
- ``flowcon.executor.backends.engine`` / ``executor_swarm``: the two backends;
- ``flowcon.executor.factory``: ``make_executor`` from the config section.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from flowcon.contract import ROLE_JOB, ROLE_PROFILE, SCALING_STOPFREE
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import ExecutorError, Worker
from flowcon.executor.executor_base import ExecutorOptions, JobState
from flowcon.executor.job_logs import JobLogsMixin
from flowcon.executor.launchers import layout
from flowcon.executor.profiling import (
    ENV_PROBE_LOCAL_BATCH,
    derived_name,
    measure,
    prerun,
    prerun_batches,
    probe_outcome,
    profile_spec,
    search_local_batch,
)
from flowcon.executor.reconcile import ReconcileEvent, ReconcileMixin, lost_workers_only
from flowcon.executor.restart import RescaleResult
from flowcon.executor.scaling_profile import profile_by_scaling
from flowcon.executor.stopfree_rescale import StopFreeRescaleMixin
from flowcon.executor.workers import Placement, plan_workers
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

__all__ = [
    "Executor",
    "ExecutorOptions",
    "JobState",
    "ReconcileEvent",
    "RescaleResult",
    "batch_problem",
    "lost_workers_only",
]

log = logging.getLogger(__name__)


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


# ---------------------------------------------------------------- executor


class Executor(StopFreeRescaleMixin, ReconcileMixin, JobLogsMixin):
    """Runs, rescales, adopts and repairs jobs on one backend (engine or swarm)."""

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

    def suspend(self, job: str, grace_s: float | None = None) -> float:
        """Stop a job (it checkpoints) and remove its containers; the checkpoint stays."""
        current = self.backend.list_workers(self._selector(job))
        t0 = time.monotonic()
        self._stop_all(current, self.options.grace_s if grace_s is None else grace_s)
        return time.monotonic() - t0

    def remove(
        self,
        job: str,
        keep_checkpoint: bool = False,
        grace_s: float | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Stop and remove a job (cancel or completion), with its checkpoint unless kept.
        ``owner``: whose job it is (its checkpoint's key, ``checkpoint_key``); None: its
        containers' owner label, else the owner this executor saw it with."""
        owner = self.owner_of(job, self.backend.list_workers(self._selector(job)), owner)
        self.suspend(job, grace_s)
        self._restarts.pop(job, None)
        volume = None if keep_checkpoint else self.volume_name(job, owner)
        self.backend.cleanup(job, volume)
        if not keep_checkpoint:
            self._owners.pop(job, None)

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
        rate_at = self._rate_at(spec, max_seconds, min_points, poll_s, cancelled)
        return prerun(spec, counts, placement_for, rate_at, min_gain, on_point, cancelled)

    def profile_by_scaling(
        self,
        spec: JobSpec,
        counts: Sequence[int],
        placement_for: Callable[[int, dict[str, list[str]] | None], dict[str, list[str]] | None],
        *,
        max_seconds: float = 60.0,
        min_points: int = 4,
        poll_s: float = 0.5,
        min_gain: float = 0.05,
        on_point: Callable[[int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ThroughputProfile:
        """Profile a stop-free job by scaling it while it runs, as itself (EDL 3.3,
        ``flowcon.executor.scaling_profile``): its progress is kept and it runs on at the
        last count measured; the caller removes it on failure."""
        profile, _ = profile_by_scaling(
            self,
            spec,
            counts,
            placement_for,
            max_seconds=max_seconds,
            min_points=min_points,
            poll_s=poll_s,
            min_gain=min_gain,
            on_point=on_point,
            cancelled=cancelled,
        )
        return profile

    def _rate_at(
        self,
        spec: JobSpec,
        max_seconds: float,
        min_points: int,
        poll_s: float,
        cancelled: Callable[[], bool] | None,
    ) -> Callable[[JobSpec, Placement], float | None]:
        """One pre-run job's speed: launched as a ``profile`` role job, measured, removed."""

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
                self.backend.cleanup(pspec.name, self.volume_name(pspec.name, pspec.owner))

        return rate_at

    def profile_batches(
        self,
        spec: JobSpec,
        profile: ThroughputProfile,
        placement_for: Callable[[int], Placement | None],
        max_seconds: float = 60.0,
        min_points: int = 4,
        poll_s: float = 0.5,
        on_point: Callable[[int, int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> tuple[dict[int, dict[int, float]], int | None]:
        """The batch dimension of the pre-run, for a job with a batch range (after
        ``profile``): (its iterations/s at other global batches at the GPU counts
        ``profile`` measured, the largest local batch that fits one worker). The largest
        local batch comes first: on one worker, the job's own probe reports it where the
        script runs one (``flowcon.elastic.largest_batch``, CUDA out-of-memory), else a
        binary search over local batches in the range finds the largest one the
        container's memory limit does not OOM-kill (exit 137 / OOMKilled); None where
        even the range's smallest batch is killed or no worker could be placed. The
        batches then measured stay within it (``flowcon.executor.profiling``)."""
        if spec.batch_range is None:
            return {}, None
        max_local = self.largest_local_batch(spec, placement_for, max_seconds, poll_s, cancelled)
        rate_at = self._rate_at(spec, max_seconds, min_points, poll_s, cancelled)
        counts = [g for g, _ in profile.points]
        rows = prerun_batches(spec, counts, placement_for, rate_at, max_local, on_point, cancelled)
        return rows, max_local

    def largest_local_batch(
        self,
        spec: JobSpec,
        placement_for: Callable[[int], Placement | None],
        max_seconds: float = 60.0,
        poll_s: float = 0.5,
        cancelled: Callable[[], bool] | None = None,
    ) -> int | None:
        """The largest local batch of ``spec`` that fits one worker (``profile_batches``)."""
        rng = spec.batch_range
        placement = placement_for(1)
        if rng is None or placement is None:
            return None
        low, high = rng
        reported: list[int] = []

        def runs_at(batch: int) -> bool:
            env = {**dict(spec.env), ENV_PROBE_LOCAL_BATCH: f"{low}:{batch}"}
            name = derived_name(spec.name, f"m{batch}")
            pspec = replace(profile_spec(spec, 1), name=name, run_batch=batch, env=env)
            selector = self._selector(pspec.name, ROLE_PROFILE)
            try:
                self.launch(pspec, placement, role=ROLE_PROFILE)
                fits, said = probe_outcome(self.backend, selector, max_seconds, poll_s, cancelled)
            finally:
                self._stop_all(self.backend.list_workers(selector), grace_s=2.0)
                self.backend.cleanup(pspec.name, self.volume_name(pspec.name, pspec.owner))
            if said is not None:
                reported.append(said)
            return fits

        if not runs_at(high):  # OOM-killed at the top: search down (CPU memory limits)
            return search_local_batch(spec, runs_at, low, high - 1) if high > low else None
        return min(reported[-1], high) if reported else high
