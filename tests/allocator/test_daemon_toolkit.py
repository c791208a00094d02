"""A node's NVIDIA toolkit state: sent by the agent's reporter with its measurements, kept by
the allocator per node, shown by ``flowcon nodes`` (a real server, plan-only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from flowcon.agent.reporter import AllocatorReporter
from flowcon.agent.toolkit import ACCEPTS, REFUSES
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.cli import main


@pytest.fixture
def daemon(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=1.0, listen="127.0.0.1:0")
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.planner.nodes = [("n0", 4), ("n1", 4)]
    alloc.start(port=0)
    yield alloc
    alloc.stop()


def _nodes(daemon, *extra: str):
    out = CliRunner().invoke(main, ["nodes", "--url", daemon.url, "--token", daemon.token, *extra])
    assert out.exit_code == 0, out.output
    return out.output


def test_each_nodes_toolkit_state_reaches_flowcon_nodes(daemon):
    assert AllocatorReporter(daemon.url, daemon.token, "n0", toolkit=REFUSES).send([])
    assert AllocatorReporter(daemon.url, daemon.token, "n1", toolkit=ACCEPTS).send([])
    rows = {n["name"]: n for n in json.loads(_nodes(daemon, "-o", "json"))}
    assert rows["n0"]["toolkit"] == REFUSES
    assert rows["n1"]["toolkit"] == ACCEPTS
    table = _nodes(daemon)
    assert "TOOLKIT" in table
    assert REFUSES in table
    assert ACCEPTS in table


def test_a_node_no_agent_reported_shows_none(daemon):
    assert AllocatorReporter(daemon.url, daemon.token, "n0").send([])  # an older agent
    rows = {n["name"]: n for n in json.loads(_nodes(daemon, "-o", "json"))}
    assert rows["n0"]["toolkit"] is None
    assert rows["n1"]["toolkit"] is None


def test_a_toolkit_state_outside_the_contract_is_refused_naming_the_field(daemon):
    body = json.dumps({"node": "n0", "measurements": [], "toolkit": "whatever"}).encode()
    req = urllib.request.Request(f"{daemon.url}/api/v1/measurements", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {daemon.token}")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    assert "toolkit" in err.value.read().decode()


class _Hardening:
    def __init__(self, state: str) -> None:
        self.state = state


class _SwarmLike:
    """A backend that says each node's hardening (as SwarmBackend.node_hardening)."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states

    def node_hardening(self, node: str) -> _Hardening:
        return _Hardening(self.states.get(node, "full"))


def test_a_weak_node_is_left_out_and_shown(tmp_path):
    from types import SimpleNamespace

    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=1.0, listen="127.0.0.1:0")
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.planner.nodes = [("node1", 4), ("node2", 4)]  # a swarm's declared inventory
    weak = "node2"
    backend = _SwarmLike({weak: "weak-refused", "node1": "weak-allowed"})
    alloc.target = SimpleNamespace(executor=SimpleNamespace(backend=backend))  # type: ignore[assignment]
    alloc._refuse_weak_nodes()
    assert alloc.planner.refused_nodes == {weak}
    shown = {n.name: n.hardening for n in alloc.nodes()}
    assert shown[weak] == "weak-refused"
    assert [e.kind for e in alloc.store.events()].count("node_refused") == 1
    assert {(i, g) for i, g in alloc.planner.blocked(0.0)} == {(1, g) for g in range(4)}
    alloc.target = None
    alloc.stop()
