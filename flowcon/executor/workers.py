"""Pure worker planning: which containers a placement needs and what each one is told.

No engine here (no docker import): a placement (ordered ``node name -> GPU ids``) becomes
ordered ``WorkerSlot``s (the first node holds rank 0), each slot gets torchrun's
environment plus FlowCon's (names from ``flowcon.contract``), and a job gets a random
master port (kept for its lifetime) when its workers share the host network, and a secret
that authenticates its rendezvous (``FLOWCON_RENDEZVOUS_SECRET``, see
flowcon.elastic.rendezvous). See ``flowcon.executor.lifecycle``
for the environment a container receives.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import secrets
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


# Master ports are drawn at random (a job's name is public: a port derived from it could be
# squatted or joined by another tenant on the host network); ``secrets``' generator, so the
# draw cannot be predicted from earlier ones.
_RANDOM = secrets.SystemRandom()


def allocate_master_port(
    job: str,
    taken: Iterable[int | None] | AbstractSet[int],
    rng: random.Random | None = None,
) -> int:
    """A master port for ``job`` that no other live job holds (``taken``: their ports),
    drawn at random from the free ports of ``PORT_RANGE`` (``rng``: a test's generator).
    The caller keeps it (the job's record) so the job holds it for its lifetime."""
    lo, hi = PORT_RANGE
    draw = rng or _RANDOM
    # a set is asked as it is (a view over thousands of live jobs need not be copied)
    busy = taken if isinstance(taken, AbstractSet) else {int(p) for p in taken if p}
    for _ in range(64):  # nearly always the first draw: live jobs hold few of 10,000 ports
        port = draw.randrange(lo, hi)
        if port not in busy:
            return port
    free = [p for p in range(lo, hi) if p not in busy]
    if not free:
        raise ValueError(f"no free master port in {lo}-{hi - 1} for job {job}")
    return draw.choice(free)


def job_secret(key: bytes, job: str) -> str:
    """The rendezvous secret of ``job`` derived from an executor's own random ``key``: for
    jobs launched without a stored one (pre-runs, the executor used on its own), the same
    for every container of the job this executor creates."""
    return hmac.new(key, b"flowcon-job-secret\0" + job.encode(), hashlib.sha256).hexdigest()


def new_job_secret() -> str:
    """A fresh per-job rendezvous secret (the allocator stores it with the job)."""
    return secrets.token_hex(32)


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
    if spec.rendezvous_secret:
        env[contract.ENV_RENDEZVOUS_SECRET] = spec.rendezvous_secret
    if checkpoint_every:
        env[contract.ENV_CHECKPOINT_EVERY] = str(checkpoint_every)
    if spec.batch_range is not None:  # the batch the job's learning rate is meant for
        env[contract.ENV_REFERENCE_BATCH_SIZE] = str(spec.global_batch_size)
    return env
