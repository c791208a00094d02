"""How a job's command starts in its containers: the spec's ``launcher`` (pure, no engine).

Three launchers (docs/jobs.md, "Launchers"):

``none`` (the default)
    One container per worker (per GPU), the command run as it is, as the container's only
    process. Each container gets exactly what torchrun gives a single-process worker:
    ``RANK``, ``LOCAL_RANK=0``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE=1``, ``GROUP_RANK`` (=
    ``RANK``: every container is a group of one), ``GROUP_WORLD_SIZE``, ``ROLE_RANK``,
    ``ROLE_NAME``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, and the
    ``TORCHELASTIC_*`` values of a first start. A torchrun script, a one-process script and
    a script that needs no PyTorch at all run unchanged.
``torchrun``
    One container per node; the command runs under the image's own torchrun (``torchrun``,
    else ``python3 -m torch.distributed.run``) with ``--nnodes``, ``--nproc_per_node`` (the
    container's GPU count), ``--node_rank``, ``--master_addr``/``--master_port`` (static
    rendezvous) and ``--no_python``, so the command is run exactly as written once per
    worker, and torchrun sets the variables. A rescale's SIGTERM reaches torchrun, which
    stops its workers.
``flowcon``
    One container per node, the command run as it is with the node's view (``RANK`` of the
    container's first worker, ``LOCAL_WORLD_SIZE`` = its GPUs, no ``LOCAL_RANK``): what
    ``flowcon.elastic.main`` expects, which spawns the node's workers itself.

Every launcher adds FlowCon's own ``FLOWCON_*`` variables (``flowcon.executor.workers``).
"""

from __future__ import annotations

from collections.abc import Sequence

from flowcon import contract
from flowcon.executor.workers import WorkerSlot, worker_env, world_size
from flowcon.jobspec.spec import JobSpec

NONE = "none"
TORCHRUN = "torchrun"
FLOWCON = "flowcon"

# The image's torchrun, or the module where an image has no torchrun script on PATH. "$0"
# is "torchrun", "$@" its arguments.
TORCHRUN_SH = (
    'if command -v torchrun >/dev/null 2>&1; then exec torchrun "$@"; fi; '
    'exec python3 -m torch.distributed.run "$@"'
)

# torchrun's names: a torchrun container's own environment leaves them to torchrun
_TORCHRUN_OWNS = (
    contract.ENV_WORLD_SIZE,
    contract.ENV_RANK,
    contract.ENV_LOCAL_RANK,
    contract.ENV_LOCAL_WORLD_SIZE,
    contract.ENV_GROUP_RANK,
    contract.ENV_MASTER_ADDR,
    contract.ENV_MASTER_PORT,
)


def layout(launcher: str, slots: Sequence[WorkerSlot]) -> list[WorkerSlot]:
    """The containers of a job: one per node (``torchrun``, ``flowcon``) or one per GPU
    (``none``: a container's index is its rank and its group rank)."""
    if launcher != NONE:
        return list(slots)
    out: list[WorkerSlot] = []
    for s in slots:
        for i, gpu in enumerate(s.gpus):
            out.append(WorkerSlot(s.node, len(out), s.first_rank + i, (gpu,)))
    return out


def container_suffix(launcher: str, slot: WorkerSlot) -> str:
    """What tells a job's containers apart besides its node: the rank under ``none`` (one
    node holds several), nothing otherwise (container names stay ``flowcon-JOB--NODE``)."""
    return f"-r{slot.first_rank}" if launcher == NONE else ""


def launch_env(
    spec: JobSpec,
    slot: WorkerSlot,
    slots: Sequence[WorkerSlot],
    master_addr: str,
    master_port: int,
    checkpoint_every: int | None = None,
) -> dict[str, str]:
    """The environment of ``slot``'s container under the spec's launcher."""
    env = worker_env(spec, slot, slots, master_addr, master_port, checkpoint_every)
    if spec.launcher == NONE:
        world = str(world_size(slots))
        rank = str(slot.first_rank)
        env.update(
            {
                contract.ENV_RANK: rank,
                contract.ENV_LOCAL_RANK: "0",
                contract.ENV_LOCAL_WORLD_SIZE: "1",
                contract.ENV_GROUP_RANK: rank,
                contract.ENV_NODE_RANK: rank,
                contract.ENV_GROUP_WORLD_SIZE: world,
                contract.ENV_ROLE_RANK: rank,
                contract.ENV_ROLE_NAME: "default",
                contract.ENV_ROLE_WORLD_SIZE: world,
                contract.ENV_RESTART_COUNT: "0",
                contract.ENV_MAX_RESTARTS: "0",
                contract.ENV_RUN_ID: spec.name,
                contract.ENV_USE_AGENT_STORE: "False",
            }
        )
    elif spec.launcher == TORCHRUN:
        for name in _TORCHRUN_OWNS:
            env.pop(name, None)
        # torchrun -u's its scripts; with --no_python the command's python must not buffer
        env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def launch_command(
    spec: JobSpec,
    slot: WorkerSlot,
    slots: Sequence[WorkerSlot],
    master_addr: str,
    master_port: int,
) -> tuple[str, ...]:
    """The container's command: the spec's, under torchrun for ``launcher: torchrun``."""
    if spec.launcher != TORCHRUN:
        return tuple(spec.command)
    args = (
        f"--nnodes={len(slots)}",
        f"--nproc_per_node={len(slot.gpus)}",
        f"--node_rank={slot.node_rank}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        f"--rdzv_id={spec.name}",
        "--max_restarts=0",
        "--monitor_interval=1",
        # no redirection, said as a mapping that names no local rank: torch < 2.0 on Python
        # 3.11 reads the plain "0" (the default) as None and fails before any worker starts
        f"--redirects={len(slot.gpus)}:0",
        f"--tee={len(slot.gpus)}:0",
        "--no_python",
    )
    return ("sh", "-c", TORCHRUN_SH, "torchrun", *args, *spec.command)
