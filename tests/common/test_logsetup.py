"""FLOWCON_LOG_LEVEL: any case, a clear refusal of anything else; libraries quiet unless DEBUG."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowcon.logsetup import LIBRARIES, LogLevelError, level_from_env, setup_logging

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("raw", "level"),
    [("debug", 10), ("Debug", 10), ("DEBUG", 10), (" info ", 20), ("Warning", 30), ("", 20)],
)
def test_any_case(raw: str, level: int) -> None:
    assert level_from_env(logging.INFO, {"FLOWCON_LOG_LEVEL": raw}) == level


@pytest.mark.parametrize("raw", ["loud", "10", "warn", "trace"])
def test_bad_value_names_the_variable(raw: str) -> None:
    with pytest.raises(LogLevelError) as err:
        level_from_env(logging.INFO, {"FLOWCON_LOG_LEVEL": raw})
    assert str(err.value) == (
        f"FLOWCON_LOG_LEVEL={raw!r} is not a log level: use one of debug, info, warning, "
        "error, critical (any case)"
    )


@pytest.fixture
def restore_levels() -> Iterator[None]:
    names = ["", *LIBRARIES]
    before = {n: logging.getLogger(n).level for n in names}
    yield
    for n, lvl in before.items():
        logging.getLogger(n).setLevel(lvl)


@pytest.mark.usefixtures("restore_levels")
def test_libraries_quiet_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWCON_LOG_LEVEL", "info")
    setup_logging()
    assert logging.getLogger("apscheduler").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("urllib3.connectionpool").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("flowcon.agent").getEffectiveLevel() == logging.INFO
    monkeypatch.setenv("FLOWCON_LOG_LEVEL", "debug")
    setup_logging()
    assert logging.getLogger("apscheduler").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("docker").getEffectiveLevel() == logging.DEBUG


def test_cli_refuses_a_bad_level(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWCON_LOG_LEVEL": "loud"}
    out = subprocess.run(
        [sys.executable, "-m", "flowcon", "status", "--state", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "Error: FLOWCON_LOG_LEVEL='loud' is not a log level: use one of debug" in out.stderr
    assert "Traceback" not in out.stderr
