"""A job spec as a client submits it to the allocator's API (the API tests' common one)."""

from __future__ import annotations

from typing import Any

PROFILE = {"1": 10.0, "2": 18.0, "4": 32.0, "8": 50.0}


def api_job(name: str, **kw: Any) -> dict[str, Any]:
    """A deadline job of the testbox image, ``kw`` over its keys."""
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", "true"],
        "global_batch_size": 16,
        "iterations": 100,
        "deadline": 3600,
        "profile": PROFILE,
        **kw,
    }
