#!/usr/bin/env python3
"""The live allocator at a cluster's size: rounds, API latency, intake, memory, restarts.

Per declared inventory (16 x 8 ... 1,024 x 8 GPUs) the real daemon (``Allocator``: HTTP API,
SQLite store, planner, measurement intake) runs with a fake executor that acknowledges
starts, stops and rescales after ``--delay`` seconds (``flowcon.testing.fake_executor``; no
containers). Two phases:

1. **Replay** (in this process): an ElasticFlow trace, thinned or replicated and shifted to
   the cluster's size (cluster04's 1,024 GPUs is factor 1), submitted through the HTTP API
   at the slot where the simulator takes each job, at the trace's pace times ``--speed``
   (0: as fast as the rounds go). This process is the planning loop: it steps the
   daemon's clock to the next decision time (the planner's or the next arrival's) and runs
   one round (``Allocator.plan_round``), as ``tests/allocator/test_planner_matches_simulator.py``
   drives the planner. Meanwhile a second process runs ``--clients`` HTTP clients on
   ``GET /api/v1/jobs``, each waiting ``--think`` seconds after an answer (1 s: a client
   polling the list about once a second; 0: a closed loop, as fast as the answers come),
   and one agent report per node every ``--itval`` seconds. The GPU
   counts of every decision and every admission are hashed and compared with the
   simulator's on the same jobs (same policy object class, no overhead, no placement).
2. **Load** (a child process: the daemon alone): the replay's store, topped up with
   best-effort copies of trace jobs to ``--active`` active jobs, opened by a fresh daemon
   (restart time: spawn to its first round), whose loop then plans back to back while the
   clients submit and list jobs and the agents report. Then it is killed (SIGKILL) during
   a round and started again on the same store: every submit acknowledged before the
   kill must be in it, the database must pass ``PRAGMA integrity_check``.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 16x8,64x8,256x8,1024x8] [--quick]

Prints a table per size on stderr and one JSON line last (``simulate`` holds the
simulator's time on the same jobs: the same-run baseline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.allocator.config import load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.records import core_job
from flowcon.allocator.store import Store, new_record
from flowcon.allocator.target import placement_by_node
from flowcon.jobspec.spec import JobSpec, ThroughputProfile
from flowcon.policy_registry import make_policy
from flowcon.sim.cli import DEFAULT_THROUGHPUTS, SHARED
from flowcon.sim.engine import Simulator
from flowcon.sim.loaders import load_throughputs, load_trace
from flowcon.testing.fake_executor import declared_inventory, fake_target
from flowcon.testing.recorder import Decisions, Recorder

if __package__ in (None, ""):  # run as a script: the repository root, for benchmarks.*
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.decision_hash import decisions_hash, outcome_hash

SLOT = 60.0
BASE_GPUS = 1024  # cluster04's cluster: factor 1
IMAGE = "bench/{model}:latest"
TOKENS = {"token": "op-bench", "user_token": "user-bench", "read_token": "read-bench",
          "agent_token": "agent-bench"}  # fmt: skip
CONFIG = """\
allocator:
  listen: 127.0.0.1:0
  state_dir: {state}
  slot_seconds: {slot}
  token: {token}
  user_token: {user_token}
  read_token: {read_token}
  agent_token: {agent_token}
gpus:
  declared:
    nodes: []
"""

# -- the trace --------------------------------------------------------------------------


def boundary(t: float) -> float:
    return math.ceil(t / SLOT - 1e-9) * SLOT


def scaled_trace(
    trace: Path, gpus: int, start: float | None, window: float, shift: float
) -> list[JobSpec]:
    """The trace's jobs submitted in [start, start + window) (start: its first), thinned
    (every k-th job) or replicated (k copies, copy i shifted by i * shift seconds) by
    gpus / 1,024, submitted at the slot boundary where the simulator takes them."""
    jobs = load_trace(trace, load_throughputs(DEFAULT_THROUGHPUTS))
    t0 = jobs[0].submit_time if start is None else start
    jobs = [j for j in jobs if t0 <= j.submit_time < t0 + window]
    factor = gpus / BASE_GPUS
    if factor < 1:
        copies, step = 1, round(1 / factor)
    else:
        copies, step = round(factor), 1
    rows = [(j.submit_time + i * shift, i, j) for i in range(copies) for j in jobs[::step]]
    rows.sort(key=lambda r: (r[0], r[1]))
    out = []
    for n, (t, i, j) in enumerate(rows):
        sub = boundary(t - t0)
        deadline = None if j.deadline is None else j.deadline + i * shift - t0
        if deadline is not None and deadline <= sub:
            continue  # its deadline passed before the slot it is taken at
        out.append(spec_of(f"j{n}", j, sub, deadline))
    return out


def spec_of(name: str, job: Job, submit: float, deadline: float | None) -> JobSpec:
    return JobSpec(
        name=name,
        image=IMAGE.format(model=job.model or "model"),
        command=("true",),
        global_batch_size=job.batch_size,
        iterations=int(job.iterations),
        submit_time=submit,
        deadline=deadline,
        best_effort=deadline is None,
        profile=ThroughputProfile(tuple(sorted(job.curve.points.items()))),
    )


def submit_body(spec: JobSpec, now: float) -> dict[str, object]:
    """The spec as a client posts it: deadline in seconds after ``now``."""
    assert spec.profile is not None
    body: dict[str, object] = {
        "name": spec.name,
        "image": spec.image,
        "command": list(spec.command),
        "global_batch_size": spec.global_batch_size,
        "iterations": spec.iterations,
        "profile": {str(g): v for g, v in spec.profile.points},
    }
    if spec.deadline is None:
        body["best_effort"] = True
    else:
        body["deadline"] = spec.deadline - now
    return body


def planner_job(spec: JobSpec) -> Job:
    """The job as the planner hands it to the policy (its curve from the stored profile)."""
    assert spec.profile is not None
    return core_job(spec, ThroughputCurve(spec.profile.as_dict()))


# -- the simulator side -----------------------------------------------------------------


def simulate(specs: list[JobSpec], topo: Topology) -> dict[str, Any]:
    rec = Recorder(make_policy("elasticflow", sticky=True))
    jobs = [planner_job(s) for s in specs]
    t0, c0 = time.perf_counter(), time.process_time()
    res = Simulator(jobs, topo, rec, slot=SLOT, overhead=0.0, place=False).run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    admitted = {r.job.job_id: r.admitted for r in res.results}
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "decisions": len(rec.decisions),
        "admitted": sum(admitted.values()),
        "outcome_hash": outcome_hash(res),
        "decisions_hash": decisions_hash(admitted, rec.decisions),
        "_admitted": admitted,
        "_decisions": rec.decisions,
    }


# -- load: HTTP clients and agents, in a process of their own ---------------------------


def _timed(req: urllib.request.Request) -> tuple[float, int, bytes]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            body = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    return time.perf_counter() - t0, status, body


def _request(url: str, token: str, body: object | None = None) -> urllib.request.Request:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    return req


@dataclass
class LoadPlan:
    url: str
    clients: int
    submit_rate: float  # submits per second, all clients together (0: GETs only)
    nodes: int
    itval: float
    prefix: str  # names of the clients' submitted jobs
    template: dict[str, object] = field(default_factory=dict)  # a best-effort job body
    think: float = 0.0  # seconds a client waits after each answer (0: a closed loop)


def _client(plan: LoadPlan, k: int, stop: Any, out: dict[str, list[float]]) -> None:
    n = 0
    gap = plan.clients / plan.submit_rate if plan.submit_rate > 0 else math.inf
    next_submit = time.monotonic() + gap * k / plan.clients
    while not stop.is_set():
        n += 1
        if time.monotonic() >= next_submit:
            next_submit += gap
            name = f"{plan.prefix}{k}x{n}"
            body = {**plan.template, "name": name}
            req = _request(plan.url + "/api/v1/jobs", TOKENS["user_token"], body)
            kind = "submit"
        else:
            req = _request(plan.url + "/api/v1/jobs", TOKENS["read_token"])
            kind = "jobs"
        try:
            took, status, _ = _timed(req)
        except OSError:
            out.setdefault("errors", []).append(time.time())
            time.sleep(0.05)
            continue
        out.setdefault(kind, []).append(took)
        if kind == "submit" and status in (200, 201):
            out.setdefault("acked_names", []).append(name)  # type: ignore[arg-type]
        if plan.think > 0:
            stop.wait(plan.think)


def _agents(plan: LoadPlan, stop: Any, out: dict[str, list[float]]) -> None:
    """One report per node every itval: a row per job container on the node (metric
    value only, no step or rate: a row that changes no decision, so parity holds)."""
    by_node: dict[int, list[str]] = {}
    gap = plan.itval / max(1, plan.nodes)
    node, next_at, refresh_at = 0, time.monotonic(), 0.0
    while not stop.is_set():
        if time.monotonic() >= refresh_at:
            by_node = _containers(plan.url)
            refresh_at = time.monotonic() + plan.itval
        rows = [
            {"container_id": f"{job}--node{node}", "name": f"flowcon-{job}--node{node}",
             "job": job, "metric": "loss", "value": 0.5, "ts": time.time()}
            for job in by_node.get(node, [])
        ]  # fmt: skip
        req = _request(
            plan.url + "/api/v1/measurements",
            TOKENS["agent_token"],
            {"node": f"node{node}", "measurements": rows},
        )
        with contextlib.suppress(OSError):
            out.setdefault("measurements", []).append(_timed(req)[0])
        node = (node + 1) % max(1, plan.nodes)
        next_at += gap
        stop.wait(max(0.0, next_at - time.monotonic()))


def _containers(url: str) -> dict[int, list[str]]:
    try:
        _, _, body = _timed(_request(url + "/api/v1/jobs", TOKENS["read_token"]))
        jobs = json.loads(body).get("jobs", [])
    except (OSError, ValueError):
        return {}
    out: dict[int, list[str]] = {}
    for j in jobs:
        for n in sorted({int(p[0]) for p in j.get("placement") or []}):
            out.setdefault(n, []).append(j["name"])
    return out


def run_load(plan: LoadPlan, started: Any, stop: Any, results: Any) -> None:
    """The load process: ``plan.clients`` client threads and the agents, until ``stop``."""
    out: dict[str, list[float]] = {}
    started.set()
    threads = [
        threading.Thread(target=_client, args=(plan, k, stop, out), daemon=True)
        for k in range(plan.clients)
    ]
    if plan.itval > 0:
        threads.append(threading.Thread(target=_agents, args=(plan, stop, out), daemon=True))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    results.put(out)


@contextlib.contextmanager
def load(plan: LoadPlan) -> Iterator[dict[str, Any]]:
    """Run the load process for the ``with`` block; its measurements land in the dict."""
    ctx = mp.get_context("spawn")
    started, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=run_load, args=(plan, started, stop, results), daemon=True)
    proc.start()
    if not started.wait(timeout=120):
        raise RuntimeError("the load process did not start")
    got: dict[str, Any] = {}
    try:
        yield got
    finally:
        stop.set()
        got.update(results.get(timeout=120))
        proc.join(timeout=30)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def stats_ms(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": _ms(pct(values, 0.5)),
        "p99_ms": _ms(pct(values, 0.99)),
        "max_ms": _ms(max(values) if values else None),
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


# -- phase 1: the replay ----------------------------------------------------------------


def write_config(state: Path, nodes: int, per_node: int) -> Path:
    text = CONFIG.format(state=state, slot=SLOT, **TOKENS)
    decl = "".join(f"      - {{name: node{i}, gpus: {per_node}}}\n" for i in range(nodes))
    text = text.replace("    nodes: []\n", "    nodes:\n" + decl)
    path = state.parent / "allocator.yaml"
    path.write_text(text)
    return path


class SteppedClock:
    """The daemon's clock: the trace time the driver stepped it to."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_allocator(
    cfg_path: Path, clock: Callable[[], float], delay: float, adopt: bool = False
) -> Allocator:
    """The daemon over the fake executor; ``adopt``: the jobs placed in the store run
    (their containers outlived the previous daemon, as on an engine)."""
    cfg = load_config(cfg_path)
    nodes = cfg.section("gpus")["declared"]["nodes"]
    inv = declared_inventory(len(nodes), int(nodes[0]["gpus"]))
    running = {}
    if adopt:
        store = Store(cfg.db_path)
        try:
            running = {
                r.name: placement_by_node(inv, r.placement)
                for r in store.active_jobs()
                if r.placement
            }
        finally:
            store.close()
    alloc = Allocator(cfg, fake_target(inv, delay, running), clock=clock)
    # no training runs: a job completes on its estimated progress (the simulator's world)
    alloc.planner.complete_on_progress = True
    return alloc


def replay(specs: list[JobSpec], cfg_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    clock = SteppedClock(specs[0].submit_time if specs else 0.0)
    alloc = make_allocator(cfg_path, clock, args.delay)
    alloc.start(port=0, plan_loop=False)
    plan = LoadPlan(alloc.url, args.clients, 0, args.nodes, args.itval, "x", think=args.think)
    rounds: list[float] = []
    lag: list[float] = []
    admitted: dict[str, bool] = {}
    decisions: Decisions = {}
    peak = 0
    try:
        with load(plan) as got:
            wait_ready(alloc.url)
            peak = _drive(specs, alloc, clock, args.speed, rounds, lag, admitted, decisions)
    finally:
        alloc.stop()
    return {
        "rounds": len(rounds),
        "round": stats_ms(rounds),
        "behind_pace_s": round(max(lag), 3) if lag else 0.0,
        "jobs_get": stats_ms(got.get("jobs", [])),
        "measurements": stats_ms(got.get("measurements", [])),
        "peak_active": peak,
        "decisions_hash": decisions_hash(admitted, decisions),
        "_admitted": admitted,
        "_decisions": decisions,
    }


def wait_ready(url: str) -> None:
    for _ in range(300):
        with contextlib.suppress(OSError):
            if _timed(urllib.request.Request(url + "/healthz"))[1] in (200, 503):
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} does not answer")


def _drive(
    specs: list[JobSpec],
    alloc: Allocator,
    clock: SteppedClock,
    speed: float,
    rounds: list[float],
    lag: list[float],
    admitted: dict[str, bool],
    decisions: Decisions,
) -> int:
    """The planning loop of the replay: the parity test's driver, over HTTP."""
    url = alloc.url + "/api/v1/jobs"
    i, peak = 0, 0
    t = specs[0].submit_time
    wall0, trace0 = time.monotonic(), t
    while True:
        if speed > 0:
            due = wall0 + (t - trace0) / speed
            lag.append(max(0.0, time.monotonic() - due))
            time.sleep(max(0.0, due - time.monotonic()))
        clock.t = t
        arrived = False
        while i < len(specs) and specs[i].submit_time <= t + 1e-9:
            _, status, body = _timed(_request(url, TOKENS["user_token"], submit_body(specs[i], t)))
            if status not in (200, 201):
                raise RuntimeError(f"submit {specs[i].name}: {status} {body[:200]!r}")
            admitted[specs[i].name] = status == 201
            i, arrived = i + 1, True
        t0 = time.perf_counter()
        plan = alloc.plan_round(force=arrived)
        rounds.append(time.perf_counter() - t0)
        active = alloc.store.active_jobs()
        peak = max(peak, len(active))
        if not active and i >= len(specs):
            return peak
        decisions[t] = dict(plan.allocation)
        nxt = alloc.planner.next_decision(t)
        if i < len(specs):
            nxt = specs[i].submit_time if nxt is None else min(nxt, specs[i].submit_time)
        assert nxt is not None
        assert nxt > t
        t = nxt


# -- phase 2: the daemon alone under load, killed and restarted -------------------------


def top_up(db: Path, specs: list[JobSpec], active: int, now: float) -> int:
    """Best-effort copies of trace jobs, stored admitted (as a submit stores them) until
    ``active`` jobs are active; the daemon's policy restores them at its start."""
    store = Store(db)
    try:
        have = len(store.active_jobs())
        need = max(0, active - have)
        rng = random.Random(1)
        with store.transaction():
            for n in range(need):
                base = rng.choice(specs)
                spec = replace(base, name=f"be{n}", submit_time=now, deadline=None,
                               best_effort=True, owner="operator")  # fmt: skip
                assert spec.profile is not None
                rec = new_record(spec, "admitted", spec.profile.as_dict(),
                                 reason="best effort: runs on spare GPUs")  # fmt: skip
                store.put_job(rec)
                store.record_admission(spec.name, True, rec.reason, None, False, now)
                store.append_event("admitted", spec.name, ts=now, reason=rec.reason)
        return have + need
    finally:
        store.close()


class Child:
    """The daemon alone in a process (``--serve``): it prints READY, then one line per
    round."""

    def __init__(self, cfg: Path, now: float, speed: float, delay: float) -> None:
        cmd = [sys.executable, __file__, "--serve", str(cfg), "--clock", repr(now),
               "--speed", repr(speed), "--delay", repr(delay)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        self.ready: dict[str, Any] = {}
        self.rounds: list[dict[str, Any]] = []
        self.in_round = threading.Event()
        self.restart_s = 0.0
        line = self._line()
        self.ready = json.loads(line.split(" ", 1)[1])
        self.restart_s = time.perf_counter() - self.t0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _line(self) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the daemon exited: {self.proc.wait()}")
            if line.startswith("READY "):
                return line

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("BEGIN"):
                self.in_round.set()
            elif line.startswith("ROUND "):
                self.in_round.clear()
                self.rounds.append(json.loads(line.split(" ", 1)[1]))

    def kill_in_round(self) -> None:
        """SIGKILL while a round runs (a moment into it)."""
        if not self.in_round.wait(timeout=300):
            raise RuntimeError("no round began")
        last = self.rounds[-1]["s"] if self.rounds else 0.01
        time.sleep(min(0.5, last * 0.3))
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve(cfg_path: Path, start: float, speed: float, delay: float) -> int:
    import faulthandler

    faulthandler.register(signal.SIGUSR1)
    """``--serve``: the daemon on the store, its clock from ``start`` at ``speed``; plans
    back to back (a round every loop iteration) until SIGTERM."""
    m0 = time.monotonic()
    clock = lambda: start + (time.monotonic() - m0) * speed  # noqa: E731
    alloc = make_allocator(cfg_path, clock, delay, adopt=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    alloc.start(port=0, plan_loop=False)  # adopts, restores the policy, runs one round
    alloc.planner.wake_loop = lambda: None  # the loop below plans back to back: a submit
    # answers with its next plan, as with the daemon's own loop
    print("READY " + json.dumps({"url": alloc.url, **_memory()}), flush=True)
    while not done.is_set():
        print("BEGIN", flush=True)
        t0 = time.perf_counter()
        alloc.plan_round(force=True)
        took = time.perf_counter() - t0
        info = {"s": took, "active": len(alloc.store.active_names()), **_memory()}
        print("ROUND " + json.dumps(info), flush=True)
    alloc.stop()
    return 0


def _memory() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key.lower() + "_kib"] = int(value.split()[0])
    return out


def loaded(
    cfg: Path, db: Path, now: float, specs: list[JobSpec], args: argparse.Namespace
) -> dict[str, Any]:
    active = top_up(db, specs, args.active, now)
    alloc = make_allocator(cfg, SteppedClock(now), 0.0, adopt=True)
    alloc.plan_round(force=True)  # the topped-up jobs placed, as the replay left the rest
    alloc.stop()
    child = Child(cfg, now, args.load_speed, args.delay)
    restart_s = child.restart_s
    template = submit_body(replace(specs[0], deadline=None, best_effort=True), now)
    plan = LoadPlan(
        child.ready["url"],
        args.clients,
        args.submit_rate,
        args.nodes,
        args.itval,
        "c",
        template,
        think=args.think,
    )
    try:
        with load(plan) as got:
            time.sleep(args.load_seconds)
            rounds = list(child.rounds)
            child.kill_in_round()
        integrity = _integrity(db)
        again = Child(cfg, now, args.load_speed, args.delay)
        try:
            lost = _lost(again.ready["url"], got.get("acked_names", []))
        finally:
            again.stop()
    finally:
        child.stop()
    rss = [r["vmrss_kib"] for r in rounds] or [child.ready["vmrss_kib"]]
    hwm = max([r["vmhwm_kib"] for r in rounds] or [child.ready["vmhwm_kib"]])
    return {
        "active": active,
        "active_in_rounds": max((r["active"] for r in rounds), default=None),
        "rounds": len(rounds),
        "round": stats_ms([r["s"] for r in rounds]),
        "submit": stats_ms(got.get("submit", [])),
        "jobs_get": stats_ms(got.get("jobs", [])),
        "measurements": stats_ms(got.get("measurements", [])),
        "client_errors": len(got.get("errors", [])),
        "rss_mib": round(max(rss) / 1024, 1),
        "rss_peak_mib": round(hwm / 1024, 1),
        "store_mib": round(_size(db) / 2**20, 2),
        "restart_s": round(restart_s, 2),
        "restart_after_kill_s": round(again.restart_s, 2),
        "acked_submits": len(got.get("acked_names", [])),
        "lost_after_kill": lost,
        "integrity": integrity,
    }


def _integrity(db: Path) -> str:
    conn = sqlite3.connect(str(db))
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _lost(url: str, names: list[str]) -> int:
    _, status, body = _timed(_request(url + "/api/v1/jobs", TOKENS["read_token"]))
    have = {j["name"] for j in json.loads(body)["jobs"]} if status == 200 else set()
    return sum(1 for n in names if n not in have)


def _size(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


# -- the simulator at the same size ------------------------------------------------------


def replicated_csv(trace: Path, copies: int, shift: float, out: Path) -> Path:
    """The trace file with ``copies`` copies of every row, copy i shifted by i * shift
    seconds (submission and deadline), ids suffixed."""
    import csv

    with trace.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for i in range(copies):
            for row in rows:
                r = dict(row)
                r["job_id"] = f"{row['job_id']}-r{i}"
                r["submission_time"] = str(int(float(row["submission_time"]) + i * shift))
                if row.get("deadline"):
                    r["deadline"] = str(int(float(row["deadline"]) + i * shift))
                w.writerow(r)
    return out


def simulate_cli(trace: Path, cluster: str) -> dict[str, Any]:
    """``flowcon simulate`` as a user runs it: wall time, decisions, peak RSS."""
    cmd = [sys.executable, "-m", "flowcon", "simulate", "--trace", str(trace),
           "--cluster", cluster, "--policy", "elasticflow"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {status}")
    summary = json.loads(out.strip().splitlines()[-1])
    decisions = int(summary.get("decisions") or 0)
    return {
        "trace": trace.name,
        "cluster": cluster,
        "jobs": summary.get("jobs"),
        "decisions": decisions,
        "wall_s": round(wall, 2),
        "ms_per_decision": round(1000 * wall / decisions, 3) if decisions else None,
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "ratio": summary.get("deadline_satisfactory_ratio"),
    }


def simulator_at_scale(args: argparse.Namespace) -> dict[str, Any]:
    """cluster04 on its 128 x 8 cluster, and replicated 8 times on 1,024 x 8."""
    base = simulate_cli(args.trace, "128x8")
    with tempfile.TemporaryDirectory(prefix="flowcon-scale-") as tmp:
        big_trace = replicated_csv(args.trace, 8, args.shift, Path(tmp) / "x8.csv")
        big = simulate_cli(big_trace, "1024x8")
    per = (big["ms_per_decision"] or 0) / (base["ms_per_decision"] or 1)
    return {"base": base, "scaled": big, "per_decision_vs_base": round(per, 2)}


# -- one size, the report ---------------------------------------------------------------


def run_size(size: str, args: argparse.Namespace) -> dict[str, Any]:
    topo = Topology.from_spec(size)
    nodes, per = topo.total_gpus // topo.gpus_per_node, topo.gpus_per_node
    args.nodes = nodes
    specs = scaled_trace(args.trace, topo.total_gpus, args.start, args.window, args.shift)
    sim = simulate(specs, topo)
    tmp = Path(tempfile.mkdtemp(prefix="flowcon-scale-"))
    try:
        cfg = write_config(tmp / "state", nodes, per)
        live = replay(specs, cfg, args)
        db = tmp / "state" / "allocator.db"
        now = max(live["_decisions"], default=0.0)
        peak = loaded(cfg, db, now, specs, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    same = live["decisions_hash"] == sim["decisions_hash"]
    if not same:
        _say_first_difference(sim, live)
    return {
        "size": size,
        "gpus": topo.total_gpus,
        "jobs": len(specs),
        "parity": same,
        "simulate": {k: v for k, v in sim.items() if not k.startswith("_")},
        "replay": {k: v for k, v in live.items() if not k.startswith("_")},
        "load": peak,
    }


def _say_first_difference(sim: dict[str, Any], live: dict[str, Any]) -> None:
    for name, a in sim["_admitted"].items():
        if live["_admitted"].get(name) != a:
            print(f"  admission of {name}: simulator {a}, live {live['_admitted'].get(name)}",
                  file=sys.stderr)  # fmt: skip
            return
    for t in sorted(set(sim["_decisions"]) | set(live["_decisions"])):
        a, b = sim["_decisions"].get(t), live["_decisions"].get(t)
        if a != b:
            print(f"  decision at {t}: simulator {a}, live {b}", file=sys.stderr)
            return


def table(rows: list[dict[str, Any]]) -> str:
    head = ("GPUs", "jobs", "active", "round p50/p99 ms", "loaded round p99", "submit p99",
            "GET p99", "report p99", "RSS MiB", "restart s", "parity")  # fmt: skip
    lines = [" | ".join(head)]
    for r in rows:
        rp, ld = r["replay"], r["load"]
        lines.append(" | ".join(str(x) for x in (
            r["gpus"], r["jobs"], ld["active"],
            f"{rp['round']['p50_ms']}/{rp['round']['p99_ms']}", ld["round"]["p99_ms"],
            ld["submit"]["p99_ms"], ld["jobs_get"]["p99_ms"], ld["measurements"]["p99_ms"],
            ld["rss_mib"], ld["restart_s"], r["parity"],
        )))  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16x8,64x8,256x8,1024x8")
    ap.add_argument("--trace", type=Path, default=SHARED / "data/elasticflow-traces/cluster04.csv")
    ap.add_argument("--start", type=float, default=None, help="trace time of the window")
    ap.add_argument("--window", type=float, default=3 * 3600.0, help="trace seconds replayed")
    ap.add_argument("--shift", type=float, default=7.0, help="seconds between replicas")
    ap.add_argument("--speed", type=float, default=0.0, help="trace s per wall s (0: no wait)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument(
        "--think",
        type=float,
        default=1.0,
        help="s a client waits after each answer (a poll every ~1 s; 0: a closed loop)",
    )
    ap.add_argument("--itval", type=float, default=20.0, help="agent report interval (s)")
    ap.add_argument("--submit-rate", type=float, default=1.0, help="client submits per s")
    ap.add_argument("--active", type=int, default=None, help="active jobs under load")
    ap.add_argument("--load-seconds", type=float, default=20.0)
    ap.add_argument("--load-speed", type=float, default=1.0, help="trace s per wall s, load")
    ap.add_argument("--delay", type=float, default=0.001, help="executor ack (s)")
    ap.add_argument("--quick", action="store_true", help="one small size, a few seconds")
    ap.add_argument(
        "--simulator", action="store_true", help="flowcon simulate: trace x8 on 1024x8, 128x8"
    )
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--clock", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.window, args.clients, args.load_seconds = "16x8", 6 * 3600.0, 4, 2.0
        args.active = args.active or 50
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        return serve(args.serve, args.clock, args.speed, args.delay)
    if args.simulator:
        print(json.dumps({"bench": "simulator-scale", **simulator_at_scale(args)}))
        return 0
    rows = []
    base = args.active
    for size in args.sizes.split(","):
        gpus = Topology.from_spec(size).total_gpus
        # 2,000 active jobs at 256 x 8, in proportion elsewhere
        args.active = base if base is not None else max(50, round(2000 * gpus / 2048))
        row = run_size(size, args)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(table(rows), file=sys.stderr)
    out = {"bench": "allocator-scale", "quick": args.quick, "think_s": args.think, "sizes": rows}
    print(json.dumps(out))
    return 0 if all(r["parity"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
