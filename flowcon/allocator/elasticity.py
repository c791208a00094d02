"""Operator requests on the live allocator: scale, migrate, drain, undrain, avoid.

EDL's ``scale_in``/``scale_out`` interface (section 3) and Elan's request adjustment, for
an operator or an outside scheduler, plus the node maintenance Docker and Kubernetes give
services (``docker node update --availability drain``, ``kubectl drain``/``uncordon``):

* ``scale(job, gpus)`` pins a job's GPU count within its bounds until ``scale(job, None)``
  gives it back to the policy; a deadline job is never pinned below its minimum
  satisfactory share, and a pin must fit beside the other jobs' guarantees;
* ``migrate(job, node)`` moves a running job's workers to one node (one-shot);
* ``drain(node)`` takes a node's GPUs out of the schedulable capacity: the policy's
  reservations are rebuilt without them and the placer moves every job there elsewhere,
  stop-free where the job's runtime allows (the executor decides, as for any rescale);
  refused when a deadline guarantee would be lost, unless forced;
* ``avoid(...)`` keeps placement off the GPU a straggler was removed from for a while.

Each request is checked here (bounds, guarantees, capacity: ``flowcon.alloc.operations``),
stored with the jobs (the store's ``meta`` table), written as an event on each job it
touches, and carried out by the next planning round (``Planner.plan``).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace

from flowcon.alloc.operations import (
    Avoidance,
    OperationError,
    Pin,
    check_scale,
    free_block_on_node,
)
from flowcon.alloc.types import ClusterState
from flowcon.allocator.planner import Planner
from flowcon.allocator.records import Json
from flowcon.allocator.store import JobRecord
from flowcon.allocator.views import NodeView

log = logging.getLogger(__name__)


class Elasticity:
    """The requests, over one ``Planner`` (its store, its policy, its operator state)."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.store = planner.store

    # -- scale / migrate ----------------------------------------------------------------

    def _active(self, name: str) -> JobRecord:
        rec = self.store.get_job(name)
        if rec is None:
            raise OperationError(404, f"no job {name!r}")
        if not rec.active:
            raise OperationError(409, f"job {name!r} is {rec.state}: only an active job moves")
        return rec

    def scale(self, name: str, gpus: int | None, by: str, now: float) -> JobRecord:
        """Pin ``name`` at ``gpus`` GPUs; None gives the count back to the policy."""
        p = self.planner
        with self.store.transaction():
            rec = self._active(name)
            old = p.ops.pins.get(name, Pin())
            if gpus is None:
                p.ops.set_pin(name, replace(old, gpus=None, by=by, ts=now))
                p.save_operations(now)
                self.store.append_event("scale_auto", name, ts=now, by=by, gpus=rec.gpus)
                return rec
            spec = rec.spec
            capacity = p._capacity_now(now)
            hi = min(spec.max_gpus or capacity, capacity)
            pins = {j: int(x.gpus) for j, x in p.ops.pins.items() if x.gpus and j != name}
            check_scale(
                name,
                gpus,
                bounds=(spec.min_gpus, hi),
                guaranteed=p._shares(now),
                pins=pins,
                capacity=capacity,
                power_of_two=p.placer is not None,
            )
            p.ops.set_pin(name, replace(old, gpus=gpus, by=by, ts=now))
            p.save_operations(now)
            self.store.append_event(
                "scale_requested", name, ts=now, by=by, old_gpus=rec.gpus, gpus=gpus
            )
            return rec

    def migrate(self, name: str, node: str, by: str, now: float) -> JobRecord:
        """Move ``name``'s workers to ``node`` at the next round (stop-free where the
        job's runtime allows, else by checkpoint-restart, as the executor decides)."""
        p = self.planner
        with self.store.transaction():
            rec = self._active(name)
            names = [n for n, _ in p.nodes]
            if node not in names:
                raise OperationError(404, f"no node {node!r} in the GPU inventory", "node")
            if p.placer is None:
                raise OperationError(
                    409, "this inventory is allocated without placement: nothing to migrate"
                )
            if node in p.ops.drained:
                raise OperationError(409, f"node {node} is drained", "node")
            if rec.gpus < 1 or not rec.placement:
                raise OperationError(409, f"job {name!r} holds no GPUs now: nothing to move")
            index = names.index(node)
            if all(int(n) == index for n, _ in rec.placement):
                raise OperationError(409, f"job {name!r} runs on {node} already", "node")
            taken = set(p.blocked(now))
            for other in self.store.active_jobs():
                if other.name != name:
                    taken.update((int(n), int(g)) for n, g in other.placement)
            count = p.nodes[index][1]
            if free_block_on_node(index, count, rec.gpus, taken) is None:
                free = count - sum(1 for n, _ in taken if n == index)
                raise OperationError(
                    409,
                    f"node {node} has {free} free GPUs, job {name!r} needs {rec.gpus} in one "
                    "aligned block",
                    "node",
                )
            old = p.ops.pins.get(name, Pin())
            p.ops.set_pin(name, replace(old, node=node, by=by, ts=now))
            p.save_operations(now)
            self.store.append_event(
                "migrate_requested", name, ts=now, by=by, node=node, placement=rec.placement
            )
            return rec

    # -- drain / undrain ----------------------------------------------------------------

    def _node_index(self, node: str) -> int:
        names = [n for n, _ in self.planner.nodes]
        if node not in names:
            raise OperationError(404, f"no node {node!r} in the GPU inventory", "node")
        return names.index(node)

    def drain(self, node: str, force: bool, by: str, now: float) -> NodeView:
        """No new workers on ``node``; its jobs are moved at the next round. Refused when
        it would lose a deadline guarantee (``force`` gives those up, with events)."""
        p = self.planner
        self._node_index(node)
        with self.store.transaction():
            if node in p.ops.drained:
                return self._view(node, now)
            lost = self._guarantees_without(node, now)
            if lost and not force:
                raise OperationError(
                    409,
                    f"draining {node} would lose the deadline guarantee of "
                    f"{', '.join(lost)} (force it to give them up)",
                    "node",
                )
            p.ops.drained[node] = now
            # a pending migration to this node cannot happen any more
            for job, pin in list(p.ops.pins.items()):
                if pin.node == node:
                    p.ops.clear_node_pin(job)
            p.save_operations(now)
            view = self._view(node, now)
            self.store.append_event("node_drained", None, ts=now, node=node, by=by, force=force)
            for job in view.jobs:
                self.store.append_event("draining", job, ts=now, node=node, by=by)
            return view

    def undrain(self, node: str, by: str, now: float) -> NodeView:
        p = self.planner
        self._node_index(node)
        with self.store.transaction():
            if p.ops.drained.pop(node, None) is not None:
                p.save_operations(now)
                self.store.append_event("node_undrained", None, ts=now, node=node, by=by)
            return self._view(node, now)

    def _guarantees_without(self, node: str, now: float) -> list[str]:
        """The deadline jobs whose guarantee a policy rebuilt without ``node``'s GPUs
        would give up (decided on a copy of the policy: nothing changes)."""
        p = self.planner
        before = p._shares(now)
        if not before:
            return []
        index = self._node_index(node)
        capacity = p._capacity_now(now) - sum(
            1 for g in range(p.nodes[index][1]) if (index, g) not in p.blocked(now)
        )
        if capacity < 1:
            return sorted(before)
        policy = copy.deepcopy(p.policy)
        state = p._state_of(self.store.active_jobs())
        state = ClusterState(
            total_gpus=capacity,
            slot=state.slot,
            jobs=state.jobs,
            allocation=state.allocation,
            attained=state.attained,
        )
        policy.restore(now, state)
        shares = getattr(policy, "guaranteed_shares", None)
        after = dict(shares(now)) if callable(shares) else {}
        return sorted(set(before) - set(after))

    # -- straggler avoidance ------------------------------------------------------------

    def avoid(
        self, job: str, node: str, gpus: tuple[str, ...], reason: str, seconds: float, now: float
    ) -> list[int]:
        """Keep placement off ``node``'s ``gpus`` (the GPUs a straggler held) for
        ``seconds``; returns the GPUs avoided. Not done (an event says why) when the
        remaining GPUs would not hold the deadline jobs' guaranteed shares."""
        p = self.planner
        if seconds <= 0 or node not in [n for n, _ in p.nodes]:
            return []
        ids = sorted({int(g) for g in gpus if str(g).isdigit()})
        index = self._node_index(node)
        with self.store.transaction():
            blocked = p.blocked(now)
            new = [g for g in ids if (index, g) not in blocked]
            if not new:
                return []
            need = sum(p._shares(now).values())
            if p._capacity_now(now) - len(new) < need:
                self.store.append_event(
                    "gpu_not_avoided",
                    job,
                    ts=now,
                    node=node,
                    gpus=new,
                    reason=f"the deadline jobs' guaranteed shares need {need} GPUs",
                )
                return []
            for g in new:
                p.ops.avoid.append(Avoidance(node, g, now + seconds, job, reason))
            p.save_operations(now)
            self.store.append_event(
                "gpu_avoided", job, ts=now, node=node, gpus=new, until=now + seconds, reason=reason
            )
            return new

    # -- views --------------------------------------------------------------------------

    def nodes(self, now: float) -> list[NodeView]:
        return [self._view(name, now) for name, _ in self.planner.nodes]

    def _view(self, node: str, now: float) -> NodeView:
        p = self.planner
        index = self._node_index(node)
        count = p.nodes[index][1]
        jobs: list[str] = []
        used = 0
        for rec in self.store.active_jobs():
            on = sum(1 for n, _ in rec.placement if int(n) == index)
            if on:
                jobs.append(rec.name)
                used += on
        avoided: list[dict[str, Json]] = [
            {"gpu": a.gpu, "until": a.until, "job": a.job, "reason": a.reason}
            for a in p.ops.avoided(now)
            if a.node == node
        ]
        since = p.ops.drained.get(node)
        if since is not None:
            status = "Draining" if jobs else "Drained"
        elif avoided:
            status = "Avoided"
        else:
            status = "Ready"
        return NodeView(node, count, used, status, sorted(jobs), since, avoided)

    def pins_of(self, job: str) -> dict[str, Json] | None:
        pin = self.planner.ops.pins.get(job)
        if pin is None:
            return None
        return {"gpus": pin.gpus, "node": pin.node, "by": pin.by, "ts": pin.ts}

    def avoided_by(self, job: str, now: float) -> list[dict[str, Json]]:
        return [
            {"node": a.node, "gpu": a.gpu, "until": a.until, "reason": a.reason}
            for a in self.planner.ops.avoided(now)
            if a.job == job
        ]
