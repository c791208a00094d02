"""Executor (paper section 3.2.3): Algorithm 1 applied.

``run`` takes the managed containers' lists, growth efficiencies and limits, runs
``flowcon.core.list_limits`` and sets each container's new limit through the engine
adapter (the container that triggered the run first, the others in parallel);
``give_back``/``restore_all`` put the original settings back. How the limits are
enforced (quota, weights, cpuset, hybrid: the ``control`` setting) is planned by
``flowcon.core.control`` for all managed containers at once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from flowcon.agent.config import Config
from flowcon.agent.counters import AgentCounters
from flowcon.agent.foreign import OwnWrites, foreign_fields, merge_expected
from flowcon.agent.foreign import describe as describe_diff
from flowcon.agent.monitor import ContainerMonitor
from flowcon.core.backoff import Itval
from flowcon.core.control import AppliedMode, ControlInput, CpuControl, plan_controls
from flowcon.core.labels import Policy
from flowcon.core.limits import to_cpus
from flowcon.core.list_limits import Decision, algorithm1
from flowcon.core.lists import ListName
from flowcon.engine.docker_engine import (
    ContainerGone,
    CpuSettings,
    EngineError,
    control_body,
    cpu_body,
)
from flowcon.engine.protocol import Engine

log = logging.getLogger("flowcon.agent")
decisions_log = logging.getLogger("flowcon.agent.decision")


@dataclass
class Tracked:
    """A container in the worker pool: its monitor, list, limit and original settings."""

    monitor: ContainerMonitor
    managed: bool
    job: str | None
    list: ListName | None
    limit: float = 1.0
    applied_cpus: float | None = None  # None: the original settings are in effect
    applied_mode: AppliedMode | None = None  # how applied_cpus is enforced
    applied_shares: int | None = None  # weights, cpuset
    applied_cpuset: str | None = None  # cpuset
    applied_cap: float | None = None  # weights, cpuset: the cpus.max label as a quota
    original: CpuSettings | None = None
    # HostConfig CPU fields as the agent's own updates left them (flowcon/agent/foreign.py):
    # a different value seen later was set by someone else
    expected: dict[str, int | str] = field(default_factory=dict)
    # ``expected`` as the update in flight will leave it, persisted before it is sent
    # (write-ahead): after a kill -9 mid-round the engine may show either
    pending: dict[str, int | str] = field(default_factory=dict)
    # ``expected`` as an update the engine did not answer would leave it (the engine went
    # away mid-request: it may or may not have applied it); {}: none outstanding
    unconfirmed: dict[str, int | str] = field(default_factory=dict)
    # why the agent keeps its hands off this container (someone else changed its CPU
    # settings); None: it is managed as its labels say
    hands_off: str | None = None
    fresh: bool = False
    view: dict[str, Any] = field(default_factory=dict)
    tracked_at: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.monitor.name

    @property
    def policy(self) -> Policy:
        return self.monitor.policy


@dataclass
class RunOutcome:
    """Containers a run of Algorithm 1 could not apply its limits to: gone meanwhile, or
    changed by someone else just before the update (handed off, nothing written)."""

    vanished: list[str] = field(default_factory=list)
    handed_off: list[str] = field(default_factory=list)


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


class Executor:
    def __init__(
        self,
        engine: Engine,
        config: Config,
        host_cpus: int,
        itval: Itval,
        threads: ThreadPoolExecutor,
        dry_run: bool = False,
        counters: AgentCounters | None = None,
    ) -> None:
        self.engine = engine
        self.counters = counters or AgentCounters()
        self.cfg = config
        self.host_cpus = host_cpus
        self.itval = itval
        self.threads = threads
        self.dry_run = dry_run
        self.fallback: str | None = None  # why cpuset fell back to weights (logged once)
        # called once a round before its updates are sent, with every changing
        # container's ``pending`` set (the controller persists the state there)
        self.before_updates: Callable[[], None] = lambda: None
        # each update's read-to-answer window (flowcon/agent/foreign.py)
        self.writes = OwnWrites()

    def _controls(
        self, managed: dict[str, Tracked], limits: dict[str, float]
    ) -> dict[str, CpuControl]:
        """Each container's control for limits ``limits``; a cpuset fallback (or its end)
        is logged once per change of the situation, not every round."""
        inputs = {
            cid: ControlInput(
                to_cpus(limits[cid], self.host_cpus, t.policy.cpus_min, t.policy.cpus_max),
                t.policy.thread_aware(t.monitor.thread_aware),
                t.policy.cpus_max,
            )
            for cid, t in sorted(managed.items(), key=lambda kv: kv[1].name)
        }
        controls, why = plan_controls(self.cfg.control, inputs, self.host_cpus)
        if why != self.fallback:
            log.info("control=%s: %s", self.cfg.control, why or "cores pinned again")
            self.fallback = why
        return controls

    def run(
        self, managed: dict[str, Tracked], trigger: str, priority: Iterable[str] = ()
    ) -> RunOutcome:
        """Algorithm 1 on ``managed``, applied; doubles itval when all are in CL.
        Says which containers vanished meanwhile or were handed off."""
        if not managed:
            return RunOutcome()
        lists = {cid: t.list for cid, t in managed.items() if t.list is not None}
        g = {cid: t.monitor.tracker.current() for cid, t in managed.items()}
        fresh = {cid for cid, t in managed.items() if t.fresh}
        limits = {cid: t.limit for cid, t in managed.items()}
        result = algorithm1(lists, g, limits, self.cfg.beta, self.cfg.alpha, fresh, self.cfg.all_cl)
        for t in managed.values():
            t.fresh = False
        first = [c for c in priority if c in result.decisions]
        rest = [c for c in result.decisions if c not in first]
        new_limits = {cid: d.limit for cid, d in result.decisions.items()}
        controls = self._controls({c: managed[c] for c in new_limits}, new_limits)
        if not self.dry_run:
            # Write-ahead: the values the updates will set are persisted before they are
            # sent, so an agent killed mid-round knows them for its own when it resumes.
            changing = [
                cid for cid in new_limits if not self._unchanged(managed[cid], controls[cid])
            ]
            for cid in changing:
                t = managed[cid]
                t.pending = merge_expected(t.expected, self._body(t, controls[cid]))
            if changing:
                self.before_updates()

        def apply(cid: str) -> tuple[str, str]:
            t = managed[cid]
            old_list, t.list = t.list, result.lists[cid]
            dec = result.decisions[cid]
            return cid, self.apply(t, dec, g[cid], old_list, trigger, controls[cid])

        # The container that triggered the run is limited first; the others in parallel
        # (each update is a round trip to the engine).
        outcomes = [apply(cid) for cid in first] + list(self.threads.map(apply, rest))
        if result.all_completing:
            self.itval.double()
        return RunOutcome(
            [cid for cid, out in outcomes if out == "vanished"],
            [cid for cid, out in outcomes if out == "foreign"],
        )

    def _unchanged(self, t: Tracked, ctl: CpuControl) -> bool:
        target = ctl.target
        if t.applied_cpus is None:
            o = t.original or CpuSettings()
            if ctl.mode == "quota":
                return target.unlimited and o.nano_cpus == 0 and not o.quota_mode
            # weights equal to the original ones and nothing else to lift or pin
            return (
                ctl.mode == "weights"
                and ctl.cap is None
                and ctl.shares == (o.cpu_shares or 1024)
                and o.nano_cpus == 0
                and not o.quota_mode
            )
        if t.applied_mode != ctl.mode or t.applied_cpuset != ctl.cpuset:
            return False
        if t.applied_cap != (ctl.cap.cpus if ctl.cap else None):
            return False
        # Deadband: a change smaller than min_update_cpus is not worth an engine call,
        # except into or out of "unlimited".
        return abs(t.applied_cpus - target.cpus) < max(self.cfg.min_update_cpus, 1e-9) and (
            target.unlimited == (t.applied_cpus >= self.host_cpus)
        )

    @staticmethod
    def _update_of(t: Tracked, ctl: CpuControl) -> tuple[CpuSettings, AppliedMode | None, bool]:
        """(originals, the mode applied so far, whether the update is a plain CPU limit as
        before control modes) of the update ``ctl`` needs."""
        previous = t.applied_mode if t.applied_cpus is not None else None
        return (
            t.original or CpuSettings(),
            previous,
            ctl.mode == "quota" and previous in (None, "quota"),
        )

    def _body(self, t: Tracked, ctl: CpuControl) -> dict[str, int | str]:
        """The update request's body (the same pure functions the engine adapter builds it
        with): what the container's settings will show once it is sent."""
        original, previous, plain = self._update_of(t, ctl)
        if plain:
            return dict(cpu_body(ctl.target, original))
        return control_body(ctl, original, self.host_cpus, previous)

    def _engine_set(self, t: Tracked, ctl: CpuControl) -> None:
        """Send the update."""
        original, previous, plain = self._update_of(t, ctl)
        if plain:
            self.engine.set_cpus(t.monitor.cid, ctl.target, original)
        else:
            self.engine.set_control(t.monitor.cid, ctl, original, self.host_cpus, previous)

    def _changed_meanwhile(self, t: Tracked) -> bool:
        """Read the container's settings right before an update: True (and handed off)
        when someone else changed what the agent set (``found_changed``)."""
        found = self.engine.inspect(t.monitor.cid).cpu
        return found is not None and self.found_changed(t, found)

    def found_changed(self, t: Tracked, found: CpuSettings) -> bool:
        """The container shows ``found`` (read before an update, or after its ``update``
        event): True (and handed off) when someone else changed what the agent set. A
        change while it still has its originals becomes its originals; the agent's own
        unanswered update is its own."""
        if t.applied_cpus is None:
            if found != t.original:
                log.info("container=%s CPU settings changed before any limit: %s", t.name, found)
                t.original = found
            return False
        diff = foreign_fields(t.expected, found)
        if diff and not _own_unanswered_update(t, found):
            self.hand_off_diff(t, found, diff)
            return True
        return False

    def hand_off_diff(
        self, t: Tracked, found: CpuSettings, diff: dict[str, tuple[int | str, int | str]]
    ) -> None:
        """``hand_off_changed`` for the fields ``diff`` someone else changed."""
        self.hand_off_changed(
            t, found, f"CPU settings changed by someone else: {describe_diff(diff)}"
        )

    def hand_off_changed(self, t: Tracked, found: CpuSettings, why: str, warn: str = "") -> None:
        """Someone else's change wins (flowcon/agent/foreign.py): logged, counted, hands off."""
        log.warning("foreign change container=%s id=%s %s%s", t.name, t.monitor.cid[:12], why, warn)
        self.counters.foreign_change()
        t.pending = {}
        self.writes.forget(t.monitor.cid)
        hand_off(t, found, why)

    def _set(self, t: Tracked, ctl: CpuControl) -> str:
        if self._unchanged(t, ctl):
            return "unchanged"
        if not self.dry_run:
            start_ns = time.time_ns()
            body: dict[str, int | str] | None = None
            try:
                if self._changed_meanwhile(t):
                    return "foreign"
                body = self._body(t, ctl)
                self._engine_set(t, ctl)
            except ContainerGone:
                return "vanished"
            except EngineError as exc:
                log.warning("update of %s failed: %s", t.name, exc)
                self.counters.engine_error("update")
                if body is not None:  # sent: the engine may have applied it all the same
                    t.unconfirmed = merge_expected(t.expected, body)
                return "failed"
            self.writes.record(t.monitor.cid, start_ns, time.time_ns())
            t.expected = merge_expected(t.expected, body)
            t.pending = {}
            t.unconfirmed = {}
            self.counters.cpu_update()
        t.applied_cpus = ctl.target.cpus
        t.applied_mode = ctl.mode
        t.applied_shares = ctl.shares
        t.applied_cpuset = ctl.cpuset
        t.applied_cap = ctl.cap.cpus if ctl.cap else None
        return "dry-run" if self.dry_run else "updated"

    def apply(
        self,
        t: Tracked,
        dec: Decision,
        g: float,
        old_list: ListName | None,
        trigger: str,
        ctl: CpuControl,
    ) -> str:
        """Set one container's limit as ``ctl`` says: how it went (``vanished``: gone,
        ``foreign``: someone else changed it first, handed off)."""
        old = t.limit
        t.limit = dec.limit
        outcome = self._set(t, ctl)
        decisions_log.info(
            "decision container=%s id=%s list=%s->%s old=%s new=%s %s control=%s g=%s "
            "reason=%s trigger=%s outcome=%s",
            t.name,
            t.monitor.cid[:12],
            old_list.value if old_list else "-",
            t.list.value if t.list else "-",
            _fmt(old),
            _fmt(dec.limit),
            ctl.describe(),
            ctl.mode,
            _fmt(g),
            json.dumps(dec.reason),
            trigger,
            outcome,
        )
        return outcome

    def give_back(self, cid: str, t: Tracked) -> None:
        """A finished container's original settings, if we changed them (best effort)."""
        if t.applied_cpus is None or self.dry_run:
            return
        try:
            self.engine.restore_cpus(cid, t.original or CpuSettings(), self.host_cpus, _mode(t))
        except EngineError as exc:  # removed (--rm) or engine gone: nothing to give back
            log.debug("restore of finished %s skipped: %s", t.name, exc)

    def restore_all(self, tracked: dict[str, Tracked]) -> int:
        """Give every managed container still present its original CPU settings; one
        that is gone leaves ``tracked``. Returns how many were restored."""
        restored = 0
        for cid, t in list(tracked.items()):
            if not t.managed or t.applied_cpus is None:
                continue
            if self.dry_run:
                _forget_applied(t)
                continue
            try:
                self.engine.restore_cpus(cid, t.original or CpuSettings(), self.host_cpus, _mode(t))
                _forget_applied(t)
                restored += 1
                log.info("restored container=%s original=%s", t.name, t.original)
            except ContainerGone:
                tracked.pop(cid, None)
            except EngineError as exc:
                self.counters.engine_error("restore")
                log.error("restore of %s failed: %s (state keeps its originals)", t.name, exc)
        return restored


def _mode(t: Tracked) -> AppliedMode:
    return t.applied_mode or "quota"


def _forget_applied(t: Tracked) -> None:
    """The originals are in effect again."""
    t.applied_cpus = t.applied_mode = t.applied_shares = t.applied_cpuset = None
    t.applied_cap = None
    t.expected = {}
    t.unconfirmed = {}


def _own_unanswered_update(t: Tracked, found: CpuSettings) -> bool:
    """True (and ``expected`` updated) when ``found`` is what the agent's own update that
    the engine did not answer would have set: the engine applied it before it went away
    (found by the agent-engine-restart fault scenario), so it is not someone else's."""
    if not t.unconfirmed or foreign_fields(t.unconfirmed, found):
        return False
    log.info("container=%s shows the agent's unanswered update: it was applied", t.name)
    t.expected, t.unconfirmed = t.unconfirmed, {}
    return True


def hand_off(t: Tracked, found: CpuSettings, why: str) -> None:
    """Someone else changed the container's CPU settings: the agent stops managing it.

    It leaves the lists; its current settings become its originals and nothing the agent
    applied is remembered, so neither a round nor a restore reverts the change."""
    t.managed = False
    t.list = None
    t.hands_off = why
    t.original = found
    t.fresh = False
    _forget_applied(t)
