"""flowcon.elastic.state: capture/restore of the whole training state (torch, CPU)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from flowcon.elastic import state as st  # noqa: E402
from flowcon.elastic.data import ElasticSampler  # noqa: E402


def _objects(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched, ElasticSampler(32, seed=1)


def _train(model, opt, sched, sampler, steps: int, x, y) -> None:
    for _ in range(steps):
        idx = torch.tensor(sampler.batch(8, 0, 1))
        weight = 1 + 0.1 * random.random()  # the python generator matters too
        loss = ((model(x[idx]) - y[idx]) ** 2).mean() * weight
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        sampler.advance(8)


def test_capture_is_a_snapshot_and_restore_continues_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    model, opt, sched, sampler = _objects()
    _train(model, opt, sched, sampler, 3, x, y)
    snap = st.capture(model, opt, step=3, scheduler=sched, sampler=sampler, extra={"k": 1})
    before = [p.detach().clone() for p in model.parameters()]
    _train(model, opt, sched, sampler, 4, x, y)  # the reference goes on to step 7
    assert not torch.equal(before[0], next(model.parameters()))
    assert torch.equal(snap["model"]["0.weight"], before[0])  # copy=True: untouched

    torch.manual_seed(999)
    random.seed(999)
    m2, o2, s2, sa2 = _objects(seed=5)  # other initial weights
    assert st.restore(snap, m2, o2, scheduler=s2, sampler=sa2) == 3
    assert sa2.position == 24
    assert s2.last_epoch == 3
    assert snap["extra"] == {"k": 1}
    _train(m2, o2, s2, sa2, 4, x, y)
    for a, b in zip(model.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_old_checkpoint_keys_and_missing_objects() -> None:
    model = torch.nn.Linear(2, 1)
    old = {"step": 7, "model": model.state_dict(), "optimizer": None}
    fresh = torch.nn.Linear(2, 1)
    assert st.restore(old, fresh, None, sampler=ElasticSampler(4)) == 7
    assert torch.equal(fresh.weight, model.weight)
    with pytest.raises(ValueError, match="format"):
        st.restore({"format": 99, "step": 1}, fresh, None)


def test_rng_state_round_trip() -> None:
    saved = st.rng_state()
    a = (random.random(), torch.rand(3))
    st.set_rng_state(saved)
    b = (random.random(), torch.rand(3))
    assert a[0] == b[0]
    assert torch.equal(a[1], b[1])
    # a python state that went through JSON-like lists still restores
    version, internal, gauss = saved["python"]
    st.set_rng_state({"python": [version, list(internal), gauss]})
    assert random.random() == a[0]


def test_disabled_grad_scaler_state_is_skipped() -> None:
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    model = torch.nn.Linear(2, 1)
    snap = st.capture(model, None, step=1, scaler=scaler)
    assert snap["scaler"] == {}
    enabled = torch.amp.GradScaler("cpu", init_scale=4.0)
    st.restore(snap, model, None, scaler=enabled)  # empty state: left alone, no error
    assert enabled.get_scale() == 4.0
    saved = st.capture(model, None, step=1, scaler=enabled)
    other = torch.amp.GradScaler("cpu", init_scale=1.0)
    st.restore(saved, model, None, scaler=other)
    assert other.get_scale() == 4.0


def test_numpy_generator_when_numpy_is_loaded() -> None:
    np = pytest.importorskip("numpy")
    saved = st.rng_state()
    assert "numpy" in saved
    a = np.random.rand(3)
    st.set_rng_state(saved)
    assert (np.random.rand(3) == a).all()


def test_importable_and_usable_without_numpy() -> None:
    """flowcon.elastic needs torch only: with numpy unimportable, capture/restore still work
    (and a state holding a numpy generator restores the rest)."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "import torch\n"
        "from flowcon import elastic\n"
        "from flowcon.elastic import state\n"
        "m = torch.nn.Linear(2, 1)\n"
        "s = state.capture(m, None, step=3, sampler=elastic.ElasticSampler(4))\n"
        "assert 'numpy' not in s['rng'], s['rng']\n"
        "s['rng']['numpy'] = ('MT19937', [0], 0, 0, 0.0)\n"
        "assert state.restore(s, m, None) == 3\n"
        "print('ok')\n"
    )
    repo = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_one_snapshot_restores_twice() -> None:
    """Regression: Optimizer.load_state_dict keeps tensors that already fit, so restoring an
    in-memory snapshot without copying let training change the snapshot's momentum buffers
    (the second restore from it then went on from a wrong state)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    model, opt, sched, sampler = _objects()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    _train(model, opt, sched, sampler, 2, x, y)
    snap = st.capture(model, opt, step=2, scheduler=sched, sampler=sampler)
    results = []
    for _ in range(2):
        st.restore(snap, model, opt, scheduler=sched, sampler=sampler)
        _train(model, opt, sched, sampler, 3, x, y)
        results.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
