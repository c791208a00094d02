"""A job's record: its soft-deadline flag (``deadline_kind``) reaches the planner, every
spec key survives the store's JSON, and a spec becomes the policy's job one way."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from flowcon.allocator.records import core_job, spec_from_dict, spec_json, spec_to_dict
from flowcon.allocator.store import Store, new_record
from flowcon.allocator.views import JobView
from flowcon.jobspec.spec import JobSpec, JobSpecError, parse_jobspec


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
    assert rec.soft_deadline is True
    assert spec_to_dict(rec.spec)["soft_deadline"] is True


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
    assert spec_from_dict(spec_to_dict(spec)).metric == spec.metric


def test_records_from_before_the_keys_still_load() -> None:
    old = spec_to_dict(_spec())
    for key in ("volumes", "shm_size", "labels", "metric", "soft_deadline", "user"):
        old.pop(key)
    back = spec_from_dict(old)
    assert back.volumes == ()
    assert back.metric is None
    assert back.soft_deadline is False
    assert back.metric is None


def test_a_stored_row_from_before_the_keys_loads(tmp_path):
    """A database written before the container keys, launchers and batch ranges: its rows
    load as typed specs with those keys' defaults, and show in the API as they are now."""
    st = Store(tmp_path / "old.db")
    st.put_job(new_record(_spec(), "running", {1: 1.0}))
    old = spec_to_dict(_spec())
    for key in ("volumes", "labels", "metric", "launcher", "scaling", "batch_size_min"):
        old.pop(key)
    st._exec("UPDATE jobs SET spec=? WHERE name='j'", (json.dumps(old, sort_keys=True),))
    st.close()
    st = Store(tmp_path / "old.db")  # the old database, opened by this flowcon
    rec = st.get_job("j")
    assert rec is not None
    assert rec.spec.launcher == "flowcon"
    assert rec.spec.scaling is None
    assert rec.spec.volumes == ()
    assert rec.spec.batch_range is None
    assert JobView.of(rec).to_json()["spec"]["launcher"] == "flowcon"
    st.close()


def test_the_api_shows_the_spec_as_stored_with_env_values_hidden() -> None:
    spec = _spec(env={"API_KEY": "hunter2"})
    shown = spec_json(spec, redact=True)
    assert list(shown) == sorted(shown)
    assert shown["env"] == {"API_KEY": "***"}
    assert spec_json(spec)["env"] == {"API_KEY": "hunter2"}


def test_the_core_job_of_a_spec() -> None:
    """One conversion (the planner's): name, times, GPUs, batch, the image as the model,
    the deadline kind; the curve is the profile unless the planner gives the measured one."""
    spec = _spec(deadline_kind="soft", max_gpus=4, profile={1: 10.0, 2: 18.5, 4: 30.0})
    job = core_job(spec)
    assert job.job_id == "j"
    assert job.iterations == 100.0
    assert job.deadline == 60.0
    assert job.curve.at(2) == 18.5
    assert job.max_gpus == 4
    assert job.batch_size == 8
    assert job.model == "flowcon/testbox:latest"
    assert job.soft_deadline
    assert job.done_iterations == 0.0
    assert job.requested_gpus == 1
    auto = _spec(profile="auto")
    with pytest.raises(JobSpecError, match="profile"):
        core_job(auto)
    assert core_job(auto.with_profile(spec.profile)).curve.at(4) == 30.0  # type: ignore[arg-type]
