"""The smallest valid job spec of the testbox image, parsed, for the executor's pure and
engine tests: ``spec_on_testbox(volumes=[...], user=...)``."""

from __future__ import annotations

from typing import Any

from flowcon.jobspec.spec import JobSpec, parse_jobspec

TESTBOX_SPEC: dict[str, Any] = {
    "name": "j",
    "image": "flowcon/testbox:latest",
    "command": "true",
    "global_batch_size": 8,
    "iterations": 10,
    "best_effort": True,
    "profile": {1: 1.0},
}


def spec_on_testbox(**over: Any) -> JobSpec:
    return parse_jobspec({**TESTBOX_SPEC, **over})
