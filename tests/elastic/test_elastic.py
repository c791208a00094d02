"""flowcon.elastic on the host: env, sharding, checkpoint/resume, SIGTERM, a gloo DDP run."""

from __future__ import annotations

import functools
import json
import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from flowcon import elastic  # noqa: E402
from flowcon.elastic import ElasticEnv, load_checkpoint, shard  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "images" / "elastic-example" / "train.py"


def test_env_from_executor_variables() -> None:
    env = ElasticEnv.from_env(
        {
            "WORLD_SIZE": "3",
            "RANK": "2",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "m",
            "MASTER_PORT": "1234",
            "FLOWCON_GLOBAL_BATCH_SIZE": "100",
            "FLOWCON_ITERATIONS": "50",
            "FLOWCON_CHECKPOINT_DIR": "/ck",
            "FLOWCON_GPUS": "a,b",
        }
    )
    assert (env.world_size, env.rank, env.node_rank, env.master_port) == (3, 2, 1, 1234)
    assert env.iterations == 50
    assert env.gpus == ("a", "b")
    assert env.checkpoint_dir == Path("/ck")
    assert not env.worker
    # local shares add up to the global batch at every world size
    for world in (1, 2, 3, 7):
        shares = [
            ElasticEnv(world_size=world, rank=r, global_batch_size=100).local_batch_size
            for r in range(world)
        ]
        assert sum(shares) == 100
        assert max(shares) - min(shares) <= 1
    with pytest.raises(ValueError, match="RANK"):
        ElasticEnv.from_env({"WORLD_SIZE": "2", "RANK": "2"})
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        ElasticEnv.from_env({"WORLD_SIZE": "two"})


def test_shard_is_a_disjoint_cover() -> None:
    items = list(range(10))
    parts = [list(shard(items, r, 3)) for r in range(3)]
    assert sorted(functools.reduce(operator.iadd, parts, [])) == items
    assert parts[0] == [0, 3, 6, 9]
    with pytest.raises(ValueError, match="outside world size"):
        shard(items, 3, 3)


def _run(tmp: Path) -> elastic.Elastic:
    e = ElasticEnv(checkpoint_dir=tmp, iterations=10, global_batch_size=8)
    return elastic.Elastic(e, checkpoint_every=3, install_signal_handlers=False)


def test_checkpoint_resume_continues_step_counter(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen = []
    for step in run.steps(model, opt):
        seen.append(step)
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        if step == 4:
            run.stop_requested = True  # what SIGTERM does
    assert seen == [1, 2, 3, 4]
    assert run.preempted
    assert run.exit_code == elastic.EXIT_PREEMPTED
    state = load_checkpoint(tmp_path)
    assert state is not None
    assert state["step"] == 4  # checkpoint at the stop, not just at 3
    assert state["optimizer"]["state"]  # momentum buffers saved

    run2 = _run(tmp_path)
    model2 = torch.nn.Linear(2, 1)
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    seen2 = list(run2.steps(model2, opt2))
    assert seen2 == list(range(5, 11))
    assert run2.finished
    assert run2.exit_code == 0
    assert (tmp_path / elastic.DONE_FILE).read_text().strip() == "10"
    assert load_checkpoint(tmp_path)["step"] == 10  # type: ignore[index]
    # a third run has nothing left to do
    run3 = _run(tmp_path)
    assert list(run3.steps(torch.nn.Linear(2, 1), None)) == []
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    events = [(x["step"], x["event"]) for x in lines]
    assert events == [(4, "preempted"), (10, "done"), (10, "done")]


def test_resume_loads_model_weights(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    elastic.save_checkpoint(tmp_path, {"step": 7, "model": model.state_dict(), "optimizer": None})
    run = _run(tmp_path)
    fresh = torch.nn.Linear(3, 1)
    assert run.resume(fresh, None) == 7
    assert torch.equal(fresh.weight, model.weight)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temp file


def _python_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWCON_", "WORLD", "RANK"))}
    env.pop("LOCAL_RANK", None)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _steps(out: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def test_sigterm_checkpoints_and_exits_143(tmp_path: Path) -> None:
    env = _python_env(
        FLOWCON_CHECKPOINT_DIR=str(tmp_path),
        FLOWCON_ITERATIONS="100000",
        FLOWCON_GLOBAL_BATCH_SIZE="16",
        FLOWCON_CHECKPOINT_EVERY="1000000",  # so only SIGTERM writes a checkpoint
        STEP_SLEEP="0.02",
    )
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{") and json.loads(line).get("step", 0) >= 3:
            break
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == elastic.EXIT_PREEMPTED
    assert time.monotonic() - t0 < 10
    last = _steps(rest)[-1]
    assert last["event"] == "preempted"
    state = load_checkpoint(tmp_path)
    assert state is not None
    assert state["step"] == last["step"] >= 3


@pytest.mark.slow
def test_gloo_world_size_two_then_resume_on_one(tmp_path: Path) -> None:
    """Two local workers (LOCAL_WORLD_SIZE=2, spawned like torchrun), stop, resume on one."""
    common = {
        "FLOWCON_CHECKPOINT_DIR": str(tmp_path),
        "FLOWCON_GLOBAL_BATCH_SIZE": "16",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(29000 + os.getpid() % 1000),
    }
    two = _python_env(
        WORLD_SIZE="2", RANK="0", LOCAL_WORLD_SIZE="2", FLOWCON_ITERATIONS="6", **common
    )
    out = subprocess.run(
        [sys.executable, str(TRAIN)], env=two, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = _steps(out.stdout)
    assert [x["step"] for x in lines if "loss" in x] == [1, 2, 3, 4, 5, 6]  # rank 0 reports
    assert all(x["world_size"] == 2 and x["local_batch"] == 8 for x in lines if "loss" in x)
    assert load_checkpoint(tmp_path)["step"] == 6  # type: ignore[index]
    # scale down to one worker with more iterations: the counter continues at 7
    one = _python_env(FLOWCON_ITERATIONS="8", **common)
    out1 = subprocess.run(
        [sys.executable, str(TRAIN)], env=one, capture_output=True, text=True, timeout=60
    )
    assert out1.returncode == 0, out1.stderr[-2000:]
    steps = [x for x in _steps(out1.stdout) if "loss" in x]
    assert [x["step"] for x in steps] == [7, 8]
    assert steps[0]["local_batch"] == 16
