"""A job's record: its soft-deadline flag (``deadline_kind``) reaches the planner, and every
spec key survives the store's JSON."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flowcon.allocator.records import job_metric, new_record, spec_from_dict, spec_to_dict
from flowcon.jobspec.spec import JobSpec, parse_jobspec


def _spec(**extra: Any) -> JobSpec:
    return parse_jobspec(
        {
            "name": "j",
            "image": "flowcon/testbox:latest",
            "command": "true",
            "global_batch_size": 8,
            "iterations": 100,
            "deadline": 60,
            "profile": {1: 1.0},
            **extra,
        },
        now=0.0,
    )


def test_hard_by_default_soft_when_the_spec_says_so() -> None:
    assert new_record(_spec(), "admitted", {1: 1.0}).soft_deadline is False
    hard = _spec(deadline_kind="hard")
    assert new_record(hard, "admitted", {1: 1.0}).soft_deadline is False
    soft = _spec(deadline_kind="soft")
    rec = new_record(soft, "admitted", {1: 1.0})
    assert rec.soft_deadline is True and rec.spec["soft_deadline"] is True


def test_every_key_round_trips_through_the_record() -> None:
    spec = _spec(
        volumes=["/srv/data:/data:ro", {"source": "cache", "target": "/cache"}],
        shm_size="2g",
        cpus_per_gpu=2,
        memory="16g",
        workdir="/work",
        user="1000:1000",
        labels={"team": "vision"},
        deadline_kind="soft",
        metric={"name": "loss", "regex": r"Step (?P<step>\d+) .*loss (?P<value>\S+)"},
    )
    back = spec_from_dict(spec_to_dict(spec))
    assert replace(back, profile_auto=spec.profile_auto) == spec
    assert job_metric(spec_to_dict(spec)) == spec.metric


def test_records_from_before_the_keys_still_load() -> None:
    old = spec_to_dict(_spec())
    for key in ("volumes", "shm_size", "labels", "metric", "soft_deadline", "user"):
        old.pop(key)
    back = spec_from_dict(old)
    assert back.volumes == () and back.metric is None and back.soft_deadline is False
    assert job_metric(old) is None
