"""The launcher process of one container of a stop-free job.

``elastic.main`` in stop-free mode runs ``launch`` in the container's first process (not a
worker): it may host the job's TCPStore, starts the container's worker processes (this
program again; each runs ``flowcon.elastic.stopfree.run_worker``), forwards signals to
them, and turns their exit codes into the container's (``container_exit``, the executor's
contract, docs/elastic.md).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import torch.distributed as dist

import flowcon.elastic.rendezvous as rdv
from flowcon import contract
from flowcon.contract import EXIT_LEFT, EXIT_PREEMPTED
from flowcon.elastic.restart import ElasticEnv
from flowcon.elastic.stopfree_env import default_worker_id
from flowcon.report import report as _report

LEAVE_REPEAT_S: Final = 0.5


def container_exit(codes: Sequence[int]) -> int:
    """A container's exit code from its workers' (executor contract, docs/elastic.md).

    A crash (any other code, or a signal: 128 + n) wins; then 143 (the job was stopped after
    a checkpoint); 144 when every worker left; 0 when they finished (or some finished and
    some left at the very end).
    """
    bad = [c if c > 0 else 128 - c for c in codes if c not in (0, EXIT_PREEMPTED, EXIT_LEFT)]
    if bad:
        return bad[0]
    if EXIT_PREEMPTED in codes:
        return EXIT_PREEMPTED
    if codes and all(c == EXIT_LEFT for c in codes):
        return EXIT_LEFT
    return 0


def host_store(host: str, port: int) -> Any:
    """The job's TCPStore, served by this (launcher) process for the job's lifetime."""
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's typed exports)
    return tcp_store(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=_dt.timedelta(seconds=60),
    )


def launch(env: ElasticEnv, argv: Sequence[str] | None = None) -> int:
    """The launcher of one container of a stop-free job (``elastic.main`` when not a worker).

    It hosts the job's TCPStore when ``FLOWCON_STORE_HOST=1`` (on MASTER_PORT, all
    interfaces), starts LOCAL_WORLD_SIZE worker processes (this program again, with
    LOCAL_RANK, RANK = RANK + local rank, FLOWCON_WORKER_ID = "<id>/<local rank>"), forwards
    SIGTERM, SIGINT and SIGUSR1 to them, and never stops the others when one fails (the job
    recovers without it). The store host stays up after its workers left, until the job is
    done or it gets SIGTERM, since the job's other workers still need the store.
    """
    cmd = (
        list(argv)
        if argv is not None
        else [
            sys.executable,
            *getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:],
        ]
    )
    hosting = os.environ.get(contract.ENV_STORE_HOST, "") not in ("", "0")
    store = host_store(env.master_addr, env.master_port) if hosting else None
    base_id = os.environ.get(contract.ENV_WORKER_ID) or default_worker_id()
    # A worker ignores SIGUSR1 (inherited) until its runtime handles it: one that arrives
    # while it imports torch must not kill it; the launcher repeats a leave request below.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    children: list[subprocess.Popen[bytes]] = []
    for local in range(env.local_world_size):
        child_env = dict(os.environ)
        child_env.update(
            {
                contract.ENV_RANK: str(env.rank + local),
                contract.ENV_LOCAL_RANK: str(local),
                contract.ENV_GROUP_RANK: str(env.node_rank),
                contract.ENV_WORKER_ID: f"{base_id}/{local}",
            }
        )
        children.append(subprocess.Popen(cmd, env=child_env))
    stopping = False
    leaving = False

    def forward(signum: int, frame: Any) -> None:
        nonlocal stopping, leaving
        if signum == signal.SIGUSR1:
            leaving = True
        else:
            stopping = True
        for c in children:
            if c.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    # from here on SIGUSR1 / SIGTERM to this container are handled (not before: imports)
    _report(
        event="launcher_started",
        worker=base_id,
        store_host=hosting,
        join=os.environ.get(contract.ENV_JOIN, "") not in ("", "0"),
        local_world_size=env.local_world_size,
    )
    last_leave = time.monotonic()
    while any(c.poll() is None for c in children):
        time.sleep(0.05)
        if leaving and time.monotonic() - last_leave >= LEAVE_REPEAT_S:
            last_leave = time.monotonic()
            forward(signal.SIGUSR1, None)  # idempotent: reaches workers still starting
    codes = [int(c.returncode) for c in children]
    code = container_exit(codes)
    if store is not None and code not in (0, EXIT_PREEMPTED):
        # our workers left or died, the job goes on elsewhere: keep serving its store
        _report(event="store_host_only", worker=base_id, exit_codes=codes)
        while not stopping and not rdv.job_done(store):
            time.sleep(0.2)
        return EXIT_PREEMPTED if stopping else 0
    return code
