"""The Worker Monitor's listeners (paper section 3.2.2, Algorithm 2) on the engine's events.

Instead of counting containers every iteration (T(i) - T(i-1) in Algorithm 2), we
follow the engine's event stream: a ``start`` is the New Cons listener's trigger, a
``die`` the Finished Cons listener's. When the stream breaks (engine restart) we
reconnect with exponential back-off and resynchronise the container set, since
events sent while we were away are lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from flowcon.contract import LABEL_ENABLE, LABEL_JOB
from flowcon.core.labels import SERVICE_ID
from flowcon.engine.docker_engine import DockerEngine, EngineError

log = logging.getLogger("flowcon.listeners")

START_ACTIONS = frozenset({"start"})
FINISH_ACTIONS = frozenset({"die", "destroy"})
# docker update (by the agent or anyone else): the agent checks for foreign changes
UPDATE_ACTIONS = frozenset({"update"})


def interesting(event: dict[str, Any]) -> bool:
    """A container event that may concern FlowCon (labels travel with the event; a Swarm
    task's may be on its service, looked up when the pool inspects it)."""
    attrs = (event.get("Actor") or {}).get("Attributes") or {}
    return LABEL_ENABLE in attrs or LABEL_JOB in attrs or SERVICE_ID in attrs


class EventListener:
    def __init__(
        self,
        engine: DockerEngine,
        on_start: Callable[[str], None],
        on_finish: Callable[[str], None],
        on_connect: Callable[[], object],
        backoff_initial: float = 0.25,
        backoff_max: float = 10.0,
        on_update: Callable[[str, int | None], None] | None = None,
    ) -> None:
        self.engine = engine
        self.on_start = on_start
        self.on_finish = on_finish
        self.on_update = on_update
        self.on_connect = on_connect
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.connects = 0
        self.events_seen = 0
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="flowcon-events", daemon=True)
        self.connected = threading.Event()
        self._delay = backoff_initial
        self._down_logged = False

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # closing a broken socket
                stream.close()
        if self._thread.ident is not None:  # a listener stopped before it started: no-op
            self._thread.join(timeout)

    def dispatch(self, event: dict[str, Any]) -> None:
        action = str(event.get("Action") or event.get("status") or "")
        cid = event.get("id") or (event.get("Actor") or {}).get("ID")
        if not cid or event.get("Type", "container") != "container":
            return
        self.events_seen += 1
        if action in START_ACTIONS:
            if interesting(event):
                self.on_start(cid)
        elif action in FINISH_ACTIONS:
            self.on_finish(cid)  # cheap no-op for containers the controller does not track
        elif action in UPDATE_ACTIONS and self.on_update is not None and interesting(event):
            # a no-op for containers the controller does not manage; the event's time
            # tells the agent's own update from a colliding one (flowcon/agent/foreign.py)
            stamp = event.get("timeNano")
            self.on_update(cid, stamp if isinstance(stamp, int) else None)

    def _consume(self, stream: Any) -> None:
        """Dispatch the events of one connection until it ends or we stop."""
        for event in stream:
            if self._stop.is_set():
                return
            if isinstance(event, dict):
                try:
                    self.dispatch(event)
                except Exception:  # one bad event must not stop us
                    log.exception("handling event %r failed", event.get("Action"))
        if not self._stop.is_set():
            log.warning("event stream ended (engine restarting?); reconnecting")

    def _session(self) -> None:
        """One connection: connect, resync (events while we were away are lost), read."""
        self._stream = self.engine.events()
        self.connects += 1
        if self.connects > 1 or self._down_logged:
            log.info("event stream connected (connection %d)", self.connects)
        self._down_logged = False
        self._delay = self.backoff_initial
        self.connected.set()
        self.on_connect()
        self._consume(self._stream)

    def _note_down(self, msg: str, exc: BaseException) -> None:
        if not self._down_logged:
            log.warning(msg, exc)
            self._down_logged = True

    def _run(self) -> None:
        self._delay = self.backoff_initial
        self._down_logged = False
        while not self._stop.is_set():
            try:
                self._session()
            except (EngineError, OSError) as exc:
                self._note_down("event stream unavailable: %s; retrying with back-off", exc)
            except Exception as exc:  # e.g. a reset socket inside the SDK
                if self._stop.is_set():
                    break
                self._note_down("event stream broke: %r; retrying with back-off", exc)
            finally:
                self.connected.clear()
            if self._stop.wait(self._delay):
                break
            self._delay = min(self._delay * 2, self.backoff_max)
