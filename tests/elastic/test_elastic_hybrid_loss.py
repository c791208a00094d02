"""The test "Hybrid scaling on the example job: loss after the same number of samples
within 5% of the fixed-batch run" (Elan III: weak scaling with the progressive linear LR
rule keeps model performance).

images/elastic-example/train.py runs locally under the stop-free launcher with the host's
torch, as in ``test_elastic_stopfree.test_example_job_under_the_stopfree_launcher``:

* fixed: one worker, global batch 16, 2304 steps = 36864 samples (9 epochs of 4096);
* hybrid: one worker at batch 16 until a joiner started with FLOWCON_GLOBAL_BATCH_SIZE=32
  switches in (1 -> 2 workers): from there 32 samples a step and the LR ramps to twice its
  value over FLOWCON_LR_RAMP_STEPS=50 steps (Elan's rule, ``HybridScaling`` in the example).

The example's LR is 0.003 here (env LR): at its default 0.01 the training is at the edge of
stability (two fixed-batch runs with different initial weights differ by up to 50 % in
loss), so no 5 % comparison means anything there; at 0.003 they agree within 1 % after 7
epochs, and a doubled batch without the LR scaling is 24-30 % worse (an in-process replica
of the example, one process for both ranks).

The first worker is paused (SIGSTOP) from about step 20 until the joiner is registered, so
the switch comes early whatever the host's load. Both runs take the same samples in the same
order (``ElasticSampler``: the order is a function of seed and epoch, the position counts
samples). Compared: the sample-weighted mean of ``batch_loss`` (the loss of the whole global
batch, before the step's update) over the last epoch (samples 32768..36864), the same samples
in both runs (256 steps of 16, 128 of 32).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from support import launcher_procs  # noqa: E402

from flowcon import contract  # noqa: E402
from flowcon.elastic import rendezvous as rdv  # noqa: E402
from flowcon.testing.ports import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "images" / "elastic-example" / "train.py"
BATCH, EPOCH, LR = 16, 4096, 0.003
SAMPLES, WINDOW = 9 * EPOCH, EPOCH
FIXED_STEPS, HYBRID_STEPS, PAUSE_AT = SAMPLES // BATCH, 1250, 20


_lines = launcher_procs.json_lines  # complete records only (a poll can cut the last one)


def _env(tmp: Path, iterations: int) -> dict[str, str]:
    port = free_port()
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "FLOWCON_SCALING": "stopfree",
        "FLOWCON_GLOBAL_BATCH_SIZE": str(BATCH),
        "FLOWCON_ITERATIONS": str(iterations),
        "FLOWCON_CHECKPOINT_DIR": str(tmp / "ck"),
        "FLOWCON_ADAPT_THREADS": "0",
        "FLOWCON_LR_RAMP_STEPS": "50",
        "LR": str(LR),
        "OMP_NUM_THREADS": "1",
        contract.ENV_STRAGGLER: "0",
    }


def _start(log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return launcher_procs.start(TRAIN, log, env)


def _until(what: str, cond: Any, procs: dict[str, subprocess.Popen[bytes]], logs: Any) -> None:
    deadline = time.monotonic() + 40
    while not cond():
        dead = {n: p.returncode for n, p in procs.items() if p.poll() not in (None, 0)}
        if dead or time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in logs)
            raise AssertionError(f"waiting for {what}: exited {dead}\n{tails}")
        time.sleep(0.02)


def _worker_pid(launcher: int) -> int:
    """The launcher's one worker process (flowcon.elastic.launcher.launch's child)."""
    (child,) = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    return int(child)


def window_loss(lines: list[dict[str, Any]], end: int, width: int) -> tuple[float, int]:
    """(sample-weighted mean batch loss, samples) of the steps ending in (end - width, end]."""
    steps = {x["step"]: x for x in lines if "batch_loss" in x}  # one line a step (rank 0's)
    total = weight = 0
    for x in steps.values():
        if end - width < x["samples"] <= end:
            n = len(x["sample_ids"])
            total += x["batch_loss"] * n
            weight += n
    return total / weight, weight


def test_hybrid_scaling_keeps_the_loss_of_the_fixed_batch_run(tmp_path: Path) -> None:
    logs = {n: tmp_path / f"{n}.log" for n in ("fixed", "a", "b")}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    fixed_env = _env(tmp_path / "fixed", FIXED_STEPS)
    hybrid_env = _env(tmp_path / "hybrid", HYBRID_STEPS)
    store: Any = None
    try:
        procs["fixed"] = _start(
            logs["fixed"], {**fixed_env, "WORLD_SIZE": "1", "RANK": "0", "FLOWCON_STORE_HOST": "1"}
        )
        procs["a"] = _start(
            logs["a"], {**hybrid_env, "WORLD_SIZE": "1", "RANK": "0", "FLOWCON_STORE_HOST": "1"}
        )
        _until(
            f"step {PAUSE_AT}",
            lambda: any(x.get("step", 0) >= PAUSE_AT for x in _lines(logs["a"])),
            procs,
            logs.values(),
        )
        worker = _worker_pid(procs["a"].pid)
        os.kill(worker, signal.SIGSTOP)  # the launcher keeps serving the store
        try:
            procs["b"] = _start(
                logs["b"],
                {
                    **hybrid_env,
                    "FLOWCON_JOIN": "1",
                    "FLOWCON_TARGET_WORLD": "2",
                    "FLOWCON_GLOBAL_BATCH_SIZE": str(2 * BATCH),
                },
            )
            store = dist.TCPStore(  # type: ignore[attr-defined]
                "127.0.0.1",
                int(hybrid_env["MASTER_PORT"]),
                is_master=False,
                timeout=dt.timedelta(seconds=30),
            )
            _until(
                "the joiner registered",
                lambda: (
                    store.add("flowcon/joiners", 0) >= 1 and rdv.there(store, "flowcon/joiner/1")
                ),
                procs,
                logs.values(),
            )
        finally:
            os.kill(worker, signal.SIGCONT)
        codes = launcher_procs.wait_all(procs, logs, timeout=60)
    finally:
        launcher_procs.kill_all(procs)
    assert codes == {"fixed": 0, "a": 0, "b": 0}, logs["a"].read_text()[-2000:]
    fixed = _lines(logs["fixed"])
    hybrid = _lines(logs["a"]) + _lines(logs["b"])  # rank 0 stays in a (the store host)
    (scaled,) = [x for x in hybrid if x.get("event") == "scaled"]
    switch = scaled["step"]
    assert scaled["world_size"] == 2
    assert scaled["global_batch"] == 2 * BATCH
    assert PAUSE_AT <= switch <= PAUSE_AT + 80, scaled  # early: most samples at batch 32
    by_step = {x["step"]: x for x in hybrid if "batch_loss" in x}
    assert by_step[switch + 1]["local_batch"] == BATCH  # 32 over two workers
    assert by_step[switch + 1]["lr"] == pytest.approx(LR)
    assert by_step[switch + 26]["lr"] == pytest.approx(1.5 * LR)  # half way up the ramp
    assert by_step[switch + 60]["lr"] == pytest.approx(2 * LR)
    assert max(x["samples"] for x in by_step.values()) >= SAMPLES
    assert max(x["samples"] for x in fixed if "samples" in x) == SAMPLES
    f_loss, f_n = window_loss(fixed, SAMPLES, WINDOW)
    h_loss, h_n = window_loss(hybrid, SAMPLES, WINDOW)
    assert f_n == h_n == WINDOW  # the same samples: the whole last epoch
    change = (h_loss / f_loss - 1) * 100
    print(
        f"epoch 9 loss: fixed {f_loss:.5f}, hybrid {h_loss:.5f} ({change:+.1f} %), switch {switch}"
    )
    assert abs(h_loss - f_loss) <= 0.05 * f_loss, (f_loss, h_loss)
