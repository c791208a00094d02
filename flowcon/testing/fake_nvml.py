"""A stand-in for the ``pynvml`` module (nvidia-ml-py) with per-process accounting.

It answers the calls ``flowcon.engine.gpus`` makes (inventory, topology, utilisation,
memory, compute processes, per-process SM utilisation) from plain attributes that a test
or ``benchmarks/gpu_check.py --cpu`` sets, so the agent's GPU path runs on a CPU host:

    nvml = FakeNvml(gpus=2)
    nvml.run(pid=4242, gpu=0, mem_bytes=1 << 30, sm_util=0.6)   # a process on GPU 0
    nvml.util[0] = 0.7                                           # GPU 0's own utilisation

Errors are NVML's shape: ``NVMLError`` with the value NVML would return, e.g. no process
utilisation samples (``NVML_ERROR_NOT_FOUND``) where ``sm_util`` was not given.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class _Proc:
    pid: int
    gpu: int
    mem_bytes: int | None
    sm_util: float | None


class FakeNvml:
    """``gpus`` GPUs of ``memory_bytes`` each on one PCIe switch (no NVLink); ``loaded``
    False behaves as a host without the driver (``nvmlInit`` fails)."""

    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVMLError = NVMLError

    def __init__(
        self,
        gpus: int = 1,
        memory_bytes: int = 80 << 30,
        name: str = "Fake GPU",
        loaded: bool = True,
        per_process: bool = True,
    ) -> None:
        self.count = gpus
        self.memory_bytes = memory_bytes
        self.name = name
        self.loaded = loaded
        self.per_process = per_process  # False: the driver keeps no per-process samples
        self.util: dict[int, float] = {}
        self.procs: list[_Proc] = []
        self.inits = 0
        self.shutdowns = 0
        self._ts = 1_000_000

    # -- what a test sets

    def run(
        self, pid: int, gpu: int = 0, mem_bytes: int | None = 0, sm_util: float | None = None
    ) -> None:
        """A compute process on ``gpu`` (``sm_util``: its SM utilisation, a fraction)."""
        self.procs = [p for p in self.procs if not (p.pid == pid and p.gpu == gpu)]
        self.procs.append(_Proc(pid, gpu, mem_bytes, sm_util))

    def stop(self, pid: int) -> None:
        self.procs = [p for p in self.procs if p.pid != pid]

    # -- pynvml's calls

    def nvmlInit(self) -> None:
        if not self.loaded:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake0000-0000-0000-0000-{h:012d}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.name

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used = sum(p.mem_bytes or 0 for p in self.procs if p.gpu == h)
        return SimpleNamespace(total=self.memory_bytes, used=used, free=self.memory_bytes - used)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=round(100 * self.util.get(h, 0.0)), memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [
            SimpleNamespace(pid=p.pid, usedGpuMemory=p.mem_bytes) for p in self.procs if p.gpu == h
        ]

    def nvmlDeviceGetProcessUtilization(self, h: int, last_seen: int) -> list[Any]:
        if not self.per_process:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._ts += 1
        out = [
            SimpleNamespace(pid=p.pid, timeStamp=self._ts, smUtil=round(100 * p.sm_util), memUtil=0)
            for p in self.procs
            if p.gpu == h and p.sm_util is not None
        ]
        if not out:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return out

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:{h + 1:02x}:00.0")

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return 10  # NVML_TOPOLOGY_SINGLE: one PCIe switch

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
