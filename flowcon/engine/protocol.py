"""What the agent needs of an engine adapter: ``DockerEngine`` is one, the tests' fakes
are others (checked by mypy, not by inheritance)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from flowcon.core.control import AppliedMode, CpuControl
from flowcon.core.limits import CpuLimit
from flowcon.engine.docker_engine import CgroupSample, ContainerInfo, CpuSettings, Stats
from flowcon.engine.logs import Line


class Engine(Protocol):
    """The calls of the agent's container monitor, worker pool and executor. Every call
    raises ``ContainerGone`` for a removed container, ``EngineUnavailable`` when the
    engine does not answer, ``EngineError`` for any other refusal."""

    def list_running(self) -> list[ContainerInfo]:
        """The running containers (labels, no CPU settings: those come from inspect)."""
        ...

    def inspect(self, cid: str) -> ContainerInfo:
        """One container with its CPU settings, cgroup parent and pid."""
        ...

    def set_cpus(self, cid: str, limit: CpuLimit, original: CpuSettings) -> None:
        """Limit a container (``original``: its settings before the agent)."""
        ...

    def set_control(
        self,
        cid: str,
        control: CpuControl,
        original: CpuSettings,
        host_cpus: int,
        previous: AppliedMode | None,
    ) -> None:
        """Apply a control of any mode (``previous``: the mode applied before, None for
        the originals); what ``previous`` set and ``control`` does not goes back."""
        ...

    def restore_cpus(
        self, cid: str, original: CpuSettings, host_cpus: int, mode: AppliedMode = "quota"
    ) -> None:
        """Give a container back its original CPU settings (``mode``: applied last)."""
        ...

    def stats(self, cid: str) -> Stats:
        """One sample of the engine's statistics (about a second's wait)."""
        ...

    def cgroup_usage(self, cid: str, cgroup_parent: str = "", pid: int = 0) -> CgroupSample | None:
        """CPU time and memory from the cgroup files, None when not reachable."""
        ...

    def forget(self, cid: str) -> None:
        """Drop what is known of a container that left."""
        ...

    def log_lines(
        self, cid: str, since_ns: int | None, tail: int | None, max_bytes: int
    ) -> Iterator[Line]:
        """New complete output lines after ``since_ns`` (else the last ``tail``)."""
        ...
