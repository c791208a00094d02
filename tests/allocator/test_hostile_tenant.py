"""The ``hostile-tenant`` fault scenario (benchmarks/faults/tenants.py): one user's
attempts on another's jobs and on the host are all refused; and the scenario's checks
fail when a guard is missing."""

from __future__ import annotations

import pytest

from benchmarks.faults import scenarios as faults
from flowcon.allocator.daemon import Allocator
from flowcon.executor.reach import Reach, UserRule
from flowcon.jobspec import keys


def scenario() -> faults.Scenario:
    return next(s for s in faults.SCENARIOS if s.name == "hostile-tenant")


def test_200_attempts_fixed_seed_none_succeeds() -> None:
    summary = faults.run_scenario(scenario(), 200, seed=15)
    assert summary.error == ""
    assert summary.runs == 200
    assert summary.violations == 0, summary.messages[:10]


def test_the_scenario_sees_a_missing_owner_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Allocator, "_own", lambda self, rec, who, what: None)
    summary = faults.run_scenario(scenario(), 120, seed=15)
    assert summary.violations > 0
    assert any("not refused" in m or "store changed" in m for m in summary.messages)


def test_the_scenario_sees_a_missing_reach_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Reach, "problems", lambda self, spec: [])
    summary = faults.run_scenario(scenario(), 120, seed=15)
    assert summary.violations > 0
    assert any("host_path" in m or "image" in m for m in summary.messages)


def test_the_scenario_sees_a_missing_user_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(UserRule, "id_problem", lambda self, uid, gid, exempt=False: None)
    summary = faults.run_scenario(scenario(), 150, seed=15)
    assert summary.violations > 0
    assert any("root_spelled" in m for m in summary.messages)


def test_the_scenario_sees_a_missing_runtime_env_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "runtime_env_problem", lambda key: None)
    summary = faults.run_scenario(scenario(), 150, seed=15)
    assert summary.violations > 0
    assert any("runtime_env" in m for m in summary.messages)
