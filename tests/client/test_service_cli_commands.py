"""The job commands a Slurm or Kubernetes user reaches for, against a live plan-only
allocator (a real HTTP server, no executor): ``submit --dry-run`` and ``submit -``, the exit
codes, ``jobs -o/-q/--watch``, ``job NAME``, ``logs`` without containers, ``cancel A B``."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.cli import main
from flowcon.client.http import AllocatorClient
from flowcon.contract import (
    CLI_EXIT_ADMITTED,
    CLI_EXIT_DROPPED,
    CLI_EXIT_ERROR,
    CLI_EXIT_INVALID,
    CLI_EXIT_PENDING,
)

PROFILE = {1: 10.0, 2: 18.0, 4: 32.0, 8: 50.0}
TABLES = ("jobs", "admissions", "allocations", "events", "measurements")


def spec(name: str, its: int = 3000, deadline: object = "10m", **kw: object) -> dict[str, Any]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", "true"],
        "global_batch_size": 16,
        "iterations": its,
        "deadline": deadline,
        "profile": dict(PROFILE),
        "env": {"API_KEY": "hunter2"},
        **kw,
    }


@pytest.fixture
def env(tmp_path, monkeypatch):
    for var in (
        "FLOWCON_ALLOCATOR_URL",
        "FLOWCON_ALLOCATOR_TOKEN",
        "FLOWCON_ALLOCATOR_CONFIG",
        "FLOWCON_TOKEN",
    ):
        monkeypatch.delenv(var, raising=False)
    cfg = AllocatorConfig(state_dir=(tmp_path / "state").resolve(), slot_seconds=1.0)
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.start(port=0)
    monkeypatch.setenv("FLOWCON_ALLOCATOR_URL", alloc.url)
    monkeypatch.setenv("FLOWCON_ALLOCATOR_TOKEN", alloc.token)
    monkeypatch.chdir(tmp_path)
    yield tmp_path, alloc
    alloc.stop()


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def write(tmp_path, data: dict[str, Any]) -> str:
    p = tmp_path / f"{data['name']}.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def counts(alloc: Allocator) -> dict[str, int]:
    return {t: alloc.store.count(t) for t in TABLES}


def test_exit_codes_of_submit(env):
    tmp_path, _alloc = env
    assert run("submit", write(tmp_path, spec("ok"))).exit_code == CLI_EXIT_ADMITTED
    drop = run("submit", write(tmp_path, spec("huge", its=10**7, deadline="1m")))
    assert drop.exit_code == CLI_EXIT_DROPPED
    assert drop.output.startswith("dropped huge:")
    bad = run("submit", write(tmp_path, spec("bad", its=-1)))
    assert bad.exit_code == CLI_EXIT_INVALID
    assert "iterations" in bad.output
    missing = run("submit", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == CLI_EXIT_INVALID
    assert "nope.yaml" in missing.output
    # refused by the daemon itself (the client cannot know: no executor to pre-run it)
    auto = run("submit", write(tmp_path, spec("auto", profile="auto")))
    assert auto.exit_code == CLI_EXIT_INVALID
    assert "profile" in auto.output
    again = run("submit", write(tmp_path, spec("ok")))  # the name is taken: 409
    assert again.exit_code == CLI_EXIT_ERROR
    assert "exists" in again.output
    away = run("submit", write(tmp_path, spec("x")), "--url", "http://127.0.0.1:9")
    assert away.exit_code == CLI_EXIT_ERROR
    assert "cannot reach" in away.output
    assert CLI_EXIT_PENDING not in (CLI_EXIT_ADMITTED, CLI_EXIT_DROPPED, CLI_EXIT_INVALID, 1)


def test_submit_reads_the_spec_from_stdin(env):
    tmp_path, alloc = env
    text = yaml.safe_dump({**spec("piped"), "profile": "prof.csv"})
    (tmp_path / "prof.csv").write_text("gpus,iterations_per_s\n1,10\n2,18\n4,32\n8,50\n")
    res = run("submit", "-", input=text)  # the profile file is read relative to the cwd
    assert res.exit_code == CLI_EXIT_ADMITTED, res.output
    assert res.output.startswith("admitted piped:")
    assert alloc.store.get_job("piped").profile == PROFILE
    bad = run("submit", "-", input="name: x\n")
    assert bad.exit_code == CLI_EXIT_INVALID
    assert "<stdin>" in bad.output
    assert "image" in bad.output
    junk = run("submit", "-", input="{not: yaml: at all")
    assert junk.exit_code == CLI_EXIT_INVALID
    assert alloc.store.get_job("x") is None


def test_dry_run_creates_nothing_and_says_what_submit_does(env):
    tmp_path, alloc = env
    assert run("submit", write(tmp_path, spec("first", its=6000))).exit_code == 0
    before = counts(alloc)
    path = write(tmp_path, spec("second", its=3000))
    dry = run("submit", "--dry-run", "--json", path)
    assert dry.exit_code == CLI_EXIT_ADMITTED, dry.output
    out = json.loads(dry.output)
    assert out["dry_run"] is True
    assert out["decision"] == "admitted"
    assert out["gpus"] >= 1
    assert out["predicted_finish"] <= out["deadline"]
    text = run("submit", "--dry-run", path)
    assert text.exit_code == CLI_EXIT_ADMITTED
    assert text.output.startswith("would be admitted second:")
    assert "predicted finish" in text.output
    assert "nothing created" in text.output
    drop = run("submit", "--dry-run", write(tmp_path, spec("huge", its=10**7, deadline="1m")))
    assert drop.exit_code == CLI_EXIT_DROPPED
    assert drop.output.startswith("would be dropped huge:")
    piped = run("submit", "--dry-run", "-", input=yaml.safe_dump(spec("third")))
    assert piped.exit_code == CLI_EXIT_ADMITTED, piped.output
    bad = run("submit", "--dry-run", write(tmp_path, spec("bad", its=0)))
    assert bad.exit_code == CLI_EXIT_INVALID
    assert counts(alloc) == before  # no job, admission, allocation or event
    assert alloc.store.get_job("second") is None
    # the real submit then decides as the dry run said (nothing ran in between)
    real = run("submit", "--json", path)
    assert real.exit_code == CLI_EXIT_ADMITTED
    assert json.loads(real.output)["gpus"] == out["gpus"]


def test_dry_run_needs_the_user_role(env):
    tmp_path, _alloc = env
    res = run("submit", "--dry-run", write(tmp_path, spec("a")), "--token", "wrong")
    assert res.exit_code == CLI_EXIT_ERROR
    assert "token" in res.output


def test_jobs_output_formats(env):
    tmp_path, _alloc = env
    run("submit", write(tmp_path, spec("alpha")))
    run("submit", write(tmp_path, spec("beta", its=10**7, deadline="1m")))
    rows = json.loads(run("jobs", "-o", "json").output)
    assert {r["name"] for r in rows} == {"alpha", "beta"}
    assert all(r["spec"]["env"] == {"API_KEY": "***"} for r in rows)
    assert json.loads(run("jobs", "--json").output) == rows
    assert run("jobs", "-o", "name").output.split() == ["job/alpha", "job/beta"]
    assert run("jobs", "-q").output.split() == ["alpha", "beta"]
    assert run("jobs", "-q", "--active").output.split() == ["alpha"]
    wide = run("jobs", "-o", "wide")
    assert wide.exit_code == 0
    for word in ("placement", "iterations", "min-max GPUs", "flowcon/testbox:latest", "beta"):
        assert word in wide.output, word
    table = run("jobs").output
    assert "alpha" in table
    assert "placement" not in table
    assert run("jobs", "-o", "yaml").exit_code == 2  # click's usage error


def test_jobs_watch_prints_each_change_until_its_count(env):
    tmp_path, alloc = env
    run("submit", write(tmp_path, spec("early")))
    client = AllocatorClient(alloc.url, alloc.token)

    def later() -> None:
        time.sleep(0.6)
        client.submit(spec("late"))

    th = threading.Thread(target=later)
    th.start()
    t0 = time.monotonic()
    res = run("jobs", "--watch", "-q", "--interval", "0.2", "--watch-count", "8")
    th.join()
    assert res.exit_code == 0, res.output
    assert 1.2 <= time.monotonic() - t0 < 10  # 8 refreshes, 0.2 s apart
    frames = [f.split() for f in res.output.split("---") if f.strip()]
    assert frames[0] == ["early"]
    assert frames[-1] == ["early", "late"]  # the new job appeared in a later listing
    assert 2 <= len(frames) <= 8  # printed when the listing changed, not every refresh
    table = run("jobs", "-w", "--interval", "0.1", "--watch-count", "2")
    assert table.exit_code == 0
    assert "early" in table.output
    assert "late" in table.output


def test_jobs_watch_on_a_terminal_redraws_in_place(env):
    tmp_path, _alloc = env
    run("submit", write(tmp_path, spec("shown")))
    res = CliRunner().invoke(
        main,
        ["jobs", "--watch", "--interval", "0.1", "--watch-count", "3"],
        env={"FORCE_COLOR": "1"},  # rich then takes the output for a terminal
    )
    assert res.exit_code == 0, res.output
    assert "shown" in res.output
    assert "\x1b[1A" in res.output  # rich Live moved the cursor up to redraw the table


def test_job_describes_spec_state_placement_events(env):
    tmp_path, _alloc = env
    run("submit", write(tmp_path, spec("desc", deadline="1h")))
    res = run("job", "desc")
    assert res.exit_code == 0, res.output
    out = res.output
    for head in (
        "Name:",
        "State:",
        "Deadline:",
        "Predicted finish:",
        "before the deadline",
        "GPUs:",
        "Spec:",
        "GPUs over time:",
        "Events:",
        "admitted",
    ):
        assert head in out, head
    assert "API_KEY" in out
    assert "hunter2" not in out
    js = json.loads(run("job", "desc", "-o", "json").output)
    assert js["name"] == "desc"
    assert js["allocations"][0]["gpus"] == js["gpus"] >= 1
    assert [e["kind"] for e in js["events"]][:2] == ["admitted", "rescaled"]
    assert "hunter2" not in json.dumps(js)
    gone = run("job", "nope")
    assert gone.exit_code == CLI_EXIT_ERROR
    assert "no job 'nope'" in gone.output


def test_logs_of_a_plan_only_allocator_and_of_an_unknown_job(env):
    tmp_path, _alloc = env
    run("submit", write(tmp_path, spec("quiet")))
    res = run("logs", "quiet")
    assert res.exit_code == 0
    assert "no executor" in res.output
    gone = run("logs", "nope")
    assert gone.exit_code == CLI_EXIT_ERROR
    assert "no job 'nope'" in gone.output
    # follow ends by itself once the job ended
    run("cancel", "quiet")
    t0 = time.monotonic()
    assert run("logs", "quiet", "-f", "--interval", "0.1").exit_code == 0
    assert time.monotonic() - t0 < 5


def test_cancel_several_names_and_say_which_failed(env):
    tmp_path, alloc = env
    for name in ("one", "two"):
        run("submit", write(tmp_path, spec(name)))
    run("submit", write(tmp_path, spec("dead", its=10**7, deadline="1m")))
    res = run("cancel", "one", "nope", "two", "dead")
    assert res.exit_code == CLI_EXIT_ERROR
    assert "cancelled one" in res.output
    assert "cancelled two" in res.output
    assert "cannot cancel nope: no job 'nope'" in res.output
    assert "cannot cancel dead:" in res.output
    assert "already dropped" in res.output
    assert "not cancelled: nope, dead" in res.output
    assert alloc.store.get_job("one").state == "cancelled"
    assert alloc.store.get_job("two").state == "cancelled"
    assert run("cancel").exit_code == 2  # a name is required
    assert run("submit", write(tmp_path, spec("three"))).exit_code == 0
    ok = run("cancel", "three")
    assert ok.exit_code == 0
    assert ok.output.strip() == "cancelled three"
