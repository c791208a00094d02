"""Summary metrics, the per-job CSV and PNG plots of a simulation run."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from flowcon.sim.engine import SimResult


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summarize(res: SimResult) -> dict[str, Any]:
    rs = res.results
    slo = [r for r in rs if r.job.deadline is not None]
    be = [r for r in rs if r.job.deadline is None]
    met = sum(1 for r in slo if r.met_deadline)
    finishes = [r.finish for r in rs if r.finish is not None]
    first = min((r.job.submit_time for r in rs), default=0.0)
    # time-weighted cluster efficiency (Eq 8) and GPU utilisation over the busy span
    ce_area = util_area = span = 0.0
    tl = res.timeline
    end = max(finishes, default=tl[-1][0] if tl else 0.0)
    for i, (t, busy, ce, _) in enumerate(tl):
        t2 = tl[i + 1][0] if i + 1 < len(tl) else end
        d = max(0.0, t2 - t)
        ce_area += ce * d
        util_area += busy / res.topology.total_gpus * d
        span += d
    be_jct = [r.finish - r.job.submit_time for r in be if r.finish is not None]
    lat_ms = [x * 1000 for x in res.latencies]
    lost = [r for r in rs if r.guarantee_lost is not None]
    return {
        "policy": res.policy,
        "cluster": str(res.topology),
        "gpus": res.topology.total_gpus,
        "slot": res.slot,
        "jobs": len(rs),
        "slo_jobs": len(slo),
        "admitted": sum(1 for r in rs if r.admitted),
        "dropped": sum(1 for r in rs if not r.admitted),
        "finished": len(finishes),
        "deadlines_met": met,
        "deadline_satisfactory_ratio": round(met / len(slo), 4) if slo else None,
        "best_effort_jobs": len(be),
        "best_effort_avg_jct_s": round(sum(be_jct) / len(be_jct), 1) if be_jct else None,
        "makespan_s": round(end - first, 1) if finishes else 0.0,
        "avg_cluster_efficiency": round(ce_area / span, 4) if span else 0.0,
        "avg_gpu_utilization": round(util_area / span, 4) if span else 0.0,
        "decisions": res.decisions,
        "decision_latency_ms": {
            "mean": round(sum(lat_ms) / len(lat_ms), 3) if lat_ms else 0.0,
            "p50": round(_pct(lat_ms, 0.5), 3),
            "p99": round(_pct(lat_ms, 0.99), 3),
            "max": round(max(lat_ms, default=0.0), 3),
        },
        "rescales": sum(r.rescales for r in rs),
        "migrations": sum(r.migrations for r in rs),
        # admitted jobs whose guarantee admission gave up (SlotLedger.try_admit), and how
        # many of them still met their deadline
        "guarantees_lost": len(lost),
        "guarantees_lost_met": sum(1 for r in lost if r.met_deadline),
        "sim_seconds": round(res.wall_seconds, 3),
    }


def write_jobs_csv(res: SimResult, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "job_id", "model", "batch_size", "requested_gpus", "iterations",
                "submit_time", "deadline", "admitted", "reason", "start", "finish",
                "met_deadline", "jct", "gpu_seconds", "rescales", "migrations",
                "guarantee_lost",
            ]
        )  # fmt: skip
        for r in res.results:
            j = r.job
            w.writerow(
                [
                    j.job_id, j.model, j.batch_size, j.requested_gpus, j.iterations,
                    j.submit_time, "" if j.deadline is None else j.deadline,
                    int(r.admitted), r.reason or "",
                    "" if r.start is None else r.start,
                    "" if r.finish is None else round(r.finish, 3),
                    int(r.met_deadline),
                    "" if r.finish is None else round(r.finish - j.submit_time, 3),
                    round(r.gpu_seconds, 1), r.rescales, r.migrations,
                    "" if r.guarantee_lost is None else r.guarantee_lost,
                ]
            )  # fmt: skip


def write_plots(res: SimResult, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    if not res.timeline:
        return paths
    t0 = res.timeline[0][0]
    hours = [(t - t0) / 3600 for t, *_ in res.timeline]
    fig, ax = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ax[0].step(hours, [x[1] for x in res.timeline], where="post")
    ax[0].set_ylabel("GPUs allocated")
    ax[0].axhline(res.topology.total_gpus, color="grey", lw=0.5)
    ax[1].step(hours, [x[2] for x in res.timeline], where="post", color="tab:green")
    ax[1].set_ylabel("cluster efficiency (Eq 8)")
    ax[1].set_xlabel("hours since first decision")
    fig.suptitle(f"{res.policy} on {res.topology}")
    fig.tight_layout()
    p = out / "cluster.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)

    subs = sorted((r.job.submit_time - t0) / 3600 for r in res.results)
    adm = sorted((r.job.submit_time - t0) / 3600 for r in res.results if r.admitted)
    met = sorted((r.finish - t0) / 3600 for r in res.results if r.met_deadline and r.finish)
    fig, a = plt.subplots(figsize=(9, 4))
    for xs, label in ((subs, "submitted"), (adm, "admitted"), (met, "met deadline")):
        a.step(xs, range(1, len(xs) + 1), where="post", label=label)
    a.set_xlabel("hours since first decision")
    a.set_ylabel("jobs")
    a.legend()
    fig.tight_layout()
    p = out / "jobs.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    paths.append(p)
    return paths
