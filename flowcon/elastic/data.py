"""Dynamic data pipeline for elastic training: one integer of position, any world size.

EDL (shared/papers/edl.txt, section 4.3) hands data out on demand so that "training goes
over the dataset once in each epoch without repetition and omission regardless of whether
scaling out and in are performed"; Elan (shared/papers/elan.txt, section V.C) gets the same
with *serial data loading*: workers take the data in one global order, so what is left of
an epoch is always one contiguous run and the whole data state is "a single integer, i.e.
the position of the start of the remaining data". This module is Elan's semantics:

- the epoch order is a permutation that is a function of ``(seed, epoch)`` only (nothing
  about the world size, the rank or the history of scale events enters it);
- ``position`` counts the samples the job consumed since the start (``epoch = position //
  size``, ``offset = position % size``); it is the only state and it is the same on every
  rank, so it travels with the replicated training state (``flowcon.elastic.state``);
- the next global batch is ``order(epoch)[offset : offset + global_batch]``, cut short at
  the end of the epoch (a batch never crosses an epoch boundary), and rank ``r`` of ``w``
  takes the ``r``-th of ``w`` contiguous pieces whose sizes differ by at most one.

So after any sequence of world-size and global-batch changes between steps, the union of the
ranks' indices over an epoch is ``range(size)``, each index exactly once.

The permutation: ``random.Random(k).shuffle(list(range(size)))`` with ``k`` the first 8 bytes
of ``sha256("flowcon.elastic.data:{seed}:{epoch}")``; it does not depend on
``PYTHONHASHSEED`` or on the process, and is the same on every machine running the same
CPython (the shuffle algorithm has been stable since Python 3.2, but that is CPython's
practice, not a language promise: run one Python version per job).

Stdlib only: training code turns the indices into tensors itself.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Final

_SEED_TAG: Final = "flowcon.elastic.data"


def share_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[lo, hi)`` of rank ``rank``'s contiguous piece of ``n`` items split ``world_size`` ways.

    The first ``n % world_size`` ranks get one item more, like ``ElasticEnv.local_batch_size``;
    a rank gets nothing when ``n < world_size`` and ``rank >= n``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    if n < 0:
        raise ValueError(f"negative item count {n}")
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def epoch_seed(seed: int, epoch: int) -> int:
    """The integer that seeds ``random.Random`` for ``epoch``'s permutation (see module doc)."""
    digest = hashlib.sha256(f"{_SEED_TAG}:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order of ``range(size)`` in ``epoch``: a function of ``(size, seed, epoch)`` only."""
    order = list(range(size))
    if shuffle:
        random.Random(epoch_seed(seed, epoch)).shuffle(order)
    return order


class ElasticSampler:
    """Exactly-once-per-epoch sample indices for a job whose world size and global batch change.

    Every rank holds one (or a copy of rank 0's ``state_dict()``); each step, each rank calls
    ``batch(global_batch, rank, world_size)`` for its indices, trains, and then every rank calls
    ``advance(global_batch)`` with the same ``global_batch``. Between two steps the world size
    and the global batch may change freely (Elan section V.C, EDL section 4.3).
    """

    def __init__(self, size: int, seed: int = 0, shuffle: bool = True) -> None:
        if size < 1:
            raise ValueError(f"dataset size must be positive, got {size}")
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.position = 0  # samples consumed since the start; the only state
        self._cached: tuple[int, list[int]] | None = None

    # -- where we are

    @property
    def epoch(self) -> int:
        return self.position // self.size

    @property
    def offset(self) -> int:
        """Samples of the current epoch already consumed."""
        return self.position % self.size

    @property
    def remaining(self) -> int:
        """Samples of the current epoch not yet consumed (never 0: a full epoch moves on)."""
        return self.size - self.offset

    def order(self, epoch: int) -> list[int]:
        """The permutation of ``epoch`` (cached for the last epoch asked; do not mutate).

        Building it costs about 0.5 s per million samples on this host's CPU: a joining
        worker calls ``order(epoch)`` while it prepares, so the switch does not pay for it.
        """
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, epoch_order(self.size, self.seed, epoch, self.shuffle))
        return self._cached[1]

    # -- the next step

    def batch_size(self, global_batch: int) -> int:
        """How many samples the next global batch really has (short at the end of an epoch)."""
        if global_batch < 1:
            raise ValueError(f"global batch must be positive, got {global_batch}")
        return min(global_batch, self.remaining)

    def global_batch(self, global_batch: int) -> list[int]:
        """All indices of the next global batch, in rank order."""
        n = self.batch_size(global_batch)
        off = self.offset
        return self.order(self.epoch)[off : off + n]

    def batch(self, global_batch: int, rank: int, world_size: int) -> list[int]:
        """Rank ``rank``'s share of the next global batch (the shares partition it and differ
        by at most one)."""
        n = self.batch_size(global_batch)
        lo, hi = share_bounds(n, rank, world_size)
        off = self.offset
        return self.order(self.epoch)[off + lo : off + hi]

    def local_size(self, global_batch: int, rank: int, world_size: int) -> int:
        """``len(batch(global_batch, rank, world_size))`` without building the list.

        With unequal shares, DDP's average of per-rank mean losses is not the batch mean; the
        sum of a rank's sample losses times ``world_size / batch_size(global_batch)`` is.
        """
        lo, hi = share_bounds(self.batch_size(global_batch), rank, world_size)
        return hi - lo

    def advance(self, global_batch: int) -> int:
        """Move past the global batch ``batch()`` gave out; returns the samples consumed."""
        n = self.batch_size(global_batch)
        self.position += n
        return n

    # -- state

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "size": self.size,
            "seed": self.seed,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the position of another sampler over the same data (same size, seed, order)."""
        for key in ("size", "seed", "shuffle"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state is for {key}={state[key]!r}, this sampler has "
                    f"{key}={getattr(self, key)!r}"
                )
        position = int(state["position"])
        if position < 0:
            raise ValueError(f"negative sampler position {position}")
        self.position = position

    def __repr__(self) -> str:
        return (
            f"ElasticSampler(size={self.size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"position={self.position})"
        )
