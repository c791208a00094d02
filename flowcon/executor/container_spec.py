"""A job spec's container settings, as each backend's create arguments (pure: no engine).

``settings_for(spec, gpus)`` turns the spec's container-facing keys into what one worker
container (or Swarm service) gets: mounts, /dev/shm size, CPU and memory limits (per GPU
values times the worker's GPU count, as Slurm's ``--cpus-per-gpu``/``--mem-per-gpu``),
working directory, user, and labels (the spec's own, plus the ``flowcon.metric*`` labels
that let a node's agent read the job's own format with the same regex), and the operator's
hardening (flowcon/executor/reach.py): every capability dropped but ``executor.cap_add``,
``no-new-privileges``, a pids limit, private IPC.
``engine_kwargs`` and ``swarm_kwargs`` are the extra keyword arguments for docker-py's
``containers.create`` and ``services.create``; the backends add their own (name, command,
env, FlowCon's labels, the checkpoint mount) around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flowcon import contract
from flowcon.executor.reach import DEFAULT_PIDS_LIMIT, DEFAULT_PROBE_IMAGE, Reach, UserRule
from flowcon.jobspec.keys import default_shm
from flowcon.jobspec.spec import JobSpec

# Keyword arguments of a docker-py ``create`` call: values of many types (mounts, limits,
# ``docker.types`` objects) that the SDK checks, so the dict is as loose as its signature.
SdkKwargs = dict[str, Any]

_N = TypeVar("_N", int, float)  # a spec's CPUs (float) or memory (int bytes)


@dataclass(frozen=True)
class ContainerSettings:
    """What one worker container gets from its job's spec."""

    mounts: tuple[dict[str, str | bool], ...] = ()  # Engine API Mount objects (Target...)
    shm_size: int = default_shm(None)
    nano_cpus: int | None = None
    memory: int | None = None
    workdir: str | None = None
    user: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    cap_add: tuple[str, ...] = ()  # given back after dropping every capability
    pids_limit: int = DEFAULT_PIDS_LIMIT
    # the operator's roots of host paths: the backend resolves each bind source on the
    # node below its root (flowcon/executor/node_fs.py)
    bind_roots: tuple[str, ...] = ()
    read_only_roots: tuple[str, ...] = ()  # a mount under one is never writable
    # the uid:gid the container may run as; ``user`` is resolved to numbers on the node
    user_rule: UserRule = UserRule()  # noqa: RUF009 (frozen)
    probe_image: str = DEFAULT_PROBE_IMAGE  # the operator's image of probe containers


def _scaled(per_worker: _N | None, per_gpu: _N | None, gpus: int) -> _N | None:
    if per_worker is not None:
        return per_worker
    return None if per_gpu is None else per_gpu * max(1, gpus)


def metric_labels(spec: JobSpec) -> dict[str, str]:
    """The agent's ``flowcon.metric*`` labels for the spec's ``metric`` (none without one)."""
    m = spec.metric
    if m is None:
        return {}
    out = {contract.LABEL_METRIC: m.name, contract.LABEL_METRIC_GOAL: m.goal}
    if m.regex is not None:
        out[contract.LABEL_METRIC_REGEX] = m.regex
    return out


def settings_for(spec: JobSpec, gpus: int, reach: Reach | None = None) -> ContainerSettings:
    """Settings of a worker container holding ``gpus`` GPUs of ``spec``, hardened as
    ``reach`` (the operator's ``executor`` section) says."""
    reach = reach or Reach()
    cpus = _scaled(spec.cpus, spec.cpus_per_gpu, gpus)
    memory = _scaled(spec.memory, spec.memory_per_gpu, gpus)
    if cpus is None:  # the operator's default, so no job starves the node
        cpus = _scaled(None, reach.default_cpus_per_gpu, gpus)
    if memory is None:
        memory = _scaled(None, reach.default_memory_per_gpu, gpus)
    mounts: tuple[dict[str, str | bool], ...] = tuple(
        {
            "Target": v.target,
            # a named user's named volume is their own (flowcon/executor/reach.py)
            "Source": v.source if v.kind == "bind" else reach.volume_source(spec.owner, v.source),
            "Type": v.kind,
            # a root the operator made read-only stays so, whatever the spec says
            "ReadOnly": v.read_only or (v.kind == "bind" and reach.read_only_source(v.source)),
        }
        for v in spec.volumes
    )
    return ContainerSettings(
        mounts=mounts,
        shm_size=spec.shm_size if spec.shm_size is not None else default_shm(memory),
        nano_cpus=None if cpus is None else int(round(cpus * 1e9)),
        memory=None if memory is None else int(memory),
        workdir=spec.workdir,
        user=spec.user if spec.user is not None else reach.default_user,
        labels={**dict(spec.labels), **metric_labels(spec)},
        cap_add=reach.cap_add,
        pids_limit=reach.pids_limit,
        bind_roots=reach.bind_roots,
        read_only_roots=reach.read_only_roots,
        user_rule=reach.user_rule(spec.owner),
        probe_image=reach.probe_image,
    )


def engine_kwargs(s: ContainerSettings) -> SdkKwargs:
    """Keyword arguments of docker-py's ``containers.create`` for these settings (the
    checkpoint mount is the backend's: it goes first, these after it)."""
    out: SdkKwargs = {
        "mounts": [dict(m) for m in s.mounts],
        "shm_size": s.shm_size,
        # what a job may reach (flowcon/executor/reach.py); Docker's default seccomp
        # profile applies (no security_opt unconfines it), the PID namespace is private
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": s.pids_limit,
        "ipc_mode": "private",
    }
    if s.cap_add:
        out["cap_add"] = list(s.cap_add)
    if s.nano_cpus is not None:
        out["nano_cpus"] = s.nano_cpus
    if s.memory is not None:
        out["mem_limit"] = s.memory
    if s.workdir is not None:
        out["working_dir"] = s.workdir
    if s.user is not None:
        out["user"] = s.user
    return out


def swarm_kwargs(s: ContainerSettings) -> SdkKwargs:
    """Keyword arguments of docker-py's ``services.create``. A service has no shm size:
    /dev/shm is a tmpfs mount of that size (what ``docker service create --mount
    type=tmpfs,dst=/dev/shm,tmpfs-size=...`` does). Services take no ``no-new-privileges``
    before Engine API 1.46: every capability is dropped instead (docs/security.md)."""
    shm = {"Target": "/dev/shm", "Type": "tmpfs", "TmpfsOptions": {"SizeBytes": s.shm_size}}
    out: SdkKwargs = {
        "mounts": [dict(m) for m in s.mounts] + [shm],
        "cap_drop": ["ALL"],
    }
    if s.cap_add:
        out["cap_add"] = list(s.cap_add)
    limits: dict[str, int] = {"Pids": s.pids_limit}
    if s.nano_cpus is not None:
        limits["NanoCPUs"] = s.nano_cpus
    if s.memory is not None:
        limits["MemoryBytes"] = s.memory
    out["resources"] = {"Limits": limits}
    if s.workdir is not None:
        out["workdir"] = s.workdir
    if s.user is not None:
        out["user"] = s.user
    return out
