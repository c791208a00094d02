"""flowcon/core/control.py: how Algorithm 1's shares are applied, per mode."""

from __future__ import annotations

import pytest

from flowcon.core.control import (
    CONTROL_MODES,
    DEFAULT_CONTROL,
    ControlInput,
    CpuControl,
    applied_mode,
    plan_controls,
    to_shares,
)
from flowcon.core.limits import CpuLimit, to_cpus


def inp(cpus: float, host: int = 2, **kw: object) -> ControlInput:
    return ControlInput(CpuLimit(cpus, cpus >= host), **kw)  # type: ignore[arg-type]


def test_modes_and_default() -> None:
    assert CONTROL_MODES == ("quota", "weights", "cpuset", "hybrid")
    assert DEFAULT_CONTROL in CONTROL_MODES


def test_shares_are_1024_per_cpu_within_the_engine_range() -> None:
    assert to_shares(1.0) == 1024  # an unmanaged container's default: one CPU's worth
    assert to_shares(0.5) == 512
    assert to_shares(2.0) == 2048
    assert to_shares(0.0) == 2
    assert to_shares(10_000.0) == 262_144
    # L * host CPUs: with beta 2 and two containers the CL one gets 0.25 of 2 CPUs
    assert to_shares(to_cpus(0.25, 2).cpus) == 512


def test_quota_is_todays_control() -> None:
    controls, why = plan_controls("quota", {"a": inp(0.5)}, 2)
    assert why is None
    assert controls == {"a": CpuControl("quota", CpuLimit(0.5, False))}
    assert controls["a"].describe() == "cpus=0.5"


def test_weights_lift_the_quota_except_a_cpus_max_cap() -> None:
    controls, _ = plan_controls(
        "weights", {"a": inp(1.5), "b": inp(0.5, cpus_max=0.5), "c": inp(1.0, cpus_max=4.0)}, 2
    )
    assert controls["a"] == CpuControl("weights", CpuLimit(1.5, False), 1536)
    assert controls["b"].shares == 512
    assert controls["b"].cap == CpuLimit(0.5, False)
    assert controls["c"].cap is None  # a cap above the host is no cap
    assert controls["b"].describe() == "cpus=0.5 shares=512 cap=0.5"


def test_cpuset_pins_when_there_is_a_core_each() -> None:
    controls, why = plan_controls("cpuset", {"a": inp(1.5), "b": inp(0.5)}, 2)
    assert why is None
    assert (controls["a"].mode, controls["a"].cpuset, controls["a"].shares) == ("cpuset", "0", 1536)
    assert (controls["b"].cpuset, controls["b"].shares) == ("1", 512)
    assert controls["a"].describe() == "cpus=1.5 shares=1536 cpuset=0"


def test_cpuset_falls_back_to_weights_with_a_reason() -> None:
    controls, why = plan_controls("cpuset", {"a": inp(1), "b": inp(0.5), "c": inp(0.5)}, 2)
    assert why is not None
    assert "3 managed containers but 2 cores" in why
    assert {c.mode for c in controls.values()} == {"weights"}
    assert all(c.cpuset is None for c in controls.values())


@pytest.mark.parametrize(
    ("mode", "aware", "expected"),
    [
        ("hybrid", True, "quota"),
        ("hybrid", False, "weights"),
        ("quota", False, "quota"),
        ("weights", True, "weights"),
        ("cpuset", True, "cpuset"),
    ],
)
def test_hybrid_selection(mode: str, aware: bool, expected: str) -> None:
    assert applied_mode(mode, aware) == expected  # type: ignore[arg-type]


def test_hybrid_quota_for_thread_aware_weights_for_the_others() -> None:
    controls, why = plan_controls(
        "hybrid", {"aware": inp(0.5, thread_aware=True), "plain": inp(0.5)}, 2
    )
    assert why is None
    assert controls["aware"] == CpuControl("quota", CpuLimit(0.5, False))
    assert controls["plain"] == CpuControl("weights", CpuLimit(0.5, False), 512)
