"""An executor without containers, for measuring the allocator at a cluster's size.

``FakeExecutor`` answers the daemon's ``flowcon.allocator.ports.Executor`` calls: a launch,
a rescale, a suspend and a remove are acknowledged after ``delay`` seconds (the time a real
backend would take to ask the engine), and the job then shows one worker container per
node of its placement, ``running``. Nothing ever exits on its own: with
``Planner.complete_on_progress`` the planner completes a job on its estimated progress and
the daemon's next round removes its containers, which is what ``benchmarks/bench_scale.py``
measures. No metric lines are produced, so no restart cost is charged (the simulator it is
compared with charges none either).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from flowcon.allocator.ports import NodePlacement
from flowcon.allocator.target import ExecutorTarget
from flowcon.contract import SCALING_RESTART
from flowcon.core.completion import Completion
from flowcon.engine.gpus import Inventory, declared_nodes
from flowcon.jobspec.keys import MetricSpec
from flowcon.jobspec.spec import JobSpec, ThroughputProfile


@dataclass(frozen=True)
class FakeContainer:
    id: str
    name: str
    node: str
    node_rank: int
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeJob:
    workers: tuple[FakeContainer, ...]
    placement: dict[str, list[str]]  # node -> GPU UUIDs
    gpus: int
    scaling: str = SCALING_RESTART
    status: str = "running"


@dataclass(frozen=True)
class FakeRescaled:
    old_gpus: int
    new_gpus: int
    stop_seconds: float
    start_seconds: float
    mode: str = SCALING_RESTART
    joined: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    fallback: str | None = None
    global_batch: int | None = None

    @property
    def total_seconds(self) -> float:
        return self.stop_seconds + self.start_seconds


@dataclass
class FakeBackend:
    """What ``ExecutorTarget`` reads of a backend (its ``kind``)."""

    kind: str = "fake"
    calls: dict[str, int] = field(default_factory=dict)


def declared_inventory(nodes: int, gpus_per_node: int) -> Inventory:
    """``nodes`` declared nodes ``node0``.. with ``gpus_per_node`` GPUs each."""
    section = {"nodes": [{"name": f"node{i}", "gpus": gpus_per_node} for i in range(nodes)]}
    return Inventory(tuple(declared_nodes(section)), "declared")


class FakeExecutor:
    """Containers as in-memory records; every action takes ``delay`` seconds."""

    def __init__(
        self,
        inventory: Inventory,
        delay: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inventory = inventory
        self.delay = delay
        self.sleep = sleep
        self.backend = FakeBackend()
        self._jobs: dict[str, FakeJob] = {}
        self._lock = threading.Lock()

    def _ack(self, what: str) -> float:
        t0 = time.perf_counter()
        if self.delay > 0:
            self.sleep(self.delay)
        calls = self.backend.calls
        calls[what] = calls.get(what, 0) + 1
        return time.perf_counter() - t0

    def _run(self, name: str, placement: NodePlacement) -> FakeJob:
        by_node = {n: list(g) for n, g in placement.items()}
        uuids = {n: self.inventory.node(n).uuids([int(g) for g in gs]) for n, gs in by_node.items()}
        workers = tuple(
            FakeContainer(f"{name}--{node}", f"flowcon-{name}--{node}", node, rank)
            for rank, node in enumerate(by_node)
        )
        job = FakeJob(workers, uuids, sum(len(g) for g in by_node.values()))
        with self._lock:
            self._jobs[name] = job
        return job

    # -- what the daemon calls --------------------------------------------------------

    def jobs(self) -> Mapping[str, FakeJob]:
        with self._lock:
            return dict(self._jobs)

    def job(self, name: str) -> FakeJob | None:
        with self._lock:
            return self._jobs.get(name)

    def launch(self, spec: JobSpec, placement: NodePlacement) -> object:
        self._ack("launch")
        return self._run(spec.name, placement)

    def rescale(
        self, spec: JobSpec, placement: NodePlacement, global_batch: int | None = None
    ) -> FakeRescaled:
        old = self.job(spec.name)
        stop = self._ack("stop")
        start = self._ack("start")
        new = self._run(spec.name, placement)
        return FakeRescaled(
            old.gpus if old else 0, new.gpus, stop, start, global_batch=global_batch
        )

    def suspend(self, job: str) -> float:
        took = self._ack("suspend")
        with self._lock:
            self._jobs.pop(job, None)
        return took

    def remove(self, job: str, *, owner: str | None = None) -> None:
        self._ack("remove")
        with self._lock:
            self._jobs.pop(job, None)

    def reconcile(
        self,
        known: Iterable[str] | None = None,
        confirm: Callable[[str], Completion] | None = None,
    ) -> Sequence[object]:
        return ()  # nothing dies or exits on its own

    def completion(
        self,
        job: str,
        iterations: float,
        metric: MetricSpec | None = None,
        reported_before: float | None = None,
    ) -> Completion:
        return Completion(False, "a fake job never exits on its own")

    def points(self, job: str, metric: MetricSpec | None = None) -> Sequence[tuple[float, float]]:
        return ()  # no metric lines

    def switch_gap(self, job: str, began: float, world: int) -> float | None:
        return None

    def job_logs(
        self, job: str, rank: int | None = None, after_ns: int = 0, tail: int | None = None
    ) -> tuple[Sequence[int], Sequence[tuple[FakeContainer, object]]]:
        return (), ()

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
    ) -> ThroughputProfile:
        raise RuntimeError("the fake executor cannot pre-run a job: give a profile")

    def orphans(self) -> set[str]:
        return set()

    def remove_profiles(self) -> int:
        return 0


def fake_target(
    inventory: Inventory, delay: float = 0.0, running: Mapping[str, NodePlacement] | None = None
) -> ExecutorTarget:
    """The daemon's executor target over a ``FakeExecutor``; ``running``: jobs whose
    containers already run (what a restarted daemon adopts), by executor placement."""
    executor = FakeExecutor(inventory, delay)
    for name, placement in (running or {}).items():
        executor._run(name, placement)
    return ExecutorTarget(executor, inventory)  # type: ignore[arg-type]
