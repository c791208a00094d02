"""Real replays on the local engine: FlowCon vs plain Docker sharing ("none"), repeated.

Runs each scenario `--repeat` times (default 3) under policy none and under FlowCon with
each control mode of `--controls` (default quota), in alternating order between
repetitions (none, flowcon, then flowcon, none, ...), through the same code as
`flowcon replay --compare --repeat N` (flowcon.replay.compare / flowcon.replay.repeat).
Prints each scenario's table (medians with min-max over repetitions) next to the paper's
reference figures (ICPP'19 sections 5.3-5.5: best job 42.06 % faster, makespan 1-5 %
shorter than no control), then per-scenario medians; the LAST line is one JSON object:

    {"fixed": {"quota": {"best_job_change": -0.31, "worst_job_change": -0.05,
                          "makespan_change": -0.02, "repeats": 3}}, ...}

Fractions, negative = faster. best/worst_job_change: per repetition the best and worst
job's JCT change against that repetition's none run, then the median over repetitions;
makespan_change: the median of the per-repetition makespan changes.

    python3 benchmarks/bench_replay.py                        # fixed and random-5
    python3 benchmarks/bench_replay.py fixed --controls quota,weights --threads pinned
    python3 benchmarks/bench_replay.py --generated 3 --seed 100 --threads pinned
    python3 benchmarks/bench_replay.py fixed --iterations 50 --repeat 1  # a quick smoke run
    python3 benchmarks/bench_replay.py --work-scale 0.5 --time-scale 0.5  # half as long
    python3 benchmarks/bench_replay.py random-10 --agent-set all_cl=equal  # a config key

A busy host (1-minute load average > 0.5 x CPUs, or CPUs > 25 % busy over 3 s) stops
the benchmark before a scenario starts unless --force (recorded in compare.json).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from flowcon.interrupts import raise_interrupt
from flowcon.replay.cli import parse_agent_sets, resolve_scenario, run_policy
from flowcon.replay.compare import (
    CompareRun,
    HostBusy,
    LoadCheck,
    check_host,
    print_aggregate,
    run_compare,
)
from flowcon.replay.generate import random_scenario
from flowcon.replay.repeat import (
    CONTROL_MODES,
    BusyLimits,
    headline,
    variant_control,
    variant_key,
)
from flowcon.replay.runner import agent_available
from flowcon.replay.scenario import THREAD_MODES, Scenario, load_scenario

REPO = Path(__file__).resolve().parent.parent

PAPER = "paper: best job -42.06 % (random, alpha 3 %, itval 30); makespan -1 % to -5 %"
GENERATED_JOBS = 5


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", help="names or files (default: fixed random-5)")
    ap.add_argument("--repeat", type=int, default=3, help="alternating repetitions (3)")
    ap.add_argument(
        "--controls",
        default="quota",
        help="comma list of " + "|".join(CONTROL_MODES) + " or default (the agent's own "
        "control, no `control` key) (quota)",
    )
    ap.add_argument("--threads", choices=THREAD_MODES, help="override the scenarios' threads")
    ap.add_argument("--no-adapt-threads", action="store_true", help="FLOWCON_ADAPT_THREADS=0")
    ap.add_argument("--force", action="store_true", help="run even on a busy host")
    ap.add_argument(
        "--settle",
        type=float,
        default=180.0,
        help="seconds to wait for a busy host to quieten before refusing (180): the "
        "load average lags a minute behind the previous run",
    )
    ap.add_argument("--max-load", type=float, default=0.5, help="per CPU (0.5)")
    ap.add_argument("--max-busy", type=float, default=0.25, help="fraction (0.25)")
    ap.add_argument("--load-window", type=float, default=3.0, help="seconds (3)")
    ap.add_argument("--generated", type=int, default=0, help="K fresh mixes of 5 jobs")
    ap.add_argument("--seed", type=int, default=1000, help="first seed of --generated (1000)")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--work-scale", type=float, default=1.0, help="scale every job's work")
    ap.add_argument("--alpha", type=float, default=None)
    ap.add_argument("--itval", type=float, default=None)
    ap.add_argument(
        "--agent-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra key for the agent's config file in every scenario (repeatable), "
        "e.g. all_cl=equal",
    )
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-replay")
    args = ap.parse_args()
    controls = [c.strip() for c in args.controls.split(",") if c.strip()]
    bad = [c for c in controls if c not in (*CONTROL_MODES, "default")]
    if bad or not controls:
        ap.error(
            f"--controls: expected a comma list of default, {', '.join(CONTROL_MODES)}; got {bad}"
        )
    if args.repeat < 1 or args.generated < 0:
        ap.error("--repeat must be >= 1 and --generated >= 0")
    args.controls = controls
    try:
        args.agent_set = parse_agent_sets(args.agent_set)
    except click.BadParameter as exc:
        ap.error(exc.format_message())
    if not args.scenarios and not args.generated:
        args.scenarios = ["fixed", "random-5"]
    return args


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    """The named scenarios, then the generated mixes (seeds seed..seed+K-1, names that
    cannot clash with the shipped random-N), with the command line's overrides."""
    out = [load_scenario(resolve_scenario(name)) for name in args.scenarios]
    for k in range(args.generated):
        seed = args.seed + k
        out.append(random_scenario(GENERATED_JOBS, seed, name=f"gen{GENERATED_JOBS}-s{seed}"))
    done = []
    for sc in out:
        sc = sc.scaled(args.time_scale, args.iterations, args.work_scale)
        if args.alpha is not None:
            sc = replace(sc, alpha=args.alpha)
        if args.itval is not None:
            sc = replace(sc, itval=args.itval)
        if args.threads is not None:
            sc = replace(sc, threads=args.threads)
        if args.no_adapt_threads:
            sc = replace(sc, adapt_threads=False)
        if args.agent_set:
            sc = replace(sc, agent={**sc.agent, **args.agent_set})
        done.append(sc)
    return done


def variants(controls: list[str]) -> list[str]:
    """The compare's variants; ``default`` runs the agent without a `control` key."""
    return [variant_key(None if c == "default" else c) for c in dict.fromkeys(controls)]


def by_control(summary: dict[str, Any]) -> dict[str, Any]:
    """headline() keyed by control mode (``default`` for the agent's own)."""
    return {variant_control(k) or "default": v for k, v in headline(summary).items()}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def main() -> int:
    args = parse_args()
    if not agent_available():
        print("the FlowCon agent is not installed: nothing to compare", file=sys.stderr)
        return 2

    import docker

    signal.signal(signal.SIGTERM, raise_interrupt)  # cleanup runs in the replay's finally
    signal.signal(signal.SIGINT, raise_interrupt)  # also when started in the background
    client = docker.from_env(timeout=120)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    check = LoadCheck(
        BusyLimits(args.max_load, args.max_busy), args.load_window, args.force, args.settle
    )
    final: dict[str, Any] = {}
    for sc in scenarios(args):
        try:
            host = check_host(check)
        except HostBusy as exc:
            print(f"{sc.name}: {exc}", file=sys.stderr)
            return 3
        spec = CompareRun(
            sc,
            args.out / f"{sc.name}-{stamp}",
            variants(args.controls),
            args.repeat,
            {},
            host,
            args.load_window,
        )
        summary, _ = run_compare(client, spec, run_policy)
        print_aggregate(summary)
        print(f"  results in {spec.out_dir}")
        final[sc.name] = by_control(summary)
    print(PAPER)
    for name, modes in final.items():
        for mode, h in modes.items():
            print(
                f"{name} [{mode}], median of {h['repeats']}: best job "
                f"{_pct(h['best_job_change'])}, worst job {_pct(h['worst_job_change'])}, "
                f"makespan {_pct(h['makespan_change'])}"
            )
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
