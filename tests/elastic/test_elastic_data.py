"""flowcon.elastic.data: exactly once per epoch across any sequence of scale events (pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
DATA_PY = REPO / "flowcon" / "elastic" / "data.py"


def _load_data_module():
    """data.py by file, so these tests need neither torch nor the package's __init__."""
    return load_script(DATA_PY, "flowcon_elastic_data_under_test")


data = _load_data_module()
ElasticSampler = data.ElasticSampler

# (world size, global batch, steps) segments: a scale event between two segments
segments = st.lists(
    st.tuples(st.integers(1, 9), st.integers(1, 40), st.integers(1, 12)), min_size=1, max_size=12
)


def _simulate(size: int, seed: int, plan: list[tuple[int, int, int]]) -> dict[int, list[int]]:
    """Each rank has its own sampler; at every scale event the new world's samplers are
    copies of rank 0's state (what replication does). Returns epoch -> indices used."""
    used: dict[int, list[int]] = {}
    samplers = [ElasticSampler(size, seed=seed)]
    for world, gbs, steps in plan:
        state = samplers[0].state_dict()
        samplers = [ElasticSampler(size, seed=seed) for _ in range(world)]
        for s in samplers:
            s.load_state_dict(state)
        for _ in range(steps):
            epoch = samplers[0].epoch
            shares = [s.batch(gbs, r, world) for r, s in enumerate(samplers)]
            lens = [len(x) for x in shares]
            assert max(lens) - min(lens) <= 1
            joined = [i for share in shares for i in share]
            assert joined == samplers[0].global_batch(gbs)  # the shares partition the batch
            assert len(joined) == min(gbs, samplers[0].remaining)  # short only at epoch end
            assert [s.local_size(gbs, r, world) for r, s in enumerate(samplers)] == lens
            used.setdefault(epoch, []).extend(joined)
            moved = {s.advance(gbs) for s in samplers}
            assert moved == {len(joined)}
            assert len({s.position for s in samplers}) == 1
    return used


@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 60), seed=st.integers(0, 2**31), plan=segments)
def test_every_sample_once_per_epoch_across_scale_events(
    size: int, seed: int, plan: list[tuple[int, int, int]]
) -> None:
    used = _simulate(size, seed, plan)
    last = max(used)
    for epoch, indices in used.items():
        assert len(indices) == len(set(indices)), f"epoch {epoch} repeats a sample"
        if epoch < last:
            assert sorted(indices) == list(range(size)), f"epoch {epoch} misses samples"
        else:
            assert set(indices) <= set(range(size))


def test_last_batch_of_epoch_is_short_and_next_epoch_reshuffles() -> None:
    s = ElasticSampler(10, seed=3)
    first = s.global_batch(4)
    s.advance(4)
    first += s.global_batch(4)
    s.advance(4)
    assert s.batch_size(4) == 2
    assert s.position == 8
    tail = s.global_batch(4)
    assert s.advance(4) == 2
    assert s.position == 10
    assert s.epoch == 1
    assert s.offset == 0
    assert sorted(first + tail) == list(range(10))
    assert s.order(1) != s.order(0)  # a new permutation (for this seed)
    assert sorted(s.order(1)) == list(range(10))


def test_order_depends_on_seed_and_epoch_only() -> None:
    a, b = ElasticSampler(50, seed=1), ElasticSampler(50, seed=1)
    b.advance(7)  # position does not change an epoch's order
    assert a.order(4) == b.order(4) == data.epoch_order(50, 1, 4)
    assert ElasticSampler(50, seed=2).order(0) != a.order(0)
    assert ElasticSampler(5, shuffle=False).order(3) == [0, 1, 2, 3, 4]


def test_order_is_the_same_in_another_process() -> None:
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('d', {str(DATA_PY)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['d'] = m\n"
        "spec.loader.exec_module(m)\n"
        "print(json.dumps([m.epoch_order(100, 7, e) for e in range(3)]))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [data.epoch_order(100, 7, e) for e in range(3)]


def test_shares_and_small_batches() -> None:
    assert [data.share_bounds(10, r, 3) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]
    # fewer samples than ranks: some ranks get none this step
    s = ElasticSampler(10)
    assert [len(s.batch(2, r, 4)) for r in range(4)] == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="rank"):
        s.batch(4, 4, 4)
    with pytest.raises(ValueError, match="global batch"):
        s.batch(0, 0, 1)
    with pytest.raises(ValueError, match="dataset size must be positive"):
        ElasticSampler(0)


def test_state_dict_round_trip_and_mismatch() -> None:
    s = ElasticSampler(20, seed=5)
    s.advance(13)
    t = ElasticSampler(20, seed=5)
    t.load_state_dict(json.loads(json.dumps(s.state_dict())))  # plain JSON-able ints
    assert t.position == 13
    assert t.batch(3, 0, 1) == s.batch(3, 0, 1)
    with pytest.raises(ValueError, match="seed"):
        ElasticSampler(20, seed=6).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="size"):
        ElasticSampler(21, seed=5).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="negative"):
        t.load_state_dict({"position": -1})
