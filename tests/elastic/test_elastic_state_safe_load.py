"""Checkpoints load without running code: torch's weights_only unpickler, and a training
state made of tensors and plain values only."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from flowcon.elastic import state as st  # noqa: E402
from flowcon.elastic.data import ElasticSampler  # noqa: E402
from flowcon.elastic.lr import HybridScaling  # noqa: E402
from flowcon.elastic.restart import CHECKPOINT_FILE, load_checkpoint, save_checkpoint  # noqa: E402


class WritesMarker:
    """Unpickling this writes a file: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_checkpoint_that_runs_code_is_refused_and_nothing_runs(tmp_path, caplog):
    marker = tmp_path / "marker"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with open(ckpt / CHECKPOINT_FILE, "wb") as fh:
        torch.save({"step": 5, "model": WritesMarker(marker)}, fh)
    with (
        caplog.at_level(logging.ERROR, logger="flowcon.elastic.restart"),
        pytest.raises(RuntimeError, match="refused: it holds more than tensors"),
    ):
        load_checkpoint(ckpt)
    assert not marker.exists()
    assert any("refused" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_the_whole_training_state_loads_with_weights_only(tmp_path):
    torch.manual_seed(0)
    random.seed(1)
    np.random.seed(2)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    sampler = ElasticSampler(100, seed=3)
    scaling = HybridScaling(0.01, 8, reference_batch=8)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    sched.step()
    state = st.capture(
        model,
        opt,
        step=7,
        scheduler=sched,
        sampler=sampler,
        batch_scaling=scaling,
        extra={"global_batch": 8},
    )
    save_checkpoint(tmp_path, state)
    after = (random.random(), torch.rand(1).item(), float(np.random.rand()))

    loaded = load_checkpoint(tmp_path)
    assert loaded is not None
    model2 = torch.nn.Linear(4, 2)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    assert st.restore(loaded, model2, opt2) == 7
    assert torch.equal(model2.weight, model.weight)
    assert (random.random(), torch.rand(1).item(), float(np.random.rand())) == after


def test_a_numpy_state_of_the_array_form_still_restores():
    np.random.seed(4)
    legacy = {"numpy": np.random.get_state()}
    want = float(np.random.rand())
    st.set_rng_state(legacy)
    assert float(np.random.rand()) == want


def test_a_torn_checkpoint_is_unreadable_not_refused(tmp_path):
    """Bytes that are no pickle at all say "unreadable", not that they hold code."""
    import os

    (tmp_path / CHECKPOINT_FILE).write_bytes(os.urandom(300))
    with pytest.raises(RuntimeError, match="unreadable"):
        load_checkpoint(tmp_path)
