"""``flowcon submit`` / ``jobs`` / ``cancel`` against a live (plan-only) daemon."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.cli import main
from flowcon.contract import (
    CLI_EXIT_DROPPED,
    CLI_EXIT_ERROR,
    CLI_EXIT_INVALID,
)

JOB = """\
name: {name}
image: flowcon/testbox:latest
command: ["sh", "-c", "true"]
global_batch_size: 16
iterations: {its}
deadline: {deadline}
profile: prof.csv
"""


@pytest.fixture
def setup(tmp_path, monkeypatch):
    for var in (
        "FLOWCON_ALLOCATOR_URL",
        "FLOWCON_ALLOCATOR_TOKEN",
        "FLOWCON_ALLOCATOR_CONFIG",
        "FLOWCON_TOKEN",
    ):
        monkeypatch.delenv(var, raising=False)
    cfg_file = tmp_path / "allocator.yaml"
    cfg_file.write_text("allocator:\n  listen: 127.0.0.1:0\n  state_dir: state\n")
    cfg = AllocatorConfig(state_dir=(tmp_path / "state").resolve(), slot_seconds=1.0)
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.start(port=0)
    # the CLI finds the token in the daemon's token file through the same config file
    cfg_file.write_text(f"allocator:\n  url: {alloc.url}\n  state_dir: state\n")
    (tmp_path / "prof.csv").write_text("gpus,iterations_per_s\n1,10\n2,18\n4,32\n8,50\n")
    yield tmp_path, cfg_file, alloc
    alloc.stop()


def _job(tmp_path, name, its, deadline):
    p = tmp_path / f"{name}.yaml"
    p.write_text(JOB.format(name=name, its=its, deadline=deadline))
    return str(p)


def test_submit_jobs_cancel(setup):
    tmp_path, cfg_file, alloc = setup
    run = CliRunner().invoke
    ok = run(main, ["submit", _job(tmp_path, "small", 300, "10m"), "--config", str(cfg_file)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("admitted small:")
    assert "GPUs" in ok.output
    drop = run(main, ["submit", _job(tmp_path, "huge", 10**7, "1m"), "--config", str(cfg_file)])
    assert drop.exit_code == CLI_EXIT_DROPPED, drop.output
    assert drop.output.startswith("dropped huge:")
    assert "unsatisfiable" in drop.output
    table = run(main, ["jobs", "--config", str(cfg_file)])
    assert table.exit_code == 0, table.output
    for word in ("small", "huge", "running", "dropped", "progress", "predicted finish"):
        assert word in table.output
    out = run(main, ["cancel", "small", "--config", str(cfg_file)])
    assert out.exit_code == 0
    assert "cancelled small" in out.output
    assert alloc.store.get_job("small").state == "cancelled"


def test_invalid_spec_fails_before_the_network(setup):
    tmp_path, cfg_file, alloc = setup
    p = tmp_path / "bad.yaml"
    p.write_text(JOB.format(name="bad", its=-1, deadline="10m"))
    res = CliRunner().invoke(main, ["submit", str(p), "--config", str(cfg_file)])
    assert res.exit_code == CLI_EXIT_INVALID
    assert "iterations" in res.output
    assert alloc.store.count("jobs") == 0


def test_wrong_token_and_unreachable_daemon_fail_clearly(setup):
    tmp_path, _cfg_file, alloc = setup
    job = _job(tmp_path, "x", 300, "10m")
    res = CliRunner().invoke(main, ["submit", job, "--url", alloc.url, "--token", "nope"])
    assert res.exit_code != 0
    assert "token" in res.output
    res = CliRunner().invoke(main, ["submit", job, "--url", "http://127.0.0.1:9", "--token", "t"])
    assert res.exit_code == CLI_EXIT_ERROR
    assert "cannot reach the allocator" in res.output
    res = CliRunner().invoke(main, ["jobs"], env={"FLOWCON_ALLOCATOR_URL": "http://127.0.0.1:9"})
    assert res.exit_code != 0
    assert "cannot reach" in res.output
