"""Every rank of a stop-free generation takes the same decision (a scale-in stalled
when they did not).

The straggler detector is rank-local state fed with gathered step times: a stayer's
detector from an earlier generation must not differ from a joiner's new one, or a stayer
removes itself (or another rank) where the joiner does not (EDL section 5.2 applied per
generation).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from flowcon import contract
from flowcon.elastic import rendezvous as rdv
from flowcon.elastic import stopfree
from flowcon.elastic.restart import ElasticEnv
from flowcon.elastic.stopfree import StopFree
from flowcon.elastic.straggler import StragglerDetector


class _NoStore:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no store call expected ({name})")


def _worker(worker_id: str, rank: int, world: int, **options: Any) -> StopFree:
    options.setdefault("straggler", StragglerDetector(ratio=1.2, consecutive=10))
    run = StopFree(
        ElasticEnv(world_size=world, rank=rank, global_batch_size=4, iterations=10),
        store=_NoStore(),
        worker_id=worker_id,
        install_signal_handlers=False,
        **options,
    )
    return run


def _votes(*times: float) -> list[rdv.Vote]:
    return [rdv.Vote(step_time=t) for t in times]


def test_a_stayer_and_a_joiner_remove_the_same_stragglers() -> None:
    stayer = _worker("a", 0, 1)
    # gen 1: a with joiner b1; a is slow for 6 steps (streak 6), then b1 leaves
    stayer._form(rdv.Generation(gen=1, world_size=1), 0)
    stayer.gen = rdv.Generation(gen=1, world_size=2, workers=("a", "b1"))
    for step in range(6):
        assert stayer._stragglers(_votes(0.2, 0.1), step) == []
    # gen 2: a alone (no observation); gen 3: a with a new joiner b2
    stayer._form(rdv.Generation(gen=2, world_size=1), 0)
    stayer._form(rdv.Generation(gen=3, world_size=1), 0)
    stayer.gen = rdv.Generation(gen=3, world_size=2, workers=("a", "b2"))
    joiner = _worker("b2", 1, 1)
    joiner._form(rdv.Generation(gen=3, world_size=1), 0)
    joiner.gen = stayer.gen
    for step in range(12):
        votes = _votes(0.2, 0.1)
        mine, theirs = stayer._stragglers(votes, step), joiner._stragglers(votes, step)
        assert mine == theirs, f"step {step}: the stayer removes {mine}, the joiner {theirs}"


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_negative_leave_settle_is_refused_as_the_environment_refuses_it(bad: float) -> None:
    """It used to be clamped to 0 here while FLOWCON_LEAVE_SETTLE_S=-1 was refused."""
    with pytest.raises(ValueError, match="leave_settle_s"):
        _worker("a", 0, 1, leave_settle_s=bad)


def test_a_zero_leave_settle_is_kept() -> None:
    assert _worker("a", 0, 1, leave_settle_s=0).leave_settle_s == 0.0


@pytest.mark.parametrize(
    ("name", "value"), [(contract.ENV_LEAVE_SETTLE_S, "-1"), (contract.ENV_STRAGGLER, "fast")]
)
def test_a_bad_variable_is_refused_before_the_store_is_reached(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """FLOWCON_LEAVE_SETTLE_S and FLOWCON_STRAGGLER are checked before the constructor
    connects to the store (they used to be checked after, so a bad value first waited on
    the store)."""
    monkeypatch.setenv(name, value)

    def reached(*_: Any) -> None:
        raise AssertionError("the store was reached before the bad value was refused")

    monkeypatch.setattr(stopfree, "connect_store", reached)
    with pytest.raises(ValueError, match=name):
        StopFree(
            ElasticEnv(world_size=1, rank=0, global_batch_size=4, iterations=10),
            worker_id="a",
            straggler="env",
            install_signal_handlers=False,
        )
