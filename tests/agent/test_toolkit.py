"""What the node's NVIDIA container toolkit config says of NVIDIA_VISIBLE_DEVICES, read from
fixture files, and how the agent sends it with its report (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowcon.agent.config import ConfigError, load
from flowcon.agent.reporter import payload
from flowcon.agent.toolkit import (
    ACCEPTS,
    NO_TOOLKIT,
    REFUSES,
    UNKNOWN,
    parse_toolkit,
    read_toolkit,
)
from flowcon.contract import TOOLKIT_STATES

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-toolkit"


def test_the_shipped_default_config_accepts_the_variable() -> None:
    # the key is commented out in the toolkit's default file: absent means true
    found = read_toolkit(str(DATA / "default.toml"))
    assert found.state == ACCEPTS
    assert "as-volume-mounts = false" in found.detail


def test_a_hardened_config_refuses_the_variable() -> None:
    found = read_toolkit(str(DATA / "hardened.toml"))
    assert found.state == REFUSES
    assert "as-volume-mounts = true" in found.detail


def test_no_file_is_no_toolkit(tmp_path: Path) -> None:
    found = read_toolkit(str(tmp_path / "config.toml"))
    assert found.state == NO_TOOLKIT
    assert str(tmp_path) in found.detail


@pytest.mark.parametrize(
    ("name", "says"),
    [("bad-value.toml", "is not true or false"), ("not-toml.toml", "not TOML")],
)
def test_a_config_that_says_nothing_usable_is_unknown_and_says_why(name: str, says: str) -> None:
    found = read_toolkit(str(DATA / name))
    assert found.state == UNKNOWN
    assert says in found.detail
    assert name in found.detail


def test_a_directory_in_place_of_the_file_is_unknown(tmp_path: Path) -> None:
    assert read_toolkit(str(tmp_path)).state == UNKNOWN


def test_parse_is_pure_on_text() -> None:
    assert parse_toolkit(None).state == NO_TOOLKIT
    assert parse_toolkit("").state == ACCEPTS
    key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
    assert parse_toolkit(f"{key} = false\n").state == REFUSES
    assert {ACCEPTS, REFUSES, NO_TOOLKIT, UNKNOWN} == set(TOOLKIT_STATES)


def test_the_report_carries_the_toolkit_state_only_when_known() -> None:
    assert payload("n1", [], REFUSES)["toolkit"] == REFUSES
    assert "toolkit" not in payload("n1", [])
    json.dumps(payload("n1", [], ACCEPTS), allow_nan=False)


def test_the_toolkit_config_path_is_an_agent_setting(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("toolkit_config: /etc/nvidia-container-runtime/config.toml\n")
    assert load(str(cfg), environ={}).toolkit_config == "/etc/nvidia-container-runtime/config.toml"
    cfg.write_text("toolkit_config: relative/config.toml\n")
    with pytest.raises(ConfigError, match="toolkit_config"):
        load(str(cfg), environ={})
