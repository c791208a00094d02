"""The rules a driver of a ``Policy`` (flowcon/alloc/types.py) shares with the other one:
the simulator (flowcon/sim/engine.py) and the live allocator's planner
(flowcon/allocator/planner.py) decide on the same absolute slot grid and call a decision a
slot tick by the same rule, so the live allocator makes the simulator's decisions. Pure.

What each keeps to itself (and why the two are not one function):

- progress between decisions: the simulator starts a job's progress after the overhead
  its rescale costs (``busy_until``) and ends it at the exact finish time within 1e-9 s;
  the planner charges no overhead (the job's measured progress corrects it) and caps the
  estimate at the job's iterations;
- the next decision: the simulator also waits for the next arrival and, when nothing is
  later than now, decides one slot later (it decides on the grid only); the planner, whose
  ``now`` may fall between boundaries, takes the next boundary first.
"""

from __future__ import annotations

import math


def slot_boundary(t: float, slot: float) -> float:
    """First slot boundary >= t on the absolute grid (slot k starts at k * slot)."""
    return math.ceil(t / slot - 1e-9) * slot


def is_tick(*, completed: bool, event: bool) -> bool:
    """A decision only because time passed (the slot grid or the policy's wakeup): no job
    completed and no other event (arrival, cancel, refined curve, forced re-plan) is due.
    ``ClusterState.tick``; a sticky policy may keep its allocation on a tick."""
    return not completed and not event
