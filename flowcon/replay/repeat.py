"""Repeated comparisons, pure: the run order, the busy-host decision and the aggregation.

A compare runs policy ``none`` and one or more FlowCon variants (one per control mode)
``repeat`` times. The order alternates between repetitions (none, flowcon, then
flowcon, none, ...) so that a drift in the host's speed weighs on both sides alike.
Every change is computed within a repetition (the variant against that repetition's
``none`` run) and then summarised over repetitions by its median, min and max.

No I/O here: the CLI (flowcon.replay.compare) and benchmarks/bench_replay.py feed it
figures and print or write what it returns.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NONE = "none"
CONTROL_MODES = ("quota", "weights", "cpuset", "hybrid")


def variant_key(control: str | None) -> str:
    """``flowcon`` for the agent's default control, ``flowcon[MODE]`` for a chosen one."""
    return "flowcon" if control is None else f"flowcon[{control}]"


def variant_control(key: str) -> str | None:
    """The control mode of a variant key (None for ``flowcon`` and ``none``)."""
    if key.startswith("flowcon[") and key.endswith("]"):
        return key[len("flowcon[") : -1]
    return None


def variant_dir(key: str) -> str:
    """A folder-friendly name: ``flowcon[weights]`` -> ``flowcon-weights``."""
    control = variant_control(key)
    return key if control is None else f"flowcon-{control}"


def variants_for(controls: Sequence[str]) -> list[str]:
    """The FlowCon variants of a compare: ``flowcon`` alone, or one per control mode
    (in the given order, duplicates dropped)."""
    if not controls:
        return ["flowcon"]
    seen: list[str] = []
    for c in controls:
        if c not in seen:
            seen.append(c)
    return [variant_key(c) for c in seen]


def run_order(variants: Sequence[str], repeat: int) -> list[list[str]]:
    """Per repetition, the policies to run in order: ``none`` then the variants in odd
    repetitions, the reverse in even ones (none, flowcon, flowcon, none, none, ...)."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    forward = [NONE, *variants]
    return [list(forward) if r % 2 == 0 else forward[::-1] for r in range(repeat)]


# -- the host's load ---------------------------------------------------------


@dataclass(frozen=True)
class HostLoad:
    load1: float  # 1-minute load average
    busy: float  # fraction of all CPUs busy over the window (0..1)
    window: float  # seconds the busy fraction was measured over
    cpus: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "load1": round(self.load1, 3),
            "busy": round(self.busy, 4),
            "window_s": self.window,
            "cpus": self.cpus,
        }


@dataclass(frozen=True)
class BusyLimits:
    max_load_per_cpu: float = 0.5  # 1-minute load average / CPUs
    max_busy: float = 0.25  # CPU busy fraction over the window


def busy_reason(load: HostLoad, limits: BusyLimits) -> str | None:
    """Why the host is too busy for a fair comparison, or None when it is quiet."""
    reasons = []
    max_load = limits.max_load_per_cpu * max(1, load.cpus)
    if load.load1 > max_load:
        reasons.append(
            f"1-minute load average {load.load1:.2f} > {max_load:.2f} "
            f"({limits.max_load_per_cpu:g} x {load.cpus} CPUs)"
        )
    if load.busy > limits.max_busy:
        reasons.append(
            f"CPUs {100 * load.busy:.0f} % busy over {load.window:g} s "
            f"> {100 * limits.max_busy:g} %"
        )
    return "; ".join(reasons) or None


# -- per-run figures ---------------------------------------------------------


@dataclass(frozen=True)
class RunFigures:
    """What the aggregation needs of one run: per job JCT and CPU-seconds, makespan."""

    jct: Mapping[str, float | None]
    cpu_seconds: Mapping[str, float]
    makespan: float | None
    run_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def cpu_seconds_by_job(samples: Iterable[tuple[float, str, float]]) -> dict[str, float]:
    """Per job, the sum of cpu x interval over its timeline: ``(t, job, cpu)`` samples,
    each sample's rate times the time since that job's previous sample (the first
    sample of a job only starts its clock, as in recorder.mean_cpus_used)."""
    last: dict[str, float] = {}
    out: dict[str, float] = {}
    for t, job, cpu in sorted(samples, key=lambda s: s[0]):
        out.setdefault(job, 0.0)
        if job in last:
            out[job] += cpu * (t - last[job])
        last[job] = t
    return out


def change(before: float | None, after: float | None) -> float | None:
    """(after - before) / before as a fraction; negative = faster/cheaper."""
    if before is None or after is None or before <= 0:
        return None
    return (after - before) / before


@dataclass(frozen=True)
class Spread:
    median: float | None
    low: float | None
    high: float | None
    n: int

    @staticmethod
    def of(values: Iterable[float | None]) -> Spread:
        vals = [v for v in values if v is not None]
        if not vals:
            return Spread(None, None, None, 0)
        return Spread(statistics.median(vals), min(vals), max(vals), len(vals))

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}


def _med(values: Iterable[float | None]) -> float | None:
    return Spread.of(values).median


def _job_row(job: str, pairs: list[tuple[RunFigures, RunFigures]]) -> dict[str, Any]:
    jct_none = [n.jct.get(job) for n, _ in pairs]
    jct_var = [v.jct.get(job) for _, v in pairs]
    cpu_none = [n.cpu_seconds.get(job) for n, _ in pairs]
    cpu_var = [v.cpu_seconds.get(job) for _, v in pairs]
    jct_changes = [change(a, b) for a, b in zip(jct_none, jct_var, strict=True)]
    cpu_changes = [change(a, b) for a, b in zip(cpu_none, cpu_var, strict=True)]
    return {
        "job": job,
        "jct_none": _med(jct_none),
        "jct": _med(jct_var),
        "jct_change": Spread.of(jct_changes).to_dict(),
        "cpu_s_none": _med(cpu_none),
        "cpu_s": _med(cpu_var),
        "cpu_s_change": Spread.of(cpu_changes).to_dict(),
        "jct_changes": jct_changes,  # per repetition, in order
    }


def _best_worst(pairs: list[tuple[RunFigures, RunFigures]]) -> tuple[Spread, Spread]:
    """Per repetition the best (most negative) and worst job JCT change; then spread."""
    best, worst = [], []
    for none, var in pairs:
        changes = [c for j in none.jct if (c := change(none.jct[j], var.jct.get(j))) is not None]
        best.append(min(changes) if changes else None)
        worst.append(max(changes) if changes else None)
    return Spread.of(best), Spread.of(worst)


def aggregate(reps: Sequence[Mapping[str, RunFigures]], variants: Sequence[str]) -> dict[str, Any]:
    """Summary of repeated runs: ``reps[i][policy]`` are repetition i's figures.

    Per variant: per job the median JCT under none and under the variant, the JCT
    change per repetition summarised as median/min/max, the same for CPU-seconds;
    the makespan change likewise; ``best_job_change``/``worst_job_change``: the best
    and worst job's change computed per repetition, then the median (and min-max)
    over repetitions. Jobs are listed in the order of the first none run."""
    jobs: list[str] = []
    for rep in reps:
        for name in rep[NONE].jct:
            if name not in jobs:
                jobs.append(name)
    out: dict[str, Any] = {"repeats": len(reps), "variants": {}}
    for key in variants:
        pairs = [(rep[NONE], rep[key]) for rep in reps if NONE in rep and key in rep]
        best, worst = _best_worst(pairs)
        span_none = [n.makespan for n, _ in pairs]
        span_var = [v.makespan for _, v in pairs]
        cpu_tot_none = [sum(n.cpu_seconds.values()) for n, _ in pairs]
        cpu_tot_var = [sum(v.cpu_seconds.values()) for _, v in pairs]
        out["variants"][key] = {
            "control": variant_control(key),
            "repeats": len(pairs),
            "jobs": [_job_row(job, pairs) for job in jobs],
            "makespan_none": _med(span_none),
            "makespan": _med(span_var),
            "makespan_change": Spread.of(
                change(a, b) for a, b in zip(span_none, span_var, strict=True)
            ).to_dict(),
            "cpu_s_total_none": _med(cpu_tot_none),
            "cpu_s_total": _med(cpu_tot_var),
            "cpu_s_total_change": Spread.of(
                change(a, b) for a, b in zip(cpu_tot_none, cpu_tot_var, strict=True)
            ).to_dict(),
            "best_job_change": best.to_dict(),
            "worst_job_change": worst.to_dict(),
        }
    return out


def headline(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The benchmark's figures per variant: medians over repetitions (fractions)."""
    out: dict[str, dict[str, Any]] = {}
    for key, v in summary["variants"].items():
        out[key] = {
            "best_job_change": v["best_job_change"]["median"],
            "worst_job_change": v["worst_job_change"]["median"],
            "makespan_change": v["makespan_change"]["median"],
            "repeats": v["repeats"],
        }
    return out
