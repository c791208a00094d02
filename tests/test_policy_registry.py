"""The one table of policy names (flowcon/policy_registry.py): what the simulator's
``--policy`` offers, what the allocator's ``policy:`` accepts, and what each name builds."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from flowcon.policy_registry import POLICIES, REGISTRY, SIMULATOR_POLICIES, make_policy
from flowcon.sim.cli import simulate


def test_simulate_offers_every_registered_name() -> None:
    out = CliRunner().invoke(simulate, ["--help"]).output
    flat = " ".join(out.split())
    for name in SIMULATOR_POLICIES:
        assert name in flat
    bad = CliRunner().invoke(simulate, ["--trace", "x.csv", "--policy", "fifo"])
    assert bad.exit_code == 2
    assert "elasticflow-published-engine" in bad.output


def test_the_allocator_takes_the_live_ones() -> None:
    assert set(POLICIES) == {n for n, e in REGISTRY.items() if e.live}
    assert "elasticflow-published" not in POLICIES
    assert "elasticflow-published-engine" not in POLICIES


@pytest.mark.parametrize("name", [n for n, e in REGISTRY.items() if e.make is not None])
def test_each_factory_builds_its_name(name: str) -> None:
    expected = "elasticflow-published" if name == "elasticflow-published-engine" else name
    assert make_policy(name).name == expected


def test_an_unknown_or_loop_only_name_is_refused() -> None:
    for name in ("fifo", "elasticflow-published"):
        with pytest.raises(ValueError, match="unknown policy"):
            make_policy(name)
