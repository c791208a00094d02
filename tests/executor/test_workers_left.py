"""The allocator is told when a stop-free worker leaves on its own ("the
allocator is told (an event on the job and a metric), so it can re-place that share
elsewhere"; EDL section 5.2, shared/papers/edl.txt): the reason read from the container's
last lines, the ``worker_left`` event with it, ``flowcon_allocator_workers_left_total``."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_stopfree_exec import launched

from flowcon import contract
from flowcon.allocator.metrics import AllocatorMetrics
from flowcon.allocator.store import JobRecord, Store
from flowcon.allocator.target import ExecutorTarget
from flowcon.executor.reconcile import ReconcileEvent
from flowcon.executor.stopfree_plan import left_reason
from flowcon.jobspec.spec import JobSpec


def _store(tmp_path: Path) -> Store:
    """A store where job ``sf`` runs (poll leaves containers of unknown jobs alone)."""
    store = Store(tmp_path / "s.db")
    store.put_job(
        JobRecord(
            "sf",
            JobSpec("sf", "flowcon/testbox:latest", ("true",), 1, 100, 1.0),
            "running",
            1.0,
            None,
            False,
            100.0,
            0.0,
            None,
            {},
            gpus=3,
        )
    )
    return store


def _left(reason: str) -> str:
    return json.dumps({"event": "left", "worker": "w/0", "step": 9, "reason": reason})


def test_left_reason_is_that_of_the_last_left_line() -> None:
    assert left_reason([_left("straggler")]) == "straggler"
    assert left_reason(["noise", '{"step": 3}', _left("signal"), "bye"]) == "signal"
    assert left_reason([_left("signal"), _left("withdrawn")]) == "withdrawn"
    assert left_reason([]) == "unknown"
    assert left_reason(["{not json", '{"event": "left"}']) == "unknown"
    assert left_reason([_left("because")]) == "unknown"  # not one of the runtime's


def _counts(m: AllocatorMetrics) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    fam = fams["flowcon_allocator_workers_left"]
    assert fam.type == "counter"
    return {s.labels["reason"]: s.value for s in fam.samples if s.name.endswith("_total")}


def test_a_straggler_that_left_is_an_event_with_its_reason_and_a_count(tmp_path: Path) -> None:
    be, ex, _ = launched(3)
    gone = be.workers[2]
    gone.state, gone.exit_code = "exited", contract.EXIT_LEFT
    be.output[gone.name] = ['{"event": "launcher_started"}', _left("straggler")]
    store = _store(tmp_path)
    try:
        metrics = AllocatorMetrics(store, 8)
        assert _counts(metrics) == {}
        target = ExecutorTarget(ex, None)  # type: ignore[arg-type]
        assert target.poll(store, metrics) == []  # the job goes on: nothing ended
        store_events = store.events(kind="worker_left")
        assert [(e.job, e.data) for e in store_events] == [
            ("sf", {"container": gone.name, "reason": "straggler"})
        ]
        assert _counts(metrics) == {"straggler": 1.0}
        assert gone.name in be.removed  # removed after its reason was read
        # one that left without a line saying why (logs gone, another runtime)
        other = be.workers[1]
        other.state, other.exit_code = "exited", contract.EXIT_LEFT
        assert ex.reconcile() == [
            ReconcileEvent("sf", "left", other.name, "unknown", other.node, other.gpus)
        ]
    finally:
        store.close()


def test_poll_without_metrics_still_stores_the_event(tmp_path: Path) -> None:
    be, ex, _ = launched(2)
    gone = be.workers[1]
    gone.state, gone.exit_code = "exited", contract.EXIT_LEFT
    be.output[gone.name] = [_left("signal")]
    store = _store(tmp_path)
    try:
        ExecutorTarget(ex, None).poll(store)  # type: ignore[arg-type]
        (ev,) = store.events(kind="worker_left")
        assert ev.data == {"container": gone.name, "reason": "signal"}
    finally:
        store.close()


def test_a_stragglers_gpus_are_told_to_the_allocator(tmp_path: Path) -> None:
    """``poll(on_left=...)`` hears the node and the GPU ids the straggler held: the daemon
    keeps placement off them (flowcon.allocator.elasticity)."""
    be, ex, _ = launched(3)
    gone = be.workers[2]
    gone.state, gone.exit_code = "exited", contract.EXIT_LEFT
    be.output[gone.name] = [_left("straggler")]
    store = _store(tmp_path)
    heard: list[tuple[str, str, tuple[str, ...], str]] = []
    try:
        target = ExecutorTarget(ex, None)  # type: ignore[arg-type]
        target.poll(store, on_left=lambda *a: heard.append(a))
        assert heard == [("sf", gone.node, tuple(gone.gpus), "straggler")]
        assert gone.node
        assert gone.gpus
    finally:
        store.close()
