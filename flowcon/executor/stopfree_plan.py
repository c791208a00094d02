"""Stop-free rescale planning (pure): which containers start, which leave, when to fall back.

EDL (shared/papers/edl.txt, section 4.2) and Elan (shared/papers/elan.txt, sections IV and
V) scale a running job without stopping it: new workers prepare while the old ones train,
and leaving workers stop at a step boundary the job agrees on. The executor's part
(``Executor.rescale`` for jobs launched with ``scaling: stopfree``) is decided here, without
I/O:

* a stop-free job runs one container per GPU (``LOCAL_WORLD_SIZE=1``), named by a stable
  container index (``-w<index>``, label ``flowcon.rank``); index 0 starts as the job's
  coordinator (``FLOWCON_STORE_HOST=1``: its launcher process holds the job's TCPStore),
  and every container's launcher hosts a standby store (``FLOWCON_STORE_ADDR``, label
  ``flowcon.store``);
* the coordinator is always the lowest-index container: when it leaves, the runtime moves
  coordination to the first stayer's store, and when it dies, the survivors elect the
  lowest-index survivor's (``flowcon.elastic.rendezvous``); joiners reach the coordinator
  through MASTER_ADDR/MASTER_PORT (``coordinator``);
* scale-out starts only containers for the GPUs no running container holds, with
  ``FLOWCON_JOIN=1`` and ``FLOWCON_TARGET_WORLD`` = the world once they are in;
* scale-in sends ``contract.LEAVE_SIGNAL`` to the containers whose GPUs the new placement
  drops, highest index first, and removes them once they exit ``contract.EXIT_LEFT``;
* a move that keeps some containers (a drain, a partial migration) lets the leavers go
  first, then starts the joiners; a migration that keeps none (every GPU replaced) starts
  the joiners first, waits until they joined, then lets the old ones go
  (``StopFreePlan.join_first``: keep-then-leave);
* anything else (a container not running, one launched for checkpoint-restart, the
  coordinator leaving while no stayer hosts a standby store) is a checkpoint-restart, and
  ``StopFreePlan.fallback`` says why.

The measured pause of an event is the job's no-progress gap: from its last step line before
the switch to its first step line at the new world size (``switch_gap``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from flowcon import contract
from flowcon.executor.backend import Worker
from flowcon.executor.workers import WorkerSlot

# the container that hosts the coordinator when the job starts (later: the lowest index)
STORE_HOST_INDEX = 0


def container_suffix(index: int) -> str:
    """A stop-free container's name suffix (``flowcon-JOB--NODE-w3``): several containers
    of one job share a node, and an index is never reused while its container lives."""
    return f"-w{index}"


def gpu_slots(placement: Sequence[tuple[str, str]], first_index: int = 0) -> list[WorkerSlot]:
    """One single-GPU slot per (node, gpu), indices from ``first_index`` in that order;
    ``first_rank`` is the slot's position (its rank until the runtime assigns another)."""
    return [WorkerSlot(node, first_index + i, i, (gpu,)) for i, (node, gpu) in enumerate(placement)]


def stopfree_env(index: int, *, join: bool, target_world: int) -> dict[str, str]:
    """What a stop-free container gets on top of the launcher's environment."""
    env = {contract.ENV_SCALING: contract.SCALING_STOPFREE}
    if index == STORE_HOST_INDEX and not join:
        env[contract.ENV_STORE_HOST] = "1"
    if join:
        env[contract.ENV_JOIN] = "1"
        env[contract.ENV_TARGET_WORLD] = str(target_world)
    return env


@dataclass(frozen=True)
class StopFreePlan:
    """One stop-free event: ``keep`` go on untouched, ``leave`` get the leave signal
    (highest index first) and go, then ``join`` start (after the kept ones in rank order).
    ``join_first`` (no container stays): the joiners start first, after the leavers in rank
    order, and the leavers go once they joined. ``fallback`` (a reason) means:
    checkpoint-restart instead. ``coordinator_leaves``: the container hosting the job's
    coordinator is among the leavers (the runtime hands coordination over)."""

    keep: tuple[Worker, ...]
    join: tuple[WorkerSlot, ...]
    leave: tuple[Worker, ...]
    old_world: int
    new_world: int
    fallback: str | None = None
    join_first: bool = False
    coordinator_leaves: bool = False

    @property
    def join_world(self) -> int:
        """``FLOWCON_TARGET_WORLD`` of the joiners. When an event both drops and adds GPUs
        (a move), the leavers go first, so the job the joiners join is the kept containers
        alone: the new world. Joining first, they join the old world."""
        if self.join_first:
            return self.old_world + len(self.join)
        return self.new_world

    @property
    def running_at_join(self) -> tuple[Worker, ...]:
        """The containers the joiners join (in index order): their ranks come first."""
        if self.join_first:
            return tuple(sorted(self.leave, key=lambda w: w.node_rank))
        return self.keep

    @property
    def noop(self) -> bool:
        return self.fallback is None and not self.join and not self.leave


def _held(w: Worker) -> list[tuple[str, str]]:
    return [(w.node, g) for g in w.gpus]


def coordinator(current: Sequence[Worker]) -> Worker | None:
    """The container hosting the job's coordinator: the lowest-index one (the runtime's
    rule, since ranks follow container indices: the coordinator is rank 0's container)."""
    live = [w for w in current if not w.left and not w.dead]
    return min(live, key=lambda w: w.node_rank) if live else None


def has_standby_store(w: Worker) -> bool:
    """Whether ``w``'s launcher hosts a store coordination can move to (launched with
    ``FLOWCON_STORE_ADDR``; older containers have no ``flowcon.store`` label)."""
    return bool(w.labels.get(contract.LABEL_STORE_ADDR))


def plan_stopfree(current: Sequence[Worker], placement: Sequence[tuple[str, str]]) -> StopFreePlan:
    """The stop-free event from ``current`` (the job's containers) to ``placement`` (the new
    (node, gpu) pairs, GPU ids as the containers' labels carry them)."""
    old_world = sum(len(w.gpus) for w in current)
    new_world = len(placement)

    def fallback(why: str) -> StopFreePlan:
        return StopFreePlan((), (), (), old_world, new_world, why)

    if not current:
        return fallback("no running container")
    if len(set(placement)) != len(placement):
        return fallback("the placement names a GPU twice")
    not_stopfree = [
        w.name for w in current if w.labels.get(contract.LABEL_SCALING) != contract.SCALING_STOPFREE
    ]
    if not_stopfree:
        return fallback(f"{', '.join(sorted(not_stopfree))} launched for checkpoint-restart")
    not_running = [w.name for w in current if w.state != "running"]
    if not_running:
        return fallback(f"{', '.join(sorted(not_running))} not running")
    want = set(placement)
    keep = sorted((w for w in current if set(_held(w)) <= want), key=lambda w: w.node_rank)
    leave = sorted((w for w in current if w not in keep), key=lambda w: -w.node_rank)
    host = coordinator(current)
    host_leaves = host is not None and host in leave
    held = {p for w in keep for p in _held(w)}
    new_pairs = [p for p in placement if p not in held]
    first = max(w.node_rank for w in current) + 1
    join_first = not keep
    if join_first and not new_pairs:
        return fallback("no container stays")
    # joining first, the joiners come in after every running container (their ranks)
    kept = old_world if join_first else sum(len(w.gpus) for w in keep)
    join = [
        WorkerSlot(node, first + i, kept + i, (gpu,)) for i, (node, gpu) in enumerate(new_pairs)
    ]
    if host_leaves:
        # coordination moves to the first stayer's store (joining first: the first joiner's)
        heir = keep[0] if keep else None
        if heir is not None and not has_standby_store(heir):
            return fallback(
                f"the coordinator {host.name if host else '?'} would leave and "
                f"{heir.name} hosts no standby store (launched before coordination moved)"
            )
    return StopFreePlan(
        tuple(keep),
        tuple(join),
        tuple(leave),
        old_world,
        new_world,
        join_first=join_first,
        coordinator_leaves=host_leaves,
    )


def world_slots(keep: Sequence[Worker], join: Sequence[WorkerSlot]) -> list[WorkerSlot]:
    """The job's containers after the event as slots in rank order (kept ones by index,
    then the joiners): their ``FLOWCON_PLACEMENT`` and world size."""
    out: list[WorkerSlot] = []
    for w in keep:
        for g in w.gpus:
            out.append(WorkerSlot(w.node, w.node_rank, len(out), (g,)))
    for s in join:
        out.append(WorkerSlot(s.node, s.node_rank, len(out), s.gpus))
    return out


# ---------------------------------------------------------------- the measured pause


@dataclass(frozen=True)
class StepLine:
    """One metric line of the job: step, wall time, and the world size it ran at."""

    step: int
    ts: float
    world: int | None


def json_objects(lines: Iterable[str]) -> Iterator[dict[str, object]]:
    """The lines that are JSON objects, parsed (others skipped)."""
    for ln in lines:
        text = ln.strip()
        if not text.startswith("{"):
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def step_lines(lines: Iterable[str]) -> list[StepLine]:
    """The step lines (``flowcon.report`` JSON with ``step`` and ``ts``, no ``event``)."""
    out = []
    for obj in json_objects(lines):
        if contract.LINE_EVENT in obj:
            continue
        step, ts = obj.get(contract.LINE_STEP), obj.get(contract.LINE_TS)
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            continue
        world = obj.get("world_size")
        out.append(StepLine(step, float(ts), world if isinstance(world, int) else None))
    return out


# why a stop-free container left (the runtime's ``"event":"left"`` line, docs/elastic.md)
LEFT_REASONS = ("straggler", "signal", "withdrawn")
LEFT_UNKNOWN = "unknown"


def left_reason(lines: Iterable[str]) -> str:
    """Why a container that exited ``EXIT_LEFT`` left: the ``reason`` of its last ``left``
    event line (``straggler``: removed by EDL 5.2's rule; ``signal``: told to leave, a
    scale-in; ``withdrawn``: a joiner told to leave before it joined), else ``unknown``
    (its log is gone, or a runtime other than flowcon.elastic's keeps the contract)."""
    reason = LEFT_UNKNOWN
    for obj in json_objects(lines):
        if obj.get(contract.LINE_EVENT) == "left":
            got = obj.get("reason")
            reason = got if isinstance(got, str) and got in LEFT_REASONS else LEFT_UNKNOWN
    return reason


def switch_gap(lines: Sequence[StepLine], began: float, world: int) -> float | None:
    """The no-progress gap of a scale event begun at ``began`` (wall time): from the last
    step line before the first line at world size ``world`` after ``began`` to that line.
    None while the job has not printed a line at the new world size."""
    for i, ln in enumerate(lines):
        if i > 0 and ln.ts >= began and ln.world == world and lines[i - 1].world != world:
            return max(0.0, ln.ts - lines[i - 1].ts)
    return None
