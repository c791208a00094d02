"""How Algorithm 1's shares are applied (the agent's ``control`` setting).

Algorithm 1 gives each managed container a limit L, a share of the host; ``to_cpus``
turns it into CPUs within the container's label bounds. This module decides, per
container and round, how those CPUs are enforced:

- ``quota``: a CFS quota of that many CPUs (``NanoCpus`` / ``CpuQuota``);
- ``weights``: a CPU weight (``CpuShares``) in proportion, ``round(1024 * cpus)`` within
  the engine's [2, 262144], so an unmanaged container at Docker's default 1024 counts as
  one CPU's worth; no quota (work-conserving), except a ``flowcon.cpus.max`` label, kept
  as a hard quota cap;
- ``cpuset``: weights as above plus disjoint cores sized from the shares
  (``flowcon.core.cpusets``), when the host has a core per managed container; otherwise
  weights for that round;
- ``hybrid``: quota for thread-aware containers (their metric lines carry ``threads``:
  they resize their thread pool to the quota), weights for all others.

Pure: no I/O; the executor calls ``plan_controls`` and the engine adapter builds bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from flowcon.core.cpusets import cpuset_string, plan_cpusets
from flowcon.core.limits import CpuLimit

ControlMode = Literal["quota", "weights", "cpuset", "hybrid"]
AppliedMode = Literal["quota", "weights", "cpuset"]
CONTROL_MODES: tuple[str, ...] = get_args(ControlMode)
# The agent's default, chosen from measurements (docs/agent.md).
DEFAULT_CONTROL: ControlMode = "hybrid"  # measured: docs/agent.md, "Default"

SHARES_PER_CPU = 1024  # Docker's default CpuShares: one CPU's worth
MIN_SHARES = 2  # the engine's range of CpuShares (cgroup v1 cpu.shares)
MAX_SHARES = 262_144


def to_shares(cpus: float) -> int:
    """CPU weight for a container entitled to ``cpus`` CPUs: 1024 per CPU, clamped."""
    return min(max(round(SHARES_PER_CPU * cpus), MIN_SHARES), MAX_SHARES)


@dataclass(frozen=True)
class ControlInput:
    """One managed container, as the planner needs it."""

    target: CpuLimit  # L in CPUs within the label bounds (to_cpus)
    thread_aware: bool = False  # its metric lines carry "threads"
    cpus_max: float | None = None  # flowcon.cpus.max: a hard cap in every mode


@dataclass(frozen=True)
class CpuControl:
    """What the agent applies to one container this round."""

    mode: AppliedMode
    target: CpuLimit  # the CPUs L stands for (the quota in quota mode)
    shares: int | None = None  # weights, cpuset
    cpuset: str | None = None  # cpuset: "0-1"
    cap: CpuLimit | None = None  # weights, cpuset: the cpus.max label as a quota; None: none

    def describe(self) -> str:
        """For decision lines and status: what was applied."""
        cpus = f"{self.target.cpus:g}" + ("(unlimited)" if self.target.unlimited else "")
        if self.mode == "quota":
            return f"cpus={cpus}"
        out = f"cpus={cpus} shares={self.shares}"
        if self.cap is not None:
            out += f" cap={self.cap.cpus:g}"
        if self.cpuset is not None:
            out += f" cpuset={self.cpuset}"
        return out


def applied_mode(mode: ControlMode, thread_aware: bool) -> AppliedMode:
    """The mode one container gets before any cpuset fallback: hybrid picks quota for
    thread-aware containers and weights for all others."""
    if mode == "hybrid":
        return "quota" if thread_aware else "weights"
    return mode


def _weights(inp: ControlInput, host_cpus: float, cpuset: str | None = None) -> CpuControl:
    cap = None
    if inp.cpus_max is not None and inp.cpus_max < host_cpus:
        cap = CpuLimit(round(inp.cpus_max, 3), False)
    mode: AppliedMode = "weights" if cpuset is None else "cpuset"
    return CpuControl(mode, inp.target, to_shares(inp.target.cpus), cpuset, cap)


def plan_controls(
    mode: ControlMode, inputs: Mapping[str, ControlInput], host_cpus: int
) -> tuple[dict[str, CpuControl], str | None]:
    """Each container's control, and why cpuset fell back to weights (None: it did not,
    or the mode is not cpuset). Containers keep the order of ``inputs`` (cores follow it)."""
    if mode == "cpuset":
        plan = plan_cpusets({k: i.target.cpus for k, i in inputs.items()}, host_cpus)
        if plan is None:
            why = (
                f"{len(inputs)} managed containers but {host_cpus} cores: cpuset needs a "
                "core each; CPU weights this round"
            )
            return {k: _weights(i, host_cpus) for k, i in inputs.items()}, why
        return {k: _weights(i, host_cpus, cpuset_string(plan[k])) for k, i in inputs.items()}, None
    out: dict[str, CpuControl] = {}
    for k, i in inputs.items():
        if applied_mode(mode, i.thread_aware) == "quota":
            out[k] = CpuControl("quota", i.target)
        else:
            out[k] = _weights(i, host_cpus)
    return out, None
