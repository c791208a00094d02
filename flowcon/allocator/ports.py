"""What the allocator calls on the parts it drives: the GPU inventory, the executor and the
placer. Each protocol names only what the allocator uses (``flowcon.allocator.target``,
``daemon``, ``planner``), so the executor can change inside as long as it answers these;
``flowcon.engine.gpus.Inventory``, ``flowcon.executor.lifecycle.Executor`` and
``flowcon.alloc.placement.BuddyPlacer`` are the implementations."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

from flowcon.alloc.placement import Placement, PlacementPlan
from flowcon.core.completion import Completion
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

# node name -> GPU indices on it, in node order (the first node hosts rank 0)
NodePlacement = Mapping[str, Sequence[str]]


class NodeGpus(Protocol):
    """One node of the inventory."""

    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int: ...
    def uuids(self, indices: Sequence[int]) -> list[str]: ...


class Inventory(Protocol):
    """The cluster's GPUs by node (NVML's or the config's ``gpus.declared``)."""

    @property
    def nodes(self) -> Sequence[NodeGpus]: ...
    @property
    def total_gpus(self) -> int: ...
    def node(self, name: str) -> NodeGpus: ...


class Container(Protocol):
    """One worker container (Swarm: service) of a job, as the engine shows it."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def node_rank(self) -> int: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


class RunningJob(Protocol):
    """A job's containers as found on the engine."""

    @property
    def workers(self) -> Sequence[Container]: ...
    @property
    def placement(self) -> dict[str, list[str]]: ...  # node -> GPU UUIDs
    @property
    def gpus(self) -> int: ...
    @property
    def scaling(self) -> str: ...
    @property
    def status(self) -> str: ...


class Rescaled(Protocol):
    """What a rescale did and what it cost."""

    @property
    def mode(self) -> str: ...
    @property
    def old_gpus(self) -> int: ...
    @property
    def new_gpus(self) -> int: ...
    @property
    def stop_seconds(self) -> float: ...
    @property
    def start_seconds(self) -> float: ...
    @property
    def total_seconds(self) -> float: ...
    @property
    def joined(self) -> Sequence[str]: ...
    @property
    def left(self) -> Sequence[str]: ...
    @property
    def fallback(self) -> str | None: ...
    @property
    def global_batch(self) -> int | None: ...


class ExecutorEvent(Protocol):
    """A change the executor found on the engine (a job completed, failed, ...)."""

    @property
    def job(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def node(self) -> str: ...  # a worker that left: its node
    @property
    def gpus(self) -> tuple[str, ...]: ...  # and the GPU ids it held


class OutputLine(Protocol):
    """One line of a worker's output, with the engine's timestamp."""

    @property
    def ts_ns(self) -> int: ...
    @property
    def text(self) -> str: ...


class Executor(Protocol):
    """Runs the job containers; every call is level-triggered on the engine's state."""

    # the engine or Swarm backend: its ``kind`` and ``client`` are read when present
    @property
    def backend(self) -> object: ...
    def jobs(self) -> Mapping[str, RunningJob]: ...
    def job(self, name: str) -> RunningJob | None: ...
    def launch(self, spec: JobSpec, placement: NodePlacement) -> object: ...
    def rescale(
        self, spec: JobSpec, placement: NodePlacement, global_batch: int | None = None
    ) -> Rescaled: ...
    def suspend(self, job: str) -> float: ...
    def remove(self, job: str, *, owner: str | None = None) -> None: ...
    def reconcile(
        self,
        known: Iterable[str] | None = None,
        confirm: Callable[[str], Completion] | None = None,
    ) -> Sequence[ExecutorEvent]: ...
    def completion(
        self,
        job: str,
        iterations: float,
        metric: MetricSpec | None = None,
        reported_before: float | None = None,
    ) -> Completion: ...
    def points(
        self, job: str, metric: MetricSpec | None = None
    ) -> Sequence[tuple[float, float]]: ...
    def switch_gap(self, job: str, began: float, world: int) -> float | None: ...
    def job_logs(
        self, job: str, rank: int | None = None, after_ns: int = 0, tail: int | None = None
    ) -> tuple[Sequence[int], Sequence[tuple[Container, OutputLine]]]: ...
    def profile(
        self,
        spec: JobSpec,
        placement_for: Callable[[int], NodePlacement | None],
        *,
        counts: Sequence[int] | None = None,
        max_seconds: float = 60.0,
        min_points: int = 4,
        on_point: Callable[[int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ThroughputProfile: ...
    def profile_batches(
        self,
        spec: JobSpec,
        profile: ThroughputProfile,
        placement_for: Callable[[int], NodePlacement | None],
        max_seconds: float = 60.0,
        min_points: int = 4,
        poll_s: float = 0.5,
        on_point: Callable[[int, int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> tuple[dict[int, dict[int, float]], int | None]: ...
    def profile_by_scaling(
        self,
        spec: JobSpec,
        counts: Sequence[int],
        placement_for: Callable[[int, dict[str, list[str]] | None], dict[str, list[str]] | None],
        *,
        max_seconds: float = 60.0,
        min_points: int = 4,
        on_point: Callable[[int, float | None], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ThroughputProfile: ...
    def scaling_of(self, spec: JobSpec) -> str: ...
    def orphans(self) -> set[str]: ...
    def remove_profiles(self) -> int: ...


class Placer(Protocol):
    """Puts GPU counts on GPUs (buddy placement, section 4.3)."""

    def place(
        self,
        allocation: Mapping[str, int],
        current: Mapping[str, Placement],
        *,
        blocked: AbstractSet[tuple[int, int]] = ...,
    ) -> PlacementPlan:
        """``blocked``: (node index, GPU index) pairs no job may use (a drained node, a GPU
        a straggler left); a job on one is moved, ``PlacementError`` when the rest cannot
        hold the allocation."""
        ...
