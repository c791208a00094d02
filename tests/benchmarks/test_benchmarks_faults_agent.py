"""benchmarks/faults/agent.py without an engine: how the agent-kill scenario reads the
agent's state file."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.faults import agent
from flowcon.agent.state_file import AgentState, to_json


def test_read_state_checks_the_file_with_the_agents_own_parser(tmp_path: Path) -> None:
    a = agent.Agent(tmp_path, "run1")
    assert a.read_state() == (None, "")  # not written yet
    a.state.write_text(to_json(AgentState(itval=2.0, rounds=3)))
    state, why = a.read_state()
    assert why == ""
    assert state == json.loads(a.state.read_text())
    a.state.write_text("{not json")
    state, why = a.read_state()
    assert state is None
    assert why.startswith("state file invalid:")
