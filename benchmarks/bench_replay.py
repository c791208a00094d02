"""Real replays on the local engine: FlowCon vs plain Docker sharing ("none").

Runs each scenario under policy none, then under flowcon (the agent as a subprocess),
and prints per-job completion-time changes and makespans, next to the paper's
reference figures (ICPP'19 sections 5.3-5.5: best job 42.06 % faster, makespan 1-5 %
shorter than no control). Wall time: fixed ~2 x 6 min, random-5 ~2 x 8 min.

    python3 benchmarks/bench_replay.py                       # fixed and random-5
    python3 benchmarks/bench_replay.py random-10 --time-scale 0.5
    python3 benchmarks/bench_replay.py fixed --iterations 50 # a quick smoke run
    python3 benchmarks/bench_replay.py --work-scale 0.5 --time-scale 0.5  # half as long

The host's CPUs are shared with whatever else runs: the load average before and
after each run is printed, and figures from a busy host are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from flowcon.replay.cli import print_comparison, resolve_scenario, run_policy  # noqa: E402
from flowcon.replay.plots import plot_jct  # noqa: E402
from flowcon.replay.recorder import comparison, write_comparison  # noqa: E402
from flowcon.replay.runner import agent_available  # noqa: E402
from flowcon.replay.scenario import load_scenario  # noqa: E402

PAPER = "paper: best job -42.06 % (random, alpha 3 %, itval 30); makespan -1 % to -5 %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", default=["fixed", "random-5"])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--work-scale", type=float, default=1.0, help="scale every job's work")
    ap.add_argument("--alpha", type=float, default=None)
    ap.add_argument("--itval", type=float, default=None)
    ap.add_argument(
        "--flowcon-first",
        action="store_true",
        help="run flowcon before none (alternate orders to expose drift in host load)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-replay")
    args = ap.parse_args()
    if not agent_available():
        print("the FlowCon agent is not installed: nothing to compare", file=sys.stderr)
        return 2

    import docker

    def stop(signum: int, frame: object) -> None:  # cleanup runs in the replay's finally
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # also when started in the background
    client = docker.from_env(timeout=120)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    summary = []
    for name in args.scenarios:
        sc = load_scenario(resolve_scenario(name)).scaled(
            args.time_scale, args.iterations, args.work_scale
        )
        if args.alpha is not None:
            sc = replace(sc, alpha=args.alpha)
        if args.itval is not None:
            sc = replace(sc, itval=args.itval)
        out = args.out / f"{sc.name}-{stamp}"
        results = {}
        loads = {}
        order = ("flowcon", "none") if args.flowcon_first else ("none", "flowcon")
        for policy in order:
            before = os.getloadavg()[0]
            t = time.time()
            results[policy] = run_policy(client, sc, policy, out / policy, show_progress=False)
            loads[policy] = (before, os.getloadavg()[0], time.time() - t)
        plot_jct(results, out / "jct.png")
        cmp = comparison(results["none"], results["flowcon"])
        write_comparison(cmp, out)
        print_comparison(cmp)
        for policy, (b, a, wall) in loads.items():
            print(f"  {policy}: load average {b:.1f} -> {a:.1f}, wall {wall:.0f} s")
        changes = [r["change_pct"] for r in cmp["jobs"] if r["change_pct"] is not None]
        row = {
            "scenario": sc.name,
            "alpha": sc.alpha,
            "itval": sc.itval,
            "jobs_faster": sum(1 for c in changes if c < 0),
            "jobs": len(cmp["jobs"]),
            "best_job_change_pct": min(changes) if changes else None,
            "worst_job_change_pct": max(changes) if changes else None,
            "makespan_none": cmp["makespan_none"],
            "makespan_flowcon": cmp["makespan_flowcon"],
            "makespan_change_pct": cmp["makespan_change_pct"],
            "agent_acted": cmp["flowcon_limits_changed"],
            "foreign_managed_max": cmp["foreign_managed_max"],
            "mean_cpus_none": cmp["mean_cpus_none"],
            "mean_cpus_flowcon": cmp["mean_cpus_flowcon"],
            "out": str(out),
        }
        summary.append(row)
        print(json.dumps(row))
    print(PAPER)
    for row in summary:
        best = row["best_job_change_pct"]
        span = row["makespan_change_pct"]
        print(
            f"{row['scenario']}: {row['jobs_faster']}/{row['jobs']} jobs faster, best job "
            f"{'-' if best is None else f'{best:+.1f} %'}, makespan "
            f"{'-' if span is None else f'{span:+.1f} %'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
