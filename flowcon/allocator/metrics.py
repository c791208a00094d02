"""Prometheus metrics of the allocator: counters kept live, job gauges read from the store
at scrape time (so they can never drift from the state the API reports).

Names follow Prometheus' conventions: counters end in ``_total``, gauges never do;
fractions end in ``_ratio``, times in ``_seconds`` (instants in ``_timestamp_seconds``).
Per-job series carry the label ``job`` (stored by Prometheus as ``exported_job`` unless the
scrape sets ``honor_labels``). The list with types is in docs/allocator.md ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from flowcon.allocator.store import ALL_STATES, JobRecord, Store
from flowcon.web.build_info import register_build_info


class _StoreCollector(Collector):
    def __init__(self, store: Store, total_gpus: int) -> None:
        self.store = store
        self.total_gpus = total_gpus

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = self.store.list_jobs(copies=False)  # read only
        by_state = GaugeMetricFamily("flowcon_allocator_jobs", "Jobs by state", labels=["state"])
        for state in ALL_STATES:
            by_state.add_metric([state], sum(1 for j in jobs if j.state == state))
        yield by_state
        yield GaugeMetricFamily(
            "flowcon_allocator_gpus", "GPUs in the inventory", value=self.total_gpus
        )
        yield GaugeMetricFamily(
            "flowcon_allocator_gpus_allocated",
            "GPUs allocated to running jobs",
            value=sum(j.gpus for j in jobs if j.active),
        )
        gpus = GaugeMetricFamily("flowcon_allocator_job_gpus", "GPUs of a job", labels=["job"])
        prog = GaugeMetricFamily(
            "flowcon_allocator_job_progress_ratio", "Done / total iterations", labels=["job"]
        )
        speed = GaugeMetricFamily(
            "flowcon_allocator_job_measured_iterations_per_second",
            "EWMA of the measured speed at the job's current GPU count",
            labels=["job"],
        )
        for j in jobs:
            if not j.active:
                continue
            gpus.add_metric([j.name], j.gpus)
            prog.add_metric([j.name], j.progress)
            if j.gpus in j.measured:
                speed.add_metric([j.name], j.measured[j.gpus])
        yield gpus
        yield prog
        yield speed
        yield from _job_times(jobs)
        done = [j for j in jobs if j.deadline_met is not None]
        met = GaugeMetricFamily(
            "flowcon_allocator_deadline_satisfactory_ratio",
            "Jobs finished by their deadline / jobs with a deadline that were submitted",
            value=(
                sum(1 for j in done if j.deadline_met)
                / max(1, sum(1 for j in jobs if j.deadline is not None))
            ),
        )
        yield met


def _job_times(jobs: list[JobRecord]) -> Iterator[GaugeMetricFamily]:
    """Deadline and predicted finish of each active job, as Unix times."""
    deadline = GaugeMetricFamily(
        "flowcon_allocator_job_deadline_timestamp_seconds",
        "Deadline of an active job (Unix time; jobs without one have no series)",
        labels=["job"],
    )
    finish = GaugeMetricFamily(
        "flowcon_allocator_job_predicted_finish_timestamp_seconds",
        "Predicted finish of an active job at its planned GPUs (Unix time)",
        labels=["job"],
    )
    for j in jobs:
        if not j.active:
            continue
        if j.deadline is not None:
            deadline.add_metric([j.name], j.deadline)
        if j.predicted_finish is not None:
            finish.add_metric([j.name], j.predicted_finish)
    yield deadline
    yield finish


class AllocatorMetrics:
    def __init__(self, store: Store, total_gpus: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StoreCollector(store, total_gpus))
        self._admissions = Counter(
            "flowcon_allocator_admissions",
            "Admission decisions",
            ["decision"],
            registry=self.registry,
        )
        self._measurements = Counter(
            "flowcon_allocator_measurements",
            "Agent measurements by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self._round = Histogram(
            "flowcon_allocator_round_seconds",
            "Wall time of one planning round (plan + executor)",
            registry=self.registry,
        )
        self._round_errors = Counter(
            "flowcon_allocator_round_errors",
            "Planning-loop iterations that failed (executor or engine errors included)",
            registry=self.registry,
        )
        self._refused = Counter(
            "flowcon_allocator_refused_calls",
            "API calls refused, by reason (unauthenticated, forbidden, not_owner, quota,"
            " invalid, not_found, conflict, body, method)",
            ["reason"],
            registry=self.registry,
        )
        self._workers_left = Counter(
            "flowcon_allocator_workers_left",
            "Stop-free workers that left their job on their own (the job runs on without them;"
            " the next plan re-places their share), by reason",
            ["reason"],
            registry=self.registry,
        )
        register_build_info(self.registry, "allocator")

    def admission(self, admitted: bool) -> None:
        self._admissions.labels("admitted" if admitted else "dropped").inc()

    def measurement(self, outcome: str) -> None:
        self._measurements.labels(outcome).inc()

    def refused(self, reason: str) -> None:
        """An API call was refused (``flowcon.allocator.audit.refusal_reason``)."""
        self._refused.labels(reason).inc()

    def worker_left(self, reason: str) -> None:
        """A ``worker_left`` event was stored (``reason``: straggler, signal, withdrawn,
        unknown; flowcon.executor.stopfree_plan.left_reason)."""
        self._workers_left.labels(reason or "unknown").inc()

    def observe_round(self, seconds: float) -> None:
        self._round.observe(seconds)

    def round_error(self) -> None:
        self._round_errors.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
