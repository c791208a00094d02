"""``flowcon simulate --users N --quota-gpus G``: a trace with owners and per-user quotas;
the summary counts the refusals per user, and a quota costs deadlines it would have met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.sim.cli import SHARED, simulate

TRACE = SHARED / "data/elasticflow-traces/195job.csv"

pytestmark = pytest.mark.skipif(not TRACE.is_file(), reason="shared traces not present")


def _run(*args: str) -> dict[str, object]:
    out = CliRunner().invoke(
        simulate, ["--trace", str(TRACE), "--cluster", "16x8", "--no-progress", *args]
    )
    assert out.exit_code == 0, out.output
    summary: dict[str, object] = json.loads(out.output.strip().splitlines()[-1])
    return summary


def test_a_quota_per_user_refuses_and_is_measured() -> None:
    free = _run("--users", "8", "--user-skew", "1")
    held = _run("--users", "8", "--user-skew", "1", "--quota-gpus", "16")
    tenants = held["tenants"]
    assert isinstance(tenants, dict)
    assert tenants["quota"] == {"max_gpus": 16, "max_jobs": None}
    per = tenants["per_user"]
    assert sum(u["jobs"] for u in per.values()) == 195
    assert tenants["quota_refused"] == sum(u["quota_refused"] for u in per.values()) > 0
    # the heaviest user is refused most
    assert max(per, key=lambda u: per[u]["quota_refused"]) == "user00"
    assert free["tenants"]["quota_refused"] == 0  # type: ignore[index]
    ratio = held["deadline_satisfactory_ratio"]
    assert isinstance(ratio, float)
    assert ratio < free["deadline_satisfactory_ratio"]  # type: ignore[operator]


def test_quota_options_need_users(tmp_path: Path) -> None:
    out = CliRunner().invoke(simulate, ["--trace", str(TRACE), "--quota-gpus", "8"])
    assert out.exit_code == 2
    assert "needs --users N" in out.output
