"""What the executor asks of a backend (plain engine or Swarm), and what both share.

``Backend`` is the protocol ``flowcon.executor.lifecycle.Executor`` drives; a backend turns
``WorkerRequest``s into containers (engine) or single-replica services (Swarm) and reports
them back as ``Worker``s, read from their labels (names in ``flowcon.contract``). The
backends import this module and ``flowcon.executor.workers`` only, never the executor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from flowcon.contract import (
    EXIT_LEFT,
    LABEL_GPUS,
    LABEL_JOB,
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_RANK,
    LABEL_SCALING,
    LABEL_WORLD_SIZE,
    SCALING_STOPFREE,
)
from flowcon.executor.container_spec import ContainerSettings
from flowcon.executor.workers import WorkerSlot

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.resource import Model

# The engine's JSON before it is read (a Swarm task): read field by field with ``.get``
# and checked where a value is used (the SDK's stubs type models' ``attrs`` the same).
EngineJson = dict[str, Any]

# Labels that describe one worker, not the job: kept off the job's checkpoint volume.
PER_WORKER_LABELS = (LABEL_NODE, LABEL_GPUS, LABEL_RANK, LABEL_WORLD_SIZE)


class ExecutorError(RuntimeError):
    """The engine refused or vanished; the message says what was being done."""


class ExecutorRefused(ExecutorError):
    """What a job asks is beyond what the operator allows (found only on its node: a host
    path that leaves its root): retrying cannot help, the job fails with this reason."""


class EngineConnectError(ExecutorError):
    """No Docker engine answers where the environment (DOCKER_HOST) points."""


def connect_engine(timeout: int = 60) -> DockerClient:
    """A Docker SDK client for the engine DOCKER_HOST names (the local socket by default),
    speaking the API version the engine negotiates (``version="auto"``);
    ``EngineConnectError`` naming the engine when none answers there."""
    import docker
    import docker.errors
    import docker.utils

    url = docker.utils.kwargs_from_env().get("base_url") or "unix:///var/run/docker.sock"
    try:
        return docker.from_env(version="auto", timeout=timeout)
    except docker.errors.DockerException as exc:
        raise EngineConnectError(
            f"cannot connect to the Docker engine at {url}: {_root_cause(exc)}"
        ) from None


def _root_cause(exc: BaseException) -> str:
    """The innermost reason ("[Errno 2] No such file or directory"), not the SDK's chain."""
    seen: set[int] = set()
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(exc))
        exc = inner
    for arg in getattr(exc, "args", ()):  # urllib3 wraps the OSError in a tuple
        if isinstance(arg, OSError):
            exc = arg
    return str(exc) or exc.__class__.__name__


def volume_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A job's checkpoint volume carries its worker's labels less the per-worker ones."""
    return {k: v for k, v in labels.items() if k not in PER_WORKER_LABELS}


def volume_refusal(
    have: Mapping[str, str] | None, want: Mapping[str, str], keys: Iterable[str] = ()
) -> str | None:
    """Why a checkpoint volume labelled ``have`` is not the one of the job whose labels are
    ``want``: another ``flowcon.job``, or another ``flowcon.owner`` (``keys``: the labels
    compared; default both). None: it is the job's. A backend neither mounts nor deletes
    a checkpoint volume of another job or owner."""
    found = have or {}
    for key in tuple(keys) or (LABEL_JOB, LABEL_OWNER):
        if (found.get(key) or "") != (want.get(key) or ""):
            return (
                f"it belongs to another job ({key} {found.get(key) or 'unset'!r},"
                f" not {want.get(key) or 'unset'!r})"
            )
    return None


def jobs_labelled(items: Iterable[Model]) -> set[str]:
    """The ``flowcon.job`` labels of engine objects (networks, volumes)."""
    jobs = ((item.attrs.get("Labels") or {}).get(LABEL_JOB) for item in items)
    return {str(job) for job in jobs if job}


def engine_errors() -> tuple[type[BaseException], ...]:
    """Engine failures a backend logs and survives (imported late: docker is optional here)."""
    import docker.errors
    import requests

    return (docker.errors.APIError, requests.exceptions.RequestException)


@dataclass(frozen=True)
class WorkerRequest:
    """What a backend needs to run one container of a job."""

    name: str
    job: str
    node: str
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    gpus: tuple[str, ...]
    real_gpus: bool
    checkpoint_volume: str
    checkpoint_host_dir: str | None
    grace_s: float
    network: str | None
    # the spec's mounts, shm, limits, workdir, user, labels (flowcon.executor.container_spec);
    # frozen, so one shared default instance is fine
    settings: ContainerSettings = ContainerSettings()  # noqa: RUF009
    init: bool = False  # run an init as PID 1 (docker --init) that forwards signals


@dataclass(frozen=True)
class LogLine:
    """One line of a worker's output (stdout and stderr), with the engine's timestamp."""

    ts_ns: int  # nanoseconds since the epoch: the cursor a follower pages on
    text: str


# a line longer than this is shown as a notice of its length (flowcon.engine.logs' bound)
LOG_LINE_MAX_BYTES = 64 * 1024


def log_lines_of(raw: bytes, after_ns: int = 0) -> list[LogLine]:
    """Timestamped engine output (``timestamps=True``, already demultiplexed) as lines
    newer than ``after_ns``; the bytes become lines in ``flowcon.engine.logs``."""
    from flowcon.engine.logs import read_lines

    out = []
    for line in read_lines([raw], LOG_LINE_MAX_BYTES, after_ns):
        text = line.text if line.text is not None else f"[a line of {line.size} bytes]"
        out.append(LogLine(line.ts_ns, text))
    return out


def engine_since(after_ns: int) -> int | None:
    """The engine's ``since`` (whole seconds, inclusive) that covers lines after
    ``after_ns``; None for "from the start"."""
    return after_ns // 1_000_000_000 if after_ns > 0 else None


@dataclass
class Worker:
    """One observed container (engine) or service (swarm) of a job."""

    id: str
    name: str
    job: str
    node: str
    node_rank: int
    gpus: tuple[str, ...]
    state: str  # running | starting | exited | created | dead | unknown
    exit_code: int | None
    labels: Mapping[str, str]
    image: str = ""
    # its node's engine went away under it (swarm: a task that failed without an exit of
    # its own): a preemption like a SIGTERM, not a crash of the job
    node_lost: bool = False

    @property
    def dead(self) -> bool:
        """Stopped without finishing: crashed, killed, or stopped by someone else."""
        if self.left:
            return False
        return self.state == "dead" or (self.state == "exited" and self.exit_code not in (0,))

    @property
    def left(self) -> bool:
        """A stop-free job's container that left the running job at an agreed step
        boundary (scale-in, straggler removal): the job goes on without it."""
        return (
            self.state == "exited"
            and self.exit_code == EXIT_LEFT
            and self.labels.get(LABEL_SCALING) == SCALING_STOPFREE
        )

    @property
    def completed(self) -> bool:
        return self.state == "exited" and self.exit_code == 0


class Backend(Protocol):
    kind: str

    def list_workers(self, selector: Mapping[str, str]) -> list[Worker]: ...

    def master_addr(
        self,
        job: str,
        slots: Sequence[WorkerSlot],
        rank0_name: str,
        labels: Mapping[str, str],
        port: int | None = None,
        grow: bool = False,
    ) -> tuple[str, int, str | None]:
        """(MASTER_ADDR, MASTER_PORT, network) for a job's placement; prepares the network.
        ``port``: the job's own port, used where jobs share the host's network. ``grow``:
        containers may join later (stop-free scaling), so even one container gets an
        address the others can reach."""
        ...

    def kill(self, worker: Worker, signal: str) -> None:
        """Send ``signal`` (a name: "SIGUSR1") to the worker's main process."""
        ...

    def image_labels(self, image: str) -> Mapping[str, str]:
        """The image's labels ({} when the image is not on the engine)."""
        ...

    def create(self, req: WorkerRequest) -> Worker: ...

    def stop(self, worker: Worker, grace_s: float) -> None: ...

    def restart(self, worker: Worker) -> None: ...

    def remove(self, worker: Worker) -> None: ...

    def logs(self, worker: Worker) -> list[str]:
        """The worker's stdout lines (timestamped stdout and stderr: ``read_logs``)."""
        ...

    def cleanup(self, job: str, volume: str | None) -> None: ...

    def job_objects(self, selector: Mapping[str, str]) -> set[str]:
        """The jobs (``flowcon.job``) of the networks and checkpoint volumes that carry
        ``selector``'s labels, with or without a container."""
        ...

    def read_logs(
        self, worker: Worker, after_ns: int = 0, tail: int | None = None
    ) -> list[LogLine]:
        """The worker's output lines (stdout and stderr) newer than ``after_ns``, the last
        ``tail`` of them when given; [] when the worker is gone."""
        ...
