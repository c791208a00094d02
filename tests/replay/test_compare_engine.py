"""`flowcon replay --compare --repeat 2 --force` on the local engine: two tiny testbox
jobs, pinned threads, adaptation off. Checks the alternating folders, the aggregate,
the thread env the containers really saw, and that nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from flowcon.replay.runner import agent_available

pytestmark = pytest.mark.docker

TESTBOX = "flowcon/testbox:latest"
STEP = "j=0; while [ $j -lt 8000 ]; do j=$((j+1)); done; sleep 0.05"
JOB = (
    'echo "threads=${FLOWCON_THREADS:-unset} adapt=${FLOWCON_ADAPT_THREADS:-unset}"; '
    f"i=0; while [ $i -lt $FLOWCON_ITERATIONS ]; do i=$((i+1)); {STEP}; "
    'printf \'{"step":%d,"loss":%d}\\n\' $i $((1000/i)); done'
)


def scenario() -> dict[str, object]:
    job = {"image": TESTBOX, "iterations": 25, "command": JOB}
    return {
        "name": "tinycmp",
        "alpha": 0.05,
        "itval": 2,
        "jobs": [
            {"name": "free", "start": 0, **job},
            {"name": "own", "start": 1, "env": {"FLOWCON_THREADS": 1}, **job},
        ],
    }


def test_compare_repeat_alternates_and_pins_threads(
    docker_client, labeled, cleanup_containers, tmp_path
) -> None:
    if not agent_available():
        pytest.skip("the FlowCon agent is not installed")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "flowcon.cli", "replay", str(path), "--compare"]
    cmd += ["--repeat", "2", "--force", "--threads", "pinned", "--no-adapt-threads"]
    cmd += ["--load-window", "0.5", "--sample-interval", "0.5", "--timeout", "120", "-q"]
    cmd += ["--out", str(out)]
    labels = labeled()
    for key, value in labels.items():
        cmd += ["--label", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "median [min, max] of 2 repetition(s)" in " ".join(proc.stdout.split())

    order = ["rep1-none", "rep1-flowcon", "rep2-flowcon", "rep2-none"]
    results = {d: json.loads((out / d / "result.json").read_text()) for d in order}
    starts = [results[d]["started_at"] for d in order]
    assert starts == sorted(starts), "runs did not alternate none, flowcon, flowcon, none"
    for d, r in results.items():
        assert r["policy"] == d.split("-")[1]
        assert r["threads"] == "pinned"
        assert r["adapt_threads"] is False
        assert set(r["host_load"]) == {"before", "after", "forced"}
        assert r["host_load"]["after"]["window_s"] == 0.5
        assert all(j["exit_code"] == 0 and j["steps"] == 25 for j in r["jobs"])
        # what the containers saw: pinned to the host's CPUs unless the job sets it
        free = (out / d / "logs" / "free.log").read_text()
        own = (out / d / "logs" / "own.log").read_text()
        assert f"threads={os.cpu_count()} adapt=0" in free
        assert "threads=1 adapt=0" in own

    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["repeats"] == 2
    assert cmp["order"] == [["none", "flowcon"], ["flowcon", "none"]]
    assert cmp["runs"]["rep2"] == {"flowcon": "rep2-flowcon", "none": "rep2-none"}
    assert cmp["host"]["forced"] == bool(cmp["host"]["busy"])
    v = cmp["variants"]["flowcon"]
    assert [j["job"] for j in v["jobs"]] == ["free", "own"]
    for j in v["jobs"]:
        assert j["jct_change"]["n"] == 2
        assert j["jct_change"]["min"] <= j["jct_change"]["median"] <= j["jct_change"]["max"]
        assert j["cpu_s_none"] > 0
        assert j["cpu_s"] > 0
    assert v["makespan_change"]["n"] == 2
    for i in (1, 2):
        assert (out / f"rep{i}-compare-flowcon.csv").exists()
    assert "(makespan)" in (out / "compare.csv").read_text()

    key, value = next(iter(labels.items()))
    assert (
        docker_client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{key}={value}"}
        )
        == []
    )
