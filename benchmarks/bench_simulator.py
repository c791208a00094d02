"""Simulator figures: deadline satisfactory ratio vs the published ElasticFlow simulator and
wall time / speed-up vs its published wall times (shared/data/README.md).

    python3 benchmarks/bench_simulator.py            # elasticflow everywhere + baselines on 195job
    python3 benchmarks/bench_simulator.py --all      # every policy with a reference, every trace

Columns: ``sim s`` = the simulation loop alone, ``load+sim s`` = reading the trace and tables
plus the simulation (in this process), ``speedup`` = published whole-process wall time /
``load+sim``. Then, for 195job, whole-process times (a fresh interpreter per run, median of
``--repeat``) next to the bare interpreter start, since for a trace this small process start
is most of the time; the published 12.8 s is a whole-process time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from flowcon.sim.cli import SHARED, run_simulation  # noqa: E402

TRACES = {  # trace -> cluster used in the published evaluation
    "195job": "16x8",
    "cluster01": "64x8",
    "cluster02": "64x8",
    "cluster03": "64x8",
    "cluster05": "64x8",
    "cluster04": "128x8",
}
# published deadline satisfactory ratios (None: not run / not finished)
REFERENCE = {
    "195job": {"elasticflow": 0.877, "edf": 0.097, "gandiva": 0.241, "tiresias": 0.492},
    "cluster01": {"elasticflow": 0.848, "edf": 0.187, "gandiva": 0.162, "tiresias": 0.493},
    "cluster02": {"edf": 0.245, "gandiva": 0.320, "tiresias": 0.487},
    "cluster03": {"elasticflow": 0.520, "edf": 0.103, "gandiva": 0.332, "tiresias": 0.431},
    "cluster05": {"elasticflow": 0.845, "edf": 0.405, "gandiva": 0.249, "tiresias": 0.482},
    "cluster04": {"gandiva": 0.263, "tiresias": 0.468},
}
# published ElasticFlow whole-process wall times, seconds (195job: 13-16 s; lower bound used)
REF_WALL = {"195job": 12.8, "cluster01": 1815.0, "cluster03": 2779.0, "cluster05": 2175.0}


def _process_ms(cmd: list[str], repeat: int) -> tuple[float, float]:
    """(min, median) wall milliseconds of a fresh process running ``cmd``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
        times.append((time.perf_counter() - t0) * 1000)
    return min(times), statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--all", action="store_true", help="all policies with a reference")
    ap.add_argument("--traces", nargs="*", default=list(TRACES))
    ap.add_argument("--overhead", type=float, default=10.0)
    ap.add_argument("--slot", type=float, default=60.0)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--repeat", type=int, default=7, help="whole-process runs of 195job")
    args = ap.parse_args()
    runs: list[tuple[str, str]] = []
    for t in args.traces:
        pols = ["elasticflow"]
        if args.all or t == "195job":
            pols += [p for p in ("edf", "gandiva", "tiresias") if p in REFERENCE[t]]
        runs += [(t, p) for p in pols]
    rows = []
    hdr = f"{'trace':<10} {'cluster':<6} {'policy':<12} {'ours':>6} {'paper':>6} {'diff':>7} "
    hdr += f"{'admit':>6} {'sim s':>7} {'load+sim s':>10} {'speedup':>8} {'lat p99 ms':>10} "
    hdr += f"{'rescales':>8} {'migr':>6}"
    print(hdr)
    print("-" * len(hdr))
    for trace, policy in runs:
        path = SHARED / "data/elasticflow-traces" / f"{trace}.csv"
        t0 = time.perf_counter()
        _, s = run_simulation(
            str(path), TRACES[trace], policy, slot=args.slot, overhead=args.overhead
        )
        wall = time.perf_counter() - t0
        ref = REFERENCE[trace].get(policy)
        ours = s["deadline_satisfactory_ratio"]
        assert isinstance(ours, float)
        ref_wall = REF_WALL.get(trace) if policy == "elasticflow" else None
        speed = f"{ref_wall / wall:8.0f}x" if ref_wall else f"{'-':>9}"
        lat = s["decision_latency_ms"]
        assert isinstance(lat, dict)
        print(
            f"{trace:<10} {TRACES[trace]:<6} {policy:<12} {ours:6.3f} "
            f"{ref if ref is not None else '-':>6} "
            f"{(ours - ref) if ref is not None else 0:+7.3f} {s['admitted']:>6} "
            f"{s['sim_seconds']:7.2f} {wall:10.2f} {speed} {lat['p99']:>10.2f} "
            f"{s['rescales']:>8} {s['migrations']:>6}",
            flush=True,
        )
        rows.append({**s, "reference_ratio": ref, "bench_wall_s": round(wall, 2)})
    if "195job" in args.traces and args.repeat > 0:
        trace = str(SHARED / "data/elasticflow-traces/195job.csv")
        py = sys.executable
        sim = ["--trace", trace, "--cluster", "16x8"]
        print(f"\nwhole process, 195job elasticflow (min / median of {args.repeat} runs, ms):")
        for label, cmd in (
            ("python -c pass", [py, "-c", "pass"]),
            ("python -m flowcon.sim", [py, "-m", "flowcon.sim", *sim]),
            ("python -m flowcon.cli simulate", [py, "-m", "flowcon.cli", "simulate", *sim]),
        ):
            lo, med = _process_ms(cmd, args.repeat)
            ref = REF_WALL["195job"] * 1000
            print(
                f"  {label:<32} {lo:7.0f} / {med:7.0f}   "
                f"speed-up {ref / lo:5.0f}x / {ref / med:5.0f}x"
            )
            rows.append({"process": label, "min_ms": round(lo), "median_ms": round(med)})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
