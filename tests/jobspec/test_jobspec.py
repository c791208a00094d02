"""Job spec parsing: every error names its field; profiles from CSV/YAML/inline; core Job."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flowcon.jobspec.spec import (
    JobSpecError,
    load_jobspec,
    load_profile,
    parse_duration,
    parse_jobspec,
)

NOW = 1_700_000_000.0
GOOD = """
name: resnet-small
image: flowcon/elastic-example:latest
command: python3 /opt/train.py --lr 0.1
global_batch_size: 64
iterations: 2000
deadline: 30m
min_gpus: 1
max_gpus: 4
profile: {1: 10, 2: 18.5, 4: 30}
env: {LR: 0.1, DEBUG: true}
"""


def test_good_spec() -> None:
    spec = parse_jobspec(GOOD, now=NOW)
    assert spec.name == "resnet-small"
    assert spec.command == (
        "python3",
        "/opt/train.py",
        "--lr",
        "0.1",
    )
    assert spec.deadline == NOW + 1800
    assert not spec.best_effort
    assert spec.profile is not None
    assert spec.profile.as_dict() == {1: 10.0, 2: 18.5, 4: 30.0}
    assert spec.env == {"LR": "0.1", "DEBUG": "true"}
    assert not spec.profile_auto


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_deadline_forms() -> None:
    base = {"name": "j", "image": "i", "command": ["x"], "global_batch_size": 8, "iterations": 1}
    assert parse_jobspec({**base, "deadline": 60}, now=NOW).deadline == NOW + 60
    iso = "2023-11-14T23:00:00+00:00"
    assert (
        parse_jobspec({**base, "deadline": iso}, now=NOW).deadline
        == datetime.fromisoformat(iso).timestamp()
    )
    # YAML's own timestamp type (unquoted)
    spec = parse_jobspec(
        "name: j\nimage: i\ncommand: x\nglobal_batch_size: 8\niterations: 1\n"
        "deadline: 2023-11-15 00:00:00+00:00\n",
        now=NOW,
    )
    assert spec.deadline == datetime(2023, 11, 15, tzinfo=UTC).timestamp()
    be = parse_jobspec({**base, "best_effort": True}, now=NOW)
    assert be.deadline is None
    assert be.best_effort
    assert be.profile_auto


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"name": None}, "name"),
        ({"image": "has space"}, "image"),
        ({"command": []}, "command"),
        ({"command": {"a": 1}}, "command"),
        ({"global_batch_size": 0}, "global_batch_size"),
        ({"iterations": "many"}, "iterations"),
        ({"iterations": True}, "iterations"),
        ({"deadline": "soonish"}, "deadline"),
        ({"deadline": -5}, "deadline"),
        ({"deadline": "2001-01-01T00:00:00"}, "deadline"),  # in the past
        ({"deadline": "1h", "best_effort": True}, "deadline"),
        ({"deadline": None}, "deadline"),  # neither deadline nor best_effort
        ({"min_gpus": 4, "max_gpus": 2}, "max_gpus"),
        ({"min_gpus": -1}, "min_gpus"),
        ({"profile": {1: "fast"}}, "profile[1]"),
        ({"profile": {0: 1.0}}, "profile[0]"),
        ({"profile": {1: float("nan")}}, "profile[1]"),
        ({"profile": 12}, "profile"),
        ({"profile": "missing.csv"}, "profile"),
        ({"env": {"WORLD_SIZE": 2}}, "env.WORLD_SIZE"),
        ({"env": {"FLOWCON_GPUS": "x"}}, "env.FLOWCON_GPUS"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"deadlne": "1h"}, "deadlne"),  # typo: unknown field
    ],
)
def test_errors_name_the_field(patch: dict[str, Any], field: str, tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(GOOD)
    data.update(patch)
    with pytest.raises(JobSpecError) as err:
        parse_jobspec(data, base_dir=tmp_path, now=NOW)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


def test_broken_yaml_and_non_mapping() -> None:
    with pytest.raises(JobSpecError) as err:
        parse_jobspec("name: [unclosed\n", now=NOW)
    assert err.value.field == "yaml"
    assert "line" in str(err.value)
    with pytest.raises(JobSpecError) as err:
        parse_jobspec("- a\n- b\n", now=NOW)
    assert err.value.field == "spec"


def test_profile_files(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text("gpus,iterations_per_s\n1,10\n2, 19.5\n\n# note\n4,30\n")
    assert load_profile(tmp_path / "p.csv").as_dict() == {1: 10.0, 2: 19.5, 4: 30.0}
    (tmp_path / "p.yaml").write_text("1: 3\n2: 5.5\n")
    assert load_profile(tmp_path / "p.yaml").as_dict() == {1: 3.0, 2: 5.5}
    (tmp_path / "rows.yml").write_text("- {gpus: 1, throughput: 2}\n- {gpus: 2, throughput: 3}\n")
    assert load_profile(tmp_path / "rows.yml").as_dict() == {1: 2.0, 2: 3.0}
    (tmp_path / "bad.csv").write_text("1,10\n2\n")
    with pytest.raises(JobSpecError, match="line 2"):
        load_profile(tmp_path / "bad.csv")
    (tmp_path / "neg.csv").write_text("1,-3\n")
    with pytest.raises(JobSpecError, match=r"profile\[1\]"):
        load_profile(tmp_path / "neg.csv")
    # a spec file resolves its profile next to itself
    (tmp_path / "job.yaml").write_text(
        GOOD.replace("profile: {1: 10, 2: 18.5, 4: 30}", "profile: p.csv")
    )
    assert load_jobspec(tmp_path / "job.yaml").profile.as_dict()[4] == 30.0  # type: ignore[union-attr]
    with pytest.raises(JobSpecError, match="cannot read"):
        load_jobspec(tmp_path / "nope.yaml")


def test_profile_counts_and_auto_profile() -> None:
    """The pre-run's GPU counts; ``profile: auto`` leaves the profile to measure (the spec
    becomes the policy's job in flowcon.allocator.records.core_job, tested there)."""
    spec = parse_jobspec(GOOD, now=NOW)
    assert spec.gpu_counts_to_profile(8) == [1, 2, 4]
    assert parse_jobspec(GOOD.replace("min_gpus: 1", "min_gpus: 3"), now=NOW).gpu_counts_to_profile(
        8
    ) == [3, 4]
    auto = parse_jobspec(GOOD.replace("profile: {1: 10, 2: 18.5, 4: 30}", "profile: auto"), now=NOW)
    assert auto.profile_auto
    assert auto.profile is None
    assert auto.with_profile(spec.profile).profile == spec.profile  # type: ignore[arg-type]
