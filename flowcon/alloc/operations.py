"""What an operator (or an outside scheduler) asked of the allocator, beside its policy.

EDL's interface (section 3: ``scale_in``/``scale_out`` of a running job) and Elan's request
adjustment let someone other than the scheduler change a job's resources; a cluster also
needs a node emptied for maintenance while its jobs keep training (``kubectl drain``,
``docker node update --availability drain``). The allocator keeps those requests here, and
the planner applies them on top of the policy's allocation each round:

* a **pin** fixes a job's GPU count (``flowcon scale NAME --gpus N``) until it is given back
  to the policy (``--auto``), and/or asks for the job to move to one node
  (``flowcon migrate NAME --to NODE``; done once it runs there);
* a **drained** node takes no workers: its GPUs leave the capacity the policy plans with
  and the placer moves the jobs on it elsewhere;
* an **avoidance** keeps placement off a GPU (or a whole node) for a while: the GPU a
  straggler was removed from (EDL section 5.2) would otherwise be chosen again at the next
  round.

Pure: no clock, no store. The planner persists ``Operations`` as JSON (``to_json`` /
``from_json``) and passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from flowcon.alloc.model import floor_power_of_two

GpuId = tuple[int, int]  # (node index, GPU index), the core's placement pairs


class OperationError(ValueError):
    """An operator request that cannot be honoured; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass(frozen=True)
class Pin:
    """An operator's request on one job: a fixed GPU count and/or a node to move to."""

    gpus: int | None = None  # None: the policy decides the count
    node: str | None = None  # move the job's workers to this node (one-shot)
    by: str = ""
    ts: float = 0.0

    @property
    def empty(self) -> bool:
        return self.gpus is None and self.node is None


@dataclass(frozen=True)
class Avoidance:
    """Placement keeps off ``node``'s GPU ``gpu`` (the whole node when None) until ``until``."""

    node: str
    gpu: int | None
    until: float
    job: str = ""
    reason: str = ""

    def covers(self, node: str, gpu: int) -> bool:
        return self.node == node and (self.gpu is None or self.gpu == gpu)


@dataclass
class Operations:
    drained: dict[str, float] = field(default_factory=dict)  # node -> since
    pins: dict[str, Pin] = field(default_factory=dict)  # job -> pin
    avoid: list[Avoidance] = field(default_factory=list)

    # -- persistence ---------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        return {
            "drained": dict(self.drained),
            "pins": {
                j: {"gpus": p.gpus, "node": p.node, "by": p.by, "ts": p.ts}
                for j, p in self.pins.items()
            },
            "avoid": [
                {"node": a.node, "gpu": a.gpu, "until": a.until, "job": a.job, "reason": a.reason}
                for a in self.avoid
            ],
        }

    @classmethod
    def from_json(cls, data: object) -> tuple[Operations, list[str]]:
        """The stored requests and, for each entry that does not parse, why it was
        skipped (the store is ours, but a hand-edited or newer file must not crash us)."""
        ops = cls()
        skipped: list[str] = []
        if not isinstance(data, Mapping):
            return ops, ([] if data is None else ["operations: not a mapping"])
        drained = data.get("drained") or {}
        if isinstance(drained, Mapping):
            for node, since in drained.items():
                if isinstance(node, str) and isinstance(since, (int, float)):
                    ops.drained[node] = float(since)
                else:
                    skipped.append(f"drained.{node}: not a node name with a time")
        pins = data.get("pins") or {}
        if isinstance(pins, Mapping):
            for job, raw in pins.items():
                pin = _pin_of(raw)
                if pin is None or not isinstance(job, str):
                    skipped.append(f"pins.{job}: not a pin")
                elif not pin.empty:
                    ops.pins[job] = pin
        for i, raw in enumerate(data.get("avoid") or []):
            avoidance = _avoidance_of(raw)
            if avoidance is None:
                skipped.append(f"avoid[{i}]: not an avoidance")
            else:
                ops.avoid.append(avoidance)
        return ops, skipped

    # -- queries -------------------------------------------------------------------------

    def avoided(self, now: float) -> list[Avoidance]:
        return [a for a in self.avoid if a.until > now]

    def expire(self, now: float) -> bool:
        """Forget avoidances that ran out; True when one did."""
        kept = self.avoided(now)
        changed = len(kept) != len(self.avoid)
        self.avoid = kept
        return changed

    def blocked(
        self, nodes: Sequence[tuple[str, int]], now: float, *, with_avoided: bool = True
    ) -> frozenset[GpuId]:
        """GPUs placement must not use: every GPU of a drained node, and (with
        ``with_avoided``) each GPU an avoidance covers. ``nodes``: (name, GPU count) in
        the core's node order."""
        avoided = self.avoided(now) if with_avoided else []
        out: set[GpuId] = set()
        for i, (name, count) in enumerate(nodes):
            if name in self.drained:
                out.update((i, g) for g in range(count))
                continue
            for a in avoided:
                if a.node == name:
                    out.update((i, g) for g in range(count) if a.covers(name, g))
        return frozenset(out)

    def set_pin(self, job: str, pin: Pin) -> None:
        if pin.empty:
            self.pins.pop(job, None)
        else:
            self.pins[job] = pin

    def clear_node_pin(self, job: str) -> None:
        pin = self.pins.get(job)
        if pin is not None:
            self.set_pin(job, replace(pin, node=None))


def _pin_of(raw: object) -> Pin | None:
    if not isinstance(raw, Mapping):
        return None
    gpus, node = raw.get("gpus"), raw.get("node")
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0):
        return None
    if node is not None and not isinstance(node, str):
        return None
    ts = raw.get("ts", 0.0)
    by = raw.get("by", "")
    return Pin(
        gpus,
        node,
        by if isinstance(by, str) else "",
        float(ts) if isinstance(ts, (int, float)) else 0.0,
    )


def _avoidance_of(raw: object) -> Avoidance | None:
    if not isinstance(raw, Mapping):
        return None
    node, gpu, until = raw.get("node"), raw.get("gpu"), raw.get("until")
    if not isinstance(node, str) or not isinstance(until, (int, float)):
        return None
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool)):
        return None
    job, reason = raw.get("job", ""), raw.get("reason", "")
    return Avoidance(
        node,
        gpu,
        float(until),
        job if isinstance(job, str) else "",
        reason if isinstance(reason, str) else "",
    )


def honour_pins(
    allocation: Mapping[str, int],
    pins: Mapping[str, int],
    floors: Mapping[str, int],
    capacity: int,
) -> tuple[dict[str, int], dict[str, int]]:
    """The policy's ``allocation`` with each pinned job at its pinned count, the others
    shrunk to fit ``capacity``.

    A pinned job gets ``max(pin, floor)``: a deadline job's floor is its minimum
    satisfactory share now, which a pin never undercuts. When the pinned jobs and the
    rest exceed ``capacity``, unpinned jobs give back GPUs above their floor, largest
    surplus first, each halved to a power of two (the placer's block sizes) or dropped to
    its floor; if that is not enough (only when the floors themselves do not fit, which
    ``check_scale`` refuses up front) pinned jobs are halved too, largest first.
    Returns (allocation, {job: GPUs it was given short of its pin}).
    """
    out = {j: int(n) for j, n in allocation.items() if n > 0}
    for j, n in pins.items():
        want = max(int(n), int(floors.get(j, 0)))
        if want > 0:
            out[j] = want
        else:
            out.pop(j, None)
    short: dict[str, int] = {}

    def excess() -> int:
        return sum(out.values()) - capacity

    while excess() > 0:
        movable = [
            (out[j] - floors.get(j, 0), j)
            for j in out
            if j not in pins and out[j] > floors.get(j, 0)
        ]
        if not movable:
            break
        _, j = max(movable)
        out[j] = _shrunk(out[j], floors.get(j, 0), excess())
        if out[j] == 0:
            del out[j]
    while excess() > 0:
        pinned = [(out[j], j) for j in out if j in pins]
        if not pinned:
            break
        n, j = max(pinned)
        new = _shrunk(n, 0, excess())
        short[j] = short.get(j, 0) + n - new
        if new:
            out[j] = new
        else:
            del out[j]
    return out, short


def _shrunk(n: int, floor: int, excess: int) -> int:
    """``n`` GPUs made smaller by at least ``excess`` where possible: the largest power of
    two at most ``n - excess`` (at least ``floor``), or halved when that is not lower."""
    target = max(floor, n - excess)
    if target <= 0:
        return 0
    new = floor_power_of_two(target)
    if new < floor:
        new = floor
    if new >= n:
        new = max(floor, n // 2)
    return new


def free_block_on_node(
    node: int, count: int, size: int, taken: Iterable[GpuId]
) -> tuple[GpuId, ...] | None:
    """An aligned block of ``size`` GPUs on node ``node`` (of ``count`` GPUs) that no entry
    of ``taken`` uses, lowest first; None when the node has none (a migration target)."""
    if size < 1 or size > count:
        return None
    used = {g for n, g in taken if n == node}
    step = size if size & (size - 1) == 0 else 1
    for start in range(0, count - size + 1, step):
        block = range(start, start + size)
        if not used.intersection(block):
            return tuple((node, g) for g in block)
    return None


def check_scale(
    job: str,
    gpus: int,
    *,
    bounds: tuple[int, int],
    guaranteed: Mapping[str, int],
    pins: Mapping[str, int],
    capacity: int,
    power_of_two: bool,
) -> None:
    """Refuse a ``scale`` the allocator could not keep: outside the job's bounds, below a
    deadline job's guaranteed share, or more than the GPUs left once the other jobs'
    guarantees and pins are counted. Raises ``OperationError`` with the reason."""
    lo, hi = bounds
    if gpus < 1:
        raise OperationError(400, "gpus must be at least 1 (cancel the job to stop it)", "gpus")
    if gpus < lo or gpus > hi:
        raise OperationError(400, f"{gpus} GPUs is outside the job's bounds [{lo}, {hi}]", "gpus")
    if power_of_two and gpus & (gpus - 1):
        raise OperationError(
            400, f"{gpus} GPUs is not a power of two (placement uses buddy blocks)", "gpus"
        )
    share = int(guaranteed.get(job, 0))
    if gpus < share:
        raise OperationError(
            409,
            f"{job}: {gpus} GPUs is below its guaranteed share of {share} GPUs now "
            "(its deadline would no longer be guaranteed)",
            "gpus",
        )
    others = sum(
        max(int(pins.get(j, 0)), int(guaranteed.get(j, 0)))
        for j in set(guaranteed) | set(pins)
        if j != job
    )
    if gpus + others > capacity:
        raise OperationError(
            409,
            f"{job}: {gpus} GPUs do not fit: {others} of the {capacity} schedulable GPUs "
            "are guaranteed to or pinned by other jobs",
            "gpus",
        )
