"""Reconciling: what the executor finds on the backend, and what it does about it.

A restarted allocator adopts the jobs it finds from their containers' labels
(``ExecutorBase.jobs``); ``ReconcileMixin.reconcile`` then reports completions, removes
stop-free containers that left, and restarts a job with a dead worker from its checkpoint
(a stop-free job that lost only workers goes on without them: ``lost_workers_only``;
its coordinator's container among them when the survivors can elect another:
``coordinator_loss``, whose reason the event's detail carries), until ``max_restarts``.
``orphans`` and ``remove_profiles`` find and clear what an interrupted allocator left
behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flowcon.contract import EXIT_PREEMPTED, ROLE_PROFILE, SCALING_STOPFREE
from flowcon.core.completion import Completion
from flowcon.executor import stopfree_plan as stopfree
from flowcon.executor.backend import Worker
from flowcon.executor.executor_base import ExecutorBase, JobState

log = logging.getLogger(__name__)


def lost_workers_only(state: JobState) -> bool:
    """A stop-free job with a running container left whose dead containers its runtime
    survives: the job goes on without them. The coordinator's container among the dead is
    survived when every running container hosts a standby store (the survivors elect the
    lowest-index one's; ``coordinator_loss``)."""
    dead = [w for w in state.workers if w.dead]
    if not dead or not any(w.state == "running" for w in state.workers):
        return False
    loss = coordinator_loss(state)
    return loss is None or loss[0] is not None


def coordinator_loss(state: JobState) -> tuple[Worker | None, str] | None:
    """None when the container of the job's coordinator (its lowest-index container that
    did not leave) is alive; else (the survivor whose store the survivors elect, None when
    they cannot: then the job restarts from its checkpoint, and why)."""
    members = [w for w in state.workers if not w.left]
    if not members:
        return None
    host = min(members, key=lambda w: w.node_rank)
    if not host.dead:
        return None
    running = sorted((w for w in members if w.state == "running"), key=lambda w: w.node_rank)
    if not running:
        return None, f"the coordinator's container {host.name} died and no container runs"
    bare = [w.name for w in running if not stopfree.has_standby_store(w)]
    if bare:
        return None, (
            f"the coordinator's container {host.name} died and {', '.join(bare)} "
            "hosts no standby store (launched before coordination moved)"
        )
    heir = running[0]
    return heir, (
        f"the coordinator's container {host.name} died: the survivors elect {heir.name}'s "
        "store and go on from their in-memory state"
    )


@dataclass(frozen=True)
class ReconcileEvent:
    job: str
    kind: str  # completed | restarted | failed | unknown-job | left | lost
    detail: str = ""
    reason: str = ""  # left: why (stopfree.left_reason: straggler, signal, ...)
    node: str = ""  # left: the node the worker ran on
    gpus: tuple[str, ...] = ()  # left: the GPU ids it held there


class ReconcileMixin(ExecutorBase):
    """The ``Executor``'s reconciling and its clean-up of what was left behind."""

    def reconcile(
        self,
        known: Iterable[str] | None = None,
        confirm: Callable[[str], Completion] | None = None,
    ) -> list[ReconcileEvent]:
        """Look at every managed job: report completions, restart dead jobs from checkpoint.

        A job whose workers all exited 0 is completed only when ``confirm`` (when given)
        says the job finished (flowcon/core/completion.py); otherwise it is restarted from
        its checkpoint like a job with a dead worker, with ``confirm``'s reason.

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
                events.append(ReconcileEvent(name, "left", w.name, reason, w.node, tuple(w.gpus)))
            status = state.status
            if status == "completed":
                verdict = confirm(name) if confirm is not None else None
                if verdict is None or verdict.own:
                    events.append(ReconcileEvent(name, "completed", verdict.why if verdict else ""))
                else:
                    events.append(self._unfinished(name, state, verdict.why))
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
        loss = coordinator_loss(state) if state.scaling == SCALING_STOPFREE else None
        if state.scaling == SCALING_STOPFREE and lost_workers_only(state):
            # EDL's consistent recovery: the others re-form from their in-memory state (a
            # dead coordinator: at the store they elect); the dead containers go, and the
            # next round (its placement differs now) starts joiners in their place (a
            # stop-free scale-out) pointed at the coordinator they elected
            for w in dead:
                self.backend.remove(w)
            detail = f"{why}; {loss[1]}" if loss is not None else why
            log.warning("job %s: removed %s; the job goes on without it", name, detail)
            return ReconcileEvent(name, "lost", detail)
        relaunched = self._restart_from_checkpoint(state)
        what = "preempted (exit 143)" if preempted else why
        if loss is not None:
            why = f"{why}; {loss[1]}: restarted from its checkpoint"
        if relaunched:
            log.warning("job %s: removed for a relaunch after %s", name, why)
        else:
            log.warning("job %s: restarted from checkpoint after %s", name, what)
        return ReconcileEvent(name, "restarted", why)

    def _unfinished(self, name: str, state: JobState, why: str) -> ReconcileEvent:
        """Workers that all exited 0 without finishing the job: restarted from its
        checkpoint (a restart used), or ``failed`` after ``max_restarts``."""
        n = self._restarts.get(name, 0)
        if n >= self.options.max_restarts:
            return ReconcileEvent(name, "failed", f"{why}; {n} restarts used")
        self._restarts[name] = n + 1
        self._restart_from_checkpoint(state)
        log.warning("job %s: restarted from checkpoint: %s", name, why)
        return ReconcileEvent(name, "restarted", f"{why}: restarted from its checkpoint")

    def _restart_from_checkpoint(self, state: JobState) -> bool:
        """Start the job again from its checkpoint: its containers stopped and started
        again; True when, stop-free, it was removed for a relaunch instead (its joiners
        carry FLOWCON_JOIN, so restarting the containers as they are would not re-form the
        job: the next round, ExecutorTarget.apply, launches it afresh)."""
        if state.scaling == SCALING_STOPFREE:
            self._stop_all(list(state.workers), self.options.grace_s)
            return True
        live = [w for w in state.workers if w.state in ("running", "starting")]
        self._parallel(lambda w: self.backend.stop(w, self.options.grace_s), live)
        self._parallel(self.backend.restart, [w for w in state.workers if not w.left])
        return False

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
            owner = self.owner_of(job, [w for w in ws if w.job == job])
            self.backend.cleanup(job, self.volume_name(job, owner))
        return len(ws)
