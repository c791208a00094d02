"""Write replay results as CSV and JSON (and read them back for re-plotting)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from flowcon.replay.growth import read_growth, write_growth
from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.repeat import RunFigures, cpu_seconds_by_job

JOB_FIELDS = (
    "name",
    "image",
    "scheduled",
    "submitted",
    "finished",
    "jct",
    "exit_code",
    "steps",
    "final_loss",
    "error",
)
COMPARE_FIELDS = (
    "jct_none",
    "jct_flowcon",
    "change_pct",
    "cpu_s_none",
    "cpu_s_flowcon",
    "cpu_s_change_pct",
)
SAMPLE_FIELDS = ("t", "job", "cpu", "cpu_pct", "limit_cpus", "shares", "cpuset")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return value


def write_run(result: RunResult, out_dir: Path) -> dict[str, Path]:
    """jobs.csv, timeline.csv, growth.csv and result.json under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "jobs": out_dir / "jobs.csv",
        "timeline": out_dir / "timeline.csv",
        "json": out_dir / "result.json",
        "growth": out_dir / "growth.csv",
    }
    with paths["jobs"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(JOB_FIELDS)
        for j in result.jobs:
            d = j.to_dict()
            w.writerow([_cell(d[k]) for k in JOB_FIELDS])
    with paths["timeline"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SAMPLE_FIELDS)
        for s in result.samples:
            pct = 100.0 * s.cpu / max(1, result.host_cpus)
            w.writerow(
                [
                    _cell(s.t),
                    s.job,
                    _cell(s.cpu),
                    _cell(pct),
                    _cell(s.limit_cpus),
                    _cell(s.shares),
                    _cell(s.cpuset),
                ]
            )
    write_growth(result.growth, paths["growth"])
    paths["json"].write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return paths


def read_run(out_dir: Path) -> RunResult:
    """A RunResult from a directory written by write_run (for re-plotting)."""
    data = json.loads((out_dir / "result.json").read_text())
    result = RunResult(
        scenario=data["scenario"],
        policy=data["policy"],
        run_id=data["run_id"],
        started_at=data["started_at"],
        host_cpus=data["host_cpus"],
        alpha=data["alpha"],
        itval=data["itval"],
        agent=data.get("agent") or {},
        interrupted=data.get("interrupted", False),
        foreign_managed_max=data.get("foreign_managed_max", 0),
        errors=data.get("errors") or [],
        threads=data.get("threads", "quota"),
        adapt_threads=data.get("adapt_threads", True),
        control=data.get("control"),
        host_load=data.get("host_load") or {},
    )
    fields = set(JobRecord.__dataclass_fields__)
    result.jobs = [JobRecord(**{k: v for k, v in j.items() if k in fields}) for j in data["jobs"]]

    def opt(v: str, kind: type) -> Any:
        return None if v == "" else kind(v)

    with (out_dir / "timeline.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            result.samples.append(
                Sample(
                    float(row["t"]),
                    row["job"],
                    float(row["cpu"]),
                    opt(row["limit_cpus"], float),
                    opt(row["shares"], int),
                    opt(row.get("cpuset") or "", str),  # absent in files written before it
                )
            )
    result.growth = read_growth(out_dir / "growth.csv")
    return result


def change_pct(before: float | None, after: float | None) -> float | None:
    """(after - before) / before in percent; negative = faster."""
    if before is None or after is None or before <= 0:
        return None
    return 100.0 * (after - before) / before


def mean_cpus_used(result: RunResult) -> float | None:
    """CPUs the replay's containers used on average over the makespan: each sample's
    rate times the interval since that container's previous sample, summed, divided by
    the makespan. Below the host's CPUs while jobs wait = capacity left idle."""
    span = result.makespan
    if not span:
        return None
    last: dict[str, float] = {}
    cpu_seconds = 0.0
    for s in sorted(result.samples, key=lambda s: s.t):
        if s.job in last:
            cpu_seconds += s.cpu * (s.t - last[s.job])
        last[s.job] = s.t
    return cpu_seconds / span


def job_cpu_seconds(result: RunResult) -> dict[str, float]:
    """Per job, CPU-seconds used: the sum of the timeline's cpu x interval."""
    return cpu_seconds_by_job((s.t, s.job, s.cpu) for s in result.samples)


def figures(result: RunResult, run_dir: str = "") -> RunFigures:
    """The figures repeat.aggregate needs of one run."""
    return RunFigures(
        jct={j.name: j.jct for j in result.jobs},
        cpu_seconds=job_cpu_seconds(result),
        makespan=result.makespan,
        run_dir=run_dir,
    )


def comparison(none: RunResult, flowcon: RunResult) -> dict[str, Any]:
    """Per-job JCT under both policies and the makespans, with changes in percent."""
    by_name = {j.name: j for j in flowcon.jobs}
    cpu_none, cpu_flow = job_cpu_seconds(none), job_cpu_seconds(flowcon)
    rows = []
    for j in none.jobs:
        other = by_name.get(j.name)
        jct_f = other.jct if other else None
        rows.append(
            {
                "job": j.name,
                "jct_none": j.jct,
                "jct_flowcon": jct_f,
                "change_pct": change_pct(j.jct, jct_f),
                "ok": j.ok and bool(other and other.ok),
                "cpu_s_none": cpu_none.get(j.name),
                "cpu_s_flowcon": cpu_flow.get(j.name),
                "cpu_s_change_pct": change_pct(cpu_none.get(j.name), cpu_flow.get(j.name)),
            }
        )
    return {
        "scenario": none.scenario,
        "alpha": flowcon.alpha,
        "itval": flowcon.itval,
        "jobs": rows,
        "makespan_none": none.makespan,
        "makespan_flowcon": flowcon.makespan,
        "makespan_change_pct": change_pct(none.makespan, flowcon.makespan),
        "flowcon_limits_changed": flowcon.limits_changed(),
        "none_limits_changed": none.limits_changed(),
        "run_ids": {"none": none.run_id, "flowcon": flowcon.run_id},
        "foreign_managed_max": max(none.foreign_managed_max, flowcon.foreign_managed_max),
        "mean_cpus_none": mean_cpus_used(none),
        "mean_cpus_flowcon": mean_cpus_used(flowcon),
    }


def write_comparison(cmp: dict[str, Any], out_dir: Path, stem: str = "compare") -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / f"{stem}.csv", "json": out_dir / f"{stem}.json"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("job", *COMPARE_FIELDS))
        for r in cmp["jobs"]:
            w.writerow([r["job"], *(_cell(r.get(k)) for k in COMPARE_FIELDS)])
        w.writerow(
            [
                "(makespan)",
                _cell(cmp["makespan_none"]),
                _cell(cmp["makespan_flowcon"]),
                _cell(cmp["makespan_change_pct"]),
            ]
        )
    paths["json"].write_text(json.dumps(cmp, indent=2) + "\n")
    return paths
