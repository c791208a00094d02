"""Stop-free rescaling (EDL section 4.2, Elan IV-V): the executor's side.

``StopFreeRescaleMixin._rescale_stopfree`` carries out a ``StopFreePlan`` (planned, without
I/O, by ``flowcon.executor.stopfree_plan``): a scale-in signals the leaving containers and
waits for them to exit ``EXIT_LEFT`` (``_leave``); a scale-out starts only the joiners,
pointed at the job's coordinator (the lowest-index running container's store); a
migration that keeps no container starts the joiners first, waits for their ``joined``
line, then lets the old ones leave (coordination moves to the first joiner). The running
containers are never touched; when stop-free cannot do it, the job is checkpoint-restarted
(``RestartMixin._restart``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

from flowcon.contract import (
    EXIT_LEFT,
    LABEL_STORE_ADDR,
    LEAVE_SIGNAL,
    ROLE_JOB,
    SCALING_STOPFREE,
)
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
        """Scale-in: the leave signal to the leaving containers (highest index first; the
        coordinator's container too: the runtime hands coordination to the first stayer),
        wait for their EXIT_LEFT, remove them; past ``leave_timeout_s`` (or another exit
        code) the job is checkpoint-restarted. Scale-out: start only the joiners
        (FLOWCON_JOIN=1, FLOWCON_TARGET_WORLD, the coordinator's MASTER_ADDR/PORT). A
        migration that keeps nobody (``join_first``): the joiners first, until each printed
        ``joined``, then the leavers. The running containers are never touched."""
        t0 = time.monotonic()
        joined: list[Worker] = []
        if plan.join_first:
            # keep-then-leave: nobody stays, so the joiners come in first; the old containers
            # leave once they joined (coordination then moves to the first joiner)
            joined = self._start_joiners(spec, plan)
            why = self._await_joined(joined)
            join_s = time.monotonic() - t0
            t1 = time.monotonic()
            if why is None:
                why = self._leave(plan.leave)
            if why is not None:
                return self._fall_back(spec, pairs, why)
            leave_s = time.monotonic() - t1
        else:
            if plan.leave:
                why = self._leave(plan.leave)
                if why is not None:
                    return self._fall_back(spec, pairs, why)
            t1 = time.monotonic()
            leave_s = t1 - t0
            if plan.join:
                joined = self._start_joiners(spec, plan)
            join_s = time.monotonic() - t1
        log.info(
            "job %s rescaled stop-free %d -> %d GPUs: %d left (%.2fs), %d joined (%.2fs)%s",
            spec.name,
            plan.old_world,
            plan.new_world,
            len(plan.leave),
            leave_s,
            len(joined),
            join_s,
            "; coordination moved" if plan.coordinator_leaves else "",
        )
        return RescaleResult(
            spec.name,
            plan.old_world,
            plan.new_world,
            leave_s,
            join_s,
            tuple(w.name for w in [*plan.keep, *joined]),
            mode=SCALING_STOPFREE,
            joined=tuple(w.name for w in joined),
            left=tuple(w.name for w in plan.leave),
            global_batch=(spec.run_batch or spec.global_batch_size) if joined else None,
        )

    def _fall_back(
        self, spec: JobSpec, pairs: Sequence[tuple[str, str]], why: str
    ) -> RescaleResult:
        log.warning(
            "job %s: stop-free rescale failed (%s): checkpoint-restart instead", spec.name, why
        )
        current = [w for w in self.backend.list_workers(self._selector(spec.name)) if not w.left]
        placement: dict[str, list[str]] = {}
        for node, gpu in pairs:
            placement.setdefault(node, []).append(gpu)
        return self._restart(spec, placement, current, fallback=why)

    def _start_joiners(self, spec: JobSpec, plan: stopfree.StopFreePlan) -> list[Worker]:
        """Create ``plan.join`` (FLOWCON_JOIN=1, FLOWCON_TARGET_WORLD), pointed at the job's
        coordinator: the lowest-index running container's store."""
        running = plan.running_at_join
        slots = stopfree.world_slots(running, plan.join)
        env = {
            s.node_rank: stopfree.stopfree_env(s.node_rank, join=True, target_world=plan.join_world)
            for s in plan.join
        }
        host = running[0]
        return self._create_all(
            spec,
            slots,
            ROLE_JOB,
            stopfree_env=env,
            only=frozenset(s.node_rank for s in plan.join),
            store_host=host,
            coordinator=self._coordinator_addr(host),
        )

    def _coordinator_addr(self, host: Worker) -> tuple[str, int] | None:
        """MASTER_ADDR/MASTER_PORT of the store ``host``'s launcher serves (its
        ``flowcon.store`` label; port 0: the port its ``launcher_started`` line names); None
        for a container without one (the job's first coordinator's address then holds)."""
        raw = host.labels.get(LABEL_STORE_ADDR, "")
        addr, _, port = raw.rpartition(":")
        if not addr or not port.isdigit():
            return None
        if int(port):
            return addr, int(port)
        deadline = time.monotonic() + self.options.leave_timeout_s
        while time.monotonic() < deadline:
            lines = [ln.text for ln in self.backend.read_logs(host, tail=200)]
            for obj in stopfree.json_objects(lines):
                if obj.get("event") == "launcher_started" and isinstance(obj.get("store"), str):
                    got = str(obj["store"]).rpartition(":")
                    if got[2].isdigit() and int(got[2]):
                        return got[0], int(got[2])
            time.sleep(self.options.poll_s)
        raise ExecutorError(f"{host.name} never said where its store listens")

    def _await_joined(self, joiners: Sequence[Worker]) -> str | None:
        """Wait until every joiner printed its runtime's ``joined`` line (None), or say why
        not: one exited, or ``leave_timeout_s`` passed."""
        waiting = {w.id: w for w in joiners}
        deadline = time.monotonic() + self.options.leave_timeout_s
        while waiting:
            for w in list(waiting.values()):
                lines = [ln.text for ln in self.backend.read_logs(w, tail=200)]
                if any(o.get("event") == "joined" for o in stopfree.json_objects(lines)):
                    del waiting[w.id]
            if not waiting:
                return None
            now = {w.id: w for w in self.backend.list_workers(self._selector(joiners[0].job))}
            gone = [w.name for i, w in waiting.items() if i not in now or now[i].state != "running"]
            if gone:
                return f"joiners {', '.join(sorted(gone))} exited before they joined"
            if time.monotonic() >= deadline:
                names = ", ".join(sorted(w.name for w in waiting.values()))
                return f"{names} did not join within {self.options.leave_timeout_s:.0f} s"
            time.sleep(self.options.poll_s)
        return None

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
