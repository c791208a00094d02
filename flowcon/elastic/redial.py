"""A store client that dials again when its connection drops before an answer.

A TCPStore client whose connection closed is dead: every later call fails with "Failed to
recv ... Connection was likely closed". A joiner that meets that on its first calls to a
coordinator that is up (a dropped connection on a busy host) would exit and never join.
:class:`RedialingStore` dials the same address again and repeats the call when repeating
it cannot count twice: ``get``, ``set``, ``compare_set`` and ``add(key, 0)`` (a read of a
counter, as ``rendezvous.there`` does). ``add`` with a count is not repeated (the lost call
may have counted), and neither is any call once ``redials`` new connections have failed:
the error then goes to the caller as before.

Only a joiner uses it, until it is admitted: a member whose coordinator stops answering
must go on to recovery at once (``StopFree._recover``), not dial a dead container.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import torch.distributed as dist

log = logging.getLogger(__name__)

# What a dropped connection raises (a subclass of RuntimeError in torch >= 2.3; a plain
# RuntimeError before). A store timeout is another error (DistStoreError) and is not
# retried: the caller's wait decides what a timeout means.
DROPPED: Final[type[BaseException]] = getattr(dist, "DistNetworkError", RuntimeError)

Dial = Callable[[], Any]


class RedialingStore:
    """The ``rendezvous.Store`` calls on a client from ``dial``, dialled again (at most
    ``redials`` times in all) when a connection drops under a call that is safe to
    repeat. ``redials_used`` says how many it took."""

    def __init__(self, dial: Dial, redials: int = 3) -> None:
        self._dial = dial
        self._client: Any = dial()
        self.redials_left = max(0, redials)
        self.redials_used = 0

    @property
    def client(self) -> Any:
        """The connection in use now (a plain store client)."""
        return self._client

    def _again(self, exc: BaseException, what: str) -> None:
        if self.redials_left <= 0:
            raise exc
        self.redials_left -= 1
        self.redials_used += 1
        log.warning("store connection dropped during %s (%s): dialling again", what, exc)
        self._client = self._dial()

    def _repeat(self, what: str, call: Callable[[Any], Any]) -> Any:
        while True:
            try:
                return call(self._client)
            except DROPPED as exc:
                if isinstance(exc, getattr(dist, "DistStoreError", ())):
                    raise  # a timeout, not a dropped connection
                self._again(exc, what)

    def get(self, key: str, /) -> bytes:
        got: bytes = self._repeat("get", lambda c: c.get(key))
        return got

    def set(self, key: str, value: str | bytes, /) -> None:
        self._repeat("set", lambda c: c.set(key, value))

    def compare_set(self, key: str, expected: str, desired: str, /) -> bytes:
        # repeating it is safe: if the lost call set ``desired``, the repeat answers it
        got: bytes = self._repeat("compare_set", lambda c: c.compare_set(key, expected, desired))
        return got

    def add(self, key: str, amount: int, /) -> int:
        if amount != 0:
            counted: int = self._client.add(key, amount)  # not repeated: it may have counted
            return counted
        got: int = self._repeat("add", lambda c: c.add(key, 0))
        return got

    def __getattr__(self, name: str) -> Any:
        # anything else a caller asks (check, wait, ...) goes to the connection unrepeated
        return getattr(self._client, name)
