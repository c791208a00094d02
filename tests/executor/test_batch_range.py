"""A job's batch-size range, live:
the spec keys ``batch_size_min``/``batch_size_max``, the pick for k GPUs
(``flowcon.alloc.batch.hybrid_batch``, Elan III), ``Executor.rescale(global_batch=)`` and the
target that calls it. Pure: in-memory backend (``test_stopfree_exec.FakeBackend``)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from test_stopfree_exec import FakeBackend, env, executor

from flowcon import contract
from flowcon.alloc.batch import hybrid_batch
from flowcon.alloc.model import ThroughputCurve
from flowcon.allocator.records import spec_from_dict, spec_to_dict
from flowcon.allocator.store import Store, new_record
from flowcon.allocator.target import ExecutorTarget, batch_for
from flowcon.executor.backend import ExecutorError
from flowcon.executor.lifecycle import batch_problem
from flowcon.jobspec.spec import KNOWN_KEYS, JobSpecError, parse_jobspec

IMAGE = "flowcon/elastic-example:latest"


def spec(name: str = "br", **over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "command": ["python3", "/opt/train.py"],
        "global_batch_size": 16,
        "iterations": 100,
        "best_effort": True,
        "profile": {1: 1.0},
        "launcher": "flowcon",
        "scaling": "stopfree",
    }
    raw.update(over)
    return parse_jobspec(raw)


# ---------------------------------------------------------------- the spec keys


def test_range_keys_are_optional_validated_and_stored() -> None:
    assert {"batch_size_min", "batch_size_max"} <= KNOWN_KEYS
    plain = spec()
    assert plain.batch_range is None
    assert plain.batch_size_min is None
    s = spec(batch_size_min=8, batch_size_max=64)
    assert s.batch_range == (8, 64)
    back = spec_from_dict(spec_to_dict(s))
    assert back.batch_range == (8, 64)
    assert back == s
    # a record from before the keys: no range
    old = {k: v for k, v in spec_to_dict(plain).items() if not k.startswith("batch_size")}
    assert spec_from_dict(old).batch_range is None
    # one side given: the other is global_batch_size
    assert spec(batch_size_max=64).batch_range == (16, 64)
    assert spec(batch_size_min=4).batch_range == (4, 16)
    # YAML, as a user writes it
    text = (
        "name: y\nimage: repo/x:1\ncommand: python3 t.py\nglobal_batch_size: 32\n"
        "batch_size_min: 16\nbatch_size_max: 128\niterations: 10\nbest_effort: true\n"
    )
    assert parse_jobspec(text).batch_range == (16, 128)


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"batch_size_min": 32}, "batch_size_min", "32 is above global_batch_size 16"),
        ({"batch_size_max": 8}, "batch_size_max", "8 is below global_batch_size 16"),
        ({"batch_size_min": 0}, "batch_size_min", ">= 1"),
        ({"batch_size_max": "big"}, "batch_size_max", "integer"),
        (
            {"batch_size_min": 2, "min_gpus": 4},
            "batch_size_min",
            "2 cannot be split over min_gpus 4",
        ),
    ],
)
def test_a_bad_range_names_its_field(over: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(JobSpecError) as bad:
        spec(**over)
    assert bad.value.field == field, bad.value
    assert words in str(bad.value)


# ---------------------------------------------------------------- the pick for k GPUs


def test_hybrid_batch_keeps_the_per_gpu_batch_within_the_range() -> None:
    # submitted 16 on min_gpus 1, range 8..64: weak scaling up to the max, then held
    assert [hybrid_batch(16, 1, 8, 64, k) for k in (1, 2, 3, 4, 8)] == [16, 32, 48, 64, 64]
    # the per-GPU batch of submission is at min_gpus: 64 on 2 GPUs is 32 per GPU
    assert [hybrid_batch(64, 2, 64, 256, k) for k in (2, 3, 4, 6)] == [64, 96, 128, 192]
    # equal shares where the range has a multiple of k: 100 -> 99 on 3 GPUs
    assert hybrid_batch(64, 1, 64, 100, 3) == 99
    # none in the range: the max (never over it), at least k when the range allows
    assert hybrid_batch(10, 1, 10, 11, 4) == 11
    assert hybrid_batch(10, 1, 10, 10, 3) == 10
    assert hybrid_batch(4, 1, 4, 8, 16) == 8  # does not split: Executor.rescale refuses it
    with pytest.raises(ValueError, match="need positive batches"):
        hybrid_batch(16, 1, 32, 8, 2)
    # only jobs with a range get one
    assert batch_for(spec(), 4) is None
    assert batch_for(spec(batch_size_max=64), 2) == 32
    assert batch_for(spec(batch_size_max=64, min_gpus=2, global_batch_size=32), 4) == 64


# ---------------------------------------------------------------- the executor


def test_rescale_refuses_a_batch_outside_the_range_before_touching_anything() -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(batch_size_max=64)
    ex.launch(s, {"node1": ["0"]})
    for batch, words in (
        (128, "outside the spec's range batch_size_min 16 .. batch_size_max 64"),
        (8, "outside the spec's range"),
    ):
        with pytest.raises(ExecutorError) as bad:
            ex.rescale(s, {"node1": ["0", "1"]}, global_batch=batch)
        assert f"global batch {batch} refused" in str(bad.value)
        assert words in str(bad.value)
    with pytest.raises(ExecutorError) as fixed:
        ex.rescale(spec(), {"node1": ["0", "1"]}, global_batch=32)
    assert "no batch range (batch_size_min/batch_size_max)" in str(fixed.value)
    assert len(be.requests) == 1
    assert be.signals == []
    assert be.stopped == []
    # the job's own batch is always fine; a batch must split over the GPUs
    assert batch_problem(spec(), 16, 2) is None
    assert batch_problem(spec(batch_size_min=2), 2, 4) == "cannot be split over 4 GPUs"


def test_stopfree_joiners_carry_the_new_batch_a_scale_in_keeps_it() -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(batch_size_max=64)
    ex.launch(s, {"node1": ["0"]})
    res = ex.rescale(s, {"node1": ["0", "1"]}, global_batch=32)
    assert res.mode == "stopfree"
    assert res.global_batch == 32
    assert len(res.joined) == 1
    joiner = env(be.requests[-1])
    assert joiner[contract.ENV_JOIN] == "1"
    assert joiner[contract.ENV_GLOBAL_BATCH_SIZE] == "32"
    assert joiner[contract.ENV_LOCAL_BATCH_SIZE] == "16"
    assert joiner[contract.ENV_REFERENCE_BATCH_SIZE] == "16"  # the submitted batch: LR's
    assert env(be.requests[0])[contract.ENV_GLOBAL_BATCH_SIZE] == "16"  # untouched
    # scale-in: nobody to tell, the job keeps its batch and is not restarted
    res = ex.rescale(s, {"node1": ["0"]}, global_batch=16)
    assert res.mode == "stopfree"
    assert res.global_batch is None
    assert res.left
    assert be.stopped == []
    assert len(be.requests) == 2
    # without a batch the joiners carry the spec's, as before
    res = ex.rescale(s, {"node1": ["0", "1"]})
    assert env(be.requests[-1])[contract.ENV_GLOBAL_BATCH_SIZE] == "16"


def test_a_restart_starts_every_container_with_the_new_batch() -> None:
    be = FakeBackend()
    ex = executor(be)
    s = spec(batch_size_max=64, scaling="restart", launcher="none")
    ex.launch(s, {"node1": ["0"]})
    res = ex.rescale(s, {"node1": ["0", "1"]}, global_batch=32)
    assert res.mode == "restart"
    assert res.global_batch == 32
    new = be.requests[1:]
    assert len(new) == 2
    assert be.stopped == ["flowcon-br--node1-r0"]
    assert {env(r)[contract.ENV_GLOBAL_BATCH_SIZE] for r in new} == {"32"}
    assert {env(r)[contract.ENV_LOCAL_BATCH_SIZE] for r in new} == {"16"}
    assert {env(r)[contract.ENV_REFERENCE_BATCH_SIZE] for r in new} == {"16"}
    # a stop-free job that cannot scale stop-free (its joiners never say they joined, so the
    # old container never leaves) restarts with it
    be2 = FakeBackend()
    ex2 = executor(be2, leave_timeout_s=0.05)
    s2 = spec(batch_size_max=64)
    ex2.launch(s2, {"node1": ["0"]})
    res = ex2.rescale(s2, {"node1": ["1", "2"]}, global_batch=32)
    assert res.mode == "restart"
    assert res.fallback
    assert res.global_batch == 32
    assert {env(r)[contract.ENV_GLOBAL_BATCH_SIZE] for r in be2.requests[1:]} == {"32"}


# ---------------------------------------------------------------- the target


class Inventory:
    class Node:
        name, count, real = "node1", 4, False

        def uuids(self, idx: list[int]) -> list[str]:
            return [str(i) for i in idx]

    nodes: ClassVar[list[Node]] = [Node()]

    def node(self, name: str) -> Node:
        return self.nodes[0]


class Planner:
    class Intake:
        def set_containers(self, name: str, containers: object) -> None:
            pass

    intake = Intake()

    def set_scaling(self, name: str, mode: str | None) -> None:
        pass

    def curve(self, rec: Any) -> ThroughputCurve:
        return ThroughputCurve(rec.profile)


def _place(store: Store, name: str, gpus: int) -> None:
    rec = store.get_job(name)
    assert rec is not None
    rec.gpus, rec.placement = gpus, [[0, g] for g in range(gpus)]
    store.put_job(rec)


def test_the_target_picks_the_batch_for_range_jobs_only(tmp_path) -> None:
    store = Store(tmp_path / "s.db")
    for s in (spec("ranged", batch_size_max=64), spec("fixed")):
        store.put_job(new_record(s, "running", {1: 1.0}))
    be = FakeBackend()
    target = ExecutorTarget(executor(be), Inventory())  # type: ignore[arg-type]
    for gpus in (2, 4, 1):
        for name in ("ranged", "fixed"):
            _place(store, name, gpus)
        target.apply(store, Planner())  # type: ignore[arg-type]
    by_job: dict[str, list[str]] = {}
    for r in be.requests:
        by_job.setdefault(r.job, []).append(env(r)[contract.ENV_GLOBAL_BATCH_SIZE])
    # launched on 2 GPUs at 2 x 16; the two joiners of 2 -> 4 at 64 (the max)
    assert by_job == {"ranged": ["32", "32", "64", "64"], "fixed": ["16"] * 4}
    said = [(e.kind, e.data.get("global_batch")) for e in store.events(job="ranged")]
    assert said == [("started", 32), ("rescaled_stop_free", 64), ("rescaled_stop_free", None)]
    assert be.stopped == []  # the scale-in to 1 GPU kept the batch, no restart
    assert all("global_batch" not in e.data for e in store.events(job="fixed"))
    fixed_env = [env(r) for r in be.requests if r.job == "fixed"]
    assert not any(contract.ENV_REFERENCE_BATCH_SIZE in e for e in fixed_env)
    ranged_env = [env(r) for r in be.requests if r.job == "ranged"]
    assert {e[contract.ENV_REFERENCE_BATCH_SIZE] for e in ranged_env} == {"16"}
    store.close()


def test_hybrid_scaling_takes_the_submitted_batch_as_its_reference(monkeypatch) -> None:
    """A range job launched at 32 (2 GPUs) but submitted at 16: its LR is meant for 16."""
    pytest.importorskip("torch")
    from flowcon.elastic.lr import HybridScaling, reference_batch_from_env

    assert reference_batch_from_env({}) is None
    assert reference_batch_from_env({contract.ENV_REFERENCE_BATCH_SIZE: "16"}) == 16
    with pytest.raises(ValueError, match="FLOWCON_REFERENCE_BATCH_SIZE"):
        reference_batch_from_env({contract.ENV_REFERENCE_BATCH_SIZE: "0"})
    monkeypatch.delenv(contract.ENV_REFERENCE_BATCH_SIZE, raising=False)
    assert HybridScaling(0.1, 32, ramp_steps=0).lr(1) == pytest.approx(0.1)
    monkeypatch.setenv(contract.ENV_REFERENCE_BATCH_SIZE, "16")
    assert HybridScaling(0.1, 32, ramp_steps=0).lr(1) == pytest.approx(0.2)
    assert HybridScaling(0.1, 32, reference_batch=32, ramp_steps=0).lr(1) == pytest.approx(0.1)
