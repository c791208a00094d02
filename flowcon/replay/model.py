"""What a replay records: per-job times, the CPU timeline, and the run's summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from flowcon.replay.growth import GrowthPoint

POLICIES = ("none", "flowcon")


@dataclass
class JobRecord:
    name: str
    image: str
    scheduled: float  # seconds after the replay start, from the scenario
    submitted: float | None = None  # when the container was created and started
    finished: float | None = None  # the engine's FinishedAt, same time base
    exit_code: int | None = None
    container_id: str | None = None
    steps: int | None = None  # last reported step
    final_loss: float | None = None
    error: str | None = None

    @property
    def jct(self) -> float | None:
        """Job completion time: finish - submit (the paper's definition)."""
        if self.submitted is None or self.finished is None:
            return None
        return self.finished - self.submitted

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["jct"] = self.jct
        return d


@dataclass(frozen=True)
class Sample:
    t: float  # seconds after the replay start (end of the measured interval)
    job: str
    cpu: float  # CPUs used on average over the interval (1.0 = one core busy)
    limit_cpus: float | None  # CFS limit at the sample time; None = unlimited
    shares: int | None
    cpuset: str | None = None  # pinned CPUs ("0", "1-3") at the sample time; None = all


@dataclass
class RunResult:
    scenario: str
    policy: str
    run_id: str
    started_at: float  # epoch seconds of the replay start
    host_cpus: int
    alpha: float
    itval: float
    jobs: list[JobRecord] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    agent: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    foreign_managed_max: int = 0  # other FlowCon-enabled containers seen at once
    # G per job over time from the agent's decision log (under none: a dry-run agent)
    growth: list[GrowthPoint] = field(default_factory=list)
    threads: str = "quota"  # the scenario's thread mode (quota | pinned)
    adapt_threads: bool = True  # False: FLOWCON_ADAPT_THREADS=0 was set in every job
    control: str | None = None  # the agent's control mode when chosen (--control)
    # Host load before/after the run ({"before": {...}, "after": {...}, "forced": bool})
    host_load: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan(self) -> float | None:
        """First submission to last finish; None unless every job finished."""
        subs = [j.submitted for j in self.jobs]
        fins = [j.finished for j in self.jobs]
        if not self.jobs or any(v is None for v in subs + fins):
            return None
        return max(f for f in fins if f is not None) - min(s for s in subs if s is not None)

    def limits_changed(self) -> bool:
        """True if any container ever ran with a CPU limit, non-default shares or a cpuset
        narrower than the host (the three levers of the agent's control modes)."""
        return any(
            s.limit_cpus is not None
            or (s.shares is not None and s.shares not in (1024, 100))
            or s.cpuset is not None
            for s in self.samples
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "host_cpus": self.host_cpus,
            "alpha": self.alpha,
            "itval": self.itval,
            "makespan": self.makespan,
            "limits_changed": self.limits_changed(),
            "interrupted": self.interrupted,
            "foreign_managed_max": self.foreign_managed_max,
            "threads": self.threads,
            "adapt_threads": self.adapt_threads,
            "control": self.control,
            "host_load": self.host_load,
            "errors": self.errors,
            "agent": self.agent,
            "jobs": [j.to_dict() for j in self.jobs],
            "samples": len(self.samples),
            "growth_points": len(self.growth),
        }
