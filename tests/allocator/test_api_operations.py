"""Operator requests over HTTP and the CLI: scale, migrate, drain, undrain, nodes, on a
real server (plan-only: decisions and state, no containers), with who may do what."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from click.testing import CliRunner

from flowcon.alloc.model import Topology
from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.cli import main
from flowcon.client.http import AllocatorClient, ClientError

PROFILE = {"1": 10.0, "2": 18.0, "4": 32.0, "8": 50.0}
NODES = [("n0", 4), ("n1", 4)]


def spec(name: str, **kw: object) -> dict[str, Any]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", "true"],
        "global_batch_size": 16,
        "iterations": 1_000_000,
        "best_effort": True,
        "profile": PROFILE,
        **kw,
    }


def _daemon(tmp_path, **cfg_kw: object) -> Allocator:
    cfg = AllocatorConfig(
        state_dir=tmp_path / "state",
        slot_seconds=1.0,
        listen="127.0.0.1:0",
        users=(("alice", "tok-alice"), ("bob", "tok-bob")),
        **cfg_kw,  # type: ignore[arg-type]
    )
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.planner.nodes = list(NODES)
    alloc.planner.placer = BuddyPlacer(Topology(2, 4))
    alloc.start(port=0)
    return alloc


@pytest.fixture
def daemon(tmp_path):
    alloc = _daemon(tmp_path)
    yield alloc
    alloc.stop()


def _wait_gpus(client: AllocatorClient, name: str, gpus: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if client.job(name)["gpus"] == gpus:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never got {gpus} GPUs: {client.job(name)}")


def test_operator_scales_and_gives_back(daemon):
    op = AllocatorClient(daemon.url, daemon.token, timeout=10)
    alice = AllocatorClient(daemon.url, "tok-alice", timeout=10)
    alice.submit(spec("a"))
    _wait_gpus(op, "a", 8)
    detail = op.scale("a", 2)
    assert detail["pin"]["gpus"] == 2
    _wait_gpus(op, "a", 2)
    op.scale("a", None)
    _wait_gpus(op, "a", 8)
    kinds = [e["kind"] for e in op.job("a")["events"]]
    assert "scale_requested" in kinds
    assert "scale_auto" in kinds


def test_owners_may_not_scale_by_default_nor_migrate_or_drain(daemon):
    alice = AllocatorClient(daemon.url, "tok-alice", timeout=10)
    alice.submit(spec("a"))
    for call in (
        lambda: alice.scale("a", 2),
        lambda: alice.migrate("a", "n1"),
        lambda: alice.drain("n0"),
        lambda: alice.undrain("n0"),
    ):
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.status == 403
    assert daemon.planner.ops.pins == {}
    assert daemon.planner.ops.drained == {}


def test_owners_may_scale_their_own_jobs_when_allowed(tmp_path):
    alloc = _daemon(tmp_path, owners_may_scale=True)
    try:
        alice = AllocatorClient(alloc.url, "tok-alice", timeout=10)
        bob = AllocatorClient(alloc.url, "tok-bob", timeout=10)
        alice.submit(spec("a", max_gpus=4))
        assert alice.scale("a", 2)["pin"]["gpus"] == 2
        with pytest.raises(ClientError) as err:
            bob.scale("a", 1)
        assert err.value.status == 403
        with pytest.raises(ClientError) as err:
            alice.scale("a", 8)  # outside its bounds, as for anyone
        assert err.value.status == 400
        assert "outside the job's bounds" in str(err.value)
    finally:
        alloc.stop()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/jobs/a/scale", {"gpus": "two"}, "gpus"),
        ("/api/v1/jobs/a/scale", {}, "gpus"),
        ("/api/v1/jobs/a/scale", {"gpus": 3}, "gpus"),
        ("/api/v1/jobs/a/migrate", {}, "node"),
        ("/api/v1/jobs/a/migrate", {"node": "n9"}, "node"),
        ("/api/v1/nodes/n0/drain", {"force": "yes"}, "force"),
        ("/api/v1/nodes/n9/drain", {}, "node"),
    ],
)
def test_bad_requests_name_the_field(daemon, path, body, field):
    op = AllocatorClient(daemon.url, daemon.token, timeout=10)
    op.submit(spec("a"))
    _wait_gpus(op, "a", 8)
    with pytest.raises(ClientError) as err:
        op._call("POST", path, body)
    assert err.value.status in (400, 404, 409)
    assert err.value.body is not None
    assert err.value.body.get("field") == field, err.value.body


def test_cli_drain_waits_until_empty_and_undrain_reopens(daemon):
    op = AllocatorClient(daemon.url, daemon.token, timeout=10)
    op.submit(spec("a", max_gpus=4))
    op.submit(spec("b", max_gpus=4))
    _wait_gpus(op, "a", 4)
    _wait_gpus(op, "b", 4)
    runner = CliRunner()
    args = ["--url", daemon.url, "--token", daemon.token]
    out = runner.invoke(main, ["drain", "n1", "--timeout", "20", "--interval", "0.2", *args])
    assert out.exit_code == 0, out.output
    assert "node/n1 cordoned" in out.output
    assert "node/n1 drained" in out.output
    nodes = {n["name"]: n for n in op.nodes()}
    assert nodes["n1"]["status"] == "Drained"
    assert nodes["n1"]["jobs"] == []
    assert nodes["n0"]["used"] == 4
    table = runner.invoke(main, ["nodes", *args])
    assert table.exit_code == 0, table.output
    assert "SchedulingDisabled" in table.output
    out = runner.invoke(main, ["undrain", "n1", *args])
    assert out.exit_code == 0
    assert "uncordoned" in out.output
    _wait_gpus(op, "a", 4)
    _wait_gpus(op, "b", 4)
    as_json = json.loads(runner.invoke(main, ["nodes", "-o", "json", *args]).output)
    assert {n["status"] for n in as_json} == {"Ready"}


def test_cli_scale_and_migrate(daemon):
    op = AllocatorClient(daemon.url, daemon.token, timeout=10)
    op.submit(spec("a", max_gpus=2))
    _wait_gpus(op, "a", 2)
    runner = CliRunner()
    args = ["--url", daemon.url, "--token", daemon.token]
    bad = runner.invoke(main, ["scale", "a", *args])
    assert bad.exit_code != 0
    assert "exactly one of --gpus N and --auto" in bad.output
    out = runner.invoke(main, ["scale", "a", "--gpus", "1", *args])
    assert out.exit_code == 0, out.output
    _wait_gpus(op, "a", 1)
    src = {n for n, _ in op.job("a")["placement"]}
    dst = "n1" if src == {0} else "n0"
    out = runner.invoke(main, ["migrate", "a", "--to", dst, *args])
    assert out.exit_code == 0, out.output
    want = [n for n, _ in NODES].index(dst)
    end = time.monotonic() + 15
    while {n for n, _ in op.job("a")["placement"]} != {want}:
        assert time.monotonic() < end, op.job("a")
        time.sleep(0.1)
    runner.invoke(main, ["scale", "a", "--gpus", "1", *args])
    daemon._left("a", "n1" if dst == "n1" else "n0", ("0",), "straggler")
    described = runner.invoke(main, ["job", "a", *args])
    assert "(held at 1 by operator)" in described.output
    assert "Avoided:" in described.output
    assert "migrated" in described.output
    assert "scale_requested" in described.output


def test_only_a_straggler_makes_the_daemon_avoid_gpus(daemon):
    op = AllocatorClient(daemon.url, daemon.token, timeout=10)
    op.submit(spec("a", max_gpus=2))
    _wait_gpus(op, "a", 2)
    daemon._left("a", "n0", ("1",), "signal")  # told to leave: the GPU is fine
    assert daemon.planner.ops.avoid == []
    daemon._left("a", "n0", ("1",), "straggler")  # no inventory here: ids are indices
    (avoided,) = daemon.planner.ops.avoid
    assert (avoided.node, avoided.gpu, avoided.job) == ("n0", 1, "a")
    assert avoided.until > time.time() + daemon.cfg.straggler_avoid_seconds - 60
    assert op.job("a")["avoided"][0]["gpu"] == 1


def test_a_stragglers_gpu_uuids_become_placement_indices(tmp_path):
    """Containers carry GPU UUIDs (their ``flowcon.gpus`` label); placement counts GPUs by
    index on the node: the daemon translates them with the inventory."""
    from flowcon.engine.gpus import discover

    inv = discover({"declared": {"nodes": [{"name": "n0", "gpus": 4}, {"name": "n1", "gpus": 4}]}})
    alloc = _daemon(tmp_path)
    try:

        class Target:
            inventory = inv

        alloc.target = Target()  # type: ignore[assignment]
        uuid = inv.node("n1").uuids([2])[0]
        assert alloc._gpu_indices("n1", (uuid, "GPU-unknown")) == ("2",)
        assert alloc._gpu_indices("n9", (uuid,)) == ()
        alloc.target = None
    finally:
        alloc.stop()
