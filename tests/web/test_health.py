"""flowcon.web.health: Liveness on a fake clock."""

from __future__ import annotations

import pytest

from flowcon.web.health import Liveness


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_starting_then_beating_then_stuck() -> None:
    clock = Clock()
    live = Liveness(20.0, stale_intervals=3, clock=clock)
    h = live.check()
    assert h.ok
    assert h.status_code == 200
    assert h.body["rounds"] == 0  # starting
    clock.t += 61  # no first round for more than 3 intervals
    h = live.check()
    assert not h.ok
    assert h.status_code == 503
    assert "no first round completed for 61 s (limit 60 s)" in h.body["problems"][0]
    live.beat()
    assert live.check().ok
    assert live.check().body["rounds"] == 1
    clock.t += 59
    assert live.check().ok
    clock.t += 2
    h = live.check(component="agent")
    assert not h.ok
    assert h.body["status"] == "unhealthy"
    assert h.body["component"] == "agent"
    assert h.body["seconds_since_round"] == 61


def test_interval_back_off_moves_the_limit() -> None:
    clock = Clock()
    live = Liveness(20.0, clock=clock)
    live.beat()
    live.set_interval(320.0)  # all containers in CL: the agent's itval backs off
    clock.t += 900
    assert live.check().ok
    clock.t += 100
    assert not live.check().ok
    live.set_interval(0)  # ignored
    assert live.interval == 320.0


def test_engine_failure_and_recovery() -> None:
    clock = Clock()
    live = Liveness(20.0, clock=clock)
    live.beat()
    live.engine_failed("cannot connect to the Docker engine at unix:///x.sock")
    h = live.check()
    assert not h.ok
    assert h.body["engine"] == "failing"
    assert h.body["problems"] == ["engine: cannot connect to the Docker engine at unix:///x.sock"]
    live.engine_ok()
    assert live.check().ok
    assert live.check().body["engine"] == "ok"


@pytest.mark.parametrize(("interval", "stale"), [(0, 3), (-1, 3), (10, 0)])
def test_bad_arguments(interval: float, stale: float) -> None:
    with pytest.raises(ValueError, match="interval and stale_intervals must be > 0"):
        Liveness(interval, stale)
