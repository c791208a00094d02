"""``flowcon replay`` argument handling that needs no engine."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from flowcon.replay.cli import replay, resolve_scenario


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
    assert res.exit_code == 2 and "set by the replay itself" in res.output
    res = CliRunner().invoke(replay, ["fixed", "--agent-set", "novalue"])
    assert res.exit_code == 2 and "KEY=VALUE" in res.output
