"""The agent's Prometheus metrics (prometheus_client), named by Prometheus' conventions.

Per container (labels ``id``, ``name``, ``job``, ``list``): ``id`` is cAdvisor's
``/docker/<full container id>`` and ``name`` the container's name, so these series join
with cAdvisor's ``container_*`` series on ``id`` or ``name``; ``job`` is the container's
``flowcon.job`` label (Prometheus stores it as ``exported_job`` unless the scrape sets
``honor_labels``), ``list`` its Algorithm 1 list (NL, WL, CL; ``none`` while unmanaged).
The full list with types is in docs/deploy-agent.md ("Metrics").

Per container and GPU (labels ``id``, ``name``, ``job``, ``list``, ``gpu``, ``UUID``):
``gpu`` (the NVML index) and ``UUID`` are spelt as NVIDIA's DCGM exporter spells them, so
``flowcon_container_gpu_*`` joins with its ``DCGM_FI_DEV_*`` series of the same GPU
(``... * on(UUID) group_left DCGM_FI_DEV_GPU_UTIL``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from flowcon.agent.counters import AgentCounters
from flowcon.web.build_info import register_build_info

CONTAINER_LABELS = ["id", "name", "job", "list"]
GPU_LABELS = [*CONTAINER_LABELS, "gpu", "UUID"]  # DCGM exporter's names for a GPU
LISTS = ("NL", "WL", "CL", "none")


def cadvisor_id(container_id: str) -> str:
    """cAdvisor's ``id`` label of a Docker container (cgroupfs driver)."""
    return f"/docker/{container_id}"


def container_labels(view: dict[str, Any]) -> tuple[str, str, str, str]:
    return (
        cadvisor_id(str(view["container_id"])),
        str(view.get("name") or ""),
        str(view.get("job") or ""),
        str(view.get("list") or "none"),
    )


class _CountersCollector(Collector):
    """Engine errors and CPU updates, read from the agent's counters at scrape time."""

    def __init__(self, counters: AgentCounters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[CounterMetricFamily]:
        errors, updates = self.counters.snapshot()
        fam = CounterMetricFamily(
            "flowcon_agent_engine_errors",
            "Engine calls that failed, by operation (list, measure, update, restore)",
            labels=["operation"],
        )
        for op, n in sorted(errors.items()):
            fam.add_metric([op], n)
        yield fam
        yield CounterMetricFamily(
            "flowcon_agent_cpu_updates",
            "CPU limit changes applied to containers with docker update",
            value=updates,
        )
        yield CounterMetricFamily(
            "flowcon_agent_foreign_changes",
            "Managed containers whose CPU settings someone else changed (then left alone)",
            value=self.counters.foreign_total(),
        )


class Exporter:
    def __init__(self, counters: AgentCounters | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        labels = CONTAINER_LABELS
        self.limit = Gauge(
            "flowcon_container_cpu_limit_cpus",
            "CPU limit FlowCon applied, in CPUs (0: the container's original settings)",
            labels,
            registry=r,
        )
        self.shares = Gauge(
            "flowcon_container_cpu_shares",
            "CPU weight FlowCon applied (control weights, cpuset, hybrid; 0: none)",
            labels,
            registry=r,
        )
        self.cpuset_cores = Gauge(
            "flowcon_container_cpuset_cores",
            "Cores FlowCon pinned the container to (control cpuset; 0: not pinned)",
            labels,
            registry=r,
        )
        self.share = Gauge(
            "flowcon_container_limit_ratio",
            "Algorithm 1 limit L, a fraction of the host's CPUs",
            labels,
            registry=r,
        )
        self.g = Gauge(
            "flowcon_container_growth_efficiency",
            "Normalized growth efficiency G (progress per second per CPU share, over the "
            "job's early G)",
            labels,
            registry=r,
        )
        self.cpu = Gauge(
            "flowcon_container_cpu_usage_ratio",
            "CPU used over the last interval, a fraction of the host's CPUs",
            labels,
            registry=r,
        )
        self.gpu_share = Gauge(
            "flowcon_container_gpu_usage_ratio",
            "GPU used over the last interval, a fraction of the host's GPUs (NVML)",
            labels,
            registry=r,
        )
        self.gpu_util = Gauge(
            "flowcon_container_gpu_utilization_ratio",
            "The container's processes' utilisation of one GPU, a fraction (NVML)",
            GPU_LABELS,
            registry=r,
        )
        self.gpu_mem = Gauge(
            "flowcon_container_gpu_memory_used_bytes",
            "Device memory the container's processes use on one GPU (NVML)",
            GPU_LABELS,
            registry=r,
        )
        self.gpu_procs = Gauge(
            "flowcon_container_gpu_processes",
            "The container's compute processes on one GPU (NVML)",
            GPU_LABELS,
            registry=r,
        )
        self.rounds = Counter("flowcon_agent_rounds", "Algorithm 1 rounds run", registry=r)
        self.itval = Gauge(
            "flowcon_agent_itval_seconds", "Current Algorithm 1 interval", registry=r
        )
        self.last_round = Gauge(
            "flowcon_agent_last_round_timestamp_seconds",
            "Unix time the last round completed",
            registry=r,
        )
        self.containers = Gauge(
            "flowcon_agent_containers",
            "Containers the agent follows, by list (none: watched, not managed)",
            ["list"],
            registry=r,
        )
        self.label_errors = Counter(
            "flowcon_agent_label_errors",
            "Containers skipped for a bad flowcon.* label (once per container and error)",
            ["id", "name"],  # id="/docker/<full id>", as cAdvisor's series
            registry=r,
        )
        self.counters = counters or AgentCounters()
        r.register(_CountersCollector(self.counters))
        register_build_info(r, "agent")
        for name in LISTS:
            self.containers.labels(name).set(0)
        self._known: set[tuple[str, str, str, str]] = set()
        self._known_gpu: set[tuple[str, ...]] = set()

    def label_error(self, cid: str, name: str, error: str) -> None:
        """A container's labels could not be used (the pool reports each error once)."""
        self.label_errors.labels(f"/docker/{cid}", name).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def update(self, views: list[dict[str, Any]], itval: float, now: float | None = None) -> None:
        self.rounds.inc()
        self.itval.set(itval)
        self.last_round.set(time.time() if now is None else now)
        seen = set()
        gpu_seen: set[tuple[str, ...]] = set()
        counts = dict.fromkeys(LISTS, 0)
        for v in views:
            key = container_labels(v)
            seen.add(key)
            counts[key[3]] = counts.get(key[3], 0) + 1
            self.limit.labels(*key).set(v.get("cpus") or 0.0)
            self.shares.labels(*key).set(v.get("shares") or 0)
            self.cpuset_cores.labels(*key).set(_cores(v.get("cpuset")))
            if v.get("limit") is not None:
                self.share.labels(*key).set(v["limit"])
            if v.get("g") is not None:
                self.g.labels(*key).set(v["g"])
            if v.get("cpu_share") is not None:
                self.cpu.labels(*key).set(v["cpu_share"])
            if v.get("gpu_share") is not None:
                self.gpu_share.labels(*key).set(v["gpu_share"])
            self._gpus(key, v, gpu_seen)
        for name, n in counts.items():
            self.containers.labels(name).set(n)
        # a container that left, or moved to another list: its old series go away
        for key in self._known - seen:
            for gauge in (
                self.limit,
                self.shares,
                self.cpuset_cores,
                self.share,
                self.g,
                self.cpu,
                self.gpu_share,
            ):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        for gkey in self._known_gpu - gpu_seen:
            for gauge in (self.gpu_util, self.gpu_mem, self.gpu_procs):
                with contextlib.suppress(KeyError):
                    gauge.remove(*gkey)
        self._known = seen
        self._known_gpu = gpu_seen

    def _gpus(self, key: tuple[str, ...], view: dict[str, Any], seen: set[tuple[str, ...]]) -> None:
        """The per-GPU series of one container (its ``gpus`` and ``gpu_processes``)."""
        procs: dict[int, int] = {}
        for p in view.get("gpu_processes") or []:
            procs[int(p["gpu"])] = procs.get(int(p["gpu"]), 0) + 1
        for g in view.get("gpus") or []:
            gkey = (*key, str(g["gpu"]), str(g["uuid"]))
            seen.add(gkey)
            if g.get("util") is not None:
                self.gpu_util.labels(*gkey).set(g["util"])
            else:
                with contextlib.suppress(KeyError):
                    self.gpu_util.remove(*gkey)
            self.gpu_mem.labels(*gkey).set(g.get("mem_bytes") or 0)
            self.gpu_procs.labels(*gkey).set(procs.get(int(g["gpu"]), 0))


def _cores(cpuset: Any) -> int:
    """How many cores a cpuset string ("0-2,5") names; 0 for none."""
    if not isinstance(cpuset, str) or not cpuset:
        return 0
    n = 0
    for part in cpuset.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n
