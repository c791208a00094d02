"""A container's CPU time and memory straight from its cgroup files.

The engine's stats endpoint answers on its next one-second tick and returns a large
JSON document; the kernel's counters are two small files. Reading them removes one
engine call per container per round. Layouts handled:

- cgroup v1: ``<root>/cpuacct/<path>/cpuacct.usage`` (ns) — also mounted as
  ``cpu,cpuacct`` or ``cpuacct,cpu`` — and ``<root>/memory/<path>/memory.usage_in_bytes``;
- cgroup v2: ``<root>/<path>/cpu.stat`` (``usage_usec``) and ``memory.current``;

with ``<path>`` the container's cgroup: ``<parent or /docker>/<id>`` (cgroupfs driver)
or ``<parent or system.slice>/docker-<id>.scope`` (systemd driver), or what
``/proc/<pid>/cgroup`` says when the container's init process is visible. When none
of these files exists (an agent in a container without the host's /sys/fs/cgroup),
the caller falls back to the engine's stats.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Directory names under the cgroup root that may hold the v1 cpuacct controller.
CPUACCT_DIRS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


class CgroupFormatError(ValueError):
    """A cgroup file did not hold what the kernel writes there."""


def parse_cpuacct_usage(text: str) -> int:
    """cgroup v1 ``cpuacct.usage``: cumulative CPU time in nanoseconds."""
    value = text.strip()
    if not value.isdigit():
        raise CgroupFormatError(f"cpuacct.usage: {value[:40]!r} is not a count of ns")
    return int(value)


def parse_cpu_stat_usage(text: str) -> int:
    """cgroup v2 ``cpu.stat``: the ``usage_usec`` line, returned in nanoseconds."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            value = value.strip()
            if not value.isdigit():
                break
            return int(value) * 1000
    raise CgroupFormatError("cpu.stat: no usage_usec line")


def parse_memory_bytes(text: str) -> int:
    """``memory.usage_in_bytes`` (v1) or ``memory.current`` (v2)."""
    value = text.strip()
    if not value.isdigit():
        raise CgroupFormatError(f"memory: {value[:40]!r} is not a byte count")
    return int(value)


def parse_procs(text: str) -> set[int]:
    """``cgroup.procs``: one PID a line (0 for a process outside the reader's namespace)."""
    out = set()
    for line in text.split():
        if line.isdigit() and int(line) > 0:
            out.add(int(line))
    return out


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup``: controller -> path (``""`` is the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            out[""] = path
        for ctl in controllers.split(","):
            if ctl:
                out[ctl] = path
    return out


def expand_slice(name: str) -> str:
    """systemd nests slices by their dashes: ``a-b.slice`` lives in ``a.slice/a-b.slice``."""
    name = name.strip("/")
    if name in ("", "-.slice"):
        return ""
    if "/" in name or not name.endswith(".slice"):
        return name
    parts = name[: -len(".slice")].split("-")
    return "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def candidate_paths(cid: str, cgroup_parent: str = "") -> list[str]:
    """The container's cgroup, relative to a hierarchy's root: cgroupfs driver first,
    then the systemd driver's scope."""
    parent = cgroup_parent.strip().strip("/")
    cgroupfs = f"/{parent or 'docker'}/{cid}"
    slice_ = expand_slice(parent if parent.endswith(".slice") else "system.slice")
    systemd = f"/{slice_}/docker-{cid}.scope" if slice_ else f"/docker-{cid}.scope"
    return [cgroupfs, systemd]


@dataclass(frozen=True)
class CgroupFiles:
    """Where one container's counters are (found once, read every round)."""

    cpu: str
    cpu_v2: bool
    memory: str | None


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


class CgroupReader:
    """Finds a container's cgroup files under ``root`` and reads its CPU time and memory."""

    def __init__(self, root: str | Path = "/sys/fs/cgroup") -> None:
        self.root = Path(root)

    def available(self) -> bool:
        return self.root.is_dir()

    def locate(self, cid: str, cgroup_parent: str = "", pid: int = 0) -> CgroupFiles | None:
        """The container's counter files, or None when they are not reachable from here."""
        if not cid or not self.root.is_dir():
            return None
        paths = candidate_paths(cid, cgroup_parent)
        hinted = self._from_pid(pid)
        if hinted:
            paths = [*hinted, *[p for p in paths if p not in hinted]]
        for rel in paths:
            rel = rel.lstrip("/")
            for sub in CPUACCT_DIRS:
                cpu = self.root / sub / rel / "cpuacct.usage"
                if cpu.is_file():
                    mem = self.root / "memory" / rel / "memory.usage_in_bytes"
                    return CgroupFiles(str(cpu), False, str(mem) if mem.is_file() else None)
            stat = self.root / rel / "cpu.stat"
            if (self.root / "cgroup.controllers").is_file() and stat.is_file():
                mem = self.root / rel / "memory.current"
                return CgroupFiles(str(stat), True, str(mem) if mem.is_file() else None)
        return None

    def _from_pid(self, pid: int) -> list[str]:
        if pid <= 0:
            return []
        try:
            groups = parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return []
        return [p for p in (groups.get("cpuacct"), groups.get("")) if p and p != "/"]

    def pids(self, files: CgroupFiles) -> set[int]:
        """The PIDs in the container's cgroup (``cgroup.procs`` beside its CPU counter; in
        the reader's PID namespace). OSError when the cgroup is gone."""
        path = Path(files.cpu).with_name("cgroup.procs")
        return parse_procs(path.read_text(encoding="ascii", errors="replace"))

    def read(self, files: CgroupFiles) -> tuple[int, int | None]:
        """(CPU ns, memory bytes or None). OSError when the cgroup is gone,
        CgroupFormatError when a file holds something unexpected."""
        text = _read(files.cpu)
        cpu = parse_cpu_stat_usage(text) if files.cpu_v2 else parse_cpuacct_usage(text)
        mem = None
        if files.memory is not None:
            try:
                mem = parse_memory_bytes(_read(files.memory))
            except (OSError, CgroupFormatError):
                mem = None
        return cpu, mem
