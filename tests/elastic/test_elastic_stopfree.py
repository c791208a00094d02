"""Stop-free scaling with real torch.distributed (gloo on CPU) and local worker processes.

The test process plays the executor and the store-hosting launcher: it hosts the job's
TCPStore, starts workers (joiners with FLOWCON_JOIN=1), sends SIGUSR1 to leavers, and holds
the job at a step with the worker script's gate file while joiners prepare (so the events
land at known steps and the test stays short).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from support import launcher_procs  # noqa: E402

from flowcon import contract  # noqa: E402
from flowcon.elastic import rendezvous as rdv  # noqa: E402
from flowcon.elastic.data import ElasticSampler  # noqa: E402
from flowcon.testing.ports import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "support" / "stopfree_job.py"
GBS = 10
SIZE = 66  # stopfree_job.SIZE: 7 steps an epoch (6 x 10 + 6)
# How long workers may take to come up (``Job.wait``): four of them importing torch at once
# beside other tests on a loaded 2-core host took 50-80 s, more than a wait's 40 s.
STARTUP_S = 180.0


class Job:
    """Workers of one stop-free job on this host."""

    def __init__(self, tmp: Path, iterations: int, **extra: str) -> None:
        self.out = tmp
        self.store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=dt.timedelta(seconds=30),
        )
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.store.port),
            "FLOWCON_GLOBAL_BATCH_SIZE": str(GBS),
            "FLOWCON_ITERATIONS": str(iterations),
            "FLOWCON_CHECKPOINT_DIR": str(tmp / "ck"),
            "FLOWCON_ADAPT_THREADS": "0",
            "OMP_NUM_THREADS": "1",
            "SF_OUT": str(tmp),
            contract.ENV_STRAGGLER: "0",  # the straggler test turns it on
            # the gate says where events land: leave at the next boundary (the settle
            # test turns the window on)
            contract.ENV_LEAVE_SETTLE_S: "0",
            **extra,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()

    def start(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        e = {**self.env, contract.ENV_WORKER_ID: name, **env}
        log = open(self.out / f"{name}.log", "wb")  # noqa: SIM115 (the child writes it)
        p = subprocess.Popen(
            [sys.executable, str(JOB)], env=e, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = p
        return p

    def gate(self, step: int) -> None:
        tmp = self.out / "gate.tmp"
        tmp.write_text(str(step))
        os.replace(tmp, self.out / "gate")

    def records(self) -> list[dict[str, Any]]:
        out = []
        for f in sorted(self.out.glob("ids-*.jsonl")):
            for line in f.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for f in sorted(self.out.glob("*.log")):
            for line in f.read_text(errors="replace").splitlines():
                if line.startswith("{") and f'"event":"{name}"' in line:
                    out.append(json.loads(line))
        return out

    def up(self) -> bool:
        """Every running worker is past its start (imports, model): the job script opens
        its ids file just before ``run.steps``."""
        return all(
            (self.out / f"ids-{p.pid}.jsonl").exists()
            for n, p in self.procs.items()
            if n not in self.killed and p.poll() is None
        )

    def wait(self, what: str, cond: Callable[[], bool], timeout: float = 40.0) -> None:
        """Until ``cond()``: ``timeout`` s from the moment every worker is up (a worker's
        start is not the job's progress; it has ``STARTUP_S``), failing at once when one
        dies."""
        now = time.monotonic()
        deadline, startup = now + timeout, now + STARTUP_S
        while not cond():
            for n, p in self.procs.items():
                rc = p.poll()
                if rc not in (None, 0, contract.EXIT_LEFT) and n not in self.killed:
                    raise AssertionError(f"{n} died ({rc}) waiting for {what}:\n{self.logs()}")
            now = time.monotonic()
            if not self.up():
                deadline = now + timeout  # the clock starts once all are up
            if now > deadline or now > startup:
                raise AssertionError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.05)

    def at(self, step: int) -> bool:
        return any(r["step"] >= step for r in self.records())

    def held(self, step: int) -> bool:
        """Every worker that ran ``step`` waits at the gate before the next one, so each has
        voted at the boundary after ``step``: a signal sent now lands at the next boundary.
        (``at(step)`` is true once one worker wrote its record, and a signal that reached a
        worker before its vote at that boundary landed one step early: a CI run saw
        4 -> 2 at step 13 instead of 14.)"""
        ran = {r["pid"] for r in self.records() if r["step"] == step}
        waiting = set()
        for f in self.out.glob("held-*"):
            if f.read_text().strip() == str(step + 1):
                waiting.add(int(f.name.split("-", 1)[1]))
        return bool(ran) and ran <= waiting

    def world_at(self, world: int, after: int) -> bool:
        return any(r["world"] == world and r["step"] > after for r in self.records())

    def joiners_ready(self, n: int) -> bool:
        return self.store.add("flowcon/joiners", 0) >= n and rdv.there(
            self.store,  # type: ignore[arg-type]
            f"flowcon/joiner/{n}",
        )

    def finish(self, timeout: float = 40.0) -> dict[str, int]:
        codes = {}
        try:
            self.wait("the workers to start", self.up)  # ``timeout`` is for the job's run
            for n, p in self.procs.items():
                codes[n] = p.wait(timeout=timeout)
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    p.kill()
        return codes

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
            for f in sorted(self.out.glob("*.log"))
        )


def reference(tmp: Path, iterations: int, **extra: str) -> Job:
    """An uninterrupted 1-worker run of the same job."""
    tmp.mkdir()
    job = Job(tmp, iterations, **extra)
    job.start("ref", WORLD_SIZE="1", RANK="0")
    return job


def check_exactly_once(
    records: list[dict[str, Any]], iterations: int, batches: dict[int, int] | None = None
) -> None:
    """Every step's shares partition the sampler's global batch; every epoch is a cover.
    ``batches``: the global batch from a step on (default: GBS throughout)."""
    sampler = ElasticSampler(SIZE, seed=1)
    gbs = GBS
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    assert sorted(by_step) == list(range(1, iterations + 1))
    epochs: dict[int, list[int]] = {}
    for step in range(1, iterations + 1):
        gbs = (batches or {}).get(step, gbs)
        rs = by_step[step]
        world = rs[0]["world"]
        assert len(rs) == world, rs
        assert sorted(r["rank"] for r in rs) == list(range(world)), rs
        got = [i for r in sorted(rs, key=lambda r: r["rank"]) for i in r["ids"]]
        assert got == sampler.global_batch(gbs), step
        epochs.setdefault(sampler.epoch, []).extend(got)
        sampler.advance(gbs)
    for epoch, ids in epochs.items():
        if epoch < sampler.epoch:  # whole epochs: each sample once
            assert sorted(ids) == list(range(SIZE)), epoch
        else:  # the epoch in progress: no sample twice
            assert len(set(ids)) == len(ids), epoch


def test_scale_1_2_4_2_1_mid_epoch(tmp_path: Path) -> None:
    iterations = 28
    ref = reference(tmp_path / "ref", iterations)
    (tmp_path / "job").mkdir()
    job = Job(tmp_path / "job", iterations)
    job.gate(3)
    job.start("a", WORLD_SIZE="1", RANK="0")
    job.wait("step 3", lambda: job.at(3))
    # 1 -> 2: the joiner prepares while "a" is held at step 3, then the job switches at 4
    job.start("b", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="2")
    job.wait("b ready", lambda: job.joiners_ready(1))
    job.gate(8)
    job.wait("world 2", lambda: job.world_at(2, 3) and job.at(8))
    # 2 -> 4
    job.start("c", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="4")
    job.start("d", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="4")
    job.wait("c, d ready", lambda: job.joiners_ready(3))
    job.gate(13)
    job.wait("world 4", lambda: job.world_at(4, 8) and job.held(13))
    # 4 -> 2: "a" (rank 0, the first worker) and "c" leave
    job.procs["a"].send_signal(signal.SIGUSR1)
    job.procs["c"].send_signal(signal.SIGUSR1)
    job.gate(18)
    job.wait("world 2 again", lambda: job.world_at(2, 13) and job.held(18))
    # 2 -> 1: "d" leaves, "b" finishes alone
    job.procs["d"].send_signal(signal.SIGUSR1)
    job.gate(iterations)
    codes = job.finish()
    ref_codes = ref.finish()
    assert ref_codes == {"ref": 0}, ref.logs()
    left = contract.EXIT_LEFT
    assert codes == {"a": left, "b": 0, "c": left, "d": left}, job.logs()

    records = job.records()
    check_exactly_once(records, iterations)
    worlds = {r["step"]: r["world"] for r in records}
    # each event lands at the boundary after the gate's step (mid-epoch: 7 steps an epoch)
    steps = (4, 5, 9, 10, 14, 15, 19, 20, iterations)
    assert [worlds[s] for s in steps] == [1, 2, 2, 4, 4, 2, 2, 1, 1]
    # the workers that stayed were never restarted: one pid each, contiguous steps
    for name, p in job.procs.items():
        mine = [r for r in records if r["worker"] == name]
        assert {r["pid"] for r in mine} == {p.pid}
        steps = [r["step"] for r in mine]  # type: ignore[assignment]
        assert steps == list(range(steps[0], steps[0] + len(steps))), name  # type: ignore[comparison-overlap]
    # the final model equals the uninterrupted 1-worker run's
    final = torch.load(job.out / "final.pt")
    expect = torch.load(ref.out / "final.pt")
    for k in expect:
        torch.testing.assert_close(final[k], expect[k], rtol=1e-5, atol=1e-6)
    scaled = job.events("scaled")
    assert [e["world_size"] for e in scaled] == [2, 4, 2, 1], scaled
    assert len(job.events("left")) == 3
    assert len(job.events("joined")) == 3


def test_kill_9_survivors_recover_from_the_agreed_state(tmp_path: Path) -> None:
    """A worker killed mid-run: the others re-form from the newest snapshot they all hold,
    lose at most the step in flight, and end with the uninterrupted run's model; a
    replacement joins afterwards like any joiner."""
    iterations = 40
    ref = reference(tmp_path / "ref", iterations)
    (tmp_path / "job").mkdir()
    job = Job(tmp_path / "job", iterations, SF_STEP_S="0.04", SF_TIMEOUT_S="3")
    job.gate(5)
    for rank, name in enumerate("abc"):
        job.start(name, WORLD_SIZE="3", RANK=str(rank))
    job.wait("step 5", lambda: job.at(5))
    job.gate(iterations)
    job.wait("step 9", lambda: job.at(9))
    job.gate(16)  # the job runs on to 16 (0.04 s a step): b dies mid-step
    job.killed.add("b")
    job.procs["b"].kill()
    job.wait("recovered", lambda: len(job.events("recovered")) == 1)
    job.start("d", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="3")
    job.wait("d ready", lambda: job.joiners_ready(1))
    job.gate(iterations)
    codes = job.finish()
    assert ref.finish() == {"ref": 0}, ref.logs()
    assert codes == {"a": 0, "b": -signal.SIGKILL, "c": 0, "d": 0}, job.logs()
    (rec,) = job.events("recovered")
    assert rec["world_size"] == 2, rec
    assert rec["failed"] == 1, rec
    assert rec["lost_steps"] <= 1, rec
    records = job.records()
    # the survivors' step counters went on from the agreed step (at most one step redone)
    for name in "ac":
        steps = [r["step"] for r in records if r["worker"] == name]
        assert steps[-1] == iterations, steps
        assert len(steps) - len(set(steps)) <= 1, steps
        assert {r["pid"] for r in records if r["worker"] == name} == {job.procs[name].pid}
    assert any(r["world"] == 3 and r["worker"] == "d" for r in records), "d never joined"
    final = torch.load(job.out / "final.pt")
    expect = torch.load(ref.out / "final.pt")
    for k in expect:
        torch.testing.assert_close(final[k], expect[k], rtol=1e-5, atol=1e-6)


def test_straggler_is_removed_like_a_scale_in(tmp_path: Path) -> None:
    """A worker that sleeps 0.15 s more each step: after 3 slow steps in a row (the test's
    rule; EDL's is 10) it leaves at the boundary, rank 0 reports ``straggler_removed``, and
    the job steps faster without it."""
    iterations = 21  # three whole epochs
    job = Job(
        tmp_path,
        iterations,
        SF_STEP_S="0.02",
        SF_SLOW_WORKER="c",
        SF_SLOW_S="0.15",
        **{contract.ENV_STRAGGLER: "1.2,3"},
    )
    for rank, name in enumerate("abc"):
        job.start(name, WORLD_SIZE="3", RANK=str(rank))
    codes = job.finish()
    assert codes == {"a": 0, "b": 0, "c": contract.EXIT_LEFT}, job.logs()
    (ev,) = job.events("straggler_removed")
    assert ev["removed"] == "c", ev
    assert ev["rank"] == 2, ev
    assert ev["world_size"] == 3, ev
    assert len(ev["step_times"]) == 3, ev
    assert min(ev["step_times"]) > 1.2 * ev["median_s"], ev
    removed_at = ev["step"]
    assert removed_at <= 6, ev  # 3 slow steps, the first vote sees none
    records = job.records()
    check_exactly_once(records, iterations)
    assert {r["world"] for r in records if r["step"] > removed_at} == {2}
    ts = {}
    for line in (job.out / "a.log").read_text().splitlines():
        if line.startswith('{"step"') and "event" not in line:
            rec = json.loads(line)
            ts[rec["step"]] = rec["ts"]
    before = (ts[removed_at] - ts[1]) / (removed_at - 1)
    after = (ts[iterations] - ts[removed_at + 2]) / (iterations - removed_at - 2)
    assert after < before / 2, (before, after)


@pytest.mark.parametrize("settle", ["2", "0"])
def test_the_leavers_of_one_scale_in_leave_together(tmp_path: Path, settle: str) -> None:
    """4 -> 2 with the two leave signals 0.6 s apart, as an executor sends them one container
    after another (a CI failure: the job ran at 3 in between). With a 2 s settle
    window both leave at one boundary, one switch; without it (0) the job runs at 3 first,
    which is what this test would see if the window did not work."""
    iterations = 70  # 10 epochs at 0.05 s a step: the window is 40 steps
    job = Job(tmp_path, iterations, SF_STEP_S="0.05", **{contract.ENV_LEAVE_SETTLE_S: settle})
    job.gate(5)
    for rank, name in enumerate("abcd"):
        job.start(name, WORLD_SIZE="4", RANK=str(rank))
    job.wait("step 5", lambda: job.at(5))
    job.procs["c"].send_signal(signal.SIGUSR1)
    job.gate(iterations)
    time.sleep(0.6)
    if settle == "0":
        # no window: c goes at the first boundary after its signal, and d's signal must come
        # after it; one step and the switch to 3 can take longer than 0.6 s on a loaded
        # host, and then both leave at that boundary as if there were a window
        job.wait("c gone", lambda: job.world_at(3, 5))
    job.procs["d"].send_signal(signal.SIGUSR1)
    left = contract.EXIT_LEFT
    assert job.finish() == {"a": 0, "b": 0, "c": left, "d": left}, job.logs()
    check_exactly_once(job.records(), iterations)
    worlds = [r["world"] for r in sorted(job.records(), key=lambda r: r["step"]) if r["rank"] == 0]
    changes = [w for i, w in enumerate(worlds) if i == 0 or w != worlds[i - 1]]
    scaled = job.events("scaled")
    gone = job.events("left")
    if settle == "0":
        assert scaled[0]["step"] <= 6, scaled  # at once: the boundary of step 5 or 6
        assert changes == [4, 3, 2], changes
        assert [(e["world_size"], e["left"]) for e in scaled] == [(3, 1), (2, 1)], scaled
        return
    assert changes == [4, 2], changes
    assert [(e["world_size"], e["left"]) for e in scaled] == [(2, 2)], scaled
    assert len(gone) == 2, gone
    assert gone[0]["step"] == gone[1]["step"] == scaled[0]["step"], gone


def test_global_batch_changes_with_a_scale_out(tmp_path: Path) -> None:
    """Elan III: the joiner asks for global batch 20; from the switch on each step takes 20
    samples and the LR ramps from 0.05 to 0.1 over 4 steps; the result equals a 1-worker run
    that changes its batch at the same step."""
    iterations, ramp = 20, "4"
    ref = reference(tmp_path / "ref", iterations, SF_RAMP=ramp, SF_BATCH_AT="4:20")
    (tmp_path / "job").mkdir()
    job = Job(tmp_path / "job", iterations, SF_RAMP=ramp)
    job.gate(3)
    job.start("a", WORLD_SIZE="1", RANK="0")
    job.wait("step 3", lambda: job.at(3))
    job.start("b", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="2", FLOWCON_GLOBAL_BATCH_SIZE="20")
    job.wait("b ready", lambda: job.joiners_ready(1))
    job.gate(iterations)
    assert job.finish() == {"a": 0, "b": 0}, job.logs()
    assert ref.finish() == {"ref": 0}, ref.logs()
    records = job.records()
    check_exactly_once(records, iterations, batches={5: 20})
    assert check_exactly_once(ref.records(), iterations, batches={5: 20}) is None  # type: ignore[func-returns-value]
    lrs = {r["step"]: round(r["lr"], 6) for r in records}
    assert [lrs[s] for s in range(4, 11)] == [0.05, 0.05, 0.0625, 0.075, 0.0875, 0.1, 0.1]
    assert {r["step"]: r["world"] for r in records}[5] == 2
    final = torch.load(job.out / "final.pt")
    expect = torch.load(ref.out / "final.pt")
    for k in expect:
        torch.testing.assert_close(final[k], expect[k], rtol=1e-5, atol=1e-6)


def test_container_exit_code() -> None:
    from flowcon.elastic.launcher import container_exit

    left, stopped = contract.EXIT_LEFT, contract.EXIT_PREEMPTED
    assert container_exit([0, 0]) == 0
    assert container_exit([left, left]) == left
    assert container_exit([left, 0]) == 0
    assert container_exit([0, stopped]) == stopped
    assert container_exit([left, -9]) == 137
    assert container_exit([0, 1]) == 1


TRAIN = REPO / "images" / "elastic-example" / "train.py"


_lines = launcher_procs.json_lines  # complete records only (a poll can cut the last one)


def _launcher_env(tmp_path: Path, iterations: int) -> dict[str, str]:
    port = free_port()
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "FLOWCON_SCALING": "stopfree",
        "FLOWCON_GLOBAL_BATCH_SIZE": "16",
        "FLOWCON_ITERATIONS": str(iterations),
        "FLOWCON_CHECKPOINT_DIR": str(tmp_path / "ck"),
        "FLOWCON_ADAPT_THREADS": "0",
        "OMP_NUM_THREADS": "1",
        # 400 steps >= 20 s: a joiner (2-5 s to start, longer beside other tests on a busy
        # machine) joins mid-run; at 0.02 s the job could end before it joined.
        "STEP_SLEEP": "0.05",
        contract.ENV_STRAGGLER: "0",
    }


def _wait_line(path: Path, pred: Callable[[dict[str, Any]], bool], alive: Any = None) -> None:
    """Until a line of ``path`` matches (``alive``: a process that must not exit meanwhile)."""
    deadline = time.monotonic() + 40
    while not any(pred(x) for x in _lines(path)):
        assert time.monotonic() < deadline, path.read_text()[-2000:]
        assert alive is None or alive.poll() is None, path.read_text()[-2000:]
        time.sleep(0.05)


def test_the_store_host_outlives_its_leaving_worker(tmp_path: Path) -> None:
    """SIGUSR1 to the store-hosting container: its worker leaves (144), its launcher keeps
    serving the store while the joined worker trains on as rank 0, then exits 0 when the job
    is done."""
    iterations = 400
    env = _launcher_env(tmp_path, iterations)
    logs = {n: tmp_path / f"{n}.log" for n in "ab"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["a"] = launcher_procs.start(
            TRAIN, logs["a"], {**env, "WORLD_SIZE": "1", "RANK": "0", "FLOWCON_STORE_HOST": "1"}
        )
        _wait_line(logs["a"], lambda x: x.get("step", 0) >= 10, procs["a"])
        procs["b"] = launcher_procs.start(
            TRAIN, logs["b"], {**env, "FLOWCON_JOIN": "1", "FLOWCON_TARGET_WORLD": "2"}
        )
        _wait_line(logs["b"], lambda x: x.get("event") == "joined", procs["b"])
        procs["a"].send_signal(signal.SIGUSR1)
        _wait_line(logs["a"], lambda x: x.get("event") == "store_host_only")
        codes = launcher_procs.wait_all(procs, logs, timeout=60)
    finally:
        launcher_procs.kill_all(procs)
    assert codes == {"a": 0, "b": 0}, logs["b"].read_text()[-2000:]
    (host,) = [x for x in _lines(logs["a"]) if x.get("event") == "store_host_only"]
    assert host["exit_codes"] == [contract.EXIT_LEFT]
    b = _lines(logs["b"])
    assert [x["step"] for x in b if x.get("event") == "done"] == [iterations]
    steps = sorted(
        [x["step"] for x in _lines(logs["a"]) if "loss" in x]
        + [x["step"] for x in b if "loss" in x]
    )
    assert steps == list(range(1, iterations + 1))  # rank 0's lines move from a to b


def test_example_job_under_the_stopfree_launcher(tmp_path: Path) -> None:
    """images/elastic-example/train.py with FLOWCON_SCALING=stopfree, as two containers would
    run it: the first launcher hosts the store; the second joins (FLOWCON_JOIN=1) and later
    leaves on SIGUSR1 to its launcher (forwarded; exit 144); the first trains on to the end
    without a restart and every step is reported once."""
    iterations = 400
    env = _launcher_env(tmp_path, iterations)
    logs = {n: tmp_path / f"{n}.log" for n in "ab"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["a"] = launcher_procs.start(
            TRAIN,
            logs["a"],
            {
                **env,
                "WORLD_SIZE": "1",
                "RANK": "0",
                "FLOWCON_STORE_HOST": "1",
                contract.ENV_WORKER_ID: "a",
            },
        )
        _wait_line(logs["a"], lambda x: x.get("step", 0) >= 20, procs["a"])
        procs["b"] = launcher_procs.start(  # joins the running job
            TRAIN,
            logs["b"],
            {**env, "FLOWCON_JOIN": "1", "FLOWCON_TARGET_WORLD": "2", contract.ENV_WORKER_ID: "b"},
        )
        _wait_line(logs["b"], lambda x: x.get("event") == "joined", procs["a"])
        time.sleep(0.3)
        procs["b"].send_signal(signal.SIGUSR1)
        codes = launcher_procs.wait_all(procs, logs, timeout=60)
    finally:
        launcher_procs.kill_all(procs)
    assert codes == {"a": 0, "b": contract.EXIT_LEFT}, logs["a"].read_text()[-2000:]
    a = _lines(logs["a"])
    steps = [x["step"] for x in a if "loss" in x]
    assert steps == list(range(1, iterations + 1))
    epochs: dict[int, list[int]] = {}
    for x in a:
        if "loss" in x:
            epochs.setdefault(x["epoch"], []).extend(x["sample_ids"])
    assert sorted(epochs[0]) == list(range(4096))  # 256 steps of 16, across both events
    assert len(set(epochs[1])) == len(epochs[1]) == 16 * (iterations - 256)
    scaled = [x for x in a if x.get("event") == "scaled"]
    assert [x["world_size"] for x in scaled] == [2, 1], scaled
    assert scaled[0]["step"] >= 20  # mid-run: the first worker trained while b prepared
    (started,) = [x for x in _lines(logs["b"]) if x.get("event") == "launcher_started"]
    assert started["join"]
    assert not started["store_host"]
    assert started["worker"] == "b"
    (joined,) = [x for x in _lines(logs["b"]) if x.get("event") == "joined"]
    assert joined["worker"] == "b/0"
    assert joined["prepare_s"] > 0
    (left,) = [x for x in _lines(logs["b"]) if x.get("event") == "left"]
    assert left["reason"] == "signal"


def test_sigterm_checkpoints_and_stops_the_whole_job(tmp_path: Path) -> None:
    """SIGTERM keeps its restart-mode meaning: all ranks stop at one boundary, rank 0 writes
    the checkpoint of that step, every worker exits 143."""
    from flowcon.elastic import load_checkpoint

    job = Job(tmp_path, 28)
    job.gate(5)
    for rank, name in enumerate("ab"):
        job.start(name, WORLD_SIZE="2", RANK=str(rank))
    job.wait("step 5", lambda: job.held(5))
    job.procs["b"].send_signal(signal.SIGTERM)  # one rank's signal stops all
    job.gate(28)
    stopped = contract.EXIT_PREEMPTED
    assert job.finish() == {"a": stopped, "b": stopped}, job.logs()
    last = max(r["step"] for r in job.records())
    ck = load_checkpoint(tmp_path / "ck")
    assert ck is not None
    assert ck["step"] == last == 6
    assert ck["sampler"]["position"] == 60
    assert [e["step"] for e in job.events("preempted")] == [6]


def test_a_joiner_dying_before_its_switch_is_not_waited_for_again(tmp_path: Path) -> None:
    """The joiner is killed after it registered: the switch to it fails after the group
    timeout, the running worker recovers alone and goes on, that slot is not admitted again,
    and the next joiner gets in."""
    job = Job(tmp_path, 21, SF_TIMEOUT_S="2")
    job.gate(3)
    job.start("a", WORLD_SIZE="1", RANK="0")
    job.wait("step 3", lambda: job.at(3))
    job.start("b", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="2")
    job.wait("b ready", lambda: job.joiners_ready(1))
    job.killed.add("b")
    job.procs["b"].kill()
    job.procs["b"].wait()
    job.gate(6)
    job.wait("recovered", lambda: len(job.events("recovered")) == 1 and job.at(6))
    job.start("c", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="2")
    job.wait("c ready", lambda: job.joiners_ready(2))
    job.gate(21)
    assert job.finish() == {"a": 0, "b": -signal.SIGKILL, "c": 0}, job.logs()
    check_exactly_once(job.records(), 21)
    assert [e["world_size"] for e in job.events("scaled")] == [2], job.events("scaled")


def test_a_joiner_told_to_leave_before_its_switch_withdraws(tmp_path: Path) -> None:
    """SIGUSR1 to a joiner still waiting (its target world not reached): it withdraws its
    slot and exits 144; the job never waits for it, and a later joiner gets in."""
    job = Job(tmp_path, 21)
    job.gate(3)
    job.start("a", WORLD_SIZE="1", RANK="0")
    job.wait("step 3", lambda: job.at(3))
    job.start("b", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="3")  # 1 + 1 < 3: waits
    job.wait("b ready", lambda: job.joiners_ready(1))
    job.gate(6)
    job.wait("step 6", lambda: job.at(6))
    job.procs["b"].send_signal(signal.SIGUSR1)
    assert job.procs["b"].wait(timeout=20) == contract.EXIT_LEFT, job.logs()
    job.start("c", FLOWCON_JOIN="1", FLOWCON_TARGET_WORLD="2")
    job.wait("c ready", lambda: job.joiners_ready(2))
    job.gate(21)
    assert job.finish() == {"a": 0, "b": contract.EXIT_LEFT, "c": 0}, job.logs()
    check_exactly_once(job.records(), 21)
    assert [e["world_size"] for e in job.events("scaled")] == [2]
    assert [e["reason"] for e in job.events("left")] == ["withdrawn"]
    assert not job.events("recovered")


def test_a_stayer_whose_peer_went_silent_recovers_within_the_group_timeout(
    tmp_path: Path,
) -> None:
    """A scale-in stall: a rank that stops answering without closing its sockets (a
    frozen process, a container whose network vanished) must not hold the others in a
    collective for longer than the group's gloo timeout (SF_TIMEOUT_S here, the runtime's
    ``timeout_s``, 10 s by default): they recover without it and go on."""
    timeout_s = 3.0
    job = Job(tmp_path, 30, SF_STEP_S="0.04", SF_TIMEOUT_S=str(timeout_s))
    job.gate(6)
    for rank, name in enumerate("ab"):
        job.start(name, WORLD_SIZE="2", RANK=str(rank))
    job.wait("step 6", lambda: job.at(6))
    job.killed.add("b")
    job.procs["b"].send_signal(signal.SIGSTOP)  # alive, silent: no FIN, no RST
    t0 = time.monotonic()
    job.gate(30)
    try:
        job.wait("recovered", lambda: len(job.events("recovered")) == 1, timeout=timeout_s + 12)
        took = time.monotonic() - t0
    finally:
        job.procs["b"].kill()
    assert took <= timeout_s + 8, took
    codes = job.finish()
    assert codes["a"] == 0, job.logs()
    (rec,) = job.events("recovered")
    assert rec["world_size"] == 1, rec
    assert rec["failed"] == 1, rec
    assert job.records()[-1]["step"] == 30 or any(r["step"] == 30 for r in job.records())
