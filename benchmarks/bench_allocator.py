#!/usr/bin/env python3
"""Live allocator vs the simulator on the same 6-job mini-trace.

The live run starts the real allocator daemon (HTTP API, SQLite, planning loop) with the
real executor on the plain Docker engine and a declared 2 nodes x 4 GPUs inventory; jobs are
the testbox rate job (flowcon.testing.ratejob), which runs at its profile's speed for the
GPU count it is given and is rescaled by real checkpoint-restart. The same trace then goes
through flowcon.sim with the ElasticFlow policy. Both deadline satisfactory ratios are
printed (jobs that met their deadline / all submitted jobs), with a per-job comparison.

    python3 benchmarks/bench_allocator.py [--slot 2] [--scale 1.0] [--json]

--scale stretches every time in the trace (deadlines, arrivals) and divides the speeds, so
a larger scale makes the restart overhead relatively smaller.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.policy import ElasticFlowPolicy
from flowcon.allocator.config import load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.target import build_target
from flowcon.client.http import AllocatorClient, ClientError
from flowcon.interrupts import cleanup_guard, raise_interrupt
from flowcon.sim.engine import Simulator
from flowcon.testing.ratejob import rate_job_spec

# Concave curves shaped like the A100 tables (iterations/s by GPU count), slowed down so a
# job lasts tens of seconds.
CURVES = {
    "resnet": {1: 2.0, 2: 3.8, 4: 7.0, 8: 12.0},
    "bert": {1: 3.0, 2: 5.0, 4: 8.0, 8: 10.0},
    "vgg": {1: 1.5, 2: 2.6, 4: 4.0, 8: 5.0},
}
# name, arrival (s), model, iterations, deadline (s after arrival)
TRACE = [
    ("j1", 0, "resnet", 120, 60),
    ("j2", 2, "bert", 200, 50),
    ("j3", 4, "vgg", 150, 45),
    ("j4", 8, "resnet", 300, 40),
    ("j5", 12, "bert", 60, 40),
    ("j6", 16, "vgg", 1000, 30),
]

CONFIG = """\
allocator:
  listen: 127.0.0.1:0
  state_dir: state
  slot_seconds: {slot}
gpus:
  declared:
    nodes:
      - {{name: node1, gpus: 4}}
      - {{name: node2, gpus: 4}}
executor:
  backend: engine
  grace_s: 5
"""


def scaled(scale: float) -> list[tuple[str, float, dict[int, float], int, float]]:
    return [
        (n, t * scale, {g: v / scale for g, v in CURVES[m].items()}, its, dl * scale)
        for n, t, m, its, dl in TRACE
    ]


def run_sim(trace, slot: float, overhead: float) -> dict[str, dict[str, Any]]:
    jobs = [
        Job(
            job_id=n,
            submit_time=t,
            iterations=float(its),
            deadline=t + dl,
            curve=ThroughputCurve(curve),
        )
        for n, t, curve, its, dl in trace
    ]
    res = Simulator(jobs, Topology(2, 4), ElasticFlowPolicy(overhead), slot, overhead).run()
    return {
        r.job.job_id: {
            "admitted": r.admitted,
            "finish": r.finish,
            "deadline": r.job.deadline,
            "met": r.met_deadline,
        }
        for r in res.results
    }


def run_live(
    trace,
    slot: float,
    run_id: str,
    dump: Path | None = None,
    extra_labels: dict[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    import docker

    client_docker = docker.from_env(timeout=60)
    labels = {**(extra_labels or {}), "flowcon.bench": run_id}
    tmp = Path(tempfile.mkdtemp(prefix="flowcon-bench-"))
    (tmp / "allocator.yaml").write_text(CONFIG.format(slot=slot))
    cfg = load_config(tmp / "allocator.yaml")
    target = build_target(cfg, client=client_docker, extra_labels=labels)
    alloc = Allocator(cfg, target)
    alloc.start(port=0)
    api = AllocatorClient(alloc.url, alloc.token)
    names = {n: f"b{run_id}-{n}" for n, *_ in trace}
    answers: dict[str, dict[str, Any]] = {}
    t0 = time.time() + 1.0
    stopping = threading.Event()  # interrupted: the submitter ends quietly
    try:

        def submit_all() -> None:
            for n, t, curve, its, dl in trace:
                if stopping.wait(max(0.0, t0 + t - time.time())):
                    return
                # deadline as an absolute time so both runs use the same one
                try:
                    answers[n] = api.submit(rate_job_spec(names[n], its, _iso(t0 + t + dl), curve))
                except ClientError:
                    if stopping.is_set():  # the allocator was stopped under it
                        return
                    raise
                print(
                    f"  t={time.time() - t0:5.1f}s submit {n}: {answers[n]['decision']} "
                    f"({answers[n]['reason']})",
                    flush=True,
                )

        th = threading.Thread(target=submit_all, daemon=True)
        th.start()
        th.join()
        end = t0 + max(t + dl for _, t, _, _, dl in trace) + 3 * slot
        while time.time() < end:
            jobs = api.jobs()
            if all(j["state"] not in ("admitted", "running") for j in jobs):
                break
            time.sleep(1.0)
        jobs = {j["name"]: j for j in api.jobs()}  # type: ignore[assignment]
        rescales = [e for e in alloc.store.events(kind="restarted_on_new_gpus")]
        overhead = (
            sum(e.data["stop_seconds"] + e.data["start_seconds"] for e in rescales) / len(rescales)
            if rescales
            else 0.0
        )
        out = {}
        for n, *_ in trace:
            j = jobs[names[n]]  # type: ignore[call-overload]
            out[n] = {
                "admitted": j["state"] != "dropped",
                "finish": (j["finish_time"] - t0) if j["state"] == "completed" else None,
                "deadline": j["deadline"] - t0,
                "met": bool(j["deadline_met"]),
                "state": j["state"],
            }
        downtimes = [
            e.data["downtime_seconds"]
            for e in alloc.store.events(kind="resumed")
            if e.data.get("downtime_seconds") is not None
        ]
        resc = [
            e.data["downtime_seconds"]
            for e in alloc.store.events(kind="resumed")
            if e.data.get("after") == "rescale" and e.data.get("downtime_seconds") is not None
        ]
        stats = {
            "rescales": len(rescales),
            "mean_rescale_seconds": overhead,
            "mean_downtime_seconds": sum(downtimes) / len(downtimes) if downtimes else 0.0,
            "mean_rescale_downtime_seconds": sum(resc) / len(resc) if resc else 0.0,
            "planner_overhead_seconds": alloc.planner.overhead,
            "curve_refinements": len(alloc.store.events(kind="curve_refined")),
            "rounds": alloc.rounds,
            "executor_errors": len(alloc.store.events(kind="executor_error")),
        }
        if dump is not None:
            dump.write_text(
                json.dumps(
                    {
                        "t0": t0,
                        "names": names,
                        "events": [e.to_json() for e in alloc.store.events()],
                        "allocations": alloc.store.allocations(),
                    },
                    indent=1,
                    default=str,
                )
            )
        return out, stats
    finally:
        stopping.set()
        with cleanup_guard():
            alloc.stop(stop_jobs=True)
            _sweep(client_docker, f"flowcon.bench={run_id}")
            client_docker.close()
            shutil.rmtree(tmp, ignore_errors=True)


def _iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat()


def _sweep(client, label: str) -> None:
    for c in client.containers.list(ignore_removed=True, all=True, filters={"label": label}):
        with contextlib.suppress(Exception):
            c.remove(force=True)
    for kind in ("networks", "volumes"):
        for item in getattr(client, kind).list(filters={"label": label}):
            with contextlib.suppress(Exception):
                item.remove()


def ratio(rows: dict[str, dict[str, Any]]) -> float:
    return sum(1 for r in rows.values() if r["met"]) / len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slot", type=float, default=2.0, help="scheduling slot (s)")
    ap.add_argument("--scale", type=float, default=1.0, help="stretch the trace in time")
    ap.add_argument("--json", action="store_true", help="print a JSON summary too")
    ap.add_argument("--dump", type=Path, help="write the live run's events and allocations here")
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on every container it starts"
    )
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.label)
    signal.signal(signal.SIGTERM, raise_interrupt)  # as Ctrl-C: cleanup runs
    trace = scaled(args.scale)
    run_id = uuid.uuid4().hex[:6]
    print(
        f"6-job mini-trace, 2 nodes x 4 GPUs (declared), slot {args.slot:g} s, scale {args.scale:g}"
    )
    print("live allocator (real executor, plain engine):", flush=True)
    w0 = time.perf_counter()
    live, stats = run_live(trace, args.slot, run_id, args.dump, extra)
    live_wall = time.perf_counter() - w0
    sim0 = run_sim(trace, args.slot, 0.0)
    # the simulator charges its overhead at every allocation change, starts included:
    # the live counterpart is the measured downtime (request -> first metric line)
    simo = run_sim(trace, args.slot, stats["mean_downtime_seconds"])
    print()
    print(
        f"{'job':4} {'deadline':>8} | {'live':>8} {'finish':>7} {'met':>4} | "
        f"{'sim':>8} {'finish':>7} {'met':>4} | {'sim+ovh':>7} {'met':>4}"
    )
    for n, *_ in trace:
        lv, sm, so = live[n], sim0[n], simo[n]

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:7.1f}"

        print(
            f"{n:4} {lv['deadline']:8.1f} | {('admit' if lv['admitted'] else 'drop'):>8} "
            f"{f(lv['finish'])} {('yes' if lv['met'] else 'no'):>4} | "
            f"{('admit' if sm['admitted'] else 'drop'):>8} {f(sm['finish'])} "
            f"{('yes' if sm['met'] else 'no'):>4} | {f(so['finish'])} "
            f"{('yes' if so['met'] else 'no'):>4}"
        )
    r_live, r_sim, r_simo = ratio(live), ratio(sim0), ratio(simo)
    print()
    print(f"deadline satisfactory ratio  live allocator: {r_live:.3f}")
    print(f"deadline satisfactory ratio  simulator:      {r_sim:.3f}")
    print(
        f"deadline satisfactory ratio  simulator with the live mean (re)start downtime "
        f"({stats['mean_downtime_seconds']:.2f} s): {r_simo:.3f}"
    )
    print(
        f"restart cost: stop+start {stats['mean_rescale_seconds']:.2f} s per rescale; "
        f"request -> first metric line {stats['mean_rescale_downtime_seconds']:.2f} s per "
        f"rescale, {stats['mean_downtime_seconds']:.2f} s over all (re)starts; planner "
        f"charged {stats['planner_overhead_seconds']:.2f} s at the end"
    )
    same = all(live[n]["admitted"] == sim0[n]["admitted"] for n in live)
    print(
        f"admission decisions identical: {same}; live rescales: {stats['rescales']}; "
        f"planning rounds: {stats['rounds']}; live wall time {live_wall:.1f} s"
    )
    if stats["executor_errors"]:
        print(
            f"WARNING: {stats['executor_errors']} executor errors (engine refused to start "
            "containers): the live figures are not comparable, run again"
        )
    if args.json:
        print(
            json.dumps(
                {
                    "live": r_live,
                    "sim": r_sim,
                    "sim_overhead": r_simo,
                    "same_decisions": same,
                    **stats,
                }
            )
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM: the finally blocks cleaned up
        print(f"interrupted ({exc or 'SIGINT'}): its containers were removed", file=sys.stderr)
        sys.exit(130)
