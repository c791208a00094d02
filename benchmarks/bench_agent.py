"""Agent overhead on the real engine: CPU seconds per control round and per event with
10 and 50 managed containers, and start-event -> limit latency (p50/p95).

Targets (docs/agent.md): <= 1% of one core with 50 containers at itval 20 s, p95 <= 1 s.

    python3 benchmarks/bench_agent.py [--sizes 10 50] [--rounds 3] [--gap 20] [--events 10]
        [--sources auto engine]   # CPU from cgroup files vs the stats API, same run

Containers are testbox loops printing one metric line every 0.5 s; all carry the label
flowcon.bench=<run id> and are removed at the end, pass or fail.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.listeners import EventListener
from flowcon.agent.state_file import StateStore
from flowcon.engine.docker_engine import DockerEngine
from flowcon.interrupts import cleanup_guard, raise_interrupt

IMAGE = "flowcon/testbox:latest"
LOOP = (
    "i=0; while true; do i=$((i+1)); "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((100000/(i+10))); sleep 0.5; done'
)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def timed_rounds(
    ctls: dict[str, Controller], sources: list[str], rounds: int, gap: float
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The controllers take turns, each one round every ``gap`` seconds (so each reads
    ``gap`` seconds of output per round, under the same machine load). A first round each
    (it reads the logs' tails) is not counted. Returns CPU and wall seconds per round."""
    cpu: dict[str, list[float]] = {s: [] for s in sources}
    wall: dict[str, list[float]] = {s: [] for s in sources}
    offset = gap / len(sources)
    for r in range(rounds + 1):
        for source in sources:
            time.sleep(offset)
            c0, w0 = time.process_time(), time.monotonic()
            ctls[source].round()
            if r:
                cpu[source].append(time.process_time() - c0)
                wall[source].append(time.monotonic() - w0)
    return cpu, wall


def start_events(
    run: str,
    labels: dict[str, str],
    events: int,
    first_update: dict[str, float],
    start_event: dict[str, float],
) -> tuple[list[float], list[str]]:
    """Start ``events`` labelled containers one at a time; the seconds from each one's start
    event to its first limit, and their ids."""
    latencies: list[float] = []
    event_ids: list[str] = []
    for k in range(events):
        out = subprocess.run(
            ["docker", "run", "-d", "--network", "none", "--name", f"bench-{run}-ev{k}"]
            + [a for key, v in labels.items() for a in ("--label", f"{key}={v}")]
            + [IMAGE, "sh", "-c", LOOP],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        cid = out.stdout.strip()
        event_ids.append(cid)
        end = time.monotonic() + 10
        while cid not in first_update and time.monotonic() < end:
            time.sleep(0.01)
        if cid in first_update and cid in start_event:
            latencies.append(first_update[cid] - start_event[cid])
        time.sleep(0.3)
    return latencies, event_ids


def run_size(
    n: int,
    rounds: int,
    events: int,
    gap: float,
    sources: list[str],
    client: Any,
    workdir: Path,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    labels = {"flowcon.enable": "true", "flowcon.bench": run, "flowcon.test.bench": "1"}
    labels.update(extra_labels or {})
    host_cpus = client.info()["NCPU"]
    ctls: dict[str, Controller] = {}
    engines: dict[str, DockerEngine] = {}  # each controller's engine, as its concrete type
    for source in sources:
        cfg = Config(
            itval=20,
            state_file=str(workdir / f"state-{run}-{source}.json"),
            match_labels={"flowcon.bench": run},
            cpu_source=source,  # type: ignore[arg-type]
        )
        eng = DockerEngine(cgroup_root=cfg.cgroup_root if source == "auto" else None)
        ctls[source] = Controller(eng, cfg, host_cpus, StateStore(cfg.state_file))
        engines[source] = eng
    ctl = ctls[sources[0]]  # also handles the events
    engine = engines[sources[0]]
    first_update: dict[str, float] = {}
    start_event: dict[str, float] = {}
    real_update = engine.update_cpu

    def update(cid: str, body: dict[str, int | str]) -> None:
        real_update(cid, body)
        first_update.setdefault(cid, time.time())

    engine.update_cpu = update  # type: ignore[method-assign]
    listener = EventListener(engine, ctl.on_start, ctl.on_finish, lambda: None)
    real_dispatch = listener.dispatch

    def dispatch(event: dict[str, Any]) -> None:
        if event.get("Action") == "start" and "timeNano" in event:
            start_event.setdefault(event["id"], event["timeNano"] / 1e9)
        real_dispatch(event)

    listener.dispatch = dispatch  # type: ignore[method-assign]
    try:
        for k in range(n):
            client.containers.run(
                IMAGE, ["sh", "-c", LOOP], detach=True, labels=labels, network_mode="none",
                name=f"bench-{run}-{k}",
            )  # fmt: skip
        time.sleep(1.0)
        c0 = time.process_time()
        ctl.resync()
        resync_cpu = time.process_time() - c0
        for other in sources[1:]:
            ctls[other].resync()
        cpu, wall = timed_rounds(ctls, sources, rounds, gap)
        sample = next(iter(ctls[sources[0]].tracked.values()), None)
        cpu_from = sample.monitor.cpu_source if sample else None
        listener.start()
        listener.connected.wait(10)
        time.sleep(0.5)
        c0 = time.process_time()
        latencies, event_ids = start_events(run, labels, events, first_update, start_event)
        start_cpu = (time.process_time() - c0) / max(events, 1)
        c0 = time.process_time()
        for cid in event_ids:
            subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
        time.sleep(1.0)
        finish_cpu = (time.process_time() - c0) / max(events, 1)
        return {
            "n": n,
            "resync_cpu": resync_cpu,
            "cpu_from": cpu_from,
            "round_cpu": {s: statistics.mean(v) for s, v in cpu.items()},
            "round_cpu_all": cpu,
            "round_wall": {s: statistics.mean(v) for s, v in wall.items()},
            "start_event_cpu": start_cpu,
            "finish_event_cpu": finish_cpu,
            "latencies": latencies,
        }
    finally:
        with cleanup_guard():
            listener.stop()
            for c in client.containers.list(
                ignore_removed=True, all=True, filters={"label": f"flowcon.bench={run}"}
            ):
                with contextlib.suppress(docker.errors.APIError):
                    c.remove(force=True)
            for e in engines.values():
                e.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds per CPU source")
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--gap", type=float, default=20.0, help="seconds between rounds (itval)")
    ap.add_argument(
        "--sources",
        nargs="+",
        choices=["auto", "engine"],
        default=["auto", "engine"],
        help="CPU sources to compare in the same run: auto (cgroup files), engine (stats API)",
    )
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on every container it starts"
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # as Ctrl-C: cleanup runs
    logging.basicConfig(level=logging.WARNING)
    client = docker.from_env()
    extra = dict(kv.split("=", 1) for kv in args.label)
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            run_size(n, args.rounds, args.events, args.gap, args.sources, client, Path(tmp), extra)
            for n in args.sizes
        ]
    print(
        f"{'containers':>10} {'CPU from':>9} {'round CPU s':>12} {'% core @20s':>12} "
        f"{'round wall s':>12}"
    )
    for r in results:
        for source in args.sources:
            label = r["cpu_from"] if source == args.sources[0] else "engine"
            rc = r["round_cpu"][source]
            print(
                f"{r['n']:>10} {label or '?':>9} {rc:>12.4f} {100 * rc / 20:>11.3f}% "
                f"{r['round_wall'][source]:>12.2f}   rounds: "
                + " ".join(f"{x:.3f}" for x in r["round_cpu_all"][source])
            )
        if len(args.sources) > 1:
            a, b = (r["round_cpu"][s] for s in args.sources[:2])
            print(f"{'':>10} ratio {args.sources[0]}/{args.sources[1]}: {a / b:.2f}")
    print(
        f"\n{'containers':>10} {'resync CPU s':>12} {'start ev CPU s':>15} "
        f"{'finish ev CPU s':>16} {'lat p50 ms':>10} {'lat p95 ms':>10}"
    )
    for r in results:
        lat = r["latencies"] or [float("nan")]
        print(
            f"{r['n']:>10} {r['resync_cpu']:>12.4f} {r['start_event_cpu']:>15.4f} "
            f"{r['finish_event_cpu']:>16.4f} "
            f"{1000 * statistics.median(lat):>10.0f} {1000 * pct(lat, 0.95):>10.0f}"
        )
    print(
        "(% core @20s = round CPU / itval 20 s; latency = engine start event -> our update;\n"
        " with CPU from cgroups, I/O stats are fetched every io_stats_interval = 60 s, i.e.\n"
        " in one of three measured rounds, as in steady state)"
    )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM: the finally blocks cleaned up
        print(f"interrupted ({exc or 'SIGINT'}): its containers were removed", file=sys.stderr)
        sys.exit(130)
