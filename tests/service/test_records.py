"""A job's first record carries its soft-deadline flag to the planner."""

from __future__ import annotations

from dataclasses import dataclass, fields

from flowcon.service.jobspec import JobSpec, parse_jobspec
from flowcon.service.records import new_record


@dataclass(frozen=True)
class _SoftSpec(JobSpec):
    """A spec with the soft-deadline key (added to JobSpec by the job-interface issue)."""

    soft_deadline: bool = True


def _spec() -> JobSpec:
    return parse_jobspec(
        {
            "name": "j",
            "image": "flowcon/testbox:latest",
            "command": "true",
            "global_batch_size": 8,
            "iterations": 100,
            "deadline": 60,
            "profile": {1: 1.0},
        },
        now=0.0,
    )


def soft(spec: JobSpec) -> JobSpec:
    return _SoftSpec(**{f.name: getattr(spec, f.name) for f in fields(spec)})


def test_hard_by_default_soft_when_the_spec_says_so() -> None:
    spec = _spec()
    assert new_record(spec, "admitted", {1: 1.0}).soft_deadline is False
    assert new_record(soft(spec), "admitted", {1: 1.0}).soft_deadline is True
