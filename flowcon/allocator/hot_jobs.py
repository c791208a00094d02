"""The rows of the jobs a round works on (pending and active), kept in memory.

Every planning round reads every active job and writes the ones it moved; decoding
thousands of SQLite rows three times a round was most of a round at 2,000 jobs. The store
writes through this cache: what a transaction writes is staged here and becomes what every
thread reads when the transaction commits (it is dropped on a rollback), as SQLite shows a
commit to the other connections. Readers take the committed map by reference (replaced,
never changed in place) and get copies: a caller may change the record it was given
without a write reaching anyone else.

The allocator daemon is the store's one writer while it runs (another process writing the
same file is not seen here); terminal jobs are read from SQLite as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar


class _Row(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def submit_time(self) -> float: ...


R = TypeVar("R", bound=_Row)


class HotJobs(Generic[R]):
    """The rows in ``states``, by name, as committed; ``copy`` makes a caller's record."""

    def __init__(self, states: Iterable[str], copy: Callable[[R], R]) -> None:
        self.states = frozenset(states)
        self._copy = copy
        self._committed: dict[str, R] = {}
        # name -> the row written in the open transaction (None: it left the states)
        self._staged: dict[str, R | None] = {}

    def load(self, rows: Iterable[R]) -> None:
        """Start from the rows the database holds (nothing staged)."""
        self._committed = {r.name: self._copy(r) for r in rows if r.state in self.states}
        self._staged = {}

    def write(self, row: R, staged: bool) -> None:
        """``row`` was written; ``staged``: inside a transaction (seen once it commits)."""
        kept = self._copy(row) if row.state in self.states else None
        if staged:
            self._staged[row.name] = kept
            return
        self._committed = _applied(self._committed, {row.name: kept})

    def commit(self) -> None:
        if self._staged:
            self._committed = _applied(self._committed, self._staged)
        self._staged = {}

    def rollback(self) -> None:
        self._staged = {}

    def _view(self, own: bool) -> dict[str, R]:
        """The rows a reader sees: the committed ones, with the open transaction's when
        the reader is the thread writing it (``own``)."""
        committed = self._committed  # one reference: a commit replaces it whole
        if not own or not self._staged:
            return committed
        return _applied(committed, self._staged)

    def get(self, name: str, own: bool) -> R | None:
        row = self._view(own).get(name)
        return None if row is None else self._copy(row)

    def rows(self, states: Iterable[str], own: bool, copies: bool = True) -> list[R]:
        """Copies of the rows in ``states`` (a subset of the hot states), in the order
        ``Store.list_jobs`` gives: by submit time, then name (``copies=False``: the rows
        themselves, for a caller that only reads them)."""
        wanted = frozenset(states)
        got = [r for r in self._view(own).values() if r.state in wanted]
        got.sort(key=lambda r: (r.submit_time, r.name))
        return [self._copy(r) for r in got] if copies else got

    def names(self, states: Iterable[str], own: bool) -> list[str]:
        return [r.name for r in self.rows(states, own, copies=False)]


def _applied(rows: dict[str, R], changes: dict[str, R | None]) -> dict[str, R]:
    """A new map: ``rows`` with ``changes`` (None: the row left the states) applied."""
    new = dict(rows)
    for name, row in changes.items():
        if row is None:
            new.pop(name, None)
        else:
            new[name] = row
    return new
