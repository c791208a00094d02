"""``flowcon replay`` argument handling that needs no engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.replay import hostload
from flowcon.replay.cli import replay, resolve_scenario
from flowcon.replay.generate import random_scenario
from flowcon.replay.repeat import HostLoad
from flowcon.replay.scenario import load_scenario


def test_malformed_scenario_names_fields(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nalpha: 5\njobs:\n  - {name: a, model: vae, start: soon}\n")
    res = CliRunner().invoke(replay, [str(bad), "--policy", "none"])
    assert res.exit_code == 1
    assert "jobs[0].start: expected a number >= 0, got 'soon'" in res.output
    assert "itval: missing" in res.output
    assert "alpha: expected a fraction" in res.output


def test_scenario_names_resolve_to_shipped_files() -> None:
    assert resolve_scenario("fixed").name == "fixed.yaml"
    assert resolve_scenario("random-5").exists()
    assert resolve_scenario("nope.yaml") == Path("nope.yaml")


def test_bad_label_and_agent_set_are_refused(tmp_path: Path) -> None:
    res = CliRunner().invoke(replay, ["fixed", "--policy", "none", "--label", "flowcon.enable=1"])
    assert res.exit_code == 2
    assert "set by the replay itself" in res.output
    res = CliRunner().invoke(replay, ["fixed", "--agent-set", "novalue"])
    assert res.exit_code == 2
    assert "KEY=VALUE" in res.output


def test_group_routes_scenarios_to_run() -> None:
    """`replay SCENARIO ...` reaches the run command; `replay run SCENARIO` too."""
    res = CliRunner().invoke(replay, ["fixed", "--repeat", "2"])
    assert res.exit_code == 2, res.output
    assert "add --compare" in res.output, res.output
    res = CliRunner().invoke(replay, ["--repeat", "2", "fixed"])  # an option first
    assert res.exit_code == 2, res.output
    assert "add --compare" in res.output, res.output
    res = CliRunner().invoke(replay, ["run", "fixed", "--repeat", "2"])
    assert res.exit_code == 2, res.output
    assert "add --compare" in res.output, res.output
    res = CliRunner().invoke(replay, ["--help"])
    assert res.exit_code == 0
    assert "generate" in res.output
    assert "run" in res.output
    res = CliRunner().invoke(replay, ["fixed", "--help"])
    assert res.exit_code == 0
    assert "--repeat" in res.output
    assert "--control" in res.output


def test_generate_subcommand(tmp_path: Path) -> None:
    out = tmp_path / "mix.yaml"
    args = ["generate", "--jobs", "4", "--seed", "77", "--threads", "pinned", "--out", str(out)]
    res = CliRunner().invoke(replay, [*args, "--name", "mix77"])
    assert res.exit_code == 0, res.output
    sc = load_scenario(out)
    assert sc == random_scenario(4, 77, threads="pinned", name="mix77")
    assert "--seed 77" in out.read_text().splitlines()[0]
    res = CliRunner().invoke(replay, ["generate", "--jobs", "2", "--seed", "3"])
    assert res.exit_code == 0
    assert "name: random-2" in res.output
    res = CliRunner().invoke(replay, ["generate", "--jobs", "2", "--seed", "3", "--name", "a b"])
    assert res.exit_code == 2
    assert "--name" in res.output


def test_control_and_threads_choices_are_validated() -> None:
    res = CliRunner().invoke(replay, ["fixed", "--compare", "--control", "shares"])
    assert res.exit_code == 2
    assert "'shares' is not one of" in res.output
    res = CliRunner().invoke(replay, ["fixed", "--policy", "none", "--control", "weights"])
    assert res.exit_code == 2
    assert "needs the agent" in res.output
    res = CliRunner().invoke(replay, ["fixed", "--threads", "all"])
    assert res.exit_code == 2
    assert "'all' is not one of" in res.output


def test_malformed_threads_in_scenario_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nalpha: 0.05\nitval: 5\nthreads: many\nadapt_threads: sometimes\n"
        "jobs:\n  - {name: a, model: vae, start: 0}\n"
    )
    res = CliRunner().invoke(replay, [str(bad), "--policy", "none"])
    assert res.exit_code == 1
    assert "threads: expected one of quota, pinned, got 'many'" in res.output
    assert "adapt_threads: expected true or false, got 'sometimes'" in res.output


def test_compare_refuses_a_busy_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before the engine is contacted (none is needed for this test)."""
    monkeypatch.setattr(hostload, "measure", lambda window: HostLoad(9.0, 1.0, window, 2))
    res = CliRunner().invoke(replay, ["fixed", "--compare", "--load-window", "0.1"])
    assert res.exit_code == 1, res.output
    assert "host is busy: 1-minute load average 9.00 > 1.00" in res.output
    assert "--force" in res.output
