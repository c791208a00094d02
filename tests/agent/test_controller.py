"""The controller against a fake engine: Algorithm 1 and 2 end to end, safety, state."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.state_file import StateStore
from flowcon.core.control import AppliedMode, CpuControl
from flowcon.core.limits import CpuLimit
from flowcon.core.lists import ListName
from flowcon.engine.docker_engine import (
    CgroupSample,
    ContainerGone,
    ContainerInfo,
    CpuSettings,
    EngineUnavailable,
    Stats,
    control_body,
    cpu_body,
    restore_body,
)
from flowcon.engine.logs import Line, read_lines
from flowcon.engine.protocol import Engine

HOST = 4
ON = {"flowcon.enable": "true"}


def ts(ns: int) -> bytes:
    dt = datetime.fromtimestamp(ns // 1_000_000_000, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S").encode() + b".%09dZ " % (ns % 1_000_000_000)


@dataclass
class FakeContainer:
    name: str
    labels: dict[str, str]
    cpu: CpuSettings = field(default_factory=CpuSettings)
    running: bool = True
    cpu_ns: int = 0
    lines: list[tuple[int, bytes]] = field(default_factory=list)


class FakeEngine:
    def __init__(self) -> None:
        self.c: dict[str, FakeContainer] = {}
        self.t = 1_700_000_000.0
        self.updates: list[tuple[str, dict[str, int | str]]] = []
        self.vanish_on_update: set[str] = set()
        self.down = False
        self.cgroups = False  # True: CPU time from "cgroup files" instead of stats
        self.stats_calls = 0
        self.forgotten: list[str] = []

    def add(self, cid: str, labels: dict[str, str], **kw: object) -> FakeContainer:
        self.c[cid] = FakeContainer(cid, labels, **kw)  # type: ignore[arg-type]
        return self.c[cid]

    def emit(self, cid: str, text: str, cpu_s: float = 0.5) -> None:
        """One output line now; the container used cpu_s seconds of CPU since the last."""
        self.t += 0.25
        self.c[cid].lines.append((int(self.t * 1e9), text.encode()))
        self.c[cid].cpu_ns += int(cpu_s * 0.25 * 1e9)

    def _get(self, cid: str) -> FakeContainer:
        if self.down:
            raise EngineUnavailable("down")
        if cid not in self.c:
            raise ContainerGone(cid)
        return self.c[cid]

    def list_running(self) -> list[ContainerInfo]:
        if self.down:
            raise EngineUnavailable("down")
        return [ContainerInfo(k, v.name, v.labels, True) for k, v in self.c.items() if v.running]

    def inspect(self, cid: str) -> ContainerInfo:
        c = self._get(cid)
        return ContainerInfo(cid, c.name, c.labels, c.running, c.cpu)

    def update_cpu(self, cid: str, body: dict[str, int | str]) -> None:
        c = self._get(cid)
        if cid in self.vanish_on_update:
            del self.c[cid]
            raise ContainerGone(cid)
        self.updates.append((cid, body))
        c.cpu = CpuSettings(
            int(body.get("NanoCpus", c.cpu.nano_cpus)),
            int(body.get("CpuQuota", c.cpu.cpu_quota)),
            int(body.get("CpuPeriod", c.cpu.cpu_period)),
            int(body.get("CpuShares", c.cpu.cpu_shares)),
            str(body.get("CpusetCpus", c.cpu.cpuset_cpus)),
        )

    def set_cpus(self, cid: str, limit: CpuLimit, original: CpuSettings) -> None:
        self.update_cpu(cid, dict(cpu_body(limit, original)))

    def set_control(
        self,
        cid: str,
        control: CpuControl,
        original: CpuSettings,
        host_cpus: int,
        previous: AppliedMode | None,
    ) -> None:
        self.update_cpu(cid, control_body(control, original, host_cpus, previous))

    def restore_cpus(
        self, cid: str, original: CpuSettings, host_cpus: int, mode: AppliedMode = "quota"
    ) -> None:
        self.update_cpu(cid, restore_body(original, host_cpus, mode))

    def stats(self, cid: str) -> Stats:
        c = self._get(cid)
        self.stats_calls += 1
        return Stats(self.t, c.cpu_ns, 1 << 20, 0, 0, 0, 0)

    def cgroup_usage(self, cid: str, cgroup_parent: str = "", pid: int = 0) -> CgroupSample | None:
        if not self.cgroups or cid not in self.c:
            return None
        return CgroupSample(self.t, self.c[cid].cpu_ns, 2 << 20)

    def forget(self, cid: str) -> None:
        self.forgotten.append(cid)

    def log_lines(
        self, cid: str, since_ns: int | None, tail: int | None, max_bytes: int
    ) -> Iterator[Line]:
        return read_lines(self.log_frames(cid, since_ns, tail), max_bytes, since_ns or 0)

    def log_frames(self, cid: str, since_ns: int | None, tail: int | None) -> Iterator[bytes]:
        c = self._get(cid)
        rows = [r for r in c.lines if since_ns is None or r[0] >= since_ns - 1_000_000]
        if since_ns is None and tail is not None:
            rows = rows[-tail:] if tail else []
        for t_ns, text in rows:
            yield ts(t_ns) + text + b"\n"


_: type[Engine] = FakeEngine  # the fake is an engine adapter (checked by mypy)


def nano(engine: FakeEngine, cid: str) -> int:
    return engine.c[cid].cpu.nano_cpus


def make(engine: FakeEngine, tmp_path: Path, **cfg: object) -> Controller:
    """A controller on the fake engine; the CFS-quota path unless ``control`` is given
    (the fake jobs print no "threads", so the default hybrid would give them weights)."""
    cfg.setdefault("control", "quota")
    config = Config(itval=2, itval_max=8, state_file=str(tmp_path / "state.json"), **cfg)  # type: ignore[arg-type]
    ctl = Controller(engine, config, HOST, StateStore(config.state_file))
    return ctl


def progress(engine: FakeEngine, cid: str, start: float, per_line: float, n: int = 8) -> float:
    v = start
    for i in range(n):
        engine.emit(cid, f'{{"step": {i}, "loss": {v}}}')
        v -= per_line
    return v


def test_opt_in_and_first_limits(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    eng.add("plain", {})
    eng.add("jobonly", {"flowcon.job": "j1"})
    eng.add("bad", {"flowcon.enable": "true", "flowcon.cpus.max": "many"})
    ctl = make(eng, tmp_path)
    itvals: list[float] = []
    ctl.on_itval = itvals.append
    with caplog.at_level(logging.INFO):
        ctl.resync()
        ctl.resync()
        ctl.round()
    assert set(ctl.tracked) == {"a", "b", "jobonly"}
    assert ctl.tracked["jobonly"].list is None
    assert ctl.tracked["a"].list is ListName.NL
    assert nano(eng, "a") == nano(eng, "b") == 2 * 10**9  # G/sumG = 1/2 of 4 CPUs
    touched = {cid for cid, _ in eng.updates}
    assert touched == {"a", "b"}  # never plain, jobonly or bad
    assert caplog.text.count("flowcon.cpus.max='many'") == 1  # one line, not one per round
    assert itvals == [2]  # Algorithm 2: reset on the new containers
    assert "decision container=a" in caplog.text
    assert "reason=" in caplog.text


def test_section_5_3_through_the_controller(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("vae", ON)
    ctl = make(eng, tmp_path, alpha=0.05, beta=2.0, reference_intervals=1)
    itvals: list[float] = []
    ctl.on_itval = itvals.append
    ctl.resync()
    v = progress(eng, "vae", 1000.0, 10.0)
    ctl.round()  # baseline
    v = progress(eng, "vae", v, 10.0)
    ctl.round()  # reference G
    assert ctl.tracked["vae"].monitor.tracker.g == pytest.approx(1.0)
    seen = []
    for _ in range(3):  # flat (the first flat window still differs from the last slope)
        progress(eng, "vae", v, 0.0)
        ctl.round()
        seen.append(ctl.tracked["vae"].list)
    assert seen == [ListName.NL, ListName.WL, ListName.CL]
    assert ctl.itval.value == 4
    assert itvals[-1] == 4  # all in CL: back-off
    for _ in range(3):
        progress(eng, "vae", v, 0.0)
        ctl.round()
    assert ctl.itval.value == 8  # capped at itval_max
    eng.add("mnist", ON)
    ctl.on_start("mnist")
    assert itvals[-1] == 2
    assert ctl.itval.value == 2  # reset, and Algorithm 1 ran at once
    assert nano(eng, "vae") == int(0.25 * HOST * 1e9)  # max(G/sumG, 1/(2*2))
    assert ctl.tracked["mnist"].limit > 0.99  # G/sumG with its G = 1 (not measured yet)
    # Finished Cons: mnist leaves; vae alone in CL -> free competition again.
    eng.c["mnist"].running = False
    ctl.on_finish("mnist")
    assert "mnist" not in ctl.tracked
    assert nano(eng, "vae") == HOST * 10**9  # 1 = the whole host
    ctl.on_start("mnist")  # a stale start for a stopped container is ignored
    assert "mnist" not in ctl.tracked


@pytest.mark.parametrize(("rule", "each"), [("equal", HOST // 2), ("free", HOST)])
def test_all_cl_rule_through_the_controller(tmp_path: Path, rule: str, each: int) -> None:
    """Once both jobs are in CL: ``all_cl: equal`` limits each to half the host, ``free``
    (the paper's lines 15-16) lifts both to the whole host; itval backs off under both."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path, alpha=0.05, reference_intervals=1, all_cl=rule)
    ctl.resync()
    va = progress(eng, "a", 1000.0, 10.0)
    vb = progress(eng, "b", 1000.0, 10.0)
    ctl.round()  # baseline
    va = progress(eng, "a", va, 10.0)
    vb = progress(eng, "b", vb, 10.0)
    ctl.round()  # reference G
    for _ in range(3):
        progress(eng, "a", va, 0.0)
        progress(eng, "b", vb, 0.0)
        ctl.round()
    assert {t.list for t in ctl.tracked.values()} == {ListName.CL}
    assert ctl.itval.value == 4  # back-off as under the paper's rule
    assert nano(eng, "a") == nano(eng, "b") == each * 10**9
    # one leaves: the other alone in CL gets the whole host
    eng.c["b"].running = False
    ctl.on_finish("b")
    assert nano(eng, "a") == HOST * 10**9


def test_bounds_dry_run_and_vanishing(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", {**ON, "flowcon.cpus.max": "0.5"})
    eng.add("b", ON)
    eng.add("c", ON)
    eng.vanish_on_update.add("b")
    ctl = make(eng, tmp_path)
    ctl.resync()  # b vanishes mid-update: released, Algorithm 1 re-runs for a and c
    assert set(ctl.tracked) == {"a", "c"}
    assert nano(eng, "a") == 500_000_000  # 1/2 of 4 CPUs = 2, capped by the label
    assert nano(eng, "c") == 2 * 10**9

    eng2 = FakeEngine()
    eng2.add("x", ON)
    eng2.add("y", ON)
    dry = Controller(
        eng2, Config(control="quota", state_file=str(tmp_path / "d.json")), HOST, dry_run=True
    )
    dry.resync()
    assert eng2.updates == []
    assert dry.tracked["x"].applied_cpus == 2.0


def test_garbage_nan_and_engine_down_are_survived(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    for text in ["garbage", '{"loss": NaN}', '{"loss": nul', "x" * 200_000, '{"loss": 3}']:
        eng.emit("a", text)
    ctl.round()
    p = ctl.tracked["a"].monitor.progress
    assert p.value == 3
    assert p.skipped == {"non-finite": 1, "malformed": 1, "too-long": 1}
    eng.down = True
    ctl.round()  # logged and skipped
    ctl.resync()
    eng.down = False
    ctl.round()
    assert "a" in ctl.tracked


def test_restore_and_resume_keep_originals(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("n", ON, cpu=CpuSettings(nano_cpus=3 * 10**9))
    eng.add("q", ON, cpu=CpuSettings(cpu_quota=150_000, cpu_period=100_000, cpu_shares=512))
    eng.add("u", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    assert nano(eng, "n") == 1_333_000_000  # 1/3 of 4 CPUs, to the engine's 0.001
    assert eng.c["q"].cpu.cpu_quota == 133_300  # quota mode: the engine refuses NanoCpus
    assert eng.c["q"].cpu.nano_cpus == 0

    # The agent dies (no restore); a new one resumes from the state file.
    ctl2 = make(eng, tmp_path)
    ctl2.resync()
    assert ctl2.tracked["n"].original == CpuSettings(nano_cpus=3 * 10**9)  # not our limit
    assert ctl2.tracked["n"].list is ListName.NL
    assert ctl2.restore_all() == 3
    assert nano(eng, "n") == 3 * 10**9
    assert (eng.c["q"].cpu.cpu_quota, eng.c["q"].cpu.cpu_shares) == (150_000, 512)
    assert nano(eng, "u") == HOST * 10**9  # "no limit": the engine cannot clear NanoCpus


@pytest.mark.parametrize(
    ("cfg", "cgroups", "stats_per_round"),
    [
        ({}, True, [2, 0, 0]),  # CPU from cgroups; I/O stats only when io_stats_interval is due
        ({"io_stats_interval": 0}, True, [2, 2, 2]),
        ({"cpu_source": "engine"}, True, [2, 2, 2]),  # forced: the engine's stats every round
        ({}, False, [2, 2, 2]),  # no cgroup files reachable: falls back to the engine
    ],
)
def test_cpu_from_cgroups_and_io_cadence(
    tmp_path: Path, cfg: dict[str, object], cgroups: bool, stats_per_round: list[int]
) -> None:
    eng = FakeEngine()
    eng.cgroups = cgroups
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path, **cfg)
    ctl.resync()
    calls = []
    for _ in range(3):
        for cid in ("a", "b"):
            progress(eng, cid, 100.0, 1.0)
        before = eng.stats_calls
        ctl.round()
        calls.append(eng.stats_calls - before)
    assert calls == stats_per_round
    mon = ctl.tracked["a"].monitor
    assert mon.cpu_source == ("cgroup" if cgroups and "cpu_source" not in cfg else "engine")
    # Two containers emit in turn, each busy half the time it emits: 0.25 CPU of 4.
    assert mon.usage.cpu_share == pytest.approx(0.25 / HOST)
    assert mon.usage.mem_bytes == (2 << 20 if mon.cpu_source == "cgroup" else 1 << 20)


def test_start_event_during_a_round_is_not_undone(tmp_path: Path) -> None:
    """A round lists the containers, then measures outside the lock; a container whose
    start event is handled in between is newer than the list, not gone."""
    eng = FakeEngine()
    eng.add("a", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    listing = ctl._present

    def list_then_start() -> dict[str, ContainerInfo]:
        present = listing()
        eng.add("late", ON)
        ctl.on_start("late")  # the listener, while the round measures
        return present

    ctl._present = list_then_start  # type: ignore[method-assign]
    ctl.round()
    assert "late" in ctl.tracked
    assert all(body.get("NanoCpus") != HOST * 10**9 for cid, body in eng.updates if cid == "late")
    ctl._present = listing  # type: ignore[method-assign]
    eng.c["late"].running = False  # ... and a later round still notices when it is gone
    ctl.round()
    assert "late" not in ctl.tracked


def test_overflowing_metric_values_keep_the_state_file_writable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    for values in ([1.0, 2.0], [1e308, 1e308], [-1e308], [1e308], [3.0]):
        for v in values:
            eng.emit("a", f'{{"loss": {v!r}}}')
        ctl.round()
    assert "cannot write state file" not in caplog.text
    saved = StateStore(tmp_path / "state.json").load()
    assert saved.rounds == ctl.rounds == 5


def test_engine_state_and_counters_for_health_and_metrics(tmp_path: Path) -> None:
    """/healthz hears of a failing engine (on_engine) and the counters count the errors
    and the CPU updates applied."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    heard: list[str | None] = []
    ctl.on_engine = heard.append
    ctl.resync()
    errors, updates = ctl.counters.snapshot()
    assert updates == 2
    assert sum(errors.values()) == 0  # a's and b's first limits
    eng.down = True
    ctl.round()
    eng.down = False
    ctl.round()
    assert heard == ["down", None]
    errors, _ = ctl.counters.snapshot()
    assert errors["list"] == 1


# ----- control modes (flowcon/core/control.py applied by the executor) ------------------


def test_weights_mode_sets_shares_lifts_quota_and_restores(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON, cpu=CpuSettings(nano_cpus=10**9))  # limited before: lifted
    eng.add("b", ON, cpu=CpuSettings(cpu_quota=50_000, cpu_period=100_000, cpu_shares=300))
    eng.add("c", {**ON, "flowcon.cpus.max": "1"})
    ctl = make(eng, tmp_path, control="weights")
    ctl.resync()
    # L = 1/3 each: 4/3 CPUs, 1365 shares
    assert eng.c["a"].cpu == CpuSettings(nano_cpus=HOST * 10**9, cpu_shares=1365)
    assert eng.c["b"].cpu == CpuSettings(cpu_quota=-1, cpu_period=100_000, cpu_shares=1365)
    assert eng.c["c"].cpu == CpuSettings(nano_cpus=10**9, cpu_shares=1024)  # cpus.max: a cap
    view = {v["name"]: v for v in ctl.views()}["a"]
    assert (view["control"], view["shares"], view["cpuset"]) == ("weights", 1365, None)
    n = len(eng.updates)
    ctl.round()
    assert len(eng.updates) == n  # unchanged: no engine call
    assert ctl.restore_all() == 3
    assert eng.c["a"].cpu == CpuSettings(nano_cpus=10**9, cpu_shares=1024)
    assert eng.c["b"].cpu == CpuSettings(cpu_quota=50_000, cpu_period=100_000, cpu_shares=300)
    assert eng.c["c"].cpu == CpuSettings(nano_cpus=HOST * 10**9, cpu_shares=1024)


def test_weights_equal_to_the_originals_need_no_engine_call(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    ctl = Controller(eng, Config(control="weights", state_file=str(tmp_path / "s")), 1)
    ctl.resync()  # alone on one CPU: 1024 shares, Docker's default
    assert eng.updates == []
    assert ctl.tracked["a"].applied_cpus is None


def test_cpuset_mode_pins_falls_back_once_and_restores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON, cpu=CpuSettings(cpuset_cpus="1-3"))
    ctl = make(eng, tmp_path, control="cpuset")
    with caplog.at_level(logging.INFO, logger="flowcon.agent"):
        ctl.resync()
        assert (eng.c["a"].cpu.cpuset_cpus, eng.c["b"].cpu.cpuset_cpus) == ("0-1", "2-3")
        assert eng.c["a"].cpu.cpu_shares == 2048
        assert "cpuset=0-1" in caplog.text
        assert "control=cpuset" in caplog.text
        for i in range(3):
            eng.add(f"x{i}", ON)
        ctl.resync()  # 5 containers, 4 cores: weights, every cpuset back to its original
        ctl.round()
        ctl.round()
    assert caplog.text.count("5 managed containers but 4 cores") == 1
    assert eng.c["a"].cpu.cpuset_cpus == "0-3"
    assert eng.c["b"].cpu.cpuset_cpus == "1-3"
    assert {ctl.tracked[c].applied_mode for c in ("a", "b", "x0")} == {"weights"}
    with caplog.at_level(logging.INFO, logger="flowcon.agent"):
        for i in range(3):
            eng.c[f"x{i}"].running = False
        ctl.resync()
    assert "cores pinned again" in caplog.text
    assert eng.c["a"].cpu.cpuset_cpus == "0-1"
    assert ctl.restore_all() == 2
    assert eng.c["a"].cpu == CpuSettings(nano_cpus=HOST * 10**9, cpu_shares=1024, cpuset_cpus="0-3")
    assert eng.c["b"].cpu.cpuset_cpus == "1-3"


def test_hybrid_quota_once_the_lines_say_threads(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("aware", ON)
    eng.add("plain", ON)
    ctl = make(eng, tmp_path, control="hybrid")
    ctl.resync()
    assert ctl.tracked["aware"].applied_mode == ctl.tracked["plain"].applied_mode == "weights"
    assert eng.c["aware"].cpu.cpu_shares == 2048
    eng.emit("aware", '{"step": 1, "loss": 3.0, "threads": 2}')
    eng.emit("plain", '{"step": 1, "loss": 3.0}')
    ctl.round()
    assert ctl.tracked["aware"].monitor.thread_aware
    assert ctl.tracked["aware"].applied_mode == "quota"  # type: ignore[comparison-overlap]
    assert eng.c["aware"].cpu == CpuSettings(nano_cpus=2 * 10**9, cpu_shares=1024)
    assert ctl.tracked["plain"].applied_mode == "weights"
    # the agent restarts: the job is still known to be thread-aware
    ctl2 = make(eng, tmp_path, control="hybrid")
    ctl2.resync()
    assert ctl2.tracked["aware"].monitor.progress.threads == 2
    assert ctl2.tracked["aware"].applied_mode == "quota"
    assert ctl2.restore_all() == 2
    assert eng.c["plain"].cpu == CpuSettings(nano_cpus=HOST * 10**9, cpu_shares=1024)


def test_hybrid_quota_from_the_start_for_a_job_labelled_adaptive(tmp_path: Path) -> None:
    """A job that sizes its pool from the quota it sees at start (the training images'
    ``threads: quota``) must start under a quota, not under weights until its first line."""
    eng = FakeEngine()
    eng.add("aware", {**ON, "flowcon.threads": "adaptive"})
    eng.add("fixed", {**ON, "flowcon.threads": "fixed"})
    ctl = make(eng, tmp_path, control="hybrid")
    ctl.resync()
    assert ctl.tracked["aware"].applied_mode == "quota"
    assert eng.c["aware"].cpu.nano_cpus == 2 * 10**9
    assert ctl.tracked["fixed"].applied_mode == "weights"
    eng.emit("fixed", '{"step": 1, "loss": 3.0, "threads": 2}')  # the label wins
    ctl.round()
    assert ctl.tracked["fixed"].applied_mode == "weights"


def test_state_keeps_the_mode_and_old_records_mean_quota(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON, cpu=CpuSettings(cpuset_cpus="0,2"))
    eng.add("b", ON)
    make(eng, tmp_path, control="cpuset").resync()  # the agent dies without restoring
    store = StateStore(tmp_path / "state.json")
    rec = store.load().containers["a"]
    assert (rec.applied_mode, rec.applied_cpuset, rec.applied_shares) == ("cpuset", "0-1", 2048)
    assert rec.original is not None
    assert rec.original["cpuset_cpus"] == "0,2"
    # a new agent, now configured for quota, still gives back what the old one set
    ctl = make(eng, tmp_path, control="quota")
    ctl.resync()
    assert eng.c["a"].cpu == CpuSettings(nano_cpus=2 * 10**9, cpu_shares=1024, cpuset_cpus="0,2")
    ctl.restore_all()
    # an old state file: no mode, no cpuset in the originals
    state = store.load()
    old = state.containers["a"]
    old.applied_cpus, old.applied_mode = 2.0, None
    old.original = {"nano_cpus": 0, "cpu_quota": 0, "cpu_period": 0, "cpu_shares": 0}
    store.save(state)
    ctl3 = make(eng, tmp_path)
    ctl3.resync()
    assert ctl3.tracked["a"].original == CpuSettings()
    assert ctl3.tracked["a"].applied_mode == "quota"
    assert ctl3.restore_all() == 2
    assert [body for cid, body in eng.updates if cid == "a"][-1] == {"NanoCpus": HOST * 10**9}


def foreign_update(eng: FakeEngine, cid: str, **fields: int | str) -> None:
    """Someone else's ``docker update`` (not through the agent)."""
    c = eng.c[cid]
    c.cpu = replace(c.cpu, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("control", ["quota", "weights", "cpuset"])
def test_a_change_by_someone_else_wins_and_is_never_reverted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, control: str
) -> None:
    eng = FakeEngine()
    for cid in ("a", "b", "c"):
        eng.add(cid, ON)
    ctl = make(eng, tmp_path, control=control)
    ctl.resync()
    itvals: list[float] = []
    ctl.on_itval = itvals.append
    ctl.on_update("a")  # the update event of the agent's own change: nothing happens
    assert ctl.tracked["a"].managed
    assert ctl.counters.foreign_total() == 0

    foreign_update(eng, "b", cpu_shares=4096, nano_cpus=3 * 10**9)
    with caplog.at_level(logging.INFO):
        ctl.on_update("b")
    t = ctl.tracked["b"]
    assert not t.managed
    assert t.list is None
    assert t.hands_off
    assert "NanoCpus" in t.hands_off  # each mode sets NanoCpus (weights: the whole host)
    assert "foreign change container=b" in caplog.text
    assert ctl.counters.foreign_total() == 1
    assert itvals == [2]  # the others' shares are recomputed at once (Algorithm 2's reset)
    after = eng.c["b"].cpu
    n_b = sum(1 for cid, _ in eng.updates if cid == "b")
    for _ in range(3):
        ctl.round()
    assert eng.c["b"].cpu == after  # never overwritten by a round ...
    assert sum(1 for cid, _ in eng.updates if cid == "b") == n_b
    view = {v["name"]: v for v in ctl.views()}["b"]
    assert view["managed"] is False
    assert view["hands_off"] == t.hands_off

    # ... nor by a restarted agent (the state file keeps the hands off) ...
    ctl2 = make(eng, tmp_path, control=control)
    ctl2.resync()
    assert not ctl2.tracked["b"].managed
    assert ctl2.tracked["b"].hands_off == t.hands_off
    # ... nor by the restore on exit, which gives the others back their originals
    assert ctl2.restore_all() == 2
    assert eng.c["b"].cpu == after
    assert sum(1 for cid, _ in eng.updates if cid == "b") == n_b

    # the container restarts: it is managed again, from its current settings
    ctl2.on_finish("b")
    ctl2.on_start("b")
    assert ctl2.tracked["b"].managed
    assert ctl2.tracked["b"].hands_off is None
    assert ctl2.tracked["b"].original == after


def test_changes_while_the_agent_was_away_are_found_on_resume(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()  # 2 CPUs each, recorded as expected
    foreign_update(eng, "a", nano_cpus=10**9)  # the agent is dead (no event seen)
    ctl2 = make(eng, tmp_path)
    ctl2.resync()
    assert ctl2.tracked["a"].hands_off
    assert not ctl2.tracked["a"].managed
    assert ctl2.counters.foreign_total() == 1
    assert nano(eng, "a") == 10**9
    assert nano(eng, "b") == HOST * 10**9  # b alone now: the whole host


def operator_during_round(ctl: Controller, eng: FakeEngine, cid: str) -> None:
    """Someone else's ``docker update`` of ``cid`` lands while a round has decided its
    limits and not yet sent them (the round's write-ahead is the last step before)."""
    save = ctl.executor.before_updates

    def operator_then_save() -> None:
        foreign_update(eng, cid, nano_cpus=700_000_000)
        save()

    ctl.executor.before_updates = operator_then_save


def test_a_change_landing_during_a_round_is_not_overwritten(tmp_path: Path) -> None:
    """Regression (the agent-foreign-change fault scenario): an operator's ``docker
    update --cpus 0.7`` that landed after a round had decided, before it sent its
    updates, was overwritten with the round's limit (NanoCpus=167000000), and the update
    event read afterwards showed the agent's own value: never handed off. The agent now
    reads a container's settings right before each update it sends."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()  # 2 CPUs each
    operator_during_round(ctl, eng, "b")
    n_b = sum(1 for cid, _ in eng.updates if cid == "b")
    eng.add("c", ON)
    ctl.on_start("c")  # a and b get new limits; b was changed meanwhile
    assert eng.c["b"].cpu.nano_cpus == 700_000_000
    assert sum(1 for cid, _ in eng.updates if cid == "b") == n_b  # nothing written to b
    t = ctl.tracked["b"]
    assert not t.managed
    assert t.hands_off
    assert "NanoCpus 2000000000 -> 700000000" in t.hands_off
    assert ctl.counters.foreign_total() == 1
    assert sorted(cid for cid, t in ctl.tracked.items() if t.managed) == ["a", "c"]
    ctl.executor.before_updates = ctl._save
    for _ in range(2):
        ctl.round()
    assert eng.c["b"].cpu.nano_cpus == 700_000_000
    record = json.loads((tmp_path / "state.json").read_text())["containers"]["b"]
    assert record["hands_off"] == t.hands_off
    assert record["pending"] in ({}, None)


def test_an_update_colliding_with_the_agents_own_is_found_by_its_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine has no conditional update: someone else's update landing between the
    agent's read and its update is replaced. The engine's events tell: an update carries
    one ``update`` event, and a second inside the agent's window is someone else's."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    real = eng.update_cpu
    stamps: dict[str, int] = {}

    def operator_first(cid: str, body: dict[str, int | str]) -> None:
        if cid == "b" and "operator" not in stamps:  # after the agent's read of b
            foreign_update(eng, "b", nano_cpus=700_000_000)
            stamps["operator"] = time.time_ns()
        real(cid, body)
        stamps.setdefault(cid, time.time_ns())  # the engine's event of this update

    eng.update_cpu = operator_first  # type: ignore[method-assign]
    eng.add("c", ON)
    ctl.on_start("c")
    eng.update_cpu = real  # type: ignore[method-assign]
    assert eng.c["b"].cpu.nano_cpus != 700_000_000  # replaced: the window the engine leaves
    ctl.on_update("b", stamps["b"])  # the agent's own event: its own value, nothing to do
    ctl.on_update("a", stamps["a"])
    ctl.on_update("a", stamps["a"] + 10**12)  # an event outside any window of a's
    assert ctl.tracked["a"].managed
    assert ctl.tracked["b"].managed
    with caplog.at_level(logging.WARNING):
        ctl.on_update("b", stamps["operator"])  # the second event inside b's window
    t = ctl.tracked["b"]
    assert not t.managed
    assert t.hands_off
    assert "in flight" in t.hands_off
    assert "may have replaced theirs" in caplog.text
    assert ctl.counters.foreign_total() == 1
    n_b = sum(1 for cid, _ in eng.updates if cid == "b")
    ctl.round()
    assert sum(1 for cid, _ in eng.updates if cid == "b") == n_b


def test_an_update_the_engine_applied_but_did_not_answer_is_the_agents_own(
    tmp_path: Path,
) -> None:
    """Regression (the agent-engine-restart fault scenario, 3 of 5 runs, after the read
    before each update was added): the engine stopped while a round's updates were in
    flight; it applied them but the answers were lost ("cannot connect"). The next round's
    read found the agent's own values and took them for someone else's: every container
    was let go, and the final restore left the agent's limits on them."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()  # 2 CPUs each
    real = eng.update_cpu

    def applied_then_gone(cid: str, body: dict[str, int | str]) -> None:
        real(cid, body)
        raise EngineUnavailable("update: cannot connect to the Docker engine")

    eng.update_cpu = applied_then_gone  # type: ignore[method-assign]
    eng.add("c", ON)
    ctl.on_start("c")  # a and b get new limits; the engine applies them, answers nothing
    eng.update_cpu = real  # type: ignore[method-assign]
    for _ in range(3):
        ctl.round()
    assert ctl.counters.foreign_total() == 0
    assert all(t.managed and t.hands_off is None for t in ctl.tracked.values())
    # someone else's change after that is still someone else's
    foreign_update(eng, "a", nano_cpus=10**9 + 1)
    ctl.on_update("a")
    assert ctl.tracked["a"].hands_off
    assert ctl.counters.foreign_total() == 1


class Killed(BaseException):
    """The agent killed (SIGKILL): nothing after this point runs, not even a finally."""


@pytest.mark.parametrize("control", ["quota", "weights"])
def test_an_update_sent_just_before_a_kill_is_the_agents_own(tmp_path: Path, control: str) -> None:
    """Regression (the agent-kill fault scenario, 11 of 20 runs): the agent sent a round's
    update and was killed before it saved the new values as ``expected``; the restarted
    agent took its own update for someone else's change and let every such container go
    ("foreign change ... NanoCpus 400000000 -> 718000000"). The values an update will set
    are now saved before it is sent (``pending``)."""
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path, control=control)
    ctl.resync()  # a and b recorded with their expected settings
    sent = len(eng.updates)
    real = eng.update_cpu

    def update_then_die(cid: str, body: dict[str, int | str]) -> None:
        real(cid, body)  # the engine applied it ...
        if cid != "c":  # (c is new: it has no record to compare with)
            raise Killed  # ... and the agent died before recording it

    eng.update_cpu = update_then_die  # type: ignore[method-assign]
    eng.add("c", ON)  # a third job: Algorithm 1 gives a and b new limits
    with pytest.raises(Killed):
        ctl.on_start("c")
    assert len(eng.updates) in (sent + 1, sent + 2)  # c's, and one of a's and b's
    assert {cid for cid, _ in eng.updates[sent:]} & {"a", "b"}
    eng.update_cpu = real  # type: ignore[method-assign]

    ctl2 = make(eng, tmp_path, control=control)
    ctl2.resync()
    assert ctl2.counters.foreign_total() == 0
    assert all(t.managed and t.hands_off is None for t in ctl2.tracked.values())
    ctl2.round()
    shares = {cid: t.limit for cid, t in ctl2.tracked.items()}
    assert sorted(shares) == ["a", "b", "c"]
    assert sum(shares.values()) == pytest.approx(1.0)
    # someone else's change while the agent is down is still someone else's
    foreign_update(eng, "a", nano_cpus=10**9 + 1)
    ctl3 = make(eng, tmp_path, control=control)
    ctl3.resync()
    assert ctl3.tracked["a"].hands_off
    assert ctl3.counters.foreign_total() == 1


def test_a_change_before_any_limit_becomes_the_original(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()  # alone: unlimited, no update sent
    assert eng.updates == []
    assert ctl.tracked["a"].applied_cpus is None
    foreign_update(eng, "a", cpu_shares=256)
    ctl.on_update("a")
    assert ctl.tracked["a"].managed
    assert ctl.counters.foreign_total() == 0
    assert ctl.tracked["a"].original == CpuSettings(cpu_shares=256)


def test_a_change_to_a_field_the_agent_does_not_set_becomes_the_original(
    tmp_path: Path,
) -> None:
    eng = FakeEngine()
    eng.add("a", ON, cpu=CpuSettings(cpu_shares=512))
    eng.add("b", ON)
    ctl = make(eng, tmp_path)  # quota: the agent never sets CpuShares
    ctl.resync()
    foreign_update(eng, "a", cpu_shares=2048)
    ctl.on_update("a")
    assert ctl.tracked["a"].managed
    assert ctl.counters.foreign_total() == 0
    assert ctl.restore_all() == 2
    assert eng.c["a"].cpu.cpu_shares == 2048  # the restore does not undo it


def test_update_events_of_gone_or_unknown_containers_are_ignored(tmp_path: Path) -> None:
    eng = FakeEngine()
    eng.add("a", ON)
    eng.add("b", ON)
    ctl = make(eng, tmp_path)
    ctl.resync()
    del eng.c["a"]
    ctl.on_update("a")  # inspect says gone: the die event will release it
    ctl.on_update("nobody")
    eng.down = True
    ctl.on_update("b")  # engine down: logged, nothing changes
    assert ctl.tracked["b"].managed
    assert ctl.counters.foreign_total() == 0


# ----- GPUs: NVML's per-process accounting matched to the containers' cgroup PIDs --------


def test_gpu_use_per_container_through_the_round(tmp_path: Path) -> None:
    """One NVML sample a round; a container's GPU figures are its cgroup PIDs' processes;
    a GPU job's R weighs its GPU share in, a CPU job's R stays its CPU share."""
    from flowcon.agent.exporter import Exporter
    from flowcon.agent.reporter import payload
    from flowcon.core.gpu_usage import GpuSample
    from flowcon.engine.gpus import GpuSampler
    from flowcon.testing.fake_nvml import FakeNvml

    eng = FakeEngine()
    eng.cgroups = True
    eng.add("gpujob", {**ON, "flowcon.job": "train"})
    eng.add("cpujob", ON)
    nvml = FakeNvml(gpus=2)
    nvml.run(pid=101, gpu=1, mem_bytes=3 << 30, sm_util=0.6)
    nvml.run(pid=102, gpu=1, mem_bytes=1 << 30, sm_util=0.2)
    nvml.run(pid=999, gpu=0, mem_bytes=5 << 30, sm_util=0.9)  # another host process
    pids = {"gpujob": {1, 101, 102}, "cpujob": {7}}
    asked: list[str] = []

    def pids_of(cid: str, parent: str, pid: int) -> set[int] | None:
        asked.append(cid)
        return pids.get(cid)

    config = Config(
        itval=2,
        itval_max=8,
        control="quota",
        state_file=str(tmp_path / "state.json"),
        gpu_weight=3.0,
    )

    class Counted(GpuSampler):
        calls = 0

        def sample(self) -> GpuSample | None:
            Counted.calls += 1
            return super().sample()

    sampler = Counted(nvml)
    ctl = Controller(
        eng, config, HOST, StateStore(config.state_file), gpus=sampler, pids_of=pids_of
    )
    ctl.resync()
    for cid in ("gpujob", "cpujob"):
        progress(eng, cid, 100.0, 1.0)
    ctl.round()
    for cid in ("gpujob", "cpujob"):
        progress(eng, cid, 90.0, 1.0)
    ctl.round()
    assert Counted.calls == 2  # one sample per round, not one per container
    assert sorted(asked) == ["cpujob", "cpujob", "gpujob", "gpujob"]
    views = {v["container_id"]: v for v in ctl.views()}
    g = views["gpujob"]
    assert g["gpu_share"] == pytest.approx(0.8 / 2)  # 0.6 + 0.2 of one of 2 GPUs
    assert g["gpus"] == [
        {
            "gpu": 1,
            "uuid": nvml.nvmlDeviceGetUUID(1),
            "util": pytest.approx(0.8),
            "mem_bytes": 4 << 30,
        }
    ]
    assert g["gpu_mem_bytes"] == 4 << 30
    assert sorted(p["pid"] for p in g["gpu_processes"]) == [101, 102]  # not 999
    cpu = ctl.tracked["gpujob"].monitor.usage.cpu_share
    assert cpu is not None
    assert g["r"] == pytest.approx((cpu + 3.0 * 0.4) / 4.0)
    c = views["cpujob"]
    assert c["gpus"] == []
    assert c["gpu_share"] is None
    assert c["gpu_processes"] == []
    assert c["r"] == pytest.approx(c["cpu_share"])
    # the state file carries the same figures (what `flowcon status` shows)
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["containers"]["gpujob"]["view"]["gpu_share"] == pytest.approx(0.4)
    # the allocator gets the GPU utilisation with the throughput
    sent = {m["container_id"]: m for m in payload("n", list(views.values()))["measurements"]}
    assert sent["gpujob"]["gpu_utilization"] == pytest.approx(0.4)
    assert "gpu_utilization" not in sent["cpujob"]  # what an older allocator knew
    # Prometheus: per container and GPU, labelled as DCGM exporter labels a GPU
    exp = Exporter()
    exp.update(list(views.values()), 2.0)
    text = exp.render().decode()
    uuid = nvml.nvmlDeviceGetUUID(1)
    assert (
        f'flowcon_container_gpu_utilization_ratio{{UUID="{uuid}",gpu="1",id="/docker/gpujob",'
        'job="train",list="NL",name="gpujob"} 0.8' in text
    )
    assert f'flowcon_container_gpu_memory_used_bytes{{UUID="{uuid}",gpu="1"' in text
    assert "flowcon_container_gpu_processes{UUID=" in text
    # the processes leave the GPU: the series go away with them
    nvml.stop(101)
    nvml.stop(102)
    ctl.round()
    exp.update(ctl.views(), 2.0)
    assert "flowcon_container_gpu_utilization_ratio{" not in exp.render().decode()


def test_no_nvml_means_cpu_only_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from flowcon.engine.gpus import GpuSampler
    from flowcon.testing.fake_nvml import FakeNvml

    with caplog.at_level(logging.WARNING):
        sampler = GpuSampler(FakeNvml(loaded=False))
    assert not sampler.available
    assert sampler.sample() is None
    assert caplog.text.count("GPU measurement off") == 1
    assert "controls CPU only" in caplog.text
    eng = FakeEngine()
    eng.add("a", ON)
    config = Config(itval=2, itval_max=8, control="quota", state_file=str(tmp_path / "s.json"))
    ctl = Controller(
        eng, config, HOST, StateStore(config.state_file), gpus=sampler, pids_of=lambda *a: {1}
    )
    ctl.resync()
    progress(eng, "a", 10.0, 1.0)
    ctl.round()
    assert ctl.views()[0]["gpus"] == []


# ----- GPU shares under MPS: the same lists, applied at a restart when it pays ----------


def _shared_gpu(tmp_path: Path, mps_running: bool = True, **cfg: object) -> tuple[Any, ...]:
    from flowcon.agent.gpu_share import GpuShares
    from flowcon.engine.gpus import GpuSampler
    from flowcon.testing.fake_mps import FakeMps
    from flowcon.testing.fake_nvml import FakeNvml

    eng = FakeEngine()
    eng.cgroups = True
    share = {**ON, "flowcon.gpu.share": "true"}
    eng.add("young", share)
    eng.add("old", share)
    eng.add("other", ON)  # on the same GPU, not opted in: never restarted
    nvml = FakeNvml(gpus=1, memory_bytes=16 << 30)
    for pid, mem in ((11, 4 << 30), (12, 2 << 30), (13, 1 << 30)):
        nvml.run(pid=pid, gpu=0, mem_bytes=mem, sm_util=0.3)
    pids = {"young": {11}, "old": {12}, "other": {13}}
    restarted: list[str] = []
    mps = FakeMps(running=mps_running)
    shares = GpuShares(
        mps, tmp_path / "shares", restarted.append, default_cost_s=5.0, background=False
    )
    config = Config(
        itval=20,
        itval_max=320,
        control="quota",
        alpha=0.05,
        reference_intervals=1,
        state_file=str(tmp_path / "state.json"),
        **cfg,  # type: ignore[arg-type]
    )
    ctl = Controller(
        eng,
        config,
        HOST,
        StateStore(config.state_file),
        gpus=GpuSampler(nvml),
        pids_of=lambda cid, parent, pid: pids.get(cid),
        gpu_shares=shares,
    )
    return eng, ctl, shares, restarted, mps


def _converge_old(eng: FakeEngine, ctl: Controller, until: list[str] | None = None) -> None:
    """ "young" keeps learning, "old" stops: old goes to CL, young stays in NL (stops at
    the round that restarted a container when ``until`` is given)."""
    ctl.resync()
    vy, vo = 1000.0, 1000.0
    for r in range(6):
        vy = progress(eng, "young", vy, 10.0)
        vo = progress(eng, "old", vo, 10.0 if r < 2 else 0.0)
        progress(eng, "other", 5.0, 1.0)
        ctl.round()
        if until:
            return


def test_gpu_shares_follow_the_lists_and_apply_at_a_restart(tmp_path: Path) -> None:
    import json as _json

    from flowcon.agent.gpu_share import read_share, share_file

    eng, ctl, shares, restarted, mps = _shared_gpu(tmp_path)
    _converge_old(eng, ctl, until=restarted)
    assert ctl.tracked["old"].list is ListName.CL
    assert ctl.tracked["young"].list is ListName.NL
    assert sorted(restarted) == ["old", "young"]  # once each, never "other"
    young = read_share(share_file(tmp_path / "shares", "young"))
    old = read_share(share_file(tmp_path / "shares", "old"))
    assert young is not None
    assert old is not None
    assert young.pct > old.pct  # NL's share of the GPU exceeds CL's
    assert young.pct + old.pct == 100
    assert young.mem_limit == 5 << 30  # 1.25 x its 4 GiB
    body = _json.loads(share_file(tmp_path / "shares", "old").read_text())
    assert body["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(old.pct)
    assert not share_file(tmp_path / "shares", "other").exists()
    # the containers step again after their restart: the share is in effect, the time
    # without a step is their measured restart cost, and nothing is restarted again
    before = ctl.tracked["young"].monitor.progress.step_ts
    eng.t += 7.0
    progress(eng, "young", 500.0, 10.0)
    first_after = eng.c["young"].lines[-8][0] / 1e9
    progress(eng, "old", 900.0, 0.0)
    ctl.round()
    assert shares.in_effect["young"] == young
    # young's last step line before the restart to its first after
    assert before is not None
    assert shares.cost_s["young"] == pytest.approx(first_after - before)
    assert shares.cost_s["young"] > 7.0
    ctl.round()
    assert sorted(restarted) == ["old", "young"]
    assert mps.asked == 1  # asked once
    # a restarted agent takes the shares the containers started with from their files
    from flowcon.agent.gpu_share import GpuShares

    ctl.gpu_shares = GpuShares(
        mps, tmp_path / "shares", restarted.append, default_cost_s=5.0, background=False
    )
    progress(eng, "young", 400.0, 10.0)
    progress(eng, "old", 900.0, 0.0)
    ctl.round()
    assert sorted(restarted) == ["old", "young"]
    assert ctl.gpu_shares.in_effect["old"] == old


def test_gpu_share_not_worth_its_restart_is_left(tmp_path: Path) -> None:
    eng, ctl, shares, restarted, _ = _shared_gpu(tmp_path, gpu_restart_cost=60.0)
    shares.default_cost_s = 10_000.0  # restarts assumed dearer than any gain
    _converge_old(eng, ctl)
    assert restarted == []
    assert shares.decisions
    assert not shares.decisions[-1][1].apply
    assert "does not pay" in shares.decisions[-1][1].reason


def test_without_mps_the_agent_says_so_once_and_controls_cpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eng, ctl, _shares, restarted, mps = _shared_gpu(tmp_path, mps_running=False)
    with caplog.at_level(logging.WARNING):
        _converge_old(eng, ctl)
    assert restarted == []
    assert caplog.text.count("GPU shares off: nvidia-cuda-mps-control not found") == 1
    assert mps.asked == 1
    assert nano(eng, "old") < nano(eng, "young")  # CPU control goes on as before
