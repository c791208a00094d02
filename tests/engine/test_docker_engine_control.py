"""flowcon/engine/docker_engine.py: the update bodies of the control modes and their
restore (pure: no engine)."""

from __future__ import annotations

from flowcon.core.control import CpuControl
from flowcon.core.limits import NANO, CpuLimit
from flowcon.engine.docker_engine import (
    CpuSettings,
    control_body,
    cpuset_body,
    restore_body,
    weight_body,
)

HALF = CpuLimit(0.5, False)
PLAIN = CpuSettings()
QUOTA_STARTED = CpuSettings(cpu_quota=150_000, cpu_period=100_000)


def test_weight_body_lifts_the_quota_in_the_containers_own_form() -> None:
    assert weight_body(512, PLAIN, 2) == {"NanoCpus": 2 * NANO, "CpuShares": 512}
    assert weight_body(512, QUOTA_STARTED, 2) == {
        "CpuPeriod": 100_000,
        "CpuQuota": -1,
        "CpuShares": 512,
    }
    # a cpus.max label stays a hard cap
    assert weight_body(512, PLAIN, 2, CpuLimit(0.5, False)) == {
        "NanoCpus": NANO // 2,
        "CpuShares": 512,
    }


def test_cpuset_body() -> None:
    assert cpuset_body("0-1,3") == {"CpusetCpus": "0-1,3"}


def test_control_body_per_mode_and_what_the_previous_mode_set_goes_back() -> None:
    quota = CpuControl("quota", HALF)
    weights = CpuControl("weights", HALF, 512)
    pinned = CpuControl("cpuset", HALF, 512, "1")
    orig = CpuSettings(cpu_shares=0, cpuset_cpus="")
    assert control_body(quota, orig, 2, None) == {"NanoCpus": NANO // 2}
    assert control_body(quota, orig, 2, "quota") == {"NanoCpus": NANO // 2}
    # hybrid: a job turned thread-aware leaves weights: Docker's default weight back
    assert control_body(quota, orig, 2, "weights") == {"NanoCpus": NANO // 2, "CpuShares": 1024}
    assert control_body(weights, orig, 2, "quota") == {"NanoCpus": 2 * NANO, "CpuShares": 512}
    assert control_body(pinned, orig, 2, "weights") == {
        "NanoCpus": 2 * NANO,
        "CpuShares": 512,
        "CpusetCpus": "1",
    }
    # cpuset fell back to weights: all cores again (an empty CpusetCpus would not change it)
    assert control_body(weights, orig, 2, "cpuset") == {
        "NanoCpus": 2 * NANO,
        "CpuShares": 512,
        "CpusetCpus": "0-1",
    }
    own = CpuSettings(cpu_shares=300, cpuset_cpus="1")
    assert control_body(quota, own, 2, "cpuset") == {
        "NanoCpus": NANO // 2,
        "CpuShares": 300,
        "CpusetCpus": "1",
    }


def test_restore_body_per_mode() -> None:
    assert restore_body(PLAIN, 2) == {"NanoCpus": 2 * NANO}  # quota: as before modes
    assert restore_body(PLAIN, 2, "weights") == {"NanoCpus": 2 * NANO, "CpuShares": 1024}
    assert restore_body(PLAIN, 4, "cpuset") == {
        "NanoCpus": 4 * NANO,
        "CpuShares": 1024,
        "CpusetCpus": "0-3",
    }
    own = CpuSettings(nano_cpus=NANO, cpu_shares=512, cpuset_cpus="0")
    assert restore_body(own, 2, "cpuset") == {
        "NanoCpus": NANO,
        "CpuShares": 512,
        "CpusetCpus": "0",
    }
    assert restore_body(QUOTA_STARTED, 2, "weights") == {
        "CpuPeriod": 100_000,
        "CpuQuota": 150_000,
        "CpuShares": 1024,
    }


def test_cpu_settings_carry_the_cpuset_and_read_old_dicts() -> None:
    hc = {"NanoCpus": 0, "CpuShares": 256, "CpusetCpus": "0"}
    s = CpuSettings.from_host_config(hc)
    assert (s.cpu_shares, s.cpuset_cpus) == (256, "0")
    assert CpuSettings.from_dict(s.to_dict()) == s
    old = {"nano_cpus": NANO, "cpu_quota": 0, "cpu_period": 0, "cpu_shares": 0}
    assert CpuSettings.from_dict(old) == CpuSettings(nano_cpus=NANO)
