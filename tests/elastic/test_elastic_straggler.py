"""flowcon.elastic.straggler: EDL's 1.2 x median for 10 consecutive steps (pure)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # flowcon.elastic's __init__ imports torch

from flowcon.elastic.straggler import StragglerDetector


def test_removed_after_ten_consecutive_slow_steps() -> None:
    d: StragglerDetector[str] = StragglerDetector()
    times = {"a": 1.0, "b": 1.0, "c": 1.3, "d": 1.05}
    flagged = [d.observe(times) for _ in range(10)]
    assert flagged[:9] == [[]] * 9
    assert flagged[9] == ["c"]
    assert d.streak("c") == 10
    assert d.recent("c") == [1.3] * 10
    assert d.observe(times) == ["c"]  # a level: still a straggler


def test_recovery_before_ten_steps_resets_the_streak() -> None:
    d: StragglerDetector[str] = StragglerDetector(ratio=1.2, consecutive=10)
    slow, ok = {"a": 1.0, "b": 1.0, "c": 2.0}, {"a": 1.0, "b": 1.0, "c": 1.1}
    for _ in range(9):
        assert d.observe(slow) == []
    assert d.observe(ok) == []
    assert d.streak("c") == 0  # recovered at step 10: not removed
    for _ in range(9):
        assert d.observe(slow) == []
    assert d.observe(slow) == ["c"]


def test_two_workers_median_of_two() -> None:
    # median of two is their mean: b is flagged only when b > 1.2 * (a + b) / 2, i.e. b > 1.5 a
    d: StragglerDetector[int] = StragglerDetector(consecutive=3)
    for _ in range(5):
        assert d.observe({0: 1.0, 1: 1.45}) == []
    for _ in range(2):
        assert d.observe({0: 1.0, 1: 1.6}) == []
    assert d.observe({0: 1.0, 1: 1.6}) == [1]
    # a world of one never has a straggler
    one: StragglerDetector[int] = StragglerDetector(consecutive=1)
    assert one.observe({0: 100.0}) == []


def test_world_changes_keep_stayers_and_reset_the_rest() -> None:
    d: StragglerDetector[str] = StragglerDetector(consecutive=4)
    for _ in range(3):
        d.observe({"w0": 1.0, "w1": 1.0, "w2": 2.0, "w3": 2.0, "w4": 1.0})
    assert d.streak("w2") == 3
    assert d.streak("w3") == 3
    # scale event: w3 left, w5 joined (slow too); w2 keeps its streak, w5 starts at zero
    step = {"w0": 1.0, "w1": 1.0, "w2": 2.0, "w5": 2.0}
    assert d.observe(step) == ["w2"]
    assert d.streak("w3") == 0
    assert d.recent("w3") == []
    assert d.streak("w5") == 1
    for _ in range(2):
        assert d.observe(step) == ["w2"]
    assert d.observe(step) == ["w2", "w5"]
    # keyed by rank: a scale event renumbers, so the caller resets
    d.reset()
    assert d.streak("w2") == 0
    assert d.observe(step) == []
    d.forget("w5")
    assert d.streak("w5") == 0


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="ratio must be > 1"):
        StragglerDetector(ratio=1.0)
    with pytest.raises(ValueError, match="consecutive must be >= 1"):
        StragglerDetector(consecutive=0)
    d: StragglerDetector[int] = StragglerDetector()
    with pytest.raises(ValueError, match="step time"):
        d.observe({0: float("nan")})
    assert d.observe({}) == []
