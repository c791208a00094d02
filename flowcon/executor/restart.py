"""Checkpoint-restart rescaling (ElasticFlow's executor, sections 3.1 and 5).

``RestartMixin._restart`` stops every container of the job (SIGTERM: the job checkpoints),
then starts the new set; the job resumes from its checkpoint on the new GPUs. It is how a
job launched for restart scaling rescales, and the fallback of a stop-free rescale that
cannot be done stop-free. ``RescaleResult`` is what any rescale returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from flowcon.contract import ROLE_JOB, SCALING_RESTART, SCALING_STOPFREE
from flowcon.executor.backend import Worker
from flowcon.executor.executor_base import ExecutorBase
from flowcon.executor.launchers import layout
from flowcon.executor.workers import Placement, plan_workers
from flowcon.jobspec.spec import JobSpec

log = logging.getLogger(__name__)


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


class RestartMixin(ExecutorBase):
    """The checkpoint-restart rescale of the ``Executor``."""

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
