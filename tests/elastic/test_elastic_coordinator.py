"""The stop-free job's coordinator is no single point of failure (local launchers, real
torch.distributed on gloo): the container hosting it leaves (a hand-over to the first
stayer's store) or is killed (the survivors elect the first member store that answers),
and the job goes on without a restart."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
from support import launcher_procs
from test_elastic_stopfree import _launcher_env, _wait_line

from flowcon import contract

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "images" / "elastic-example" / "train.py"
_lines = launcher_procs.json_lines


def _own() -> dict[str, str]:
    return {contract.ENV_STORE_ADDR: "127.0.0.1:0"}  # a standby store on any free port


def _steps(logs: dict[str, Path]) -> list[int]:
    return sorted(x["step"] for p in logs.values() for x in _lines(p) if "loss" in x)


def _events(logs: dict[str, Path], name: str) -> list[dict[str, Any]]:
    return [x for p in logs.values() for x in _lines(p) if x.get("event") == name]


def test_the_coordinator_hands_over_when_its_container_leaves(tmp_path: Path) -> None:
    """SIGUSR1 to the coordinator's launcher (a scale-in 2 -> 1 that removes the first
    container): the stayer moves the job to its own store at the switch, the old host's
    launcher exits EXIT_LEFT once coordination moved, and the job finishes every step once
    on the stayer, in a later generation."""
    iterations = 400
    env = _launcher_env(tmp_path, iterations)
    logs = {n: tmp_path / f"{n}.log" for n in "ab"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["a"] = launcher_procs.start(
            TRAIN, logs["a"], {**env, "WORLD_SIZE": "1", "RANK": "0", "FLOWCON_STORE_HOST": "1"}
        )
        _wait_line(logs["a"], lambda x: x.get("step", 0) >= 10, procs["a"])
        procs["b"] = launcher_procs.start(
            TRAIN,
            logs["b"],
            {**env, **_own(), "FLOWCON_JOIN": "1", "FLOWCON_TARGET_WORLD": "2"},
        )
        _wait_line(logs["b"], lambda x: x.get("event") == "joined", procs["b"])
        procs["a"].send_signal(signal.SIGUSR1)
        assert procs["a"].wait(timeout=60) == contract.EXIT_LEFT, logs["a"].read_text()[-2000:]
        codes = launcher_procs.wait_all(procs, logs, timeout=60)
    finally:
        launcher_procs.kill_all(procs)
    assert codes == {"a": contract.EXIT_LEFT, "b": 0}, logs["b"].read_text()[-2000:]
    scaled = _events(logs, "scaled")
    assert [s["coordinator_moved"] for s in scaled] == [False, True], scaled
    (b_started,) = [x for x in _lines(logs["b"]) if x.get("event") == "launcher_started"]
    assert scaled[-1]["coordinator"] == b_started["store"]  # the stayer's own store
    # the old host's launcher went as soon as coordination had moved (at once, or after it
    # saw the move while serving)
    assert all(m["to"] == b_started["store"] for m in _events(logs, "coordinator_moved"))
    assert scaled[-1]["gen"] > scaled[0]["gen"]
    assert _steps(logs) == list(range(1, iterations + 1))  # no restart, no step twice


# Beside the fast lane's parallel tests a joiner's first call to the coordinator's store
# was dropped ("Failed to recv, got 0 bytes") and its redials were not answered within the
# wait, in two of three CI runs; alone it passed every run. The cause is not known.
@pytest.mark.alone
def test_survivors_elect_a_coordinator_when_its_container_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the coordinator's launcher and worker (3 -> 2): the survivors elect the
    first answering member store, recover from their agreed in-memory state there and
    finish the job; rank 0's step lines repeat at most the steps since that state."""
    iterations = 400
    env = _launcher_env(tmp_path, iterations)
    logs = {n: tmp_path / f"{n}.log" for n in "abc"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["a"] = launcher_procs.start(
            TRAIN, logs["a"], {**env, "WORLD_SIZE": "1", "RANK": "0", "FLOWCON_STORE_HOST": "1"}
        )
        _wait_line(logs["a"], lambda x: x.get("step", 0) >= 5, procs["a"])
        for n in "bc":
            procs[n] = launcher_procs.start(
                TRAIN,
                logs[n],
                {**env, **_own(), "FLOWCON_JOIN": "1", "FLOWCON_TARGET_WORLD": "3"},
            )
        for n in "bc":
            _wait_line(logs[n], lambda x: x.get("event") == "joined", procs[n])
        _wait_line(logs["a"], lambda x: x.get("world_size") == 3 and "loss" in x, procs["a"])
        os.killpg(procs["a"].pid, signal.SIGKILL)
        codes = launcher_procs.wait_all(procs, logs, timeout=90)
    finally:
        launcher_procs.kill_all(procs)
    assert codes["b"] == 0, (codes, logs["b"].read_text()[-3000:])
    assert codes["c"] == 0, (codes, logs["c"].read_text()[-3000:])
    (rec,) = _events(logs, "recovered")
    assert rec["coordinator_elected"] is True, rec
    assert rec["world_size"] == 2, rec
    assert rec["failed"] == 1, rec
    elected = _events(logs, "coordinator_elected")
    assert {e["coordinator"] for e in elected} == {rec["coordinator"]}  # all took the same
    assert len(elected) == 2
    steps = _steps(logs)
    # rank 0 prints the step lines: the killed one may not have printed the last step it
    # finished (the agreed one, the survivors go on after it); no other is missing
    missing = set(range(1, iterations + 1)) - set(steps)
    assert missing <= {rec["step"]}, (missing, rec)
    assert len(steps) - len(set(steps)) <= max(1, rec["lost_steps"]) + 1, rec
    done = _events(logs, "done")
    assert [d["step"] for d in done] == [iterations]
