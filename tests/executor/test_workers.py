"""Pure worker planning and executor helpers: slots, ranks, torchrun environment, the
pre-run's step rate, the backend factory (flowcon/executor/workers.py, profiling.py,
executor_factory.py)."""

from __future__ import annotations

import pytest
from support.swarm_fixtures import step_job_spec

from flowcon.executor.factory import make_executor
from flowcon.executor.profiling import metric_points, step_rate
from flowcon.executor.workers import pack_placement, plan_workers, worker_env


def test_plan_workers_ranks_follow_node_order() -> None:
    slots = plan_workers({"b": ["g0", "g1"], "empty": [], "a": ["g2"]})
    assert [(s.node, s.node_rank, s.first_rank, s.gpus) for s in slots] == [
        ("b", 0, 0, ("g0", "g1")),
        ("a", 1, 2, ("g2",)),
    ]
    with pytest.raises(ValueError, match="no GPU"):
        plan_workers({"a": []})
    with pytest.raises(ValueError, match="repeats"):
        plan_workers({"a": ["x", "x"]})


def test_worker_env_is_torchrun_like() -> None:
    spec = step_job_spec("envjob", global_batch_size=100, env={"LR": "0.1"})
    slots = plan_workers({"n1": ["u0", "u1"], "n2": ["u2"]})
    env = worker_env(spec, slots[1], slots, "master", 29500, checkpoint_every=7)
    assert env["WORLD_SIZE"] == "3"
    assert env["RANK"] == "2"
    assert env["LOCAL_WORLD_SIZE"] == "1"
    assert env["GROUP_RANK"] == "1"
    assert env["FLOWCON_NUM_NODES"] == "2"
    assert env["FLOWCON_LOCAL_BATCH_SIZE"] == "33"
    assert env["FLOWCON_GLOBAL_BATCH_SIZE"] == "100"
    assert env["FLOWCON_GPUS"] == "u2"
    assert env["FLOWCON_PLACEMENT"] == "n1:u0,u1;n2:u2"
    assert env["MASTER_ADDR"] == "master"
    assert env["FLOWCON_CHECKPOINT_EVERY"] == "7"
    assert env["LR"] == "0.1"
    assert "LOCAL_RANK" not in env


def test_pack_placement_prefers_one_node() -> None:
    from flowcon.engine.gpus import Inventory, declared_nodes

    nodes = declared_nodes({"nodes": [{"name": "a", "gpus": 4}, {"name": "b", "gpus": 2}]})
    inv = Inventory(tuple(nodes), "declared")
    assert pack_placement(inv, 2) == {"b": ["FAKE-b-0", "FAKE-b-1"]}  # fullest node that fits
    assert pack_placement(inv, 4) == {"a": [f"FAKE-a-{i}" for i in range(4)]}
    assert pack_placement(inv, 3, busy={"FAKE-a-0"}) == {"a": ["FAKE-a-1", "FAKE-a-2", "FAKE-a-3"]}
    assert pack_placement(inv, 5) == {"a": [f"FAKE-a-{i}" for i in range(4)], "b": ["FAKE-b-0"]}
    assert pack_placement(inv, 7) is None


def test_step_rate_skips_noise_and_first_line() -> None:
    lines = [
        "start",
        '{"step":1,"ts":100.0}',  # start-up line, dropped
        "garbage {",
        '{"step":2,"ts":101.0}',
        '{"step":"x","ts":1}',
        '{"step":6,"ts":103.0}',
        '{"step":6,"event":"preempted","ts":103.5}',
    ]
    rate, n = step_rate(lines)
    assert n == 2
    assert rate == pytest.approx(2.0)
    assert step_rate(['{"step":1,"ts":1}']) == (None, 0)


def test_metric_points_read_through_the_one_parser() -> None:
    lines = [
        '{"step":1,"ts":10.0}',
        '{"step":"2","ts":"11.5"}',  # numbers as strings, as metric_lines reads them
        '{"step":3,"ts":NaN}',
        '{"step":4,"ts":13.0,"event":"checkpoint"}',
        "{not json",
        '{"step":5,"ts":14.0,"loss":0.1}',
    ]
    assert metric_points(lines, skip_first=0) == [(10.0, 1.0), (11.5, 2.0), (14.0, 5.0)]
    assert metric_points(lines) == [(11.5, 2.0), (14.0, 5.0)]
    assert metric_points(lines, skip_first=3) == []


def test_make_executor_picks_the_backend() -> None:
    client = object()  # backends only keep the client until they talk to it
    ex = make_executor({"backend": "engine", "network": "host", "grace_s": 5}, client=client)
    assert ex.backend.kind == "engine"
    assert ex.options.grace_s == 5.0
    assert ex.backend.network == "host"  # type: ignore[attr-defined]
    assert make_executor({"backend": "swarm"}, client=client).backend.kind == "swarm"
    with pytest.raises(ValueError, match="engine' or 'swarm"):
        make_executor({"backend": "k8s"}, client=client)
