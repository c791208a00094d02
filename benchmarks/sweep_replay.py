"""The paper's alpha x itval study on the local engine (ICPP'19 Table 2, Figures 3-6).

Runs a scenario (default ``fixed``) under FlowCon for every alpha in {1, 3, 5, 10, 15} %
and itval in {10, 20, 30, 60} s, and under policy none as the baseline, then writes
sweep.csv (per point: best job's and worst job's JCT change, makespan change, against
the median of the none runs) and two heatmaps (best-job.png, makespan.png).

    python3 benchmarks/sweep_replay.py --dry-list                    # plan and wall time
    python3 benchmarks/sweep_replay.py --time-scale 0.25 --work-scale 0.25
    python3 benchmarks/sweep_replay.py --points 5:20,3:30 --repeat 3  # a subset, repeated

Time scaling: --time-scale multiplies the start times, --work-scale every job's
iterations, and the itval each point runs with is the paper's itval times --itval-scale
(default: the time scale), so a quarter-length replay checks G four times as often in
the same share of its run. Check one full-length point against its scaled twin
(--points 5:20 at scales 1 and 0.25) before trusting a scaled grid.

Order: each repetition runs none first, then the points (every other repetition in the
reverse order, so a drift of the host's load does not always favour the same points).
Every run is a folder (rep1-none, rep1-flowcon-a5-i20, ...) that
``flowcon replay report`` reads.

Statistics: the same as ``flowcon replay --compare --repeat`` (flowcon.replay.repeat):
each point's changes are computed against the none run of the same repetition, then
summarised over repetitions by median, min and max.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flowcon.interrupts import raise_interrupt
from flowcon.replay import repeat
from flowcon.replay.model import RunResult
from flowcon.replay.recorder import figures
from flowcon.replay.repeat import NONE, RunFigures

REPO = Path(__file__).resolve().parent.parent

ALPHAS = (0.01, 0.03, 0.05, 0.10, 0.15)
ITVALS = (10.0, 20.0, 30.0, 60.0)
# One full-length run of `fixed` took about 6 min on a 2-CPU host (bench_replay.py), plus
# about 15 s of agent start, image checks and cleanup per run.
FULL_RUN_S = 360.0
OVERHEAD_S = 15.0
CSV_FIELDS = (
    "alpha_pct",
    "itval",
    "itval_run",
    "repeats",
    "best_job",
    "best_job_change_pct",
    "worst_job",
    "worst_job_change_pct",
    "makespan_none",
    "makespan_flowcon",
    "makespan_change_pct",
    "makespan_change_min_pct",
    "makespan_change_max_pct",
)


@dataclass(frozen=True, order=True)
class Point:
    alpha: float  # fraction
    itval: float  # seconds, the paper's value (before --itval-scale)

    @property
    def slug(self) -> str:
        return f"a{100 * self.alpha:g}-i{self.itval:g}"


def parse_points(text: str | None) -> list[Point]:
    """'5:20,3:30' (alpha in %, itval in s) -> points; None -> the whole grid."""
    if not text:
        return [Point(a, i) for a in ALPHAS for i in ITVALS]
    points = []
    for item in text.split(","):
        alpha, sep, itval = item.strip().partition(":")
        try:
            point = Point(round(float(alpha) / 100, 6), float(itval))
        except ValueError:
            point = None
        if not sep or point is None or not 0 < point.alpha <= 1 or point.itval <= 0:
            raise ValueError(
                f"--points: {item.strip()!r} is not ALPHA_PCT:ITVAL_S (e.g. 5:20), "
                "alpha in (0, 100] %, itval > 0 s"
            )
        points.append(point)
    return points


def plan(points: list[Point], repeat: int) -> list[tuple[int, Point | None]]:
    """(repetition, point or None for the none baseline) in run order."""
    runs: list[tuple[int, Point | None]] = []
    for r in range(1, repeat + 1):
        runs.append((r, None))
        runs += [(r, p) for p in (points if r % 2 else list(reversed(points)))]
    return runs


def estimate_s(runs: int, scale: float, run_s: float = FULL_RUN_S) -> float:
    """Wall time of ``runs`` replays at ``scale`` (the larger of time and work scale)."""
    return runs * (run_s * scale + OVERHEAD_S)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def aggregate(runs: Sequence[tuple[int, Point | None, RunResult]]) -> list[dict[str, Any]]:
    """Per point, the statistics of ``flowcon replay --compare --repeat`` (repeat.aggregate):
    every change is computed within a repetition (the point's run against that
    repetition's none run), then summarised over repetitions by its median (min, max).

    ``best_job_change_pct`` / ``worst_job_change_pct``: the best and worst job's JCT
    change per repetition, median over repetitions (bench_replay's definition);
    ``best_job`` / ``worst_job``: the job whose median change is lowest / highest.
    Percent, negative = faster."""
    reps: dict[int, dict[str, RunFigures]] = {}
    points: dict[str, Point] = {}
    for rep, point, result in runs:
        key = NONE if point is None else point.slug
        if point is not None:
            points[key] = point
        reps.setdefault(rep, {})[key] = figures(result)
    summary = repeat.aggregate([reps[r] for r in sorted(reps)], list(points))
    rows = []
    for key, point in sorted(points.items(), key=lambda kv: kv[1]):
        v = summary["variants"][key]
        medians = {
            row["job"]: row["jct_change"]["median"]
            for row in v["jobs"]
            if row["jct_change"]["median"] is not None
        }
        best = min(medians, key=lambda n: medians[n]) if medians else None
        worst = max(medians, key=lambda n: medians[n]) if medians else None
        span = v["makespan_change"]
        itval_run = next((r.itval for _, p, r in runs if p is not None and p.slug == key), None)
        rows.append(
            {
                "alpha_pct": round(100 * point.alpha, 4),
                "itval": point.itval,
                "itval_run": itval_run,
                "repeats": v["repeats"],
                "best_job": best,
                "best_job_change_pct": _pct(v["best_job_change"]["median"]),
                "worst_job": worst,
                "worst_job_change_pct": _pct(v["worst_job_change"]["median"]),
                "makespan_none": v["makespan_none"],
                "makespan_flowcon": v["makespan"],
                "makespan_change_pct": _pct(span["median"]),
                "makespan_change_min_pct": _pct(span["min"]),
                "makespan_change_max_pct": _pct(span["max"]),
            }
        )
    return rows


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    return round(value, 3) if isinstance(value, float) else value


def write_outputs(rows: list[dict[str, Any]], out: Path, scenario: str) -> list[Path]:
    """sweep.csv and the two heatmaps."""
    from flowcon.replay.plots import plot_heatmap

    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: _csv_cell(row[k]) for k in CSV_FIELDS})

    def grid(key: str) -> dict[tuple[float, float], float | None]:
        return {(row["alpha_pct"] / 100, row["itval"]): row[key] for row in rows}

    return [
        path,
        plot_heatmap(
            grid("best_job_change_pct"),
            out / "best-job.png",
            f"{scenario}: best job's JCT change against none",
            "JCT change (%)",
        ),
        plot_heatmap(
            grid("makespan_change_pct"),
            out / "makespan.png",
            f"{scenario}: makespan change against none",
            "makespan change (%)",
        ),
    ]


def run_sweep(args: argparse.Namespace, points: list[Point]) -> int:
    import docker

    from flowcon.replay.cli import resolve_scenario, run_policy
    from flowcon.replay.runner import agent_available
    from flowcon.replay.scenario import load_scenario

    if not agent_available():
        print("the FlowCon agent is not installed: nothing to sweep", file=sys.stderr)
        return 2
    itval_scale = args.itval_scale if args.itval_scale is not None else args.time_scale
    sc = load_scenario(resolve_scenario(args.scenario)).scaled(
        args.time_scale, None, args.work_scale
    )
    sc = replace(sc, itval=sc.itval * itval_scale)  # the none runs' dry-run agent
    out: Path = args.out / f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    client = docker.from_env(version="auto", timeout=120)
    signal.signal(signal.SIGTERM, raise_interrupt)
    done: list[tuple[int, Point | None, RunResult]] = []
    runs = plan(points, args.repeat)
    for n, (rep, point) in enumerate(runs, start=1):
        load = os.getloadavg()[0]
        if point is None:
            run_sc, policy, folder = sc, "none", out / f"rep{rep}-none"
        else:
            run_sc = replace(sc, alpha=point.alpha, itval=point.itval * itval_scale)
            policy, folder = "flowcon", out / f"rep{rep}-flowcon-{point.slug}"
        print(f"[{n}/{len(runs)}] {folder.name} (load average {load:.1f})", flush=True)
        result = run_policy(client, run_sc, policy, folder, show_progress=False)
        done.append((rep, point, result))
        bad = [j.name for j in result.jobs if not j.ok]
        if bad:
            print(f"  failed jobs: {', '.join(bad)} (see {folder})", file=sys.stderr)
    rows = aggregate(done)
    for path in write_outputs(rows, out, sc.name):
        print(f"wrote {path}")
    for row in rows:
        best, span = row["best_job_change_pct"], row["makespan_change_pct"]
        print(
            f"alpha {row['alpha_pct']:g} %, itval {row['itval']:g} s: best job "
            f"{'-' if best is None else f'{best:+.1f} %'} ({row['best_job']}), makespan "
            f"{'-' if span is None else f'{span:+.1f} %'}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default="fixed")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply start times")
    ap.add_argument("--work-scale", type=float, default=1.0, help="multiply iterations")
    ap.add_argument(
        "--itval-scale", type=float, default=None, help="multiply itval (default: --time-scale)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="repetitions of every point")
    ap.add_argument("--points", help="subset, ALPHA_PCT:ITVAL_S,... e.g. 5:20,3:30")
    ap.add_argument(
        "--run-seconds",
        type=float,
        default=FULL_RUN_S,
        help="one full-length run's wall time, for the estimate",
    )
    ap.add_argument("--dry-list", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "sweep-replay")
    args = ap.parse_args(argv)
    if args.repeat < 1 or min(args.time_scale, args.work_scale) <= 0:
        ap.error("--repeat must be >= 1 and the scales > 0")
    try:
        points = parse_points(args.points)
    except ValueError as exc:
        ap.error(str(exc))
    runs = plan(points, args.repeat)
    itval_scale = args.itval_scale if args.itval_scale is not None else args.time_scale
    if args.dry_list:
        for rep, point in runs:
            what = (
                "none (dry-run agent)"
                if point is None
                else f"flowcon alpha {100 * point.alpha:g} %, itval {point.itval:g} s "
                f"(runs with {point.itval * itval_scale:g} s)"
            )
            print(f"rep {rep}: {what}")
        scale = max(args.time_scale, args.work_scale)
        total = estimate_s(len(runs), scale, args.run_seconds)
        print(
            f"{len(runs)} runs, about {total / 3600:.1f} h "
            f"({args.run_seconds * scale + OVERHEAD_S:.0f} s a run at scale {scale:g})"
        )
        return 0
    try:
        return run_sweep(args, points)
    except KeyboardInterrupt:
        print("interrupted: the running replay's agent and containers were removed")
        return 130


if __name__ == "__main__":
    sys.exit(main())
