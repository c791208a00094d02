"""Whether workers that exited 0 finished their job (flowcon/core/completion.py)."""

from __future__ import annotations

from flowcon.core.completion import done_marker, judge


def test_the_marker_is_found_among_other_lines() -> None:
    lines = [
        "start rank=0",
        '{"step": 5, "ts": 1}',
        '{"event": "done"',  # cut short: not a marker
        '{"step": 9, "event": "preempted"}',
        '{"step": 10, "event": "done", "ts": 2}',
    ]
    assert done_marker(lines) == 10
    assert done_marker(['{"event": "done"}']) == 0
    assert done_marker(['{"step": 3, "ts": 1}', "done"]) is None


def test_no_progress_now_from_a_job_that_reported_progress_is_not_a_completion() -> None:
    """After a node restart the manager answered the service's logs with nothing: a job
    that reported step 40 before is not taken at its exit 0."""
    lost = judge(None, None, 100, reported_before=40)
    assert not lost.own
    assert "reported step 40 of 100 before" in lost.why
    quiet = judge(None, None, 100)  # a job that never printed progress: not checkable
    assert quiet.own
    assert quiet.why.startswith("not confirmed")
    assert judge(None, 100, 100, reported_before=40).own
    assert not judge(None, 99.5, 100).own
    assert judge(100, None, 100, reported_before=40).own
