"""Worker pool (paper section 3.2.2, Algorithm 2): the containers the agent monitors.

A container joins when it starts (or is found running) with ``flowcon.enable`` (and the
configured match labels); a managed one joins NL. It leaves when it finishes (or is no
longer listed): its original CPU settings go back (Algorithm 2, line 15). The listeners
call in through the controller (``on_start``/``on_finish``), the round through ``sync``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from flowcon.agent.config import Config
from flowcon.agent.foreign import foreign_fields, merge_unset
from flowcon.agent.limit_executor import Executor, Tracked, hand_off
from flowcon.agent.monitor import ContainerMonitor
from flowcon.agent.state_file import AgentState, ContainerRecord
from flowcon.contract import LABEL_MANAGED_BY, MANAGED_BY_ALLOCATOR
from flowcon.core.control import AppliedMode
from flowcon.core.growth import GrowthTracker
from flowcon.core.labels import LabelError, Policy, parse_policy
from flowcon.core.lists import ListName
from flowcon.core.pool_change import pool_change
from flowcon.engine.docker_engine import ContainerGone, ContainerInfo, CpuSettings, EngineError
from flowcon.engine.protocol import Engine

log = logging.getLogger("flowcon.agent")


def present_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` without the ``flowcon.*`` keys whose value is empty: the executor blanks
    the reserved keys a job's image carries (flowcon/executor/visibility.py), and a blank
    label says nothing."""
    return {k: v for k, v in labels.items() if not (k.startswith("flowcon.") and v == "")}


def agent_policy(labels: Mapping[str, str], manage_allocator_jobs: bool) -> Policy | None:
    """The container's policy as this agent applies it: an empty ``flowcon.*`` label is
    absent, and a container the allocator's executor runs (``flowcon.managed-by``) is
    measured for its job but its CPU limit is left to the allocator unless
    ``manage_allocator_jobs``. LabelError when a label is bad."""
    labels = present_labels(labels)
    policy = parse_policy(labels)
    allocators = labels.get(LABEL_MANAGED_BY) == MANAGED_BY_ALLOCATOR
    if policy is None or not policy.managed or manage_allocator_jobs or not allocators:
        return policy
    return replace(policy, managed=False) if policy.job is not None else None


@dataclass(frozen=True)
class SyncResult:
    new: list[str] = field(default_factory=list)  # ids that joined
    managed_changed: bool = False  # a managed container joined or left
    changed: bool = False  # any container joined or left


class WorkerPool:
    def __init__(
        self,
        engine: Engine,
        config: Config,
        host_cpus: int,
        executor: Executor,
        saved: AgentState,
    ) -> None:
        self.engine = engine
        self.cfg = config
        self.host_cpus = host_cpus
        self.executor = executor
        self.saved = saved  # the state file's records: resumed containers keep originals
        self.tracked: dict[str, Tracked] = {}
        # Containers skipped for a bad label: id -> (name, error), shown by `flowcon
        # status` (state file) and counted by the exporter (on_label_error, once each).
        self.label_errors: dict[str, tuple[str, str]] = {}
        self.on_label_error: Callable[[str, str, str], None] = lambda _cid, _name, _err: None
        # Containers whose die event we saw: a racy list of running containers must not
        # bring them back (their current settings are our limits, not their originals).
        self._finished: set[str] = set()

    def managed(self) -> dict[str, Tracked]:
        return {cid: t for cid, t in self.tracked.items() if t.managed and t.list is not None}

    def policy(self, info: ContainerInfo) -> Policy | None:
        for key, value in self.cfg.match_labels.items():
            if info.labels.get(key) != value:
                return None
        try:
            policy = agent_policy(info.labels, self.cfg.manage_allocator_jobs)
        except LabelError as exc:
            if self.label_errors.get(info.id, ("", ""))[1] != str(exc):
                self.label_errors[info.id] = (info.name, str(exc))
                log.warning("skipping container=%s id=%s: %s", info.name, info.id[:12], exc)
                self.on_label_error(info.id, info.name, str(exc))
            return None
        self.label_errors.pop(info.id, None)  # fixed (a Swarm service's labels can change)
        return policy

    def track(self, info: ContainerInfo, policy: Policy) -> Tracked | None:
        """A new container joins (NL if managed), resumed from the state file if known."""
        if info.cpu is None:
            info = self.engine.inspect(info.id)
            if not info.running:
                return None
        tracker = GrowthTracker(self.cfg.reference_intervals, self.cfg.min_cpu_share)
        mon = ContainerMonitor(
            info.id,
            info.name,
            policy,
            tracker,
            self.host_cpus,
            max_line_bytes=self.cfg.max_line_bytes,
            log_tail=self.cfg.log_tail,
            history_len=self.cfg.history,
            cgroup_parent=info.cgroup_parent,
            pid=info.pid,
            use_cgroup=self.cfg.cpu_source == "auto",
            io_interval=self.cfg.io_stats_interval,
            gpu_weight=self.cfg.gpu_weight,
        )
        t = Tracked(mon, policy.managed, policy.job, ListName.NL if policy.managed else None)
        saved = self.saved.containers.get(info.id)
        if saved is not None and policy.managed and saved.hands_off:
            hand_off(t, info.cpu or CpuSettings(), saved.hands_off)
            log.info("resumed container=%s hands off: %s", info.name, saved.hands_off)
        elif saved is not None and saved.managed == policy.managed:
            _resume(t, saved)
            log.info("resumed container=%s list=%s limit=%.3f", info.name, t.list, t.limit)
            diff = foreign_fields(t.expected, info.cpu) if info.cpu else {}
            if diff and t.pending and info.cpu and not foreign_fields(t.pending, info.cpu):
                # the agent's own update, sent just before it was stopped (write-ahead)
                log.info("resumed container=%s: its last update was the agent's own", info.name)
                t.expected, diff = dict(t.pending), {}
            t.pending = {}
            if diff and t.applied_cpus is not None:  # changed while the agent was away
                self.executor.hand_off_diff(t, info.cpu or CpuSettings(), diff)
        if policy.managed and t.original is None:
            t.original = info.cpu
        self.tracked[info.id] = t
        return t

    def updated(self, cid: str, time_ns: int | None = None) -> bool:
        """The engine says a container was updated (at ``time_ns``, the event's time):
        True if it was a managed container whose CPU settings someone else changed (it is
        then left alone)."""
        t = self.tracked.get(cid)
        if t is None or not t.managed:
            return False
        info = self.engine.inspect(cid)  # EngineError: the caller's to log
        if info.cpu is None:
            return False
        if self.executor.found_changed(t, info.cpu):
            return True
        if t.applied_cpus is None:  # at its originals: the new settings became them
            return False
        if time_ns is not None and self.executor.writes.collided(cid, time_ns):
            # someone else's update landed while the agent's was in flight, and the
            # agent's came last: theirs is lost, and only they can set it again
            self.executor.hand_off_changed(
                t,
                info.cpu,
                "CPU settings updated by someone else while the agent's own update was in flight",
                "; the agent's update may have replaced theirs: set it again",
            )
            return True
        # the agent's own update; others' changes to fields it never set become originals
        t.original = merge_unset(t.original or CpuSettings(), info.cpu, t.expected)
        return False  # (a restore must not undo them)

    def release(self, cid: str, why: str) -> None:
        """Finished container: leave its list, give back its original settings (line 15)."""
        t = self.tracked.pop(cid, None)
        self.saved.containers.pop(cid, None)
        self.engine.forget(cid)
        self.executor.writes.forget(cid)
        if t is None or not t.managed:
            return
        log.info("released container=%s id=%s reason=%s", t.name, cid[:12], why)
        self.executor.give_back(cid, t)

    def sync(self, present: dict[str, ContainerInfo], listed_at: float | None = None) -> SyncResult:
        """Compare the running containers with the lists; new -> NL, gone -> released.

        ``listed_at``: when ``present`` was listed, if that was outside the lock; a
        container a listener tracked since then is not "gone", just newer than the list.
        """
        wanted: dict[str, Policy] = {}
        self._finished.intersection_update(present)  # bounded: only ids still listed
        for cid in set(self.label_errors) - set(present):
            del self.label_errors[cid]
        for cid, info in present.items():
            policy = None if cid in self._finished else self.policy(info)
            if policy is not None and policy.monitored:
                wanted[cid] = policy
        change = pool_change(set(self.tracked), set(wanted))
        managed_changed = False
        for cid in change.finished:
            if listed_at is not None and self.tracked[cid].tracked_at >= listed_at:
                continue
            managed_changed |= self.tracked[cid].managed
            self.release(cid, "gone")
        for cid in change.new:
            t = self._track_listed(present[cid], wanted[cid])
            managed_changed |= t is not None and t.managed
        return SyncResult(list(change.new), managed_changed, bool(change.changed))

    def _track_listed(self, info: ContainerInfo, policy: Policy) -> Tracked | None:
        try:
            t = self.track(info, policy)
        except ContainerGone:
            return None
        except EngineError as exc:
            log.warning("cannot track %s: %s", info.name, exc)
            return None
        if t is not None:
            log.info("new container=%s id=%s list=%s job=%s", t.name, info.id[:12], t.list, t.job)
        return t

    def started(self, cid: str) -> Tracked | None:
        """New Cons listener: the container that joined, or None (not ours, gone, known)."""
        self._finished.discard(cid)
        if cid in self.tracked:
            return None
        try:
            info = self.engine.inspect(cid)
        except EngineError as exc:
            log.info("started container %s not inspected: %s", cid[:12], exc)
            return None
        if not info.running:
            return None
        policy = self.policy(info)
        if policy is None or not policy.monitored:
            return None
        t = self.track(info, policy)
        if t is not None:
            log.info("new container=%s id=%s list=%s job=%s", t.name, cid[:12], t.list, t.job)
        return t

    def finished(self, cid: str) -> Tracked | None:
        """Finished Cons listener: the container that left, or None (not tracked)."""
        t = self.tracked.get(cid)
        if t is None:
            return None
        self._finished.add(cid)
        self.release(cid, "finished")
        return t


def _resume(t: Tracked, saved: ContainerRecord) -> None:
    """Same lists, and above all the same originals (never our own limits)."""
    tracker = t.monitor.tracker
    t.list = ListName(saved.list) if saved.list and t.managed else t.list
    t.limit = saved.limit
    t.applied_cpus = saved.applied_cpus
    if saved.applied_cpus is not None:
        t.applied_mode = _applied_mode(saved.applied_mode)
        t.applied_shares, t.applied_cpuset = saved.applied_shares, saved.applied_cpuset
        t.applied_cap = saved.applied_cap
    t.monitor.progress.threads = saved.threads
    t.original = CpuSettings.from_dict(saved.original) if saved.original else None
    g = saved.growth or {}
    lp = g.get("last_point")
    tracker.last_point = (float(lp[0]), float(lp[1])) if lp else None
    tracker.reference = float(g.get("reference") or 0.0)
    tracker.intervals = int(g.get("intervals") or 0)
    tracker.g = g.get("g")
    t.monitor.log_since_ns = saved.log_since_ns
    t.expected = dict(saved.expected or {})
    t.pending = dict(saved.pending or {})


def _applied_mode(raw: str | None) -> AppliedMode:
    """A state file's mode; older files (and unknown values) mean quota, the only mode
    they knew."""
    if raw == "weights":
        return "weights"
    return "cpuset" if raw == "cpuset" else "quota"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def container_view(cid: str, t: Tracked) -> dict[str, Any]:
    """What ``flowcon status``, the exporter and the allocator report see of a container."""
    m = t.monitor
    p, u = m.progress, m.usage
    return {
        "container_id": cid,
        "name": t.name,
        "managed": t.managed,
        "hands_off": t.hands_off,
        "job": t.job,
        "list": t.list.value if t.list else None,
        "g": _finite(m.tracker.g),
        "limit": t.limit if t.managed else None,
        "cpus": t.applied_cpus,
        "control": t.applied_mode if t.applied_cpus is not None else None,
        "shares": t.applied_shares,
        "cpuset": t.applied_cpuset,
        "threads": m.progress.threads,
        "cpu_share": _finite(u.cpu_share),
        "mem_bytes": u.mem_bytes,
        # GPU use (flowcon.core.gpu_usage; null/empty where the container uses no GPU or
        # NVML is absent): its share of the host's GPUs, per GPU, its processes
        "gpu_share": _finite(u.gpu_share),
        "gpu_mem_bytes": sum(g.mem_bytes for g in u.gpus) if u.gpus else None,
        "gpus": [
            {"gpu": g.gpu, "uuid": g.uuid, "util": _finite(g.util), "mem_bytes": g.mem_bytes}
            for g in u.gpus
        ],
        "gpu_processes": list(u.gpu_processes),
        "r": _finite(u.r),
        "blk_read": u.blk_read,
        "blk_write": u.blk_write,
        "net_rx": u.net_rx,
        "net_tx": u.net_tx,
        "metric": t.policy.metric,
        "value": _finite(p.value),
        "step": p.step,
        "iterations_per_second": _finite(p.steps_per_s),
        "ts": p.value_ts or p.step_ts,
        "step_ts": p.step_ts,
    }


def container_record(cid: str, t: Tracked) -> ContainerRecord:
    """The state file's record of a container (what a restarted agent resumes from)."""
    tr = t.monitor.tracker
    return ContainerRecord(
        id=cid,
        name=t.name,
        managed=t.managed,
        job=t.job,
        list=t.list.value if t.list else None,
        limit=t.limit,
        applied_cpus=t.applied_cpus,
        applied_mode=t.applied_mode,
        applied_shares=t.applied_shares,
        applied_cpuset=t.applied_cpuset,
        applied_cap=t.applied_cap,
        threads=t.monitor.progress.threads,
        original=t.original.to_dict() if t.original else None,
        growth={
            "last_point": list(tr.last_point) if tr.last_point else None,
            "reference": tr.reference,
            "intervals": tr.intervals,
            "g": tr.g,
        },
        log_since_ns=t.monitor.log_since_ns,
        view=container_view(cid, t),
        expected=dict(t.expected),
        pending=dict(t.pending),
        hands_off=t.hands_off,
    )
