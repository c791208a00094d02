"""Saxena et al.'s metrics (section IV-C) from a simulation's results: jobs completed over
time, scheduled-job scaling (SJS) efficiency, job drop ratio, average job completion time.

SJS efficiency = Opt_Sch_Time / Act_Sch_Time over the scheduled jobs: the single-GPU time
each would need at its best single-GPU rate (its work in samples / T(b_max, 1)) over the
GPU-seconds it actually held.
"""

from __future__ import annotations

from typing import Any

from flowcon.sim.engine import JobResult, SimResult


def single_gpu_seconds(r: JobResult) -> float | None:
    """The job's whole work on one GPU at its best single-GPU rate (None: unknown)."""
    job = r.job
    if job.batch_range is not None:
        base = job.batch_range.base_rate()
        return job.iterations * job.batch_range.submitted / base if base > 0 else None
    t1 = job.curve.at(1)
    return job.iterations / t1 if t1 > 0 else None


def completed_over_time(res: SimResult, step: float = 600.0) -> list[tuple[float, int]]:
    """(t, jobs finished by t) every ``step`` seconds up to the last completion."""
    fins = sorted(r.finish for r in res.results if r.finish is not None)
    if not fins:
        return []
    out: list[tuple[float, int]] = []
    t, i = 0.0, 0
    while True:
        while i < len(fins) and fins[i] <= t:
            i += 1
        out.append((t, i))
        if i == len(fins):
            return out
        t += step


def sjs_efficiency(res: SimResult) -> float | None:
    opt = act = 0.0
    for r in res.results:
        if r.finish is None or r.gpu_seconds <= 0:
            continue
        one = single_gpu_seconds(r)
        if one is None:
            continue
        opt += one
        act += r.gpu_seconds
    return opt / act if act > 0 else None


def drop_ratio(res: SimResult) -> float:
    n = len(res.results)
    return sum(1 for r in res.results if not r.admitted) / n if n else 0.0


def average_jct(res: SimResult) -> float | None:
    """Mean of finish - submission over the completed jobs, seconds."""
    jct = [r.finish - r.job.submit_time for r in res.results if r.finish is not None]
    return sum(jct) / len(jct) if jct else None


def saxena_metrics(res: SimResult, horizon: float | None = None) -> dict[str, Any]:
    """The four figures; ``completed`` counts jobs finished by ``horizon`` seconds (None:
    all), the paper's jobs-completed curve at its end."""
    done = [r for r in res.results if r.finish is not None]
    if horizon is not None:
        done = [r for r in done if r.finish is not None and r.finish <= horizon]
    sjs = sjs_efficiency(res)
    jct = average_jct(res)
    return {
        "jobs": len(res.results),
        "completed": len(done),
        "drop_ratio": round(drop_ratio(res), 4),
        "sjs_efficiency": None if sjs is None else round(sjs, 4),
        "avg_jct_min": None if jct is None else round(jct / 60.0, 2),
    }
