"""The tests' reader of launcher logs (tests/support/launcher_procs.py): a log polled while the
launcher writes it may end inside a record."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import launcher_procs


def test_a_record_cut_by_the_read_is_left_for_the_next_poll(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text('starting\n{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.')
    assert launcher_procs.json_lines(log) == [{"step": 1, "loss": 2.5}]
    with log.open("a") as f:
        f.write("4}\n")
    assert [x["step"] for x in launcher_procs.json_lines(log)] == [1, 2]


def test_no_log_yet_and_no_complete_line_read_as_nothing(tmp_path: Path) -> None:
    assert launcher_procs.json_lines(tmp_path / "missing.log") == []
    (tmp_path / "b.log").write_text('{"step": 1')
    assert launcher_procs.json_lines(tmp_path / "b.log") == []


def test_a_broken_record_before_the_last_line_is_still_an_error(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text('{"step": 1, "lo\n{"step": 2}\n')
    with pytest.raises(ValueError, match="Unterminated string"):
        launcher_procs.json_lines(log)
