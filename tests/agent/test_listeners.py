"""Algorithm 2 listeners: dispatch of start/die events, reconnect with back-off, resync."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from support.waiting import wait_for as poll

from flowcon.agent.listeners import EventListener, interesting
from flowcon.engine.docker_engine import EngineUnavailable


class Stream:
    def __init__(self, q: queue.Queue[Any]) -> None:
        self.q = q
        self.closed = False

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Any:
        item = self.q.get(timeout=5)
        if item is StopIteration or self.closed:
            raise StopIteration
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed = True
        self.q.put(StopIteration)


class FlakyEngine:
    """The first connection works, then the engine is down twice, then it is back."""

    def __init__(self) -> None:
        self.connects: list[float] = []
        self.queues: list[queue.Queue[Any]] = []
        self.plan = ["ok", "down", "down", "ok"]

    def events(self) -> Stream:
        self.connects.append(time.monotonic())
        step = self.plan.pop(0) if self.plan else "ok"
        if step == "down":
            raise EngineUnavailable("connection refused")
        q: queue.Queue[Any] = queue.Queue()
        self.queues.append(q)
        return Stream(q)


def ev(action: str, cid: str, **attrs: str) -> dict[str, Any]:
    return {
        "Type": "container",
        "Action": action,
        "id": cid,
        "Actor": {"ID": cid, "Attributes": attrs},
    }


def wait_for(cond: Any, timeout: float = 5.0) -> None:
    poll(cond, timeout, 0.01)


def test_dispatch_reconnect_and_resync() -> None:
    eng = FlakyEngine()
    started: list[str] = []
    finished: list[str] = []
    resyncs = threading.Semaphore(0)
    lst = EventListener(
        eng,  # type: ignore[arg-type]
        started.append,
        finished.append,
        resyncs.release,
        backoff_initial=0.05,
        backoff_max=0.1,
    )
    lst.start()
    try:
        assert resyncs.acquire(timeout=5)  # resync after the first connect
        q = eng.queues[0]
        q.put(ev("start", "a", **{"flowcon.enable": "true"}))
        q.put(ev("start", "plain", image="x"))  # not ours: no inspect, no callback
        q.put(ev("start", "j", **{"flowcon.job": "train"}))
        q.put({"Type": "network", "Action": "connect", "id": "n"})
        q.put(ev("die", "a"))
        q.put(ConnectionResetError("engine went away"))  # the stream breaks
        assert resyncs.acquire(timeout=5)  # reconnected (after two refused tries) and resynced
        assert started == ["a", "j"]
        assert finished == ["a"]
        assert len(eng.connects) == 4
        gaps = [b - a for a, b in zip(eng.connects, eng.connects[1:], strict=False)]
        assert gaps[1] >= 0.05  # back-off between refused connections
        eng.queues[-1].put(ev("start", "b", **{"flowcon.enable": "true"}))
        wait_for(lambda: started[-1] == "b")
    finally:
        lst.stop()
    assert not lst._thread.is_alive()


def test_a_failing_handler_does_not_stop_the_listener() -> None:
    eng = FlakyEngine()
    eng.plan = []
    seen: list[str] = []

    def on_start(cid: str) -> None:
        seen.append(cid)
        if cid == "boom":
            raise RuntimeError("handler bug")

    lst = EventListener(eng, on_start, lambda _c: None, lambda: None)  # type: ignore[arg-type]
    lst.start()
    try:
        wait_for(lambda: eng.queues)
        for cid in ("boom", "fine"):
            eng.queues[0].put(ev("start", cid, **{"flowcon.enable": "true"}))
        wait_for(lambda: seen == ["boom", "fine"])
    finally:
        lst.stop()


def test_interesting_events() -> None:
    def ev(**attrs: str) -> dict[str, Any]:
        return {"Type": "container", "Action": "start", "Actor": {"Attributes": attrs}}

    assert interesting(ev(**{"flowcon.enable": "true"}))
    assert interesting(ev(**{"flowcon.job": "j"}))
    # a Swarm task: its flowcon.* labels may be on its service (deploy.labels)
    assert interesting(ev(**{"com.docker.swarm.service.id": "s1"}))
    assert not interesting(ev(image="x", name="web"))


def test_stop_before_start_is_a_no_op() -> None:
    """A program interrupted before it started its listener cleans up with stop(): that
    must not raise ("cannot join thread before it is started" skipped bench_agent's
    container removal)."""
    eng = FlakyEngine()
    eng.plan = []
    lst = EventListener(eng, lambda _c: None, lambda _c: None, lambda: None)  # type: ignore[arg-type]
    lst.stop()
    assert not lst.connected.is_set()


def test_update_events_reach_on_update_only_when_asked() -> None:
    eng = FlakyEngine()
    updated: list[tuple[str, int | None]] = []
    lst = EventListener(eng, print, print, lambda: None)  # type: ignore[arg-type]
    lst.dispatch(ev("update", "a", **{"flowcon.enable": "true"}))  # no handler: ignored
    lst = EventListener(
        eng,  # type: ignore[arg-type]
        print,
        print,
        lambda: None,
        on_update=lambda cid, ns: updated.append((cid, ns)),
    )
    lst.dispatch(ev("update", "a", **{"flowcon.enable": "true"}))
    lst.dispatch({**ev("update", "b", **{"flowcon.enable": "true"}), "timeNano": 17})
    lst.dispatch(ev("update", "other", image="x"))  # not a FlowCon container
    assert updated == [("a", None), ("b", 17)]  # with the event's time where it has one
