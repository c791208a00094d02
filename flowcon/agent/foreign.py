"""Changes to a managed container's CPU settings that the agent did not make (pure).

The agent remembers, per container, the HostConfig CPU fields its own ``docker update``
requests set (``expected``: the last value of each field it sent). When the engine
reports an update of the container (its ``update`` event) or the agent resumes a
container after a restart, the container's current settings are compared with
``expected``: a field that differs was changed by someone else.

The agent also reads the container's settings right before each update it sends: a
change made since the agent last looked is found there, before the agent's update could
replace it. The engine has no conditional update, so a change landing between that read
and the update (a millisecond or two) is still replaced; ``OwnWrites`` finds it afterwards
from the engine's events: an update carries one ``update`` event, so a second event of the
same container inside the agent's read-to-answer window of an update is someone else's.

The rule (docs/agent.md, "Changes made by someone else"): someone else's change wins.
The agent logs it, counts it (``flowcon_agent_foreign_changes_total``), stops managing
that container until it restarts (it leaves the lists; its current settings become its
originals, so neither a later round nor the agent's restore on exit reverts the change)
and re-runs Algorithm 1 for the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from flowcon.engine.docker_engine import CpuSettings

Value = int | str

# HostConfig field -> CpuSettings attribute
FIELDS: dict[str, str] = {
    "NanoCpus": "nano_cpus",
    "CpuQuota": "cpu_quota",
    "CpuPeriod": "cpu_period",
    "CpuShares": "cpu_shares",
    "CpusetCpus": "cpuset_cpus",
}


def merge_expected(expected: Mapping[str, Value], body: Mapping[str, Value]) -> dict[str, Value]:
    """``expected`` after the agent sent the update request ``body``: each CPU field of
    the body is now what the container should show (others keep their last value)."""
    out = dict(expected)
    for key, value in body.items():
        if key in FIELDS:
            out[key] = value
    return out


def _same(key: str, expected: Value, found: Value) -> bool:
    if key == "CpuQuota" and isinstance(expected, int) and isinstance(found, int):
        return expected == found or (expected <= 0 and found <= 0)  # -1 and 0: no quota
    if key == "CpusetCpus":
        return str(expected).replace(" ", "") == str(found).replace(" ", "")
    return expected == found


def foreign_fields(
    expected: Mapping[str, Value], found: CpuSettings
) -> dict[str, tuple[Value, Value]]:
    """The fields whose current value is not the one the agent set last:
    ``{field: (expected, found)}``; empty when nothing was changed by someone else."""
    diff: dict[str, tuple[Value, Value]] = {}
    for key, want in expected.items():
        attr = FIELDS.get(key)
        if attr is None:
            continue
        have: Value = getattr(found, attr)
        if not _same(key, want, have):
            diff[key] = (want, have)
    return diff


def merge_unset(
    original: CpuSettings, found: CpuSettings, expected: Mapping[str, Value]
) -> CpuSettings:
    """``original`` with the current value of every field the agent has not set: a change
    someone else made to such a field is kept by the agent's restore."""
    changes = {attr: getattr(found, attr) for key, attr in FIELDS.items() if key not in expected}
    return replace(original, **changes)


def describe(diff: Mapping[str, tuple[Value, Value]]) -> str:
    """``NanoCpus 1000000000 -> 500000000, CpuShares 512 -> 2048`` (sorted by field)."""
    return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(diff.items()))


@dataclass
class Window:
    """One update the agent sent: from the read before it to the engine's answer
    (nanoseconds since the epoch, the clock the engine's events carry) and how many of
    the container's ``update`` events fell inside it."""

    start_ns: int
    end_ns: int
    events: int = 0


class OwnWrites:
    """The agent's recent updates per container, to tell a colliding update by someone
    else from the agent's own by the engine's events (module docstring)."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._windows: dict[str, list[Window]] = {}

    def record(self, cid: str, start_ns: int, end_ns: int) -> None:
        windows = self._windows.setdefault(cid, [])
        windows.append(Window(start_ns, end_ns))
        del windows[: -self.keep]

    def collided(self, cid: str, time_ns: int) -> bool:
        """Count an ``update`` event of ``cid`` at ``time_ns``: True when it is the second
        one inside one of the agent's own update windows (someone else's update landed
        while the agent's was in flight)."""
        for w in self._windows.get(cid, ()):
            if w.start_ns <= time_ns <= w.end_ns:
                w.events += 1
                return w.events >= 2
        return False

    def forget(self, cid: str) -> None:
        self._windows.pop(cid, None)
