"""The role table and token check of flowcon.allocator.auth (pure; the HTTP side is
tests/allocator/test_api_auth.py)."""

from __future__ import annotations

import pytest

from flowcon.allocator.auth import Credentials, required_role


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("GET", "/healthz", "public"),
        ("GET", "/metrics", "public"),
        ("GET", "/ui", "public"),
        ("GET", "/ui/jobs/a", "public"),
        ("GET", "/static/uplot.min.js", "public"),
        ("GET", "/", "public"),
        ("GET", "/favicon.ico", "public"),
        ("GET", "/api/v1/jobs", "read"),
        ("HEAD", "/api/v1/jobs", "read"),
        ("GET", "/api/v1/jobs/a", "read"),
        ("GET", "/api/v1/jobs/a/logs", "read"),
        ("GET", "/api/v1/history", "read"),
        ("GET", "/api", "read"),
        ("GET", "/apiary", "public"),
        ("POST", "/api/v1/jobs", "user"),  # also ?dry_run=true: the path has no query
        ("DELETE", "/api/v1/jobs/a", "user"),
        ("PUT", "/api/v1/jobs", "user"),
        ("post", "/api/v1/measurements", "agent"),
    ],
)
def test_role_table(method: str, path: str, role: str) -> None:
    assert required_role(method, path) == role


def test_grants() -> None:
    creds = Credentials(operator="op", user="us", read="rd", agent="ag")
    table = {
        None: {"read": 401, "user": 401, "agent": 401},
        "Bearer nope": {"read": 401, "user": 401, "agent": 401},
        "Bearer rd": {"read": 200, "user": 403, "agent": 403},
        "Bearer us": {"read": 200, "user": 200, "agent": 403},
        "Bearer ag": {"read": 403, "user": 403, "agent": 200},
        "Bearer op": {"read": 200, "user": 200, "agent": 200},
    }
    for header, want in table.items():
        for role, status in want.items():
            assert creds.check(header, role) == status, (header, role)  # type: ignore[arg-type]
        assert creds.check(header, "public") == 200


def test_unset_roles_match_nothing() -> None:
    creds = Credentials(operator="op")
    assert creds.kinds("Bearer ") == set()
    assert creds.kinds("Bearer \x00unset\x00") == set()
    assert creds.check("Bearer op", "agent") == 200
    assert creds.check("Bearer anything", "read") == 401
