"""Whether workers that exited 0 finished the job (pure).

An exit 0 alone does not say the job is done: a Swarm task ended by its node's restart, an
engine stop or a task shutdown can read as ``complete`` with exit code 0, and reporting such
a job completed loses the work it had not done without a word to its owner. A job is
completed only when it says so itself, from its rank-0 output:

* its completion marker, ``{"step": N, "event": "done"}`` (``flowcon.contract.EVENT_DONE``,
  printed by ``flowcon.elastic`` and by the rate job), or
* its progress: the last step it reported reached its ``iterations``.

A job that never printed a progress line cannot be checked: its exit 0 is taken as its
own, and the reason says it was not confirmed. Anything else is not a completion: progress
short of its iterations and no marker, output that could not be read, or output without
any progress line from a job that did report progress before (after a node restart the
manager can answer a service's logs with nothing). The executor then restarts the job from
its checkpoint, as after a crash (``executor.max_restarts``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from flowcon.contract import EVENT_DONE, LINE_EVENT, LINE_STEP


@dataclass(frozen=True)
class Completion:
    """The verdict on workers that all exited 0: ``own`` (the job finished) and why."""

    own: bool
    why: str


def done_marker(lines: Iterable[str]) -> float | None:
    """The step of the last completion marker among ``lines`` (0 when it has no step), or
    None when there is none."""
    found: float | None = None
    for line in lines:
        text = line.strip()
        if EVENT_DONE not in text or not text.startswith("{"):
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and obj.get(LINE_EVENT) == EVENT_DONE:
            step = obj.get(LINE_STEP)
            found = float(step) if isinstance(step, int | float) and step is not True else 0.0
    return found


def _steps(x: float) -> str:
    return f"{x:g}"


def judge(
    done_step: float | None,
    last_step: float | None,
    iterations: float,
    reported_before: float | None = None,
) -> Completion:
    """The verdict from the job's completion marker (its step, or None), the last step its
    progress lines show (None: no progress line) and the step the job was last seen to
    report by other means (the allocator's record; None: it never reported one)."""
    if done_step is not None:
        return Completion(True, f"the job reported done at step {_steps(done_step)}")
    if last_step is not None and last_step >= iterations:
        return Completion(
            True, f"its progress reached {_steps(last_step)} of {_steps(iterations)} iterations"
        )
    if last_step is None and reported_before is not None:
        return Completion(
            False,
            "its workers exited 0 but its output shows no progress line, though the job"
            f" reported step {_steps(reported_before)} of {_steps(iterations)} before: its"
            " output was lost (a node restart?)",
        )
    if last_step is None:
        return Completion(
            True, "not confirmed: the job printed no progress line and no completion marker"
        )
    return Completion(
        False,
        f"its workers exited 0 at step {_steps(last_step)} of {_steps(iterations)} without the"
        " job's"
        " completion marker (a node restart, an engine stop or a task shutdown ends a task"
        " that way)",
    )


def unreadable(error: str) -> Completion:
    """The verdict when the job's output could not be read."""
    return Completion(False, f"its workers exited 0 but its output could not be read: {error}")
