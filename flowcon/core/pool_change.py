"""Algorithm 2 of the paper: how the container pool changed between two looks."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from flowcon.core.lists import ListName


@dataclass(frozen=True)
class PoolChange:
    new: frozenset[str]
    finished: frozenset[str]

    @property
    def changed(self) -> bool:
        return bool(self.new or self.finished)


def pool_change(known: Set[str], present: Set[str]) -> PoolChange:
    """Lines 2-7 and 10-11: containers on the worker in no list, and listed ones gone."""
    return PoolChange(frozenset(present - known), frozenset(known - present))


def apply_change(lists: Mapping[str, ListName], change: PoolChange) -> dict[str, ListName]:
    """New containers join NL (line 7); finished ones leave every list (lines 12-14)."""
    out = {cid: lst for cid, lst in lists.items() if cid not in change.finished}
    for cid in change.new:
        out.setdefault(cid, ListName.NL)
    return out
