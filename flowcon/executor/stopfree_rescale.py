"""Stop-free rescaling (EDL section 4.2, Elan IV-V): the executor's side.

``StopFreeRescaleMixin._rescale_stopfree`` carries out a ``StopFreePlan`` (planned, without
I/O, by ``flowcon.executor.stopfree_plan``): a scale-in signals the leaving containers and
waits for them to exit ``EXIT_LEFT`` (``_leave``); a scale-out starts only the joiners. The
running containers are never touched; when stop-free cannot do it, the job is
checkpoint-restarted (``RestartMixin._restart``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

from flowcon.contract import EXIT_LEFT, LEAVE_SIGNAL, ROLE_JOB, SCALING_STOPFREE
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import ExecutorError, Worker
from flowcon.executor.restart import RescaleResult, RestartMixin
from flowcon.jobspec.spec import JobSpec

log = logging.getLogger(__name__)


class StopFreeRescaleMixin(RestartMixin):
    """The stop-free rescale of the ``Executor`` (its fallback: checkpoint-restart)."""

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
