"""Per-container CPU usage and CPU limit, read from the cgroup filesystem.

One file read per container and figure costs microseconds, where ``docker stats``
costs a second per container; so the replay can sample every container each second.
The reader finds the container's cgroup under cgroup v1 or v2, with the cgroupfs or
the systemd driver; if it cannot (remote engine, unusual layout), the recorder falls
back to the engine's stats API.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

CGROUP_ROOT = Path(os.environ.get("FLOWCON_CGROUP_ROOT", "/sys/fs/cgroup"))


@dataclass(frozen=True)
class CpuReading:
    usage_ns: int  # cumulative CPU time of the container
    limit_cpus: float | None  # CFS quota / period; None when unlimited
    shares: int | None  # cpu.shares (v1) or cpu.weight (v2), None if unreadable
    # the CPUs the container is pinned to (cpuset.cpus, "0-1"); None when it may use all of
    # the host's CPUs (no cpuset, or one equal to the host's) or unreadable
    cpuset: str | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pinned(container_dir: Path, host_dir: Path) -> str | None:
    """The container's cpuset.cpus when it is narrower than the host's, else None.

    cgroup v2 names the effective set cpuset.cpus.effective at the root; v1 cpuset.cpus.
    """
    own = _read(container_dir / "cpuset.cpus")
    if not own:
        return None
    host = _read(host_dir / "cpuset.cpus") or _read(host_dir / "cpuset.cpus.effective")
    return None if host is not None and own == host else own


class CgroupCpu:
    """Reads one container's figures; ``read`` returns None once its cgroup is gone."""

    def __init__(self, container_id: str, root: Path = CGROUP_ROOT) -> None:
        self.container_id = container_id
        self.root = root
        self._v1: tuple[Path, Path] | None = None  # (cpuacct dir, cpu dir)
        self._v2: Path | None = None
        self._cpuset: Path | None = None  # v1: the container's cpuset controller dir
        self._locate()

    @property
    def found(self) -> bool:
        return self._v1 is not None or self._v2 is not None

    def _locate(self) -> None:
        cid = self.container_id
        for rel in (f"docker/{cid}", f"system.slice/docker-{cid}.scope"):
            acct = self.root / "cpuacct" / rel
            cpu = self.root / "cpu" / rel
            cpuset = self.root / "cpuset" / rel
            if (acct / "cpuacct.usage").exists():
                self._v1 = (acct, cpu if cpu.exists() else acct)
                self._cpuset = cpuset if cpuset.exists() else None
                return
            if (self.root / "cpu,cpuacct" / rel / "cpuacct.usage").exists():
                d = self.root / "cpu,cpuacct" / rel
                self._v1 = (d, d)
                self._cpuset = cpuset if cpuset.exists() else None
                return
            v2 = self.root / rel
            if (v2 / "cpu.stat").exists():
                self._v2 = v2
                return

    def read(self) -> CpuReading | None:
        if not self.found:
            self._locate()  # the cgroup may appear just after the container starts
        reading = None
        if self._v1 is not None:
            reading = self._read_v1(*self._v1)
            pinned = _pinned(self._cpuset, self.root / "cpuset") if self._cpuset else None
        elif self._v2 is not None:
            reading = self._read_v2(self._v2)
            pinned = _pinned(self._v2, self.root)
        if reading is None or pinned is None:
            return reading
        return replace(reading, cpuset=pinned)

    @staticmethod
    def _read_v1(acct: Path, cpu: Path) -> CpuReading | None:
        usage = _read(acct / "cpuacct.usage")
        if usage is None or not usage.isdigit():
            return None
        quota = _read(cpu / "cpu.cfs_quota_us")
        period = _read(cpu / "cpu.cfs_period_us")
        limit = None
        if quota and period and quota.lstrip("-").isdigit() and period.isdigit():
            q, p = int(quota), int(period)
            limit = q / p if q > 0 and p > 0 else None
        shares = _read(cpu / "cpu.shares")
        return CpuReading(int(usage), limit, int(shares) if shares and shares.isdigit() else None)

    @staticmethod
    def _read_v2(d: Path) -> CpuReading | None:
        stat = _read(d / "cpu.stat")
        if stat is None:
            return None
        usage_us = None
        for line in stat.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec" and value.isdigit():
                usage_us = int(value)
        if usage_us is None:
            return None
        limit = None
        cpu_max = _read(d / "cpu.max")
        if cpu_max:
            parts = cpu_max.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]):
                limit = int(parts[0]) / int(parts[1])
        weight = _read(d / "cpu.weight")
        return CpuReading(
            usage_us * 1000, limit, int(weight) if weight and weight.isdigit() else None
        )


def stats_reading(stats: dict[str, object], attrs: dict[str, object]) -> CpuReading | None:
    """The same figures from ``docker stats`` (one-shot) and ``docker inspect`` output."""
    try:
        usage = int(stats["cpu_stats"]["cpu_usage"]["total_usage"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None
    host = attrs.get("HostConfig") if isinstance(attrs, dict) else None
    limit = None
    shares = None
    cpuset = None
    if isinstance(host, dict):
        nano = host.get("NanoCpus") or 0
        quota, period = host.get("CpuQuota") or 0, host.get("CpuPeriod") or 0
        if isinstance(nano, int) and nano > 0:
            limit = nano / 1e9
        elif isinstance(quota, int) and isinstance(period, int) and quota > 0:
            limit = quota / (period or 100_000)
        raw_shares = host.get("CpuShares")
        shares = raw_shares if isinstance(raw_shares, int) and raw_shares > 0 else None
        raw_set = host.get("CpusetCpus")
        cpuset = raw_set if isinstance(raw_set, str) and raw_set else None
    return CpuReading(usage, limit, shares, cpuset)
