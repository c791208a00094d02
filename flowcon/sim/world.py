"""The world a simulation runs in: decision timing, what a rescale costs, when a job counts
as meeting its deadline, and whether arrivals are admitted one by one or as a batch.

- ``ours`` (default): decisions on an absolute slot grid; a job pays ``overhead`` seconds
  each time it is started, rescaled or migrated, whatever the policy.
- ``published``: the world of the published ElasticFlow simulator (pkusys/ElasticFlow),
  read from its code: an event is handled at its own time unless it falls within one slot
  of the last decision (then at last decision + slot); per-policy overheads (ElasticFlow:
  every running job at every scheduling event, 2 s if the GPU ranks it gets in that
  simulator's layout (``flowcon.sim.published_layout``) were used before since the last
  periodic restart, else 2 + 2 (log2 n + 1) s, plus 27 s at every 60th event; 7 s and
  47 s on clusters of 256+ GPUs; EDF: none); its deadline check compares the end time
  *without* the last interval's overhead; arrivals handled together are admitted or
  declined together (policies that implement ``on_submit_batch``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from flowcon.sim.published_layout import RankKey

SLOT = 60  # the published simulator's scheduling slot; also its restart period in events


def published_overhead(num_gpu: int, restart: bool, total_gpus: int) -> float:
    """Seconds one (re)start costs in the published world: 2 s (7 s on 256+ GPUs) plus
    2 (log2 n + 1) s; every ``SLOT``-th scheduling event restarts everything for 27 s more
    (47 s on 256+ GPUs)."""
    big = total_gpus >= 256
    o = 7.0 if big else 2.0
    if restart:
        o += 47.0 if big else 27.0
    return o + (math.log2(num_gpu) + 1) * 2 if num_gpu > 0 else o


@dataclass(frozen=True)
class World:
    name: str
    published_timing: bool = False
    charge_every_event: bool = False  # overhead on every running job at every decision
    charge_changes: bool = True  # overhead on a start / rescale / migration
    deadline_without_last_overhead: bool = False
    batch_admission: bool = False

    def event_overhead(self, gpus: int, restart: bool, reused: bool, total_gpus: int) -> float:
        """The published ElasticFlow per-event charge of one running job."""
        if reused:  # its "in cache" check comes before the restart surcharge
            return 7.0 if total_gpus >= 256 else 2.0
        return published_overhead(gpus, restart, total_gpus)

    def event_charges(
        self,
        jobs: Mapping[str, tuple[int, RankKey | None]],
        cache: set[RankKey],
        restart: bool,
        total_gpus: int,
    ) -> dict[str, float]:
        """One scheduling event's charges in the published world: ``jobs`` maps each
        running job to (GPUs, its rank key in the published layout, None if it has
        none). A job whose key is in ``cache`` (keys recorded since the last periodic
        restart) pays the base charge only; every key is then recorded, and a restart
        empties the cache after this event's charges (as the published simulator checks
        its cache while logging the layout, before it restarts)."""
        out: dict[str, float] = {}
        for jid, (gpus, key) in jobs.items():
            reused = key is not None and key in cache
            if key is not None:
                cache.add(key)
            out[jid] = self.event_overhead(gpus, restart, reused, total_gpus)
        if restart:
            cache.clear()
        return out

    @staticmethod
    def restart_period() -> int:
        return SLOT


OURS = World("ours")


def published_world(policy: str) -> World:
    """The published simulator's world for ``policy`` (its overhead model differs by
    policy: ElasticFlow pays at every event, EDF nothing)."""
    every = policy.startswith("elasticflow")
    return World(
        "published",
        published_timing=True,
        charge_every_event=every,
        charge_changes=False,
        deadline_without_last_overhead=True,
        batch_admission=True,
    )
