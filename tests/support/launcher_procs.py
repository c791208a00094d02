"""Stop-free launchers started by the tests: each in its own session, so that a failing
test kills the launcher's workers too (killing the launcher alone left a hung worker
running after a CI run), and waits that fail with every log's tail."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def start(script: Path, log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """``python script`` (a launcher) writing ``log``, in a new session (its own group)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(script)],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_all(
    procs: Mapping[str, subprocess.Popen[bytes]], logs: Mapping[str, Path], timeout: float
) -> dict[str, int]:
    """Each launcher's exit code; one still running after ``timeout`` s fails the test with
    the tail of every log (a hung switch prints its stack there)."""
    codes: dict[str, int] = {}
    for name, p in procs.items():
        try:
            codes[name] = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            tails = "\n".join(f"--- {n}\n{logs[n].read_text()[-1500:]}" for n in procs)
            msg = f"launcher {name} still running after {timeout} s\n{tails}"
            raise AssertionError(msg) from None
    return codes


def kill_all(procs: Mapping[str, subprocess.Popen[bytes]]) -> None:
    """SIGKILL every launcher's process group (its workers included)."""
    for p in procs.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON records a launcher has written to ``path`` so far: complete lines only. A
    test polls the log while the launcher writes it, and a read can end inside a line
    (a record cut after 140 characters once failed a run); that unfinished last line is
    read on the next poll. A broken line before it is still an error."""
    text = path.read_text(errors="replace") if path.exists() else ""
    done = text[: text.rfind("\n") + 1]  # up to the last newline ('' when there is none)
    return [json.loads(ln) for ln in done.splitlines() if ln.startswith("{")]
