"""A straggler made with the agent's own lever, on the real engine ("A
straggler made with the agent's own lever (``docker update --cpus 0.2`` on one worker's
container) is detected and removed; the job's step rate afterwards is at least that of the
remaining workers alone"); EDL section 5.2 (shared/papers/edl.txt)."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from flowcon.contract import EXIT_LEFT
from flowcon.core.limits import CpuLimit
from flowcon.engine.docker_engine import CpuSettings, DockerEngine
from flowcon.executor.lifecycle import Executor
from flowcon.executor.reconcile import ReconcileEvent

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import step_job_spec  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)

REPO = Path(__file__).resolve().parents[2]
# this checkout's example image under its own tag (other checkouts build :latest)
EXAMPLE = "flowcon/elastic-example:straggler-test"
JOB = "sfstrag"
# Each step: STEP_CPU seconds of CPU work plus STEP_SLEEP seconds asleep (about 110 ms, half
# of it on a CPU, so three workers fit on the 2-core host). At --cpus 0.2 the engine lets the
# container run 20 ms per 100 ms CFS period, so a step's 50 ms of CPU takes three periods'
# quotas: every step of the throttled worker waits out at least two throttled stretches
# (~80 ms each; the sleep overlaps some of it), step after step, as the detector's "10 in a
# row" needs: 0.19-0.29 s against a median of 0.11-0.13 s measured (docs/elastic.md).
# (A step using less CPU than one period's quota runs at full speed four times out of five
# and is very slow the fifth: 20 % of a CPU on average, but never 10 slow steps in a row;
# with 30 ms the fastest throttled steps came within 1.37x of the median on a busy host.)
STEP_CPU = 0.05
STEP_SLEEP = 0.05
THROTTLE_CPUS = 0.2  # the agent's lever: docker update --cpus 0.2
RATE_TOLERANCE = 0.8  # the rate after >= 0.8 x the 2-worker rate measured before
RATE_STEPS = 25  # step lines per rate window
RATE_WINDOWS = 3  # windows before (the best is the reference) and, at most, after
SETTLE_STEPS = 5  # step lines after a start or a switch left out of the windows
# FLOWCON_CHECKPOINT_EVERY for the job (the allocator's ``checkpoint_every``): a checkpoint
# gathers from every rank, and once counted in the voted step times it hid the straggler at
# every checkpoint (never removed with this setting; tests/elastic/test_elastic_straggler_timing.py)
CHECKPOINT_EVERY = 5


def _lines(c: Any) -> list[dict[str, Any]]:
    out = []
    for ln in c.logs().decode(errors="replace").splitlines():
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except ValueError:
                continue
    return out


def _steps(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in lines if "event" not in m and "step" in m and "ts" in m]


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [m for m in lines if m.get("event") == name]


def _worker_id(c: Any) -> str:
    """The runtime's id of the container's (only) worker: its launcher's id + "/0"."""
    started = wait_for(lambda: _events(_lines(c), "launcher_started"), timeout=60)
    return f"{started[0]['worker']}/0"


def _rate(steps: list[dict[str, Any]]) -> float:
    """Steps per second over consecutive rank-0 step lines: 1 / the median step interval."""
    gaps = [(b["ts"] - a["ts"]) / (b["step"] - a["step"]) for a, b in itertools.pairwise(steps)]
    return 1.0 / float(statistics.median(gaps))


def _windows(steps: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """The first ``n`` windows of RATE_STEPS intervals (RATE_STEPS + 1 lines, overlapping by
    one line) of ``steps``."""
    return [steps[i * RATE_STEPS : (i + 1) * RATE_STEPS + 1] for i in range(n)]


def _wait(pred: Callable[[], Any], timeout: float, what: Callable[[], str]) -> Any:
    """``wait_for`` that says what did not happen, with the host's load (a 2-core host
    at a load of 30 slows every worker alike: none is a straggler then)."""

    def said() -> str:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        return f"{what()} (load average {load})"

    return wait_for(pred, timeout, 0.5, said)


def _at_least(lines: Callable[[], list[Any]], n: int) -> bool:
    return len(lines()) >= n


def _pids(c: Any) -> set[str]:
    return {str(p[1]) for p in c.top()["Processes"]}


@pytest.mark.docker
@pytest.mark.slow
def test_a_cpu_throttled_worker_is_removed_and_the_job_runs_at_the_rate_of_the_rest(
    executor: Executor, docker_client: Any
) -> None:
    """elastic-example, stop-free, launched on 2 fake GPUs of node1 (containers w0, w1), then
    scaled out to 3 (w2 joins). The joiner w2 (not the store host) gets ``--cpus 0.2`` the
    way the agent sets it (``DockerEngine.set_cpus``, NanoCpus). The job checkpoints every
    ``CHECKPOINT_EVERY`` steps (a collective in every rank's step). Then:

    * rank 0 reports ``straggler_removed`` naming w2's worker, whose recorded step times all
      exceed 1.2 x the median (the detector measures each worker's own time for the step,
      the gradient all-reduce, the checkpoint and the vote excluded, so waiting for w2
      does not make the others look slow);
    * w2 exits 144 on its own; ``Executor.reconcile`` reports ``left`` for it (reason
      ``straggler``, read from its last lines: what the allocator's ``worker_left`` event
      and ``flowcon_allocator_workers_left_total{reason}`` carry) and removes the container;
      w0 and w1 keep their container ids and processes;
    * "the remaining workers alone" is the job's step rate at 2 workers (w0 and w1, the
      same global batch, so the same per-worker share) measured before the scale-out, in
      this test; after the removal the job runs again on w0 and w1, and its rate must be at
      least ``RATE_TOLERANCE`` (0.8) of that. A rate is 1 / the median interval between
      consecutive rank-0 step lines over a window of ``RATE_STEPS`` steps (a median: one
      stall, such as the engine removing w2's container, does not decide). The reference
      is the best of ``RATE_WINDOWS`` windows before; after the removal, up to as many
      windows are measured until one reaches the bar. This 2-core host is shared with other
      tests (load averages of 8-30 were seen during runs): a window that coincides with
      their bursts runs at 0.6-0.7x, the next one at full speed again. The bar still tells
      the outcomes apart: the job held back by the 0.2-CPU worker ran at 3.4-3.7 steps/s,
      0.4x of the 8.6-9.5 of two workers alone, in every run.
    """
    build = REPO / "images" / "elastic-example" / "build.sh"
    res = subprocess.run(["bash", str(build), EXAMPLE], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    spec = step_job_spec(
        JOB,
        image=EXAMPLE,
        command=["python3", "/opt/train.py"],
        global_batch_size=32,
        env={"STEP_CPU": str(STEP_CPU), "STEP_SLEEP": str(STEP_SLEEP)},
    )
    assert executor.scaling_of(spec) == "stopfree"
    executor.options.checkpoint_every = CHECKPOINT_EVERY
    w0, w1 = executor.launch(spec, {"node1": ["0", "1"]})
    c0 = docker_client.containers.get(w0.id)
    c1 = docker_client.containers.get(w1.id)

    def at(world: int) -> list[dict[str, Any]]:
        return [m for m in _steps(_lines(c0)) if m.get("world_size") == world]

    # the 2-worker rate: the best of RATE_WINDOWS windows
    need = SETTLE_STEPS + RATE_WINDOWS * RATE_STEPS + 1
    _wait(lambda: len(at(2)) >= need, 120, lambda: f"{len(at(2))} steps at 2 workers")
    rates_before = [_rate(w) for w in _windows(at(2)[SETTLE_STEPS:], RATE_WINDOWS)]
    rate_before = max(rates_before)
    pids = {c.name: _pids(c) for c in (c0, c1)}

    out = executor.rescale(spec, {"node1": ["0", "1", "2"]})
    assert out.mode == "stopfree", out
    assert len(out.joined) == 1, out
    c2 = docker_client.containers.get(out.joined[0])
    straggler = _worker_id(c2)
    _wait(lambda: len(at(3)) >= 3, 120, lambda: f"{len(at(3))} steps at 3 workers")

    hc = c2.attrs["HostConfig"]
    DockerEngine().set_cpus(
        c2.id, CpuLimit(cpus=THROTTLE_CPUS, unlimited=False), CpuSettings.from_host_config(hc)
    )
    c2.reload()
    assert c2.attrs["HostConfig"]["NanoCpus"] == int(THROTTLE_CPUS * 1e9)
    throttled_at = time.time()

    removed = _wait(
        lambda: _events(_lines(c0), "straggler_removed"),
        60,
        lambda: f"no straggler_removed ({len(at(3))} steps at 3 workers)",
    )
    ev = removed[0]
    assert ev["removed"] == straggler, (ev, straggler)
    assert len(ev["step_times"]) == 10
    assert min(ev["step_times"]) > 1.2 * ev["median_s"], ev
    wait_for(lambda: c2.reload() or c2.status == "exited", timeout=30)
    assert c2.attrs["State"]["ExitCode"] == EXIT_LEFT
    left = [m for m in _events(_lines(c2), "left") if m.get("reason") == "straggler"]
    assert left, _lines(c2)[-5:]

    events = executor.reconcile(known=[JOB])
    # the event names the node and the GPU the straggler held (the allocator avoids it)
    gpus = tuple(c2.labels["flowcon.gpus"].split(","))
    assert ReconcileEvent(JOB, "left", c2.name, "straggler", "node1", gpus) in events, events
    names = {
        c.name
        for c in docker_client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"flowcon.job={JOB}"}
        )
    }
    assert names == {c0.name, c1.name}
    state = executor.job(JOB)
    assert state is not None
    assert state.status == "running"

    def after() -> list[dict[str, Any]]:
        return [m for m in at(2) if m["step"] > ev["step"]]

    rates_after: list[float] = []
    while len(rates_after) < RATE_WINDOWS and (
        not rates_after or max(rates_after) < RATE_TOLERANCE * rate_before
    ):
        need = SETTLE_STEPS + (len(rates_after) + 1) * RATE_STEPS + 1
        _wait(partial(_at_least, after, need), 60, lambda: f"{len(after())} steps after")
        window = after()[SETTLE_STEPS:][len(rates_after) * RATE_STEPS :][: RATE_STEPS + 1]
        rates_after.append(_rate(window))
    rate_after = max(rates_after)
    for c in (c0, c1):
        c.reload()
        assert c.status == "running"
        assert c.attrs["RestartCount"] == 0
        assert pids[c.name] <= _pids(c), (c.name, pids[c.name], _pids(c))
    assert {c0.id, c1.id} == {w0.id, w1.id}
    steps = [m["step"] for m in _steps(_lines(c0))]
    assert steps == sorted(steps)
    assert len(set(steps)) == len(steps)  # never restarted
    print(
        json.dumps(
            {
                "straggler_step_times_s": ev["step_times"],
                "median_s": ev["median_s"],
                "ratio_min": round(min(ev["step_times"]) / ev["median_s"], 2),
                "detected_after_s": round(min(m["ts"] for m in removed) - throttled_at, 2),
                "rates_2_before": [round(r, 2) for r in rates_before],
                # the 3-worker job held back by the throttled one (after the update)
                "rate_3_throttled": round(
                    _rate([m for m in at(3) if m["ts"] > throttled_at + 0.5]), 2
                ),
                "rates_2_after": [round(r, 2) for r in rates_after],
            }
        )
    )
    assert rate_after >= RATE_TOLERANCE * rate_before, (rate_after, rate_before)
