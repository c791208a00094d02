"""run_compare's bookkeeping without an engine: the runs come from a stand-in for
cli.run_policy that returns hand-made results; what is checked is the order, the
folders, the agent config per variant and the files. Also check_host's decision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowcon.replay import hostload
from flowcon.replay.compare import (
    CompareRun,
    HostBusy,
    LoadCheck,
    check_host,
    print_aggregate,
    run_compare,
)
from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.repeat import HostLoad, variants_for
from flowcon.replay.scenario import parse_scenario

SC = parse_scenario(
    {
        "name": "t",
        "alpha": 0.05,
        "itval": 2,
        "threads": "pinned",
        "jobs": [
            {"name": "a", "image": "flowcon/testbox:latest", "start": 0},
            {"name": "b", "image": "flowcon/testbox:latest", "start": 1},
        ],
    }
)
# JCTs of a and b per policy: flowcon variants make a faster and b slower
JCT = {"none": (100.0, 50.0), "flowcon": (80.0, 55.0)}


class FakeRuns:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any] | None, bool, float | None]] = []

    def __call__(self, client: Any, sc: Any, policy: str, out_dir: Path, **kw: Any) -> RunResult:
        cfg = kw.get("agent_config")
        self.calls.append((policy, out_dir.name, cfg, kw["forced"], kw["load_window"]))
        a, b = JCT[policy]
        r = RunResult(sc.name, policy, out_dir.name, 0.0, 2, sc.alpha, sc.itval)
        r.jobs = [JobRecord("a", "x", 0, 0.0, a, 0), JobRecord("b", "x", 1, 1.0, 1.0 + b, 0)]
        r.samples = [Sample(0, "a", 1.0, None, None), Sample(a, "a", 1.0, None, None)]
        r.control = (cfg or {}).get("control") if policy == "flowcon" else None
        out_dir.mkdir(parents=True)
        return r


def test_repeated_compare_alternates_and_aggregates(tmp_path: Path) -> None:
    runs = FakeRuns()
    spec = CompareRun(
        SC,
        tmp_path,
        variants_for(["quota", "weights"]),
        2,
        {"agent_config": {"beta": 2}},
        {"busy": "x", "forced": True},
        load_window=0.5,
    )
    summary, results = run_compare(None, spec, runs)
    assert [c[1] for c in runs.calls] == [
        "rep1-none",
        "rep1-flowcon-quota",
        "rep1-flowcon-weights",
        "rep2-flowcon-weights",
        "rep2-flowcon-quota",
        "rep2-none",
    ]
    configs = {c[1]: c[2] for c in runs.calls}
    assert configs["rep1-none"] == {"beta": 2}  # no control key without the agent
    assert configs["rep2-flowcon-weights"] == {"beta": 2, "control": "weights"}
    assert all(c[3] is True and c[4] == 0.5 for c in runs.calls)
    assert len(results) == 2
    assert set(results[0]) == {"none", "flowcon[quota]", "flowcon[weights]"}

    data = json.loads((tmp_path / "compare.json").read_text())
    assert data == json.loads(json.dumps(summary))
    assert data["repeats"] == 2
    assert data["threads"] == "pinned"
    assert data["host"]["forced"] is True
    assert data["runs"]["rep2"]["flowcon[weights]"] == "rep2-flowcon-weights"
    assert set(data["variants"]) == {"flowcon[quota]", "flowcon[weights]"}
    a = data["variants"]["flowcon[quota]"]["jobs"][0]
    assert a["jct_change"]["median"] == pytest.approx(-0.2)
    assert a["cpu_s_change"]["median"] == pytest.approx(-0.2)  # 1 CPU x 80 s vs 100 s
    assert data["variants"]["flowcon[weights]"]["worst_job_change"]["median"] == pytest.approx(0.1)
    csv_lines = (tmp_path / "compare.csv").read_text().splitlines()
    assert csv_lines[0].startswith("variant,job,repeats,jct_none_median")
    assert "flowcon[quota],a,2,100.0000,80.0000,-0.2000" in csv_lines[1]
    assert any(line.startswith("flowcon[weights],(makespan),2") for line in csv_lines)
    for i in (1, 2):
        for v in ("flowcon-quota", "flowcon-weights"):
            assert (tmp_path / f"rep{i}-compare-{v}.json").exists()
        assert (tmp_path / f"rep{i}-jct.png").stat().st_size > 1000


def test_aggregate_table_names_each_control_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: rich read "flowcon[quota]" as a markup tag and printed "flowcon" for
    every mode; and a log file got 80 columns, which cut the job names."""
    spec = CompareRun(SC, tmp_path, variants_for(["quota", "weights"]), 1, {}, {})
    summary, _ = run_compare(None, spec, FakeRuns())
    print_aggregate(summary)
    out = capsys.readouterr().out
    assert "flowcon[quota]" in out
    assert "flowcon[weights]" in out
    assert max(len(line) for line in out.splitlines()) > 80


def test_single_compare_keeps_todays_layout(tmp_path: Path) -> None:
    runs = FakeRuns()
    spec = CompareRun(SC, tmp_path, ["flowcon"], 1, {}, {"busy": None, "forced": False})
    cmp, _ = run_compare(None, spec, runs)
    assert [c[1] for c in runs.calls] == ["none", "flowcon"]
    assert runs.calls[1][2] is None  # the agent's default control: no key added
    assert cmp["jobs"][0]["change_pct"] == pytest.approx(-20.0)
    assert cmp["jobs"][0]["cpu_s_change_pct"] == pytest.approx(-20.0)
    data = json.loads((tmp_path / "compare.json").read_text())
    assert "variants" not in data
    assert data["makespan_change_pct"] is not None
    assert data["host"] == {"busy": None, "forced": False}
    assert "(makespan)" in (tmp_path / "compare.csv").read_text()
    assert (tmp_path / "jct.png").exists()


def test_check_host_refuses_a_busy_host_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = {"now": HostLoad(3.0, 0.9, 0.1, 2)}
    monkeypatch.setattr(hostload, "measure", lambda window: loads["now"])
    with pytest.raises(HostBusy, match=r"host is busy: 1-minute load average 3.00.*--force"):
        check_host(LoadCheck(window=0.1))
    rec = check_host(LoadCheck(window=0.1, force=True))
    assert rec["forced"] is True
    assert "90 % busy" in rec["busy"]
    assert rec["start"]["load1"] == 3.0
    loads["now"] = HostLoad(0.1, 0.05, 0.1, 2)
    rec = check_host(LoadCheck(window=0.1, force=True))
    assert rec == {"start": loads["now"].to_dict(), "busy": None, "forced": False}


def test_check_host_waits_for_the_load_average_to_settle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Right after a run the 1-minute load average still says busy: with ``settle`` the
    check waits (10 s a look) and goes on once the host is quiet; past it, it refuses."""
    seq = [HostLoad(2.5, 0.01, 0.1, 2), HostLoad(1.4, 0.01, 0.1, 2), HostLoad(0.8, 0.01, 0.1, 2)]
    looks = iter(seq)
    monkeypatch.setattr(hostload, "measure", lambda window: next(looks))
    slept: list[float] = []
    rec = check_host(LoadCheck(window=0.1, settle=60), sleep=slept.append)
    assert slept == [10.0, 10.0]
    assert rec["busy"] is None
    assert rec["start"]["load1"] == 0.8
    looks = iter(seq)
    with pytest.raises(HostBusy):
        check_host(LoadCheck(window=0.1, settle=10), sleep=slept.append)


def test_measure_reads_the_host() -> None:
    load = hostload.measure(0.2)
    assert 0.0 <= load.busy <= 1.0
    assert load.load1 >= 0
    assert load.cpus >= 1
    assert load.window == 0.2
