"""The agent's state file: lists, limits and each container's original CPU settings.

Written atomically (temporary file + os.replace) after every change, so a restarted
agent resumes with the same lists and, above all, restores the settings the
containers had before FlowCon touched them, never its own limits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("flowcon.agent.state_file")

VERSION = 1


@dataclass
class ContainerRecord:
    id: str
    name: str
    managed: bool
    job: str | None = None
    list: str | None = None  # NL/WL/CL; None for monitor-only containers
    limit: float = 1.0  # Algorithm 1's L, a share of the host
    applied_cpus: float | None = None  # what we set; None: the original settings are in effect
    # how (control mode: quota, weights, cpuset; None in older files: quota), and with what
    applied_mode: str | None = None
    applied_shares: int | None = None
    applied_cpuset: str | None = None
    applied_cap: float | None = None
    threads: int | None = None  # the job's last "threads" (thread-aware), None: not seen
    # NanoCpus, CpuQuota, CpuPeriod, CpuShares, CpusetCpus (older files lack the last)
    original: dict[str, Any] | None = None
    growth: dict[str, Any] = field(default_factory=dict)
    log_since_ns: int = 0
    view: dict[str, Any] = field(default_factory=dict)  # last figures, for `flowcon status`
    # HostConfig CPU fields as the agent's updates left them (flowcon/agent/foreign.py)
    expected: dict[str, Any] = field(default_factory=dict)
    # the same fields as the update being sent will leave them, written before it is sent:
    # a restart that finds these values knows the change was its own (killed before it
    # could record it as ``expected``)
    pending: dict[str, Any] = field(default_factory=dict)
    # why the agent keeps its hands off this container (someone else changed its CPU
    # settings); None: managed as its labels say. Kept until the container restarts.
    hands_off: str | None = None


@dataclass
class AgentState:
    itval: float | None = None
    rounds: int = 0
    updated_at: float = 0.0
    node: str = ""
    host_cpus: int = 0
    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    # Containers skipped for a bad flowcon.* label: id -> {"name": ..., "error": ...}.
    label_errors: dict[str, dict[str, str]] = field(default_factory=dict)


def to_json(state: AgentState) -> str:
    """Compact JSON (written every round: a tenth of the CPU of asdict + indent)."""
    data = {
        "version": VERSION,
        "itval": state.itval,
        "rounds": state.rounds,
        "updated_at": state.updated_at,
        "node": state.node,
        "host_cpus": state.host_cpus,
        "containers": {cid: vars(rec) for cid, rec in state.containers.items()},
        "label_errors": state.label_errors,
    }
    return json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)


def from_json(text: str) -> AgentState:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError("not a FlowCon agent state (version mismatch)")
    records = {}
    for cid, raw in (data.get("containers") or {}).items():
        if not isinstance(raw, dict):
            raise ValueError(f"container {cid!r} is not a mapping")
        records[cid] = ContainerRecord(**raw)
    label_errors = {
        str(cid): {"name": str(e.get("name", "")), "error": str(e.get("error", ""))}
        for cid, e in (data.get("label_errors") or {}).items()
        if isinstance(e, dict)
    }
    return AgentState(
        itval=data.get("itval"),
        rounds=int(data.get("rounds") or 0),
        updated_at=float(data.get("updated_at") or 0.0),
        node=str(data.get("node") or ""),
        host_cpus=int(data.get("host_cpus") or 0),
        containers=records,
        label_errors=label_errors,
    )


class StateStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> AgentState:
        """The saved state; a fresh one if there is none. A corrupt file is moved aside
        (``<name>.corrupt-<time>``) with an error line, never silently overwritten."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return AgentState()
        except OSError as exc:
            log.error("cannot read state file %s: %s; starting empty", self.path, exc)
            return AgentState()
        try:
            return from_json(text)
        except (ValueError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = self.path
            log.error(
                "state file %s is corrupt (%s); kept as %s; starting empty: original CPU "
                "settings of containers limited before are unknown",
                self.path,
                exc,
                aside,
            )
            return AgentState()

    def save(self, state: AgentState) -> None:
        state.updated_at = time.time()
        text = to_json(state)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
