"""Rescale overhead of the executor on the plain engine: checkpoint-restart vs stop-free
(paper section 6.6, "scaling overhead"; EDL section 4.2, Elan sections IV-V).

Runs a small CPU job (the elastic-example image: an MLP trained with flowcon.elastic, DDP
over gloo) on a declared inventory, once per scaling mode, and rescales it 1 -> 2 -> 1 ->
... GPUs: ``--events N`` scale-outs and N scale-ins per mode. Per event it prints

  stop    restart: SIGTERM -> every old container gone (the job checkpoints on the way
          out); stop-free: leave signal -> the leaving container exited EXIT_LEFT
  start   creating and starting the new containers (restart: all; stop-free: the joiners)
  gap     the no-progress gap: the job's last step line before the event to its first
          step line at the new world size (the metric lines' own ``ts``)
  prep    the time the new workers spent preparing: for stop-free scale-out the joiners'
          own ``prepare_s`` (their ``joined`` event: python + torch import, model, until
          ready) while the job kept training, else rescale call returned -> the first step
          line at the new size (for restarts: the new containers' start-up)
  steps   last step before the event -> first step after (must continue, not restart)

then per mode the gap's p50/p95 and the preparation time, and as its last line one JSON
object: ``restart_gap_p95_s``, ``stopfree_gap_p95_s``, ``events`` (per mode),
``exactly_once`` (true only when the job's metric lines record the sample ids it trained
on, ``sample_ids`` with ``epoch``, and every id appears at most once per epoch and every
finished epoch has them all; false when the job does not record them).

    python3 benchmarks/bench_rescale.py [--events 5] [--modes restart,stopfree]
    python3 benchmarks/bench_rescale.py --quick          # one event each way per mode
    python3 benchmarks/bench_rescale.py --image flowcon/testbox:latest   # shell job, restart only
    python3 benchmarks/bench_rescale.py --quick --modes migrate,drain,coordinator-leave

Modes that move the job's coordinator (stop-free, at executor level, on a declared
inventory of three nodes with two GPUs each; each adds the restart mode to the same run,
whose gap is the baseline in the JSON line):

  migrate            the same count on another node: node1's GPUs 0,1 <-> node2's (every
                     worker moves: the joiners first, then the old ones leave)
  drain              every worker on one node moved off it: one worker on each of two nodes,
                     the first node's leaves and a joiner starts on the third (the drained
                     node holds the lowest-index container, the coordinator's, each time)
  coordinator-leave  a scale-in 2 -> 1 that removes the lowest-index container (the
                     coordinator's), then a scale-out back to 2 (not counted in its gap)

Their gap is the longest pause between two step lines from the event's start to the first
step line at the new placement's size after the size changed (a move is two switches).

Stopped by SIGTERM (``timeout``), SIGINT (Ctrl-C) or an error, it removes the job's
containers, network and checkpoint volume before it exits (130 when interrupted); a second
signal during that cleanup is ignored.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowcon.engine.gpus import discover
from flowcon.executor.backend import Worker
from flowcon.executor.backends.engine import EngineBackend
from flowcon.executor.lifecycle import Executor, ExecutorOptions
from flowcon.interrupts import raise_interrupt
from flowcon.jobspec.spec import parse_jobspec

REPO = Path(__file__).resolve().parent.parent

EXAMPLE = "flowcon/elastic-example:latest"
TESTBOX = "flowcon/testbox:latest"
MODES = ("restart", "stopfree", "migrate", "drain", "coordinator-leave")
# the modes that move the coordinator: stop-free jobs, the restart mode as their baseline
MOVES = ("migrate", "drain", "coordinator-leave")
# the placements each mode's events cycle through (event i goes to [(i + 1) % len])
PLACEMENTS: dict[str, list[dict[str, list[str]]]] = {
    "restart": [{"node1": ["0"]}, {"node1": ["0", "1"]}],
    "stopfree": [{"node1": ["0"]}, {"node1": ["0", "1"]}],
    "migrate": [{"node1": ["0", "1"]}, {"node2": ["0", "1"]}],
    "drain": [
        {"node1": ["0"], "node2": ["0"]},
        {"node2": ["0"], "node3": ["0"]},
        {"node3": ["0"], "node1": ["0"]},
    ],
    "coordinator-leave": [
        {"node1": ["0", "1"]},
        {"node1": ["1"]},
        {"node1": ["1", "0"]},
        {"node1": ["0"]},
    ],
}


def event_kind(mode: str, old: int, new: int) -> str:
    """What a mode's event is: coordinator-leave's scale-outs back are ``scale-out``."""
    if mode == "coordinator-leave" and new > old:
        return "scale-out"
    return mode


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


@dataclass(frozen=True)
class Line:
    """One step line of the job, from container ``cid``."""

    ts: float
    step: int
    world: int | None
    cid: str
    raw: dict[str, Any]


def parse_lines(cid: str, lines: Iterable[str]) -> list[Line]:
    out = []
    for ln in lines:
        if not ln.startswith("{"):
            continue
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if not isinstance(obj, dict) or "event" in obj:
            continue
        step, ts = obj.get("step"), obj.get("ts")
        if not isinstance(step, int) or not isinstance(ts, int | float) or isinstance(ts, bool):
            continue
        world = obj.get("world_size")
        out.append(Line(float(ts), step, world if isinstance(world, int) else None, cid, obj))
    return out


def event_gap(
    lines: Sequence[Line], began: float, world: int, new_ids: set[str]
) -> tuple[Line, Line] | None:
    """(last step line before, first step line after) an event begun at ``began``: the
    first line at world size ``world`` (lines that carry it), else the first line from a
    container the event started; None while there is none."""
    for i, ln in enumerate(lines):
        if i == 0 or ln.ts < began:
            continue
        after = ln.world == world if ln.world is not None else ln.cid in new_ids
        if not after:
            continue
        prev = lines[i - 1]
        if ln.world is not None and prev.world == world:
            continue  # a line at this size before the switch? not this event's
        return prev, ln
    return None


def settle_gap(lines: Sequence[Line], began: float, world: int) -> tuple[Line, Line] | None:
    """The longest pause of an event that may switch more than once (a move: join, then
    leave): (the two step lines around the longest gap) from the last line before
    ``began`` to the first line at world size ``world`` after the size was another one
    (before the event or during it); None while there is no such line."""
    start = None
    other = False
    for i, ln in enumerate(lines):
        if ln.ts < began:
            start = i
            other = ln.world != world
            continue
        if start is None:
            start = i
        if ln.world != world:
            other = True
            continue
        if not other or i == 0:
            continue
        window = lines[start : i + 1]
        pairs = list(itertools.pairwise(window))
        return max(pairs, key=lambda p: p[1].ts - p[0].ts) if pairs else None
    return None


def joined_prepare(lines: Iterable[str]) -> float | None:
    """A joiner's own preparation time (its ``joined`` event's ``prepare_s``)."""
    for ln in lines:
        if '"joined"' not in ln or not ln.startswith("{"):
            continue
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        prep = obj.get("prepare_s") if isinstance(obj, dict) else None
        if obj.get("event") == "joined" and isinstance(prep, int | float):
            return float(prep)
    return None


def exactly_once(lines: Sequence[Line]) -> bool | None:
    """Each sample id once per epoch (lines with ``sample_ids`` and ``epoch``); a step
    trained twice (a restart that repeats steps) counts twice. None when the job records
    no sample ids."""
    recorded = [ln for ln in lines if "sample_ids" in ln.raw and "epoch" in ln.raw]
    if not recorded:
        return None
    seen: dict[int, list[int]] = {}
    for ln in sorted(recorded, key=lambda x: (x.step, x.ts)):
        raw = ln.raw
        ids = raw["sample_ids"]
        if not isinstance(ids, list) or not isinstance(raw["epoch"], int):
            return False
        seen.setdefault(raw["epoch"], []).extend(int(i) for i in ids)
    epochs = sorted(seen)
    for e in epochs:
        if len(seen[e]) != len(set(seen[e])):
            return False
    finished = epochs[:-1]  # the last one may still be running
    sizes = {len(seen[e]) for e in finished[1:]}  # the first one may have started midway
    return all(sorted(seen[e]) == list(range(len(seen[e]))) for e in finished[1:]) and (
        len(sizes) <= 1
    )


class KeepingBackend(EngineBackend):
    """The engine backend that reads a container's output before it removes it, so a
    restarted job's lines before the stop are still there to measure the gap."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.kept: dict[str, tuple[str, list[str]]] = {}  # container id -> (job, lines)

    def remove(self, worker: Worker) -> None:
        if worker.id not in self.kept:
            self.kept[worker.id] = (worker.job, self.logs(worker))
        super().remove(worker)


def job_lines(ex: Executor, be: KeepingBackend, job: str) -> list[Line]:
    out: list[Line] = []
    live = ex.job(job)
    seen = set()
    for w in live.workers if live is not None else ():
        seen.add(w.id)
        out.extend(parse_lines(w.id, be.logs(w)))
    for cid, (owner, lines) in be.kept.items():
        if cid not in seen and owner == job:  # the other mode's job is not this one
            out.extend(parse_lines(cid, lines))
    out.sort(key=lambda ln: ln.ts)
    return out


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``; nan for none."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _shield() -> None:
    """Cleanup must finish: further SIGINT/SIGTERM are ignored from here on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@dataclass
class Row:
    mode: str
    old: int
    new: int
    stop: float
    start: float
    gap: float | None
    prep: float | None
    before: int | None
    after: int | None
    fallback: str | None
    kind: str = ""  # the event (event_kind); "" for the restart / stopfree modes' events


def run_mode(
    ex: Executor,
    be: KeepingBackend,
    spec: Any,
    placements: list[dict[str, list[str]]],
    events: int,
    train_s: float,
    wait_s: float,
    mode: str = "",
) -> tuple[list[Row], list[Line]]:
    """Launch ``spec``, rescale it ``events`` times between the placements, measure (a
    move ``mode``: the gap by ``settle_gap``)."""
    rows: list[Row] = []
    ex.launch(spec, placements[0])
    print(f"launched {spec.name} ({spec.scaling})", flush=True)
    t_end = time.monotonic() + wait_s
    while not job_lines(ex, be, spec.name) and time.monotonic() < t_end:
        time.sleep(0.2)
    for i in range(events):
        time.sleep(train_s)  # let it train a little
        old = ex.job(spec.name)
        old_ids = {w.id for w in old.workers} if old is not None else set()
        began = time.time()
        res = ex.rescale(spec, placements[(i + 1) % len(placements)])
        returned = time.time()
        state = ex.job(spec.name)
        new_ids = {w.id for w in state.workers} - old_ids if state is not None else set()
        found = None
        deadline = time.monotonic() + wait_s
        while found is None and time.monotonic() < deadline:
            now = job_lines(ex, be, spec.name)
            if mode in MOVES:
                found = settle_gap(now, began, res.new_gpus)
            else:
                found = event_gap(now, began, res.new_gpus, new_ids)
            if found is None:
                time.sleep(0.1)
        prev, first = found if found is not None else (None, None)
        preps = [
            p
            for w in (state.workers if state is not None else ())
            if w.id in new_ids and res.mode == "stopfree"
            for p in [joined_prepare(be.logs(w))]
            if p is not None
        ]
        prep = max(preps) if preps else (max(0.0, first.ts - returned) if first else None)
        if res.mode == "stopfree" and res.new_gpus < res.old_gpus:
            prep = None  # nobody new prepared
        rows.append(
            Row(
                res.mode,
                res.old_gpus,
                res.new_gpus,
                res.stop_seconds,
                res.start_seconds,
                first.ts - prev.ts if first and prev else None,
                prep,
                prev.step if prev else None,
                first.step if first else None,
                res.fallback,
                event_kind(mode, res.old_gpus, res.new_gpus) if mode in MOVES else "",
            )
        )
        r = rows[-1]
        if r.gap is None:  # say what the job's containers last printed
            for w in ex.job(spec.name).workers if ex.job(spec.name) is not None else ():  # type: ignore[union-attr]
                logs = be.logs(w)
                events_ = [ln for ln in logs if '"event"' in ln or not ln.startswith("{")]
                print(f"  {w.name} ({w.state}): {events_[-4:]} ... {logs[-3:]}",
                      file=sys.stderr, flush=True)  # fmt: skip
        gap = f"{r.gap:.2f} s" if r.gap is not None else "not seen"
        prep = f"{r.prep:.2f} s" if r.prep is not None else "-"  # type: ignore[assignment]
        what = f"{r.kind} " if r.kind else ""
        print(f"  {what}{spec.scaling} {r.old}->{r.new} ({r.mode}): gap {gap}, prep {prep}",
              flush=True)  # fmt: skip
        if r.gap is None:
            print(
                f"  {spec.name}: no step at {r.new} worker(s) within {wait_s:.0f} s: the job is "
                f"stuck; its remaining {events - i - 1} event(s) are skipped",
                file=sys.stderr,
                flush=True,
            )
            break
    return rows, job_lines(ex, be, spec.name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=EXAMPLE)
    ap.add_argument(
        "--events", type=int, default=None, help="scale-outs and as many scale-ins per mode"
    )
    ap.add_argument("--rescales", type=int, default=None, help="rescale events per mode")
    ap.add_argument("--quick", action="store_true", help="a smoke run: one event each way")
    ap.add_argument(
        "--modes",
        default=None,
        help="restart,stopfree,migrate,drain,coordinator-leave (default restart,stopfree; "
        "testbox: restart)",
    )
    ap.add_argument(
        "--no-build", action="store_true", help="run the example image as it is (no build.sh)"
    )
    ap.add_argument("--grace", type=float, default=30.0)
    ap.add_argument("--run-id", default=None, help="names the job bench-RUN_ID (default: random)")
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on every object it creates"
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # as Ctrl-C: the finally below cleans up

    import docker

    client = docker.from_env(timeout=120)
    if args.image.startswith(EXAMPLE.split(":")[0] + ":"):  # this checkout's, that tag
        if not args.no_build:
            build = REPO / "images/elastic-example/build.sh"
            subprocess.run(["bash", str(build), args.image], check=True)
        command = ["python3", "/opt/train.py"]
        env = {"STEP_SLEEP": "0.05"}
        modes = ["restart", "stopfree"]
    else:
        from flowcon.testing.stepjob import STEP_JOB

        command = ["sh", "-c", STEP_JOB]
        env = {"STEP_SECONDS": "0.1"}
        modes = ["restart"]  # a shell job has no stop-free runtime
    if args.modes:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        if not set(modes) <= set(MODES):
            ap.error(f"--modes: {args.modes!r}: any of {', '.join(MODES)}")
        if set(modes) & set(MOVES) and "restart" not in modes:
            modes.insert(0, "restart")  # the same run's baseline
    if args.rescales is not None:
        events = args.rescales
    elif args.events is not None:
        events = 2 * args.events
    else:
        events = 2 if args.quick else 10
    train_s = 1.0 if args.quick else 2.0
    run_id = args.run_id or uuid.uuid4().hex[:6]
    specs = {
        mode: parse_jobspec(
            {
                "name": f"bench-{run_id}" if i == 0 else f"bench-{run_id}-{mode[:2]}",
                "image": args.image,
                "command": command,
                "global_batch_size": 64,
                "iterations": 10**7,
                "best_effort": True,
                "profile": {1: 1.0},
                "env": env,
                "launcher": "flowcon",
                "scaling": "restart" if mode == "restart" else "stopfree",
            }
        )
        for i, mode in enumerate(modes)
    }
    nodes = [{"name": f"node{i}", "gpus": 2} for i in (1, 2, 3)]
    inv = discover({"declared": {"nodes": nodes}})
    labels = {"flowcon.bench": run_id, **dict(kv.split("=", 1) for kv in args.label)}
    be = KeepingBackend(client)
    ex = Executor(be, inv, ExecutorOptions(grace_s=args.grace, extra_labels=labels))
    rows: dict[str, list[Row]] = {}
    lines: dict[str, list[Line]] = {}
    interrupted = False
    current: str | None = None
    try:
        for mode, spec in specs.items():
            current = spec.name
            rows[mode], lines[mode] = run_mode(
                ex, be, spec, PLACEMENTS[mode], events, train_s, 180.0, mode
            )
            ex.remove(spec.name, grace_s=2.0)
            current = None
    except KeyboardInterrupt as exc:
        interrupted = True
        print(f"interrupted ({exc or 'SIGINT'}): removing {current}", file=sys.stderr)
    finally:
        _shield()
        for spec in specs.values():
            ex.remove(spec.name, grace_s=2.0)
    if interrupted:
        return 130

    return report(args.image, args.grace, rows, lines)


def move_summary(rows: dict[str, list[Row]], summary: dict[str, Any]) -> dict[str, Any]:
    """The move modes' keys of the JSON line: their gaps, fallbacks, and their p95 gap as a
    fraction of the same run's restart p95 gap (the baseline)."""
    out: dict[str, Any] = {}
    base = summary.get("restart_gap_p95_s")
    for mode in MOVES:
        if mode not in rows:
            continue
        key = mode.replace("-", "_")
        for k in ("gap_p50_s", "gap_p95_s", "fallbacks"):
            out[f"{key}_{k}"] = summary[f"{key}_{k}"]
        p95 = summary[f"{key}_gap_p95_s"]
        out[f"{key}_vs_restart"] = round(p95 / base, 3) if p95 is not None and base else None
    return out


def report(
    image: str, grace: float, rows: dict[str, list[Row]], lines: dict[str, list[Line]]
) -> int:
    n = {m: len(r) for m, r in rows.items()}
    print(f"image {image}; grace {grace:.0f} s; events per mode {n}")
    print(
        f"{'mode':>17} {'gpus':>7} {'stop s':>7} {'start s':>8} {'gap s':>7} {'prep s':>7} "
        f"{'step before':>12} {'step after':>11}"
    )
    ok = True

    def f(x: float | None) -> str:
        return f"{x:.2f}" if x is not None else "-"

    for rs in rows.values():
        for r in rs:
            cont = r.before is not None and r.after is not None and r.after > r.before
            ok &= cont
            print(
                f"{r.kind or r.mode:>17} {r.old:>3}->{r.new:<3} {r.stop:>7.2f} {r.start:>8.2f} "
                f"{f(r.gap):>7} {f(r.prep):>7} {r.before!s:>12} {r.after!s:>11}"
                + (f"  (fallback: {r.fallback})" if r.fallback else "")
            )
    summary: dict[str, Any] = {}
    for mode, rs in rows.items():
        if mode in MOVES:
            rs = [r for r in rs if r.kind == mode]  # its own events, not the way back
        gaps = [r.gap for r in rs if r.gap is not None]
        outs = [r.prep for r in rs if r.prep is not None and (r.new > r.old or r.kind)]
        p50, p95 = pct(gaps, 0.5), pct(gaps, 0.95)
        print(
            f"{mode}: no-progress gap p50 {p50:.2f} s, p95 {p95:.2f} s over {len(gaps)} "
            f"events ({len(rs) - len(gaps)} unmeasured); joiners' preparation (scale-out) "
            f"median {statistics.median(outs) if outs else math.nan:.2f} s"
        )
        falls = [r for r in rs if r.fallback]
        if falls:
            print(f"{mode}: {len(falls)} event(s) fell back to checkpoint-restart")
        key = mode.replace("-", "_")
        summary[f"{key}_gap_p50_s"] = round(p50, 3) if gaps else None
        summary[f"{key}_gap_p95_s"] = round(p95, 3) if gaps else None
        summary[f"{key}_fallbacks"] = len(falls)
    if "restart" in rows:
        stops = [r.stop for r in rows["restart"]]
        if stops:
            print(
                f"restart stop time: median {statistics.median(stops):.2f} s, max "
                f"{max(stops):.2f} s (target <= 3 s: {'met' if max(stops) <= 3.0 else 'MISSED'})"
            )
            ok &= max(stops) <= 3.0
    checks = {m: exactly_once(ls) for m, ls in lines.items()}
    for m, c in checks.items():
        what = {None: "not recorded by the job (reported false)", True: "yes", False: "NO"}[c]
        print(f"{m}: each sample once per epoch: {what}")
    print(f"step counter continued across every rescale: {'yes' if ok else 'NO'}")
    out = {
        "restart_gap_p95_s": summary.get("restart_gap_p95_s"),
        "stopfree_gap_p95_s": summary.get("stopfree_gap_p95_s"),
        "restart_gap_p50_s": summary.get("restart_gap_p50_s"),
        "stopfree_gap_p50_s": summary.get("stopfree_gap_p50_s"),
        "events": n,
        "exactly_once": bool(checks) and all(c is True for c in checks.values()),
    }
    out.update(move_summary(rows, summary))
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
