"""How the agent reads a container's labels: an empty flowcon.* label is absent, and the
allocator's job containers are measured but their limits left alone (pure)."""

from __future__ import annotations

import pytest

from flowcon.agent.config import from_mapping
from flowcon.agent.pool import agent_policy, present_labels

ALLOCATOR_JOB = {"flowcon.managed-by": "flowcon-allocator", "flowcon.job": "j1"}


def test_empty_flowcon_labels_are_absent() -> None:
    labels = {"flowcon.enable": "", "flowcon.cpus.min": "", "other": "", "flowcon.job": "j"}
    assert present_labels(labels) == {"other": "", "flowcon.job": "j"}


def test_a_blanked_enable_label_opts_nothing_in() -> None:
    # what the executor leaves of an image's flowcon.enable=true flowcon.cpus.min=9999
    blanked = {"flowcon.enable": "", "flowcon.cpus.min": "", "flowcon.gpu.share": ""}
    assert agent_policy(blanked, manage_allocator_jobs=True) is None
    policy = agent_policy({**blanked, **ALLOCATOR_JOB}, manage_allocator_jobs=True)
    assert policy is not None
    assert not policy.managed
    assert policy.job == "j1"
    assert policy.cpus_min is None


def test_an_allocator_job_is_measured_not_managed_by_default() -> None:
    labels = {**ALLOCATOR_JOB, "flowcon.enable": "true", "flowcon.cpus.min": "9999"}
    policy = agent_policy(labels, manage_allocator_jobs=False)
    assert policy is not None
    assert policy.job == "j1"
    assert policy.monitored
    assert not policy.managed


def test_manage_allocator_jobs_hands_their_limits_to_the_agent() -> None:
    labels = {**ALLOCATOR_JOB, "flowcon.enable": "true"}
    policy = agent_policy(labels, manage_allocator_jobs=True)
    assert policy is not None
    assert policy.managed


def test_a_container_of_its_own_is_managed_as_before() -> None:
    policy = agent_policy({"flowcon.enable": "true"}, manage_allocator_jobs=False)
    assert policy is not None
    assert policy.managed


@pytest.mark.parametrize(("raw", "want"), [(None, False), (True, True), (False, False)])
def test_the_config_key_defaults_to_off(raw: object, want: bool) -> None:
    data = {} if raw is None else {"manage_allocator_jobs": raw}
    assert from_mapping(data).manage_allocator_jobs is want
