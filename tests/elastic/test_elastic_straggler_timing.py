"""The step time a stop-free worker votes is its own work (EDL section 5.2).

Found by the engine straggler test (tests/executor/test_stopfree_straggler_engine.py): with
the job's checkpoints every 5 steps, a worker at ``--cpus 0.2`` was never removed. The
checkpoint inside the measured window gathers every rank's RNG state, so at each checkpoint
the fast ranks waited for the straggler there, voted its time, and its streak of 10 slow
steps restarted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support.no_store import NoStore

torch = pytest.importorskip("torch")

from flowcon.elastic.restart import ElasticEnv  # noqa: E402
from flowcon.elastic.stopfree import StopFree  # noqa: E402
from flowcon.elastic.straggler import StragglerDetector  # noqa: E402

WAIT_S = 0.2  # a checkpoint's gather waiting for a slow peer


def test_a_checkpoint_is_not_counted_in_the_voted_step_time(tmp_path: Path) -> None:
    run = StopFree(
        ElasticEnv(global_batch_size=4, iterations=6, checkpoint_dir=tmp_path),
        store=NoStore(),
        worker_id="w",
        straggler=StragglerDetector(),
        checkpoint_every=2,
        install_signal_handlers=False,
    )
    voted: list[float] = []
    checkpoints: list[int] = []

    def boundary(step: int, took: float, *rest: Any) -> str:
        voted.append(took)
        return "go"

    def checkpoint(step: int, extra: Any) -> None:
        checkpoints.append(step)
        time.sleep(WAIT_S)

    run._boundary = boundary  # type: ignore[assignment, method-assign]
    run._checkpoint = checkpoint  # type: ignore[method-assign]
    run._mark_done = lambda total: None  # type: ignore[method-assign]
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in run.steps(run.wrap(model), opt, 6):
        pass
    assert checkpoints == [2, 4, 6]  # after steps 2 and 4, and the final one
    # a vote before each step (the first at step 0); those after steps 2 and 4 follow a
    # checkpoint
    assert len(voted) == 6, voted
    assert max(voted) < WAIT_S / 2, voted
