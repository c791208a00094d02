"""Growth timelines from the agent's decision lines, without an engine."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from flowcon.replay.growth import (
    GrowthPoint,
    parse_growth,
    read_agent_growth,
    read_growth,
    write_growth,
)

PREFIX = "flowcon-replay-abc123-"
T0 = datetime(2026, 11, 24, 14, 51, 0).timestamp()  # local time, like the agent's stamps


def line(ts: str, container: str, g: str, lists: str = "NL->NL", outcome: str = "dry-run") -> str:
    return (
        f"2026-11-24 {ts} INFO flowcon.agent.decision decision container={container} "
        f"id=81a5500519e6 list={lists} old=1.0000 new=0.5000 cpus=1 g={g} "
        f'reason="NL: G/sumG g=9 \\"quoted\\"" trigger=round outcome={outcome}'
    )


def test_decision_lines_become_points() -> None:
    text = "\n".join(
        [
            "2026-11-24 14:51:00,100 INFO flowcon.agent.daemon started dry_run=True",
            line("14:51:03,517", PREFIX + "conv", "1.0000"),
            line("14:51:05,041", PREFIX + "lin-2", "0.0123", "NL->CL", "updated"),
            line("14:51:06,000", "flowcon-replay-other-conv", "0.5000"),  # another run
            line("14:51:07,000", PREFIX + "conv", "-"),  # no estimate yet
            "garbage line decision container=x g=1",
        ]
    )
    points = parse_growth(text, PREFIX, T0)
    assert points == [
        GrowthPoint(3.517, "conv", 1.0, "NL", "dry-run"),
        GrowthPoint(5.041, "lin-2", 0.0123, "CL", "updated"),
    ]


def test_csv_round_trip_and_bad_rows(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pts = [GrowthPoint(1.5, "a", 0.25, "WL", "unchanged"), GrowthPoint(2.0, "b", 1e-4, "CL", "x")]
    path = write_growth(pts, tmp_path / "growth.csv")
    assert read_growth(path) == pts
    with path.open("a") as f:
        f.write("soon,a,1,NL,x\n")
    assert read_growth(path) == pts
    assert "line 4 skipped" in caplog.text
    assert read_growth(tmp_path / "absent.csv") == []


def test_unreadable_log_gives_no_points(tmp_path: Path) -> None:
    assert read_agent_growth(tmp_path / "no-agent.log", PREFIX, T0) == []
    log = tmp_path / "agent.log"
    log.write_text(line("14:51:10,000", PREFIX + "conv", "0.5000") + "\n")
    assert read_agent_growth(log, PREFIX, T0) == [GrowthPoint(10.0, "conv", 0.5, "NL", "dry-run")]


def test_decision_lines_with_the_applied_control_fields() -> None:
    """Regression: the agent's lines gained shares=, cpuset= and control= after cpus=
    (the control modes); the parser skipped every such line, so growth.csv was empty."""
    text = (
        "2026-11-24 15:46:57,180 INFO flowcon.agent.decision decision "
        f"container={PREFIX}vae id=f53dbba2bfda list=NL->WL old=1.0000 new=0.5000 "
        "cpus=2(unlimited) shares=1024 cpuset=0-1 control=weights g=0.2500 "
        'reason="NL: G/sumG" trigger=round outcome=updated'
    )
    t0 = datetime(2026, 11, 24, 15, 46, 50).timestamp()
    assert parse_growth(text, PREFIX, t0) == [GrowthPoint(7.18, "vae", 0.25, "WL", "updated")]
