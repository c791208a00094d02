"""A step whose gradient all-reduce failed is not reported (found by the ``kill -9`` test).

Found by the engine test ``test_a_killed_worker_container_is_replaced_while_the_job_goes_on``
(intermittent): the worker container was killed while rank 0 was in step 3's all-reduce.
The communication hook marks the failure instead of raising into ``backward``, so the
script went on and printed step 3; the loop then recovered from the snapshot after step 2
and yielded step 3 again, which was printed a second time, while the ``recovered`` event
said ``lost_steps`` 0 (no completed step was rolled back).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.no_store import NoStore

torch = pytest.importorskip("torch")

import flowcon.elastic.restart as restart  # noqa: E402
from flowcon.elastic.restart import ElasticEnv  # noqa: E402
from flowcon.elastic.stopfree import StopFree  # noqa: E402


def _run(tmp_path: Path) -> StopFree:
    run = StopFree(
        ElasticEnv(global_batch_size=4, iterations=5, checkpoint_dir=tmp_path),
        store=NoStore(),
        worker_id="w",
        straggler=None,
        checkpoint_every=100,
        install_signal_handlers=False,
    )
    run._boundary = lambda *a: "go"  # type: ignore[method-assign]
    run._checkpoint = lambda step, extra: None  # type: ignore[method-assign]
    run._mark_done = lambda total: None  # type: ignore[method-assign]
    return run


def test_the_failed_step_is_printed_once_when_it_is_redone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    recoveries: list[int] = []

    def recover() -> int:  # what StopFree._recover does to the loop: back to the snapshot
        run.comm.failed = None
        step, snap = run._snaps[-1]
        recoveries.append(step)
        return run._restore(snap, copy=True)

    run._recover = recover  # type: ignore[method-assign]
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    yielded: list[int] = []
    for step in run.steps(run.wrap(model), opt, 5):
        yielded.append(step)
        if step == 3 and yielded.count(3) == 1:
            run.comm.failed = RuntimeError("peer died")  # as the hook marks it
        run.report(step=step, loss=0.5)
    assert yielded == [1, 2, 3, 3, 4, 5]
    assert recoveries == [2]  # nothing completed was rolled back: lost_steps 0
    steps = [json.loads(line)["step"] for line in capsys.readouterr().out.splitlines()]
    assert steps == [1, 2, 3, 4, 5]


def test_events_are_still_reported_while_a_failure_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path)
    run.comm.failed = RuntimeError("peer died")
    lines: list[dict[str, Any]] = []

    def capture(**m: Any) -> str:
        lines.append(m)
        return ""

    monkeypatch.setattr(restart, "_report", capture)
    run.report(step=7, event="preempted")
    run.report(step=8, loss=0.1)
    assert [m["step"] for m in lines] == [7]
