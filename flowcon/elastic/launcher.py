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
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch.distributed as dist

import flowcon.elastic.rendezvous as rdv
from flowcon import contract
from flowcon.contract import EXIT_LEFT, EXIT_PREEMPTED
from flowcon.elastic.restart import ElasticEnv
from flowcon.elastic.stopfree_env import default_worker_id
from flowcon.report import report as _report

LEAVE_REPEAT_S: Final = 0.5
# How long an old coordinator's store still serves after coordination moved: a joiner that
# waits there polls every 20 ms and re-registers at the new one (rendezvous ``moved``).
MOVED_LINGER_S: Final = 1.0


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


def host_store(host: str, port: int, secret: str | None = None) -> Any:
    """A TCPStore served by this (launcher) process for the job's lifetime (port 0: any
    free port, its ``port`` says which). With the job's rendezvous ``secret`` (default:
    ``FLOWCON_RENDEZVOUS_SECRET``) it publishes the secret's proof and the store returned
    keeps every key under the secret's prefix (its ``port`` is the server's)."""
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's typed exports)
    raw = tcp_store(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=_dt.timedelta(seconds=60),
    )
    if secret is None:
        secret = os.environ.get(contract.ENV_RENDEZVOUS_SECRET, "")
    if not secret:
        return raw
    rdv.publish_proof(raw, secret)
    return _Served(getattr(dist, "PrefixStore")(rdv.secret_prefix(secret), raw), raw)  # noqa: B009


class _Served:
    """A hosted store under the secret's prefix that still says its server's ``port``
    (and keeps the server alive: the process serves while this object lives)."""

    def __init__(self, store: Any, raw: Any) -> None:
        self._store = store
        self.raw = raw

    @property
    def port(self) -> int:
        return int(self.raw.port)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def launch(env: ElasticEnv, argv: Sequence[str] | None = None) -> int:
    """The launcher of one container of a stop-free job (``elastic.main`` when not a worker).

    It hosts the job's TCPStore when ``FLOWCON_STORE_HOST=1`` (on MASTER_PORT, all
    interfaces; the job's first coordinator), else a standby store when the executor gave
    ``FLOWCON_STORE_ADDR`` (host:port, port 0: any free one; the store coordination moves
    to when the coordinator's container leaves or dies), and passes the address it serves
    on to its workers as ``FLOWCON_STORE_ADDR``. It starts LOCAL_WORLD_SIZE worker processes
    (this program again, with
    LOCAL_RANK, RANK = RANK + local rank, FLOWCON_WORKER_ID = "<id>/<local rank>"), forwards
    SIGTERM, SIGINT and SIGUSR1 to them, and never stops the others when one fails (the job
    recovers without it). A launcher whose store coordinates the job stays up after its
    workers left, until coordination moved away (``rendezvous.mark_moved``), the job is done
    or it gets SIGTERM, since the job's other workers still need the store.
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
    store, served = own_store(env, hosting)
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
        if served:
            child_env[contract.ENV_STORE_ADDR] = served
        else:
            child_env.pop(contract.ENV_STORE_ADDR, None)
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
        store=served,
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
    if store is not None and code not in (0, EXIT_PREEMPTED) and rdv.was_coordinator(store):
        if rdv.moved_to(store) is None:
            _report(event="store_host_only", worker=base_id, exit_codes=codes)
        return linger(store, base_id, code, lambda: stopping)
    return code


def linger(
    store: Any,
    base_id: str,
    code: int,
    stopping: Callable[[], bool],
    after_move_s: float = MOVED_LINGER_S,
) -> int:
    """Our workers left or died, the job goes on elsewhere: keep serving its coordinator
    until the stayers moved to another store (a hand-over: ``code``, the workers' exit,
    ``after_move_s`` later, so that joiners still waiting here see where it went), the job
    is done (0), or SIGTERM (143)."""
    while not stopping() and not rdv.job_done(store):
        to = rdv.moved_to(store)
        if to is not None:
            _report(event="coordinator_moved", worker=base_id, to=to)
            time.sleep(after_move_s)
            return code
        time.sleep(0.2)
    return EXIT_PREEMPTED if stopping() else 0


def own_store(env: ElasticEnv, hosting: bool) -> tuple[Any, str]:
    """This container's store and the "host:port" it serves on: the job's first
    coordinator's on MASTER_ADDR:MASTER_PORT (``hosting``), else a standby one where
    ``FLOWCON_STORE_ADDR`` says (port 0: any free port); (None, "") without either."""
    if hosting:
        store = host_store(env.master_addr, env.master_port)
        served = f"{env.master_addr}:{env.master_port}"
        rdv.mark_coordinator(store, served)
        return store, served
    own = os.environ.get(contract.ENV_STORE_ADDR, "")
    if not own:
        return None, ""
    host, port = rdv.split_addr(own)
    store = host_store(host, port)
    return store, f"{host}:{int(store.port)}"
