"""Agent overhead on the real engine: CPU seconds per control round and per event with
10 and 50 managed containers, and start-event -> limit latency (p50/p95).

Targets (docs/agent.md): <= 1% of one core with 50 containers at itval 20 s, p95 <= 1 s.

    python3 benchmarks/bench_agent.py [--sizes 10 50] [--rounds 3] [--gap 20] [--events 10]

Containers are testbox loops printing one metric line every 0.5 s; all carry the label
flowcon.bench=<run id> and are removed at the end, pass or fail.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker
from flowcon.agent.controller import Controller
from flowcon.agent.state import StateStore
from flowcon.listeners.events import EventListener

from flowcon.config import Config
from flowcon.engine.docker_engine import DockerEngine

IMAGE = "flowcon/testbox:latest"
LOOP = (
    "i=0; while true; do i=$((i+1)); "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((100000/(i+10))); sleep 0.5; done'
)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def run_size(
    n: int, rounds: int, events: int, gap: float, client: Any, workdir: Path
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    labels = {"flowcon.enable": "true", "flowcon.bench": run, "flowcon.test.bench": "1"}
    cfg = Config(
        itval=20, state_file=str(workdir / f"state-{run}.json"), match_labels={"flowcon.bench": run}
    )
    engine = DockerEngine()
    host_cpus = client.info()["NCPU"]
    ctl = Controller(engine, cfg, host_cpus, StateStore(cfg.state_file))
    first_update: dict[str, float] = {}
    start_event: dict[str, float] = {}
    real_update = engine.update_cpu

    def update(cid: str, body: dict[str, int]) -> None:
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
        round_cpu, round_wall = [], []
        for _ in range(rounds):
            time.sleep(gap)  # the jobs print meanwhile, as between two real rounds
            c0, w0 = time.process_time(), time.monotonic()
            ctl.round()
            round_cpu.append(time.process_time() - c0)
            round_wall.append(time.monotonic() - w0)
        listener.start()
        listener.connected.wait(10)
        time.sleep(0.5)
        latencies, event_ids = [], []
        c0 = time.process_time()
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
        start_cpu = (time.process_time() - c0) / events
        c0 = time.process_time()
        for cid in event_ids:
            subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
        time.sleep(1.0)
        finish_cpu = (time.process_time() - c0) / events
        return {
            "n": n,
            "resync_cpu": resync_cpu,
            "round_cpu": statistics.mean(round_cpu),
            "round_wall": statistics.mean(round_wall),
            "start_event_cpu": start_cpu,
            "finish_event_cpu": finish_cpu,
            "latencies": latencies,
        }
    finally:
        listener.stop()
        for c in client.containers.list(all=True, filters={"label": f"flowcon.bench={run}"}):
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--gap", type=float, default=20.0, help="seconds between rounds (itval)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            run_size(n, args.rounds, args.events, args.gap, client, Path(tmp)) for n in args.sizes
        ]
    print(
        f"{'containers':>10} {'round CPU s':>12} {'% core @20s':>12} {'round wall s':>12} "
        f"{'start ev CPU s':>15} {'finish ev CPU s':>16} {'lat p50 ms':>10} {'lat p95 ms':>10}"
    )
    for r in results:
        lat = r["latencies"] or [float("nan")]
        print(
            f"{r['n']:>10} {r['round_cpu']:>12.4f} {100 * r['round_cpu'] / 20:>11.3f}% "
            f"{r['round_wall']:>12.2f} {r['start_event_cpu']:>15.4f} "
            f"{r['finish_event_cpu']:>16.4f} "
            f"{1000 * statistics.median(lat):>10.0f} {1000 * pct(lat, 0.95):>10.0f}"
        )
    print("(% core @20s = round CPU / itval 20 s; latency = engine start event -> our update)")


if __name__ == "__main__":
    main()
