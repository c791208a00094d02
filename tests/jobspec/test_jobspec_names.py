"""Job names: the names FlowCon derives from a job's (its pre-runs) are no job's, so no
user's job shares another job's containers, checkpoint volume, network or folder."""

from __future__ import annotations

import pytest

from flowcon.executor.executor_base import ExecutorBase, ExecutorOptions
from flowcon.executor.profiling import derived_name, profile_spec
from flowcon.jobspec.spec import NAME_RE, JobSpecError, parse_jobspec

NOW = 1_700_000_000.0
BASE = {
    "name": "train",
    "image": "flowcon/testbox:latest",
    "command": ["true"],
    "global_batch_size": 8,
    "iterations": 10,
    "best_effort": True,
    "profile": {1: 10.0},
}


@pytest.mark.parametrize("name", ["train_p1", "train_m64", "train_p2b128", "a_b"])
def test_a_derived_name_is_refused_naming_the_field(name):
    with pytest.raises(JobSpecError) as err:
        parse_jobspec({**BASE, "name": name}, now=NOW)
    assert err.value.field == "name"
    assert "reserved" in str(err.value)


def test_the_old_derived_forms_are_ordinary_names_of_their_own():
    spec = parse_jobspec({**BASE, "name": "train-p1"}, now=NOW)
    prerun = profile_spec(parse_jobspec(BASE, now=NOW), 1)
    assert prerun.name == "train_p1"
    assert spec.name != prerun.name
    assert ExecutorBase.volume_name(spec.name) != ExecutorBase.volume_name(prerun.name)
    assert ExecutorBase.worker_name(spec.name, "n1", "profile") != ExecutorBase.worker_name(
        prerun.name, "n1", "profile"
    )


@pytest.mark.parametrize("suffix", ["p1", "p16", "m64", "p2b128"])
def test_no_submitted_name_equals_a_derived_one(suffix):
    assert NAME_RE.match(derived_name("train", suffix)) is None
    with pytest.raises(JobSpecError):
        parse_jobspec({**BASE, "name": derived_name("train", suffix)}, now=NOW)


def test_a_derived_name_is_valid_for_docker_and_swarm():
    import re

    docker_object = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")  # containers, volumes, networks
    swarm_service = re.compile(r"^[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*$")  # a DNS component
    name = derived_name("a" * 40, "p16b65536")
    worker = ExecutorBase.worker_name(name, "node-1", "profile", "-r3")
    assert docker_object.match(worker)
    assert swarm_service.match(worker)
    assert docker_object.match(ExecutorBase.volume_name(name, "alice"))


def test_checkpoints_are_keyed_by_owner_and_name(tmp_path):
    ex = ExecutorBase(object(), options=ExecutorOptions(checkpoint_host_dir=str(tmp_path)))  # type: ignore[arg-type]
    alice, bob = ex.volume_name("train", "alice"), ex.volume_name("train", "bob")
    assert alice == "flowcon-ckpt-alice.train"
    assert alice != bob
    assert (
        ex.volume_name("train", None) == ex.volume_name("train", "operator") == "flowcon-ckpt-train"
    )
    assert ex.checkpoint_dir("train", "alice") == f"{tmp_path}/alice.train"
    assert ex.checkpoint_dir("train", "bob") != ex.checkpoint_dir("train", "alice")
