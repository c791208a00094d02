"""Replay pieces without an engine: time parsing, metric tails, cgroup reading, the
comparison arithmetic, CSV/JSON round trip and the plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcon.replay.cpu import CgroupCpu, stats_reading
from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.plots import plot_cpu, plot_jct
from flowcon.replay.recorder import (
    change_pct,
    comparison,
    mean_cpus_used,
    read_run,
    write_run,
)
from flowcon.replay.runner import REPLAY_LABEL, Replay, last_metric, parse_docker_time
from flowcon.replay.scenario import load_scenario


def test_parse_docker_time() -> None:
    assert parse_docker_time("2026-01-01T00:00:01.500000000Z") == pytest.approx(1767225601.5)
    assert parse_docker_time("2026-01-01T00:00:01Z") == pytest.approx(1767225601.0)
    assert parse_docker_time("2026-01-01T01:00:01.25+01:00") == pytest.approx(1767225601.25)
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    assert parse_docker_time("") is None
    assert parse_docker_time("yesterday") is None


def test_last_metric_skips_noise() -> None:
    text = '{"step":1,"loss":2.0}\n{"step":2,"loss":1.5}\nEpoch done\n{not json\n'
    assert last_metric(text) == (2, 1.5)
    assert last_metric('{"step":3,"loss":null}\n') == (3, None)
    assert last_metric("nothing here") == (None, None)


def _cgroup_v1(root: Path, cid: str, usage: int, quota: int, shares: int = 1024) -> None:
    acct = root / "cpuacct" / "docker" / cid
    cpu = root / "cpu" / "docker" / cid
    acct.mkdir(parents=True)
    cpu.mkdir(parents=True)
    (acct / "cpuacct.usage").write_text(f"{usage}\n")
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (cpu / "cpu.shares").write_text(f"{shares}\n")


def test_cgroup_v1_and_v2(tmp_path: Path) -> None:
    _cgroup_v1(tmp_path, "abc", 5_000_000_000, 50_000, 512)
    r = CgroupCpu("abc", tmp_path).read()
    assert r is not None
    assert r.usage_ns == 5_000_000_000
    assert r.limit_cpus == pytest.approx(0.5)
    assert r.shares == 512
    _cgroup_v1(tmp_path, "free", 7, -1)
    free = CgroupCpu("free", tmp_path).read()
    assert free is not None
    assert free.limit_cpus is None

    v2 = tmp_path / "v2" / "system.slice" / "docker-def.scope"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\n")
    (v2 / "cpu.max").write_text("150000 100000\n")
    (v2 / "cpu.weight").write_text("100\n")
    r2 = CgroupCpu("def", tmp_path / "v2").read()
    assert r2 is not None
    assert r2.usage_ns == 1_500_000
    assert r2.limit_cpus == pytest.approx(1.5)

    gone = CgroupCpu("missing", tmp_path)
    assert not gone.found
    assert gone.read() is None
    (tmp_path / "cpuacct" / "docker" / "abc" / "cpuacct.usage").write_text("garbage")
    assert CgroupCpu("abc", tmp_path).read() is None


def test_cgroup_cpuset_is_read_only_when_narrower_than_the_host(tmp_path: Path) -> None:
    """Regression: a replay whose agent only pinned cpusets said "agent changed limits: no"."""
    _cgroup_v1(tmp_path, "pin", 1, -1)
    _cgroup_v1(tmp_path, "all", 1, -1)
    (tmp_path / "cpuset").mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    for cid, cpus in (("pin", "1"), ("all", "0-1")):
        d = tmp_path / "cpuset" / "docker" / cid
        d.mkdir(parents=True)
        (d / "cpuset.cpus").write_text(cpus + "\n")
    pin, free = CgroupCpu("pin", tmp_path).read(), CgroupCpu("all", tmp_path).read()
    assert pin is not None
    assert pin.cpuset == "1"
    assert free is not None
    assert free.cpuset is None

    v2 = tmp_path / "v2" / "system.slice" / "docker-v2pin.scope"
    v2.mkdir(parents=True)
    (tmp_path / "v2" / "cpuset.cpus.effective").write_text("0-3\n")
    (v2 / "cpu.stat").write_text("usage_usec 1\n")
    (v2 / "cpuset.cpus").write_text("2-3\n")
    r = CgroupCpu("v2pin", tmp_path / "v2").read()
    assert r is not None
    assert r.cpuset == "2-3"


def test_limits_changed_sees_each_control_lever() -> None:
    base = RunResult("s", "flowcon", "id", 0.0, 2, 0.05, 20.0)
    assert not base.limits_changed()
    base.samples = [Sample(1, "a", 1.0, None, 1024)]
    assert not base.limits_changed()
    for sample in (
        Sample(1, "a", 1.0, 0.5, 1024),  # quota
        Sample(1, "a", 1.0, None, 512),  # weights
        Sample(1, "a", 1.0, None, 1024, "1"),  # cpuset
    ):
        base.samples = [sample]
        assert base.limits_changed(), sample


def test_stats_reading() -> None:
    stats: dict[str, object] = {"cpu_stats": {"cpu_usage": {"total_usage": 42}}}
    r = stats_reading(stats, {"HostConfig": {"NanoCpus": 1_500_000_000, "CpuShares": 0}})
    assert r is not None
    assert r.usage_ns == 42
    assert r.limit_cpus == 1.5
    assert r.shares is None
    r = stats_reading(stats, {"HostConfig": {"CpuQuota": 50000, "CpuPeriod": 100000}})
    assert r is not None
    assert r.limit_cpus == 0.5
    assert r.cpuset is None
    r = stats_reading(stats, {"HostConfig": {"CpusetCpus": "0"}})
    assert r is not None
    assert r.cpuset == "0"
    assert stats_reading({}, {}) is None


def result(policy: str, jcts: dict[str, float], limit: float | None = None) -> RunResult:
    r = RunResult("s", policy, f"id-{policy}", 0.0, 2, 0.05, 20.0)
    start = 0.0
    for name, jct in jcts.items():
        r.jobs.append(JobRecord(name, "img", start, start, start + jct, 0, "c", 10, 0.5))
        for t in range(int(jct)):
            r.samples.append(Sample(start + t + 1, name, 1.0, limit, 1024))
        start += 10
    return r


def test_comparison_and_makespan() -> None:
    none = result("none", {"a": 100.0, "b": 50.0})
    flow = result("flowcon", {"a": 110.0, "b": 25.0}, limit=0.5)
    assert none.makespan == 100.0
    assert flow.makespan == 110.0
    cmp = comparison(none, flow)
    rows = {r["job"]: r for r in cmp["jobs"]}
    assert rows["a"]["change_pct"] == pytest.approx(10.0)
    assert rows["b"]["change_pct"] == pytest.approx(-50.0)
    assert cmp["makespan_change_pct"] == pytest.approx(10.0)
    assert cmp["flowcon_limits_changed"]
    assert not cmp["none_limits_changed"]
    assert change_pct(None, 1.0) is None
    assert change_pct(0.0, 1.0) is None
    # a: 1 CPU for 99 s (first sample has no interval), b: 1 CPU for 49 s, over 100 s
    assert mean_cpus_used(none) == pytest.approx((99 + 49) / 100)
    assert cmp["mean_cpus_none"] == pytest.approx(1.48)


def test_unfinished_job_has_no_makespan() -> None:
    r = result("none", {"a": 10.0})
    r.jobs.append(JobRecord("b", "img", 5.0, 5.0))
    assert r.jobs[-1].jct is None
    assert r.makespan is None


def test_write_read_and_plot(tmp_path: Path) -> None:
    flow = result("flowcon", {"a": 30.0, "b": 20.0}, limit=0.5)
    write_run(flow, tmp_path)
    back = read_run(tmp_path)
    assert [j.jct for j in back.jobs] == [30.0, 20.0]
    assert back.samples[0] == flow.samples[0]
    flow.samples.append(Sample(99.0, "a", 1.0, None, 1024, "0"))
    write_run(flow, tmp_path)
    assert read_run(tmp_path).samples[-1].cpuset == "0"
    assert "cpu_pct" in (tmp_path / "timeline.csv").read_text().splitlines()[0]
    assert plot_cpu(back, tmp_path / "cpu.png").stat().st_size > 5000
    none = result("none", {"a": 35.0, "b": 20.0})
    assert plot_jct({"none": none, "flowcon": back}, tmp_path / "j.png").stat().st_size > 5000


def test_agent_is_scoped_to_its_own_run(tmp_path: Path) -> None:
    """Regression: an unscoped replay agent managed every FlowCon container on the engine."""
    scenario = load_scenario(str(Path(__file__).resolve().parents[2] / "scenarios" / "fixed.yaml"))
    replay = Replay(None, scenario, "flowcon", tmp_path, run_id="abc123")
    settings = replay.agent_settings()
    assert settings["match_labels"] == {REPLAY_LABEL: "abc123"}
    assert settings["alpha"] == scenario.alpha
    assert settings["itval"] == scenario.itval
    # An explicit scope from the caller wins.
    replay = Replay(None, scenario, "flowcon", tmp_path, agent_config={"match_labels": {"x": "1"}})
    assert replay.agent_settings()["match_labels"] == {"x": "1"}


def test_thread_mode_control_and_host_load_are_recorded(tmp_path: Path) -> None:
    flow = result("flowcon", {"a": 30.0, "b": 20.0})
    flow.threads, flow.adapt_threads, flow.control = "pinned", False, "weights"
    flow.host_load = {"before": {"load1": 0.1}, "after": {"load1": 0.3}, "forced": True}
    write_run(flow, tmp_path)
    back = read_run(tmp_path)
    assert (back.threads, back.adapt_threads, back.control) == ("pinned", False, "weights")
    assert back.host_load == flow.host_load
    cmp = comparison(result("none", {"a": 60.0, "b": 20.0}), flow)
    header = (tmp_path / "result.json").read_text()
    assert '"threads": "pinned"' in header
    assert set(cmp["jobs"][0]) >= {"cpu_s_none", "cpu_s_flowcon", "cpu_s_change_pct"}


def test_control_mode_reaches_the_agent_config(tmp_path: Path) -> None:
    scenario = load_scenario(str(Path(__file__).resolve().parents[2] / "scenarios" / "fixed.yaml"))
    replay = Replay(None, scenario, "flowcon", tmp_path, agent_config={"control": "weights"})
    assert replay.agent_settings()["control"] == "weights"


def test_shipped_images_say_whether_they_adapt_their_threads(tmp_path: Path) -> None:
    """The shipped training images resize their pool (flowcon.report) unless
    FLOWCON_ADAPT_THREADS=0: the replay labels them so that hybrid control gives them a
    quota from the start, as they size their pool from the quota they see at start."""
    from dataclasses import replace

    scenario = load_scenario(str(Path(__file__).resolve().parents[2] / "scenarios" / "fixed.yaml"))
    replay = Replay(None, scenario, "flowcon", tmp_path)
    job = scenario.jobs[0]
    env = scenario.job_environment(job, 2)
    assert replay._labels(job, env)["flowcon.threads"] == "adaptive"
    pinned = replace(scenario, adapt_threads=False)
    replay = Replay(None, pinned, "flowcon", tmp_path)
    assert replay._labels(job, pinned.job_environment(job, 2))["flowcon.threads"] == "fixed"
    # the job's own environment decides (its FLOWCON_ADAPT_THREADS wins over the scenario's)
    assert replay._labels(job, {"FLOWCON_ADAPT_THREADS": "1"})["flowcon.threads"] == "adaptive"
    other = replace(job, image="example/own-script:1")
    assert "flowcon.threads" not in replay._labels(other, env)
