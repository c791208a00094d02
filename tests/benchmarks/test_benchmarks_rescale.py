"""benchmarks/bench_rescale.py without an engine: the gap and exactly-once measurement and
the report's last JSON line (tests/benchmarks/test_benchmarks_rescale_engine.py runs it)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_rescale as bench


def jl(step: int, ts: float, world: int | None = None, **extra: object) -> str:
    obj: dict[str, object] = {"step": step, "ts": ts, **extra}
    if world is not None:
        obj["world_size"] = world
    return json.dumps(obj)


def test_gap_by_world_size_and_by_new_container() -> None:
    old = bench.parse_lines("a", [jl(1, 1.0, 1), jl(2, 2.0, 1), '{"event":"x","ts":2.5}'])
    new = bench.parse_lines("a", [jl(3, 4.5, 2), jl(4, 5.0, 2)])
    lines = sorted(old + new, key=lambda ln: ln.ts)
    prev, first = bench.event_gap(lines, 1.5, 2, set())  # type: ignore[misc]
    assert (prev.step, first.step, first.ts - prev.ts) == (2, 3, 2.5)
    assert bench.event_gap(lines, 1.5, 4, set()) is None
    # lines without a world size (a shell job): the first line of a new container
    shell = bench.parse_lines("old", [jl(1, 1.0), jl(2, 2.0)]) + bench.parse_lines(
        "new", [jl(3, 3.5)]
    )
    prev, first = bench.event_gap(shell, 1.5, 2, {"new"})  # type: ignore[misc]
    assert (prev.step, first.step) == (2, 3)


def test_exactly_once_needs_recorded_ids() -> None:
    assert bench.exactly_once(bench.parse_lines("a", [jl(1, 1.0, 1)])) is None
    good = [
        jl(1, 1.0, 1, epoch=0, sample_ids=[2, 3]),
        jl(2, 2.0, 2, epoch=1, sample_ids=[3, 0]),
        jl(3, 3.0, 2, epoch=1, sample_ids=[1, 2]),
        jl(4, 4.0, 2, epoch=2, sample_ids=[1]),
    ]
    assert bench.exactly_once(bench.parse_lines("a", good)) is True
    twice = [*good[:2], jl(3, 3.0, 2, epoch=1, sample_ids=[3, 2]), *good[3:]]
    assert bench.exactly_once(bench.parse_lines("a", twice)) is False
    repeated = [*good[:3], jl(3, 3.5, 2, epoch=1, sample_ids=[1, 2]), good[3]]
    assert bench.exactly_once(bench.parse_lines("a", repeated)) is False  # step 3 twice
    missing = [*good[:2], jl(3, 3.0, 2, epoch=1, sample_ids=[1]), *good[3:]]
    assert bench.exactly_once(bench.parse_lines("a", missing)) is False


def test_report_last_line_is_json_with_both_modes(capsys: pytest.CaptureFixture[str]) -> None:
    Row = bench.Row
    rows = {
        "restart": [
            Row("restart", 1, 2, 0.4, 0.3, 5.0, 4.0, 10, 11, None),
            Row("restart", 2, 1, 0.4, 0.3, 7.0, 6.0, 20, 21, None),
        ],
        "stopfree": [
            Row("stopfree", 1, 2, 0.0, 0.3, 0.5, 3.0, 30, 31, None),
            Row("stopfree", 2, 1, 0.1, 0.0, 0.25, 0.1, 40, 41, None),
        ],
    }
    assert bench.report("img", 30.0, rows, {"restart": [], "stopfree": []}) == 0
    out = capsys.readouterr().out.splitlines()
    last = json.loads(out[-1])
    assert last["restart_gap_p95_s"] == 7.0
    assert last["stopfree_gap_p95_s"] == 0.5
    assert last["events"] == {"restart": 2, "stopfree": 2}
    assert last["exactly_once"] is False  # the job recorded no sample ids
    assert any("not recorded by the job" in ln for ln in out)


def test_joined_prepare_reads_the_joiners_event() -> None:
    lines = [jl(5, 1.0, 1), '{"event":"joined","prepare_s":1.25,"ts":2.0}', "noise {"]
    assert bench.joined_prepare(lines) == 1.25
    assert bench.joined_prepare([jl(5, 1.0, 1)]) is None


def test_kept_lines_belong_to_their_job() -> None:
    """The restart mode's removed containers' lines were counted in the stop-free job's
    (every step twice: exactly-once came out false)."""

    class NoJob:
        def job(self, name: str) -> None:
            return None

    be = bench.KeepingBackend(object())
    be.kept = {"c1": ("bench-a", [jl(1, 1.0, 1)]), "c2": ("bench-a-st", [jl(1, 5.0, 1)])}
    lines = bench.job_lines(NoJob(), be, "bench-a-st")  # type: ignore[arg-type]
    assert [(ln.cid, ln.step) for ln in lines] == [("c2", 1)]


def test_settle_gap_spans_both_switches_of_a_move() -> None:
    """A migration 2 -> 4 -> 2: the gap is the longest pause up to the first line at 2
    after the size was another; lines at 2 before the join do not end it."""
    lines = bench.parse_lines(
        "a",
        [jl(1, 1.0, 2), jl(2, 2.0, 2), jl(3, 3.5, 2), jl(4, 4.0, 4), jl(5, 6.5, 2)],
    )
    prev, first = bench.settle_gap(lines, 1.5, 2)  # type: ignore[misc]
    assert (prev.step, first.step, first.ts - prev.ts) == (4, 5, 2.5)
    assert bench.settle_gap(lines[:4], 1.5, 2) is None  # not back at 2 yet
    # a scale-in 2 -> 1 (the coordinator's container leaves): the first line at 1
    shrink = bench.parse_lines("a", [jl(1, 1.0, 2), jl(2, 2.0, 1), jl(3, 2.1, 1)])
    prev, first = bench.settle_gap(shrink, 1.5, 1)  # type: ignore[misc]
    assert (prev.step, first.step) == (1, 2)


def test_move_modes_report_their_gaps_against_the_same_runs_restart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Row = bench.Row
    rows = {
        "restart": [Row("restart", 1, 2, 0.4, 0.3, 8.0, 4.0, 10, 11, None)],
        "migrate": [Row("stopfree", 2, 2, 0.1, 0.3, 0.4, 3.0, 30, 31, None, "migrate")],
        "coordinator-leave": [
            Row("stopfree", 2, 1, 0.1, 0.0, 0.2, None, 40, 41, None, "coordinator-leave"),
            Row("stopfree", 1, 2, 0.0, 0.3, 3.0, 3.0, 50, 51, None, "scale-out"),
        ],
    }
    assert bench.report("img", 30.0, rows, {m: [] for m in rows}) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["restart_gap_p95_s"] == 8.0
    assert last["migrate_gap_p95_s"] == 0.4
    assert last["migrate_vs_restart"] == 0.05
    assert last["coordinator_leave_gap_p95_s"] == 0.2  # the scale-out back is not counted
    assert last["coordinator_leave_fallbacks"] == 0
    assert "drain_gap_p95_s" not in last
    assert bench.event_kind("coordinator-leave", 1, 2) == "scale-out"
    assert bench.event_kind("drain", 2, 2) == "drain"
