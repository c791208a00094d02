"""Rescale overhead of the executor on the plain engine (paper section 6.6, "scaling overhead").

Runs a small CPU job (the elastic-example image: an MLP trained with flowcon.elastic, DDP over
gloo when it has 2 "GPUs") on a declared inventory, rescales it 1 -> 2 -> 1 -> ... GPUs and
prints per rescale:

  stop    SIGTERM -> every old container gone (the job checkpoints on the way out); target <= 3 s
  start   creating and starting the new containers
  resume  rescale call -> first metric line of the new run (includes Python + torch import)
  steps   last step before the stop -> first step after (must continue, not restart)

    python3 benchmarks/bench_rescale.py [--rescales 4] [--image flowcon/elastic-example:latest]
    python3 benchmarks/bench_rescale.py --image flowcon/testbox:latest   # shell job, no torch

Stopped by SIGTERM (``timeout``), SIGINT (Ctrl-C) or an error, it removes the job's
containers, network and checkpoint volume before it exits (130 when interrupted); a second
signal during that cleanup is ignored.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from flowcon.engine.gpus import discover  # noqa: E402
from flowcon.interrupts import raise_interrupt  # noqa: E402
from flowcon.service.executor import Executor, ExecutorOptions  # noqa: E402
from flowcon.service.executor_engine import EngineBackend  # noqa: E402
from flowcon.service.jobspec import parse_jobspec  # noqa: E402

EXAMPLE = "flowcon/elastic-example:latest"
TESTBOX = "flowcon/testbox:latest"


def metric_steps(lines: list[str]) -> list[int]:
    out = []
    for ln in lines:
        if ln.startswith("{"):
            try:
                obj = json.loads(ln)
            except ValueError:
                continue
            if "event" not in obj and isinstance(obj.get("step"), int):
                out.append(obj["step"])
    return out


def _shield() -> None:
    """Cleanup must finish: further SIGINT/SIGTERM are ignored from here on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=EXAMPLE)
    ap.add_argument("--rescales", type=int, default=4)
    ap.add_argument("--grace", type=float, default=30.0)
    ap.add_argument("--run-id", default=None, help="names the job bench-RUN_ID (default: random)")
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on every object it creates"
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # as Ctrl-C: the finally below cleans up

    import docker

    client = docker.from_env(timeout=120)
    if args.image == EXAMPLE:
        subprocess.run(["bash", str(REPO / "images/elastic-example/build.sh")], check=True)
        command = ["python3", "/opt/train.py"]
        env = {"STEP_SLEEP": "0.05"}
    else:
        from swarm_fixtures import STEP_JOB

        command = ["sh", "-c", STEP_JOB]
        env = {"STEP_SECONDS": "0.1"}
    run_id = args.run_id or uuid.uuid4().hex[:6]
    spec = parse_jobspec(
        {
            "name": f"bench-{run_id}",
            "image": args.image,
            "command": command,
            "global_batch_size": 64,
            "iterations": 10**7,
            "best_effort": True,
            "profile": {1: 1.0},
            "env": env,
            "launcher": "flowcon",
        }
    )
    inv = discover({"declared": {"nodes": [{"name": "node1", "gpus": 2}]}})
    labels = {"flowcon.bench": run_id, **dict(kv.split("=", 1) for kv in args.label)}
    ex = Executor(
        EngineBackend(client), inv, ExecutorOptions(grace_s=args.grace, extra_labels=labels)
    )
    placements = [{"node1": ["0"]}, {"node1": ["0", "1"]}]
    rows = []
    interrupted = False
    try:
        ex.launch(spec, placements[0])
        print(f"launched {spec.name}", flush=True)
        t_end = time.monotonic() + 120
        while not metric_steps(ex.logs(spec.name)) and time.monotonic() < t_end:
            time.sleep(0.2)
        for i in range(args.rescales):
            time.sleep(2.0)  # let it train a little
            before = metric_steps(ex.logs(spec.name))
            t0 = time.monotonic()
            res = ex.rescale(spec, placements[(i + 1) % 2])
            after: list[int] = []
            while not after and time.monotonic() < t0 + 120:
                after = metric_steps(ex.logs(spec.name))
                if not after:
                    time.sleep(0.05)
            resume = time.monotonic() - t0
            rows.append(
                (
                    res.old_gpus,
                    res.new_gpus,
                    res.stop_seconds,
                    res.start_seconds,
                    resume,
                    before[-1] if before else None,
                    after[0] if after else None,
                )
            )
    except KeyboardInterrupt as exc:
        interrupted = True
        print(f"interrupted ({exc or 'SIGINT'}): removing {spec.name}", file=sys.stderr)
    finally:
        _shield()
        ex.remove(spec.name, grace_s=2.0)
    if interrupted:
        return 130

    print(f"image {args.image}; grace {args.grace:.0f} s; {len(rows)} rescales")
    print(
        f"{'gpus':>7} {'stop s':>7} {'start s':>8} {'resume s':>9} {'step before':>12} "
        f"{'step after':>11}"
    )
    ok = True
    for old, new, stop, start, resume, b, a in rows:
        cont = b is not None and a is not None and a > b
        ok &= cont
        print(f"{old:>3}->{new:<3} {stop:>7.2f} {start:>8.2f} {resume:>9.2f} {b!s:>12} {a!s:>11}")
    stops = [r[2] for r in rows]
    if stops:
        print(
            f"stop time: median {statistics.median(stops):.2f} s, max {max(stops):.2f} s "
            f"(target <= 3 s: {'met' if max(stops) <= 3.0 else 'MISSED'})"
        )
    print(f"step counter continued across every rescale: {'yes' if ok else 'NO'}")
    return 0 if ok and stops and max(stops) <= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())
