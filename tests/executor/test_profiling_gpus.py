"""Pre-runs take free GPUs only, within the owner's quota, and a checkpoint volume of
another job or owner is neither mounted nor deleted."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from flowcon.alloc.quota import Quota
from flowcon.allocator.auth import Principal
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.store import new_record
from flowcon.contract import LABEL_JOB, LABEL_OWNER
from flowcon.executor.backend import ExecutorRefused, volume_refusal
from flowcon.executor.profiling import prerun_refusal
from flowcon.jobspec.spec import JobSpec, ThroughputProfile
from flowcon.testing.fake_executor import declared_inventory, fake_target


def test_a_count_over_the_free_gpus_or_the_quota_is_refused():
    assert prerun_refusal(2, free=4, allowance=None) is None
    assert "free" in (prerun_refusal(4, free=2, allowance=None) or "")
    assert "quota" in (prerun_refusal(4, free=8, allowance=2) or "")
    assert "quota" in (prerun_refusal(1, free=8, allowance=0) or "")


def test_a_volume_of_another_job_or_owner_is_refused():
    mine = {LABEL_JOB: "train", LABEL_OWNER: "alice"}
    assert volume_refusal(mine, mine) is None
    assert volume_refusal({LABEL_JOB: "train", LABEL_OWNER: "bob"}, mine) is not None
    assert volume_refusal({LABEL_JOB: "train-p1"}, {LABEL_JOB: "train-p1", LABEL_OWNER: "x"})
    assert volume_refusal(None, mine) is not None
    assert volume_refusal({LABEL_JOB: "train"}, {LABEL_JOB: "train"}, (LABEL_JOB,)) is None


class _Volumes:
    def __init__(self, labels):
        self.vol = SimpleNamespace(attrs={"Labels": labels}, removed=False)
        self.vol.remove = lambda force=False: setattr(self.vol, "removed", True)

    def get(self, name):
        return self.vol


def test_the_engine_backend_mounts_and_deletes_no_volume_of_another_job():
    from flowcon.executor.backends.engine import EngineBackend

    theirs = {LABEL_JOB: "train", LABEL_OWNER: "bob"}
    client = SimpleNamespace(volumes=_Volumes(theirs), networks=SimpleNamespace())
    backend = EngineBackend(client)  # type: ignore[arg-type]
    with pytest.raises(ExecutorRefused, match="belongs to another job"):
        backend._ensure_volume("flowcon-ckpt-x", {LABEL_JOB: "train", LABEL_OWNER: "alice"})
    backend._ensure_volume("flowcon-ckpt-x", theirs)  # its own job's: mounted
    client.networks.get = lambda name: SimpleNamespace(remove=lambda: None)
    backend.cleanup("other", "flowcon-ckpt-x")
    assert not client.volumes.vol.removed
    backend.cleanup("train", "flowcon-ckpt-x")
    assert client.volumes.vol.removed


def _body(name: str, **kw: object) -> dict[str, object]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 8,
        "iterations": 100000,
        "best_effort": True,
        "profile": {"1": 10.0, "2": 18.0},
        **kw,
    }


def test_a_prerun_gets_only_free_gpus_within_its_owners_quota(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=60.0, listen="127.0.0.1:0")
    cfg = replace(cfg, quotas={"alice": Quota(max_gpus=3)})
    alloc = Allocator(cfg, fake_target(declared_inventory(1, 8)))
    assert alloc.target is not None
    spec = JobSpec("held", "flowcon/testbox:latest", ("true",), 8, 1000, 10.0, best_effort=True)
    rec = new_record(spec, "running", {1: 10.0})
    rec.gpus, rec.placement = 2, [[0, 0], [0, 1]]  # another user's job holds GPUs 0 and 1
    alloc.store.put_job(rec)
    held = alloc._busy_gpus()
    assert len(held) == 2
    seen: dict[int, list[str] | None] = {}

    def profile(spec, placement_for, *, counts=None, on_point=None, **kw):
        for n in counts or ():
            got = placement_for(n)
            seen[n] = None if got is None else [g for ids in got.values() for g in ids]
        return ThroughputProfile(((1, 10.0), (2, 18.0)))

    alloc.target.executor.profile = profile  # type: ignore[method-assign]
    alice = Principal("alice", frozenset({"user"}))
    status, _ = alloc.submit(_body("auto", profile="auto", max_gpus=8), who=alice)
    assert status == 202
    deadline = time.monotonic() + 20
    while alloc._profilers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen[1] is not None
    assert seen[2] is not None
    assert not set(seen[1]) & held
    assert not set(seen[2]) & held
    assert seen[4] is None  # over alice's quota of 3 GPUs
    assert seen[8] is None
    skipped = [e for e in alloc.store.events(job="auto") if e.kind == "profile_skipped"]
    assert {e.data["gpus"] for e in skipped} == {4, 8}
    assert all("quota" in e.data["reason"] for e in skipped)
    assert alloc._prerun_held == {}
    alloc.stop()


def test_a_prerun_never_takes_a_gpu_another_prerun_holds(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=60.0, listen="127.0.0.1:0")
    alloc = Allocator(cfg, fake_target(declared_inventory(1, 4)))
    one = SimpleNamespace(name="one", owner=None)
    two = SimpleNamespace(name="two", owner=None)
    first = alloc._profile_placement(one, 3)  # type: ignore[arg-type]
    assert first is not None
    assert alloc._profile_placement(two, 2) is None  # type: ignore[arg-type]
    second = alloc._profile_placement(two, 1)  # type: ignore[arg-type]
    assert second is not None
    assert not {g for ids in first.values() for g in ids} & set(second[next(iter(second))])
    alloc.stop()
