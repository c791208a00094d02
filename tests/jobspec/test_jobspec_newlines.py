"""A trailing newline is not part of any accepted name, id or key: Python's ``$`` matches
before a final newline, so every rule of the spec anchors at the end of the string."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.jobspec.spec import parse_jobspec


def _spec(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "j", "image": "flowcon/testbox:latest", "command": "true",
        "global_batch_size": 8, "iterations": 10, "best_effort": True, "profile": {1: 1.0},
    }  # fmt: skip
    raw.update(over)
    return raw


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"name": "alice-job\n"}, "name"),
        ({"image": "flowcon/testbox:latest\n"}, "image"),
        ({"user": "root\n"}, "user"),
        ({"user": "1000\n"}, "user"),
        ({"env": {"FOO\n": "x"}}, "env"),
        ({"volumes": ["data\n:/data"]}, "volumes"),
        ({"labels": {"a\n": "x"}}, "labels"),
    ],
)
def test_a_trailing_newline_is_refused(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_jobspec(_spec(**over), allow_files=False)
