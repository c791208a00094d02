"""Profiling by scaling against the pre-run: time to a throughput curve, progress lost.

Runs the elastic-example job (stop-free runtime, real torch) on the local engine with a
declared inventory (one node, ``--gpus`` GPUs; a "GPU" is a CPU slot here) and measures
its throughput at the same GPU counts both ways, in the same run:

* ``prerun`` (the baseline): ``Executor.profile``, a fresh profile job per count, each
  thrown away with its progress (the steps it trained are lost);
* ``scaling``: ``Executor.profile_by_scaling``, the job itself started once and rescaled
  stop-free between counts (EDL 3.3); it keeps its steps and runs on.

Per mode it prints the profiling time, the points measured, the steps trained while
profiling and how many of them the job keeps, and as its last line one JSON object:
``prerun_s``, ``scaling_s``, ``speedup`` (prerun_s / scaling_s: EDL reports about 10x),
``prerun_steps_lost``, ``scaling_steps_kept``, ``scaling_steps_lost``, the points.

    python3 benchmarks/bench_profile.py [--counts 1,2] [--gpus 2] [--startup 20]
    python3 benchmarks/bench_profile.py --quick      # counts 1,2, short measurements
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from flowcon.engine.gpus import Inventory, discover
from flowcon.executor.lifecycle import Executor, ExecutorOptions
from flowcon.executor.scaling_profile import grow_placement
from flowcon.executor.workers import pack_placement
from flowcon.interrupts import raise_interrupt
from flowcon.jobspec.spec import JobSpec, parse_jobspec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: the repository's benchmarks package
    sys.path.insert(0, str(REPO))
from benchmarks.bench_rescale import EXAMPLE, KeepingBackend, parse_lines  # noqa: E402


def _spec(name: str, image: str, startup: float) -> JobSpec:
    return parse_jobspec(
        {
            "name": name,
            "image": image,
            "command": ["python3", "/opt/train.py"],
            "global_batch_size": 32,
            "iterations": 10**7,
            "best_effort": True,
            "profile": {1: 1.0},
            "env": {"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1", "START_SLEEP": str(startup)},
            "launcher": "flowcon",
            "scaling": "stopfree",
        }
    )


def _steps_of(be: KeepingBackend, job_prefix: str) -> list[int]:
    """Step numbers of every container of jobs named ``job_prefix``* the backend removed
    (their output, read before removal) or still runs."""
    out: list[int] = []
    for cid, (owner, lines) in be.kept.items():
        if owner.startswith(job_prefix):
            out.extend(ln.step for ln in parse_lines(cid, lines) if ln.raw.get("rank", 0) == 0)
    return out


def run_prerun(
    ex: Executor, be: KeepingBackend, inv: Inventory, spec: JobSpec, counts: list[int], args: Any
) -> tuple[float, dict[int, float], int, int]:
    t0 = time.monotonic()
    profile = ex.profile(
        spec,
        placement_for=lambda n: pack_placement(inv, n),
        counts=counts,
        max_seconds=args.max_seconds,
        min_points=args.min_points,
        min_gain=-1.0,  # measure every count, as the scaling mode does
    )
    seconds = time.monotonic() - t0
    trained = _steps_of(be, f"{spec.name}_p")
    return seconds, dict(profile.points), len(trained), 0


def run_scaling(
    ex: Executor, be: KeepingBackend, inv: Inventory, spec: JobSpec, counts: list[int], args: Any
) -> tuple[float, dict[int, float], int, int]:
    free = [(n.name, [g.uuid for g in n.gpus]) for n in inv.nodes]
    t0 = time.monotonic()
    profile = ex.profile_by_scaling(
        spec,
        counts,
        lambda n, cur: grow_placement(cur or {}, free, n),
        max_seconds=args.max_seconds,
        min_points=args.min_points,
        min_gain=-1.0,
    )
    seconds = time.monotonic() - t0
    live = ex.job(spec.name)
    steps: list[int] = []
    for w in live.workers if live is not None else ():
        steps.extend(ln.step for ln in parse_lines(w.id, be.logs(w)) if ln.raw.get("rank", 0) == 0)
    steps.extend(_steps_of(be, spec.name))
    kept = len(set(steps))
    return seconds, dict(profile.points), len(steps), kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=EXAMPLE)
    ap.add_argument("--counts", default="1,2", help="GPU counts to measure (both modes)")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the declared node")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="per count, at most")
    ap.add_argument("--min-points", type=int, default=8, help="metric lines per count")
    ap.add_argument(
        "--startup",
        type=float,
        default=0.0,
        help="seconds each worker start spends before training (train.py's START_SLEEP): "
        "a real job's data loading and model build; 0: the example's own (about 3 s here)",
    )
    ap.add_argument("--quick", action="store_true", help="short measurements (a smoke run)")
    ap.add_argument("--no-build", action="store_true", help="run the image as it is")
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on every object it creates"
    )
    args = ap.parse_args()
    if args.quick:
        args.min_points = 4
    counts = sorted({int(c) for c in args.counts.split(",") if c.strip()})
    if not counts or max(counts) > args.gpus:
        ap.error(f"--counts {args.counts!r}: 1..{args.gpus} (--gpus)")
    signal.signal(signal.SIGTERM, raise_interrupt)

    import docker

    client = docker.from_env(timeout=120)
    if not args.no_build:
        subprocess.run(
            ["bash", str(REPO / "images/elastic-example/build.sh"), args.image], check=True
        )
    run_id = uuid.uuid4().hex[:6]
    inv = discover({"declared": {"nodes": [{"name": "node1", "gpus": args.gpus}]}})
    labels = {"flowcon.bench": run_id, **dict(kv.split("=", 1) for kv in args.label)}
    be = KeepingBackend(client)
    ex = Executor(be, inv, ExecutorOptions(grace_s=10.0, extra_labels=labels))
    pre_spec = _spec(f"bprof-{run_id}", args.image, args.startup)
    sc_spec = _spec(f"bscal-{run_id}", args.image, args.startup)
    try:
        pre = run_prerun(ex, be, inv, pre_spec, counts, args)
        print(
            f"prerun:  {pre[0]:.1f} s, points {pre[1]}, {pre[2]} steps trained, all lost",
            flush=True,
        )
        sc = run_scaling(ex, be, inv, sc_spec, counts, args)
        print(
            f"scaling: {sc[0]:.1f} s, points {sc[1]}, {sc[2]} step lines, {sc[3]} steps kept",
            flush=True,
        )
    finally:
        for spec in (pre_spec, sc_spec):
            try:
                ex.remove(spec.name, grace_s=2.0)
            except Exception as exc:
                print(f"cleanup of {spec.name}: {exc}", file=sys.stderr)
        ex.remove_profiles()
    out = {
        "counts": counts,
        "prerun_s": round(pre[0], 2),
        "scaling_s": round(sc[0], 2),
        "speedup": round(pre[0] / sc[0], 2) if sc[0] > 0 else None,
        "prerun_steps_lost": pre[2],
        "scaling_steps_kept": sc[3],
        "scaling_steps_lost": sc[2] - sc[3],
        "prerun_points": {str(k): round(v, 3) for k, v in pre[1].items()},
        "scaling_points": {str(k): round(v, 3) for k, v in sc[1].items()},
        "image": args.image,
        "min_points": args.min_points,
        "startup_s": args.startup,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
