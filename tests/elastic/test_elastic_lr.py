"""flowcon.elastic.lr: Elan's progressive linear LR scaling and the current batches (pure)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # flowcon.elastic's __init__ imports torch

from flowcon.elastic.lr import DEFAULT_RAMP_STEPS, HybridScaling, ramp_steps_from_env  # noqa: E402


def test_ramp_goes_linearly_to_the_scaled_rate() -> None:
    h = HybridScaling(0.1, 64, ramp_steps=4)
    assert h.lr(1) == pytest.approx(0.1)
    assert h.global_batch == 64
    h.set_global_batch(128, step=11)  # k = 2: target 0.2
    assert [round(h.lr(s), 6) for s in range(10, 17)] == [0.1, 0.1, 0.125, 0.15, 0.175, 0.2, 0.2]
    assert h.ramping_until == 15
    # a batch change during a ramp starts from the rate reached there
    h.set_global_batch(32, step=13)  # from 0.15 to 0.05
    assert h.lr(13) == pytest.approx(0.15)
    assert h.lr(15) == pytest.approx(0.10)
    assert h.lr(17) == pytest.approx(0.05)
    assert h.lr(100) == pytest.approx(0.05)
    h.set_global_batch(32, step=14)  # the same batch: nothing restarts
    assert h.lr(15) == pytest.approx(0.10)


def test_reference_batch_and_immediate_change() -> None:
    h = HybridScaling(0.4, 64, reference_batch=256, ramp_steps=0)
    assert h.lr(1) == pytest.approx(0.1)
    h.set_global_batch(512, step=5)
    assert h.lr(5) == pytest.approx(0.8)
    assert h.factor(5) == pytest.approx(2.0)


def test_local_batch_shares() -> None:
    h = HybridScaling(0.1, 10, ramp_steps=1)
    assert [h.local_batch(r, 3) for r in range(3)] == [4, 3, 3]
    h.set_global_batch(7, step=2)
    assert [h.local_batch(r, 2) for r in range(2)] == [4, 3]
    with pytest.raises(ValueError, match="outside world size"):
        h.local_batch(2, 2)


def test_apply_and_state_round_trip() -> None:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=1.0)
    h = HybridScaling(0.1, 8, ramp_steps=10)
    h.set_global_batch(16, step=1)
    assert h.apply(opt, 6) == pytest.approx(0.15)
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(0.15)] * 2
    copy = HybridScaling(1.0, 1, ramp_steps=0)
    copy.load_state_dict(h.state_dict())
    assert [copy.lr(s) for s in range(12)] == [h.lr(s) for s in range(12)]
    assert copy.global_batch == 16


def test_ramp_steps_from_env() -> None:
    assert ramp_steps_from_env({}) == DEFAULT_RAMP_STEPS
    assert ramp_steps_from_env({"FLOWCON_LR_RAMP_STEPS": "25"}) == 25
    with pytest.raises(ValueError, match="FLOWCON_LR_RAMP_STEPS"):
        ramp_steps_from_env({"FLOWCON_LR_RAMP_STEPS": "x"})
    with pytest.raises(ValueError, match="negative"):
        ramp_steps_from_env({"FLOWCON_LR_RAMP_STEPS": "-1"})
    with pytest.raises(ValueError, match="global batch must be positive"):
        HybridScaling(0.1, 0)
