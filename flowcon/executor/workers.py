"""Pure worker planning: which containers a placement needs and what each one is told.

No engine here (no docker import): a placement (ordered ``node name -> GPU ids``) becomes
ordered ``WorkerSlot``s (the first node holds rank 0), each slot gets torchrun's
environment plus FlowCon's (names from ``flowcon.contract``), and a job gets a stable
master port when its workers share the host network. See ``flowcon.executor.lifecycle``
for the environment a container receives.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from flowcon import contract
from flowcon.jobspec.spec import JobSpec

DEFAULT_MASTER_PORT = 29500

Placement = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class WorkerSlot:
    """One container of a job: its node, node rank, first global rank and GPU ids."""

    node: str
    node_rank: int
    first_rank: int
    gpus: tuple[str, ...]


def plan_workers(placement: Placement) -> list[WorkerSlot]:
    """Ordered slots for a placement; nodes with no GPU are skipped, order gives the ranks."""
    slots: list[WorkerSlot] = []
    rank = 0
    for node, gpus in placement.items():
        ids = tuple(str(g) for g in gpus)
        if not ids:
            continue
        if len(set(ids)) != len(ids):
            raise ValueError(f"placement repeats a GPU on {node}: {list(ids)}")
        slots.append(WorkerSlot(str(node), len(slots), rank, ids))
        rank += len(ids)
    if not slots:
        raise ValueError("placement has no GPU")
    return slots


def pack_placement(
    inventory: Any,  # flowcon.engine.gpus.Inventory: the allocator's port lists no GPUs
    gpus: int,
    busy: Iterable[str] = (),
) -> dict[str, list[str]] | None:
    """A simple placement of ``gpus`` free GPUs (UUIDs not in ``busy``): one node if any has
    room (the fullest such node, to keep big holes free), else nodes in inventory order.
    For the profiling pre-run; the allocator core's buddy placement is used for real jobs."""
    taken = set(busy)
    free = [(n.name, [g.uuid for g in n.gpus if g.uuid not in taken]) for n in inventory.nodes]
    fitting = [(len(ids), name, ids) for name, ids in free if len(ids) >= gpus]
    if fitting:
        _, name, ids = min(fitting)
        return {name: ids[:gpus]}
    out: dict[str, list[str]] = {}
    need = gpus
    for name, ids in free:
        if need and ids:
            out[name] = ids[:need]
            need -= len(out[name])
    return out if need == 0 else None


def placement_text(slots: Sequence[WorkerSlot]) -> str:
    """``node:gpu,gpu;node:gpu`` (the ``FLOWCON_PLACEMENT`` value)."""
    return ";".join(f"{s.node}:{','.join(s.gpus)}" for s in slots)


def world_size(slots: Sequence[WorkerSlot]) -> int:
    """Worker processes of the job: one per GPU."""
    return sum(len(s.gpus) for s in slots)


PORT_RANGE = (20000, 30000)  # master ports given to jobs on host networking: [lo, hi)


def master_port_for(job: str) -> int:
    """The job's preferred port for host networking: a hash of its name (two names can
    share it; ``allocate_master_port`` resolves that)."""
    lo, hi = PORT_RANGE
    return lo + zlib.crc32(job.encode()) % (hi - lo)


def allocate_master_port(job: str, taken: Iterable[int | None] | AbstractSet[int]) -> int:
    """A master port for ``job`` that no other live job holds (``taken``: their ports):
    its hash port when free, else the next free one above it (wrapping in ``PORT_RANGE``).
    Deterministic, so the same live set always gives the same answer."""
    lo, hi = PORT_RANGE
    # a set is asked as it is (a view over thousands of live jobs need not be copied)
    busy = taken if isinstance(taken, AbstractSet) else {int(p) for p in taken if p}
    start = master_port_for(job) - lo
    for i in range(hi - lo):
        port = lo + (start + i) % (hi - lo)
        if port not in busy:
            return port
    raise ValueError(f"no free master port in {lo}-{hi - 1} for job {job}")


def live_master_port(job: str, current: int | None, live: Mapping[str, int | None]) -> int:
    """``job``'s master port among the live jobs ``live`` (name -> port, ``job``'s own entry
    ignored): the one it holds (``current``) while no other live job holds it, else a newly
    allocated one."""
    taken = {p for name, p in live.items() if name != job and p}
    if current and current not in taken:
        return current
    return allocate_master_port(job, taken)


def worker_env(
    spec: JobSpec,
    slot: WorkerSlot,
    slots: Sequence[WorkerSlot],
    master_addr: str,
    master_port: int,
    checkpoint_every: int | None = None,
) -> dict[str, str]:
    """The environment of ``slot``'s container: the spec's own, then torchrun's and FlowCon's."""
    world = world_size(slots)
    batch = spec.run_batch or spec.global_batch_size
    env = dict(spec.env)
    env.update(
        {
            contract.ENV_JOB: spec.name,
            contract.ENV_NODE: slot.node,
            contract.ENV_GPUS: ",".join(slot.gpus),
            contract.ENV_PLACEMENT: placement_text(slots),
            contract.ENV_WORLD_SIZE: str(world),
            contract.ENV_RANK: str(slot.first_rank),
            contract.ENV_LOCAL_WORLD_SIZE: str(len(slot.gpus)),
            contract.ENV_GROUP_RANK: str(slot.node_rank),
            contract.ENV_NODE_RANK: str(slot.node_rank),
            contract.ENV_NUM_NODES: str(len(slots)),
            contract.ENV_MASTER_ADDR: master_addr,
            contract.ENV_MASTER_PORT: str(master_port),
            contract.ENV_GLOBAL_BATCH_SIZE: str(batch),
            contract.ENV_LOCAL_BATCH_SIZE: str(max(1, batch // world)),
            contract.ENV_ITERATIONS: str(spec.iterations),
            contract.ENV_CHECKPOINT_DIR: contract.CHECKPOINT_MOUNT,
        }
    )
    if checkpoint_every:
        env[contract.ENV_CHECKPOINT_EVERY] = str(checkpoint_every)
    if spec.batch_range is not None:  # the batch the job's learning rate is meant for
        env[contract.ENV_REFERENCE_BATCH_SIZE] = str(spec.global_batch_size)
    return env
