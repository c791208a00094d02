"""A container's GPU use, from one NVML sample of the host's GPUs and the container's PIDs.

NVML answers per GPU: its utilisation and memory (``nvmlDeviceGetUtilizationRates``,
``nvmlDeviceGetMemoryInfo``), the compute processes on it with the device memory each uses
(``nvmlDeviceGetComputeRunningProcesses``) and, where the driver keeps them, each process's
SM utilisation over the last samples (``nvmlDeviceGetProcessUtilization``). A container's
processes are the PIDs in its cgroup (``cgroup.procs``, host PID namespace). This module
matches the two, pure, so the rules can be checked without a GPU:

- a process on a GPU belongs to the container whose cgroup lists its PID;
- the container's memory on a GPU is the sum of its processes' used device memory;
- its utilisation of a GPU is the sum of its processes' SM utilisation when NVML gave one
  for each of them; when NVML gave none (no samples yet, or not supported) and the
  container's processes are the only ones on that GPU, the GPU's own utilisation; otherwise
  unknown (None): several tenants and no per-process figures cannot be split honestly;
- its GPU share (the R of growth efficiency for the GPU) is the sum of its utilisations
  over the GPUs it uses, divided by the host's GPU count, as the CPU share is CPU time
  over the host's CPUs. Unknown when any GPU it uses has an unknown utilisation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of the host, as NVML saw it in one sample."""

    index: int
    uuid: str
    util: float | None  # fraction of the sample period a kernel ran (NVML's "gpu" %, / 100)
    mem_used: int  # bytes
    mem_total: int  # bytes


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU."""

    pid: int
    gpu: int  # index of the GPU
    mem_bytes: int  # used device memory (0 where NVML cannot say)
    sm_util: float | None = None  # its SM utilisation, a fraction; None: no sample


@dataclass(frozen=True)
class GpuSample:
    """One look at every GPU of the host (``at``: monotonic seconds)."""

    at: float
    devices: tuple[GpuDevice, ...]
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class ContainerGpu:
    """What one container uses of one GPU."""

    gpu: int
    uuid: str
    util: float | None  # fraction of that GPU; None: not attributable (see the module doc)
    mem_bytes: int
    pids: tuple[int, ...]
    mem_total: int = 0  # the GPU's memory, bytes


def attribute(sample: GpuSample, pids: Iterable[int]) -> tuple[ContainerGpu, ...]:
    """The GPUs the container's processes run on, with its use of each (GPU order)."""
    mine = set(pids)
    by_gpu: dict[int, list[GpuProcess]] = {}
    for proc in sample.processes:
        by_gpu.setdefault(proc.gpu, []).append(proc)
    out: list[ContainerGpu] = []
    for dev in sorted(sample.devices, key=lambda d: d.index):
        procs = by_gpu.get(dev.index, [])
        own = [p for p in procs if p.pid in mine]
        if not own:
            continue
        out.append(
            ContainerGpu(
                gpu=dev.index,
                uuid=dev.uuid,
                util=_util(dev, own, procs),
                mem_bytes=sum(p.mem_bytes for p in own),
                pids=tuple(sorted({p.pid for p in own})),
                mem_total=dev.mem_total,
            )
        )
    return tuple(out)


def _util(dev: GpuDevice, own: Sequence[GpuProcess], every: Sequence[GpuProcess]) -> float | None:
    if all(p.sm_util is not None for p in own):
        return min(1.0, sum(p.sm_util or 0.0 for p in own))
    if {p.pid for p in every} <= {p.pid for p in own}:  # the only tenant of this GPU
        return dev.util
    return None


def gpu_share(used: Sequence[ContainerGpu], host_gpus: int) -> float | None:
    """The container's use of the host's GPUs, a fraction (None: unknown or no GPU)."""
    if not used or host_gpus <= 0:
        return None
    total = 0.0
    for u in used:
        if u.util is None:
            return None
        total += u.util
    return total / host_gpus


def per_process(used: Sequence[ContainerGpu], sample: GpuSample) -> list[dict[str, object]]:
    """The container's processes on GPUs, for the state file and ``flowcon status``."""
    uuid: Mapping[int, str] = {d.index: d.uuid for d in sample.devices}
    gpus = {u.gpu for u in used}
    mine = {pid for u in used for pid in u.pids}
    return [
        {
            "pid": p.pid,
            "gpu": p.gpu,
            "uuid": uuid.get(p.gpu, ""),
            "mem_bytes": p.mem_bytes,
            "sm_util": p.sm_util,
        }
        for p in sample.processes
        if p.gpu in gpus and p.pid in mine
    ]
