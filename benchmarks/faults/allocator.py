"""The allocator's kill -9 scenario for benchmarks/faults.py ("Allocator and
executor").

allocator-kill: a real ``flowcon allocator`` subprocess (declared inventory 2 nodes x 4
GPUs, the engine executor, 1 s slots) runs rate jobs (``flowcon.testing.ratejob``: testbox
containers that advance at their profile's speed and checkpoint their step every 0.25 s).
Each run submits one more job (and cancels the oldest when three are active), which makes
the allocator re-divide the GPUs and rescale the others by checkpoint-restart. The
allocator is then killed with SIGKILL, the kinds in turn:

* ``submit``: 0-50 ms after the submit request went out (before or after its answer);
* ``rescale``: the moment the engine reports a job container stopped by a rescale (exit
  143): the old containers are stopped, the new ones not (all) started yet.

It is restarted on the same state directory. Invariants, checked once it answers and every
active job with GPUs runs again:

* no job lost: every job whose submit was answered "admitted" is listed, active;
* none admitted twice: at most one admission record per job name (the store, read-only);
* none runs twice: never two running containers of one job with the same rank, and no
  container of a job the allocator does not list as active;
* at most one checkpoint interval repeated: the first step a job's new rank-0 container
  starts from (its ``from=`` line) is not below the last step seen from its earlier
  containers minus one checkpoint interval (0.25 s at the fastest rate, rounded up).

Recovery: restart to the moment every active job with GPUs has running containers at its
stored world size. Every container, volume and job of a session is removed at its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from flowcon.testing.ports import free_port

Outcome = tuple[list[str], float | None]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "faults-0perator-t0ken"
PROFILE = {1: 4.0, 2: 7.0, 4: 12.0, 8: 20.0}  # iterations/s by GPU count
CHECKPOINT_S = 0.25  # the rate job saves its step every tick
# one checkpoint interval at the fastest rate, rounded up, plus the ranks' clock skew
REPEAT_SLACK = int(max(PROFILE.values()) * CHECKPOINT_S) + 2
MAX_ACTIVE = 3
KINDS = ("submit", "rescale")
START_RE = re.compile(r"start rank=(\d+) world=(\d+) rate=\d+mit/s from=(\d+)")
STEP_RE = re.compile(r'\{"step":(\d+),')


def write_config(
    path: Path, listen: str, gpus: list[int], executor: dict[str, Any], prefix: str = "n"
) -> Path:
    """An allocator config (JSON is YAML): state next to it, 1 s slots, the scenarios'
    token, declared nodes n1, n2, ... (``prefix``) with ``gpus`` GPUs each, the engine
    executor (``executor`` may name another backend)."""
    path.write_text(
        json.dumps(
            {
                "allocator": {
                    "listen": listen,
                    "state_dir": str(path.parent / "state"),
                    "slot_seconds": 1,
                    "token": TOKEN,
                },
                "gpus": {
                    "declared": {
                        "nodes": [
                            {"name": f"{prefix}{i + 1}", "gpus": g} for i, g in enumerate(gpus)
                        ]
                    }
                },
                "executor": {"backend": "engine", "grace_s": 5, **executor},
            }
        )
    )
    return path


def active_jobs(client: Any) -> list[dict[str, Any]]:
    """The allocator's admitted and running jobs (its API)."""
    jobs: list[dict[str, Any]] = client.jobs()
    return [j for j in jobs if j.get("state") in ("admitted", "running")]


def engines(docker_client: Any) -> list[Any]:
    """One engine client, or the list of them (the swarm's nodes)."""
    return list(docker_client) if isinstance(docker_client, list | tuple) else [docker_client]


def run_containers(docker_client: Any, run_id: str) -> list[Any]:
    """The running containers of one scenario session (label flowcon.faults=<run id>), on
    one engine or on each of a list of engines."""
    out: list[Any] = []
    for client in engines(docker_client):
        out += client.containers.list(
            ignore_removed=True, filters={"label": f"flowcon.faults={run_id}"}
        )
    return out


def wait_running(client: Any, docker_client: Any, run_id: str, timeout: float) -> float | None:
    """Seconds until every active job with GPUs has running containers at exactly its
    stored world size; None after ``timeout``."""
    from flowcon.contract import LABEL_JOB, LABEL_WORLD_SIZE

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with contextlib.suppress(Exception):
            want = {str(j["name"]): int(j["gpus"]) for j in active_jobs(client) if j["gpus"]}
            have: dict[str, set[int]] = {}
            for c in run_containers(docker_client, run_id):
                have.setdefault(c.labels.get(LABEL_JOB, ""), set()).add(
                    int(c.labels.get(LABEL_WORLD_SIZE, "0"))
                )
            if want and all(have.get(job) == {gpus} for job, gpus in want.items()):
                return time.monotonic() - t0
        time.sleep(0.2)
    return None


def settled_problems(client: Any, running: list[Any], poller: StepPoller, tag: str) -> list[str]:
    """What a restart scenario checks once every job runs again: no job failed or lost,
    no rank run twice, no job restarted more than one checkpoint interval behind (after
    one more poll of the new containers' first lines)."""
    problems = [
        f"{tag}: job {j['name']} is {j['state']}: {j['reason']}"
        for j in client.jobs()
        if j["state"] not in ("admitted", "running")
    ]
    problems += [f"{tag}: {p}" for p in duplicate_ranks(running)]
    time.sleep(1.0)
    return problems + [f"{tag}: {p}" for p in poller.regressions()]


def cancel_all(client: Any) -> None:
    """Cancel every job the allocator lists (a session's clean-up; errors ignored)."""
    with contextlib.suppress(Exception):
        for j in client.jobs():
            with contextlib.suppress(Exception):
                client.cancel(j["name"])


def remove_networks(docker_client: Any, run_id: str) -> None:
    """The job networks of one session (an allocator stopped mid-cancel leaves them)."""
    with contextlib.suppress(Exception):
        for net in docker_client.networks.list(filters={"label": f"flowcon.faults={run_id}"}):
            with contextlib.suppress(Exception):
                net.remove()


def duplicate_ranks(containers: list[Any]) -> list[str]:
    """``job rank r: n running containers`` for every job rank run more than once."""
    from flowcon.contract import LABEL_JOB, LABEL_RANK

    ranks: dict[tuple[str, str], int] = {}
    for c in containers:
        key = (c.labels.get(LABEL_JOB, "?"), c.labels.get(LABEL_RANK, "?"))
        ranks[key] = ranks.get(key, 0) + 1
    return [f"{job} rank {r}: {n} running containers" for (job, r), n in ranks.items() if n > 1]


class AllocatorProcess:
    """``flowcon allocator`` as a subprocess on a private config and state directory."""

    def __init__(self, folder: Path, labels: dict[str, str]) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "allocator.log"
        self.cfg = folder / "allocator.yaml"
        self.db = folder / "state" / "allocator.db"
        write_config(self.cfg, f"127.0.0.1:{self.port}", [4, 4], {"labels": labels})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWCON_LOG_LEVEL": "INFO"}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flowcon.cli", "allocator", "--config", str(self.cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout: float = 10.0) -> Any:
        from flowcon.client.http import AllocatorClient

        return AllocatorClient(self.url, TOKEN, timeout=timeout)

    def wait_up(self, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                return False
            with contextlib.suppress(Exception):
                self.client(timeout=2).health()
                return True
            time.sleep(0.1)
        return False

    def admissions(self) -> dict[str, int]:
        """Admission records per job, read from the store with a read-only connection."""
        import sqlite3

        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            rows = con.execute("SELECT job, COUNT(*) FROM admissions GROUP BY job").fetchall()
        finally:
            con.close()
        return {str(job): int(n) for job, n in rows}


@dataclass
class Seen:
    """What the poller saw of one job container."""

    job: str
    rank: int
    world: int
    created: float
    start_from: int | None = None
    last_step: int | None = None


class StepPoller:
    """Reads every job container's log every 0.3 s: the step it started from and the last
    step it printed (so a checkpoint that went back can be seen after the container is
    gone)."""

    def __init__(self, client: Any, selector: str) -> None:
        self.client = client
        self.selector = selector
        self.seen: dict[str, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-steps", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from flowcon.contract import LABEL_JOB, LABEL_RANK

        while not self._stop.wait(0.3):
            found = []
            for client in engines(self.client):  # one engine, or each node of the swarm
                with contextlib.suppress(Exception):
                    found += client.containers.list(
                        ignore_removed=True, all=True, filters={"label": self.selector}
                    )
            for c in found:
                with contextlib.suppress(Exception):
                    text = c.logs(stdout=True, stderr=False).decode(errors="replace")
                    s = self.seen.get(c.id)
                    if s is None:
                        start = START_RE.search(text)
                        if start is None:
                            continue
                        s = Seen(
                            c.labels.get(LABEL_JOB, "?"),
                            int(c.labels.get(LABEL_RANK, start.group(1))),
                            int(start.group(2)),
                            time.time(),
                            int(start.group(3)),
                        )
                        self.seen[c.id] = s
                    steps = STEP_RE.findall(text)
                    if steps:
                        s.last_step = max(s.last_step or 0, int(steps[-1]))

    def regressions(self) -> list[str]:
        """Rank-0 containers that started below what their job's earlier ones printed."""
        out = []
        by_job: dict[str, list[Seen]] = {}
        for s in self.seen.values():
            if s.rank == 0:
                by_job.setdefault(s.job, []).append(s)
        for job, gens in by_job.items():
            gens.sort(key=lambda s: s.created)
            best = 0
            for s in gens:
                if s.start_from is not None and s.start_from < best - REPEAT_SLACK:
                    out.append(
                        f"{job}: a container started from step {s.start_from}, its earlier "
                        f"ones had printed {best} (more than one checkpoint interval lost)"
                    )
                best = max(best, s.last_step or 0, s.start_from or 0)
        return out


class KillSession:
    def __init__(self, docker_client: Any, rng: Any, folder: Path, labels: dict[str, str]):
        self.docker = docker_client
        self.rng = rng
        self.run_id = f"a{uuid.uuid4().hex[:8]}"
        self.labels = {**labels, "flowcon.faults": self.run_id}
        self.alloc = AllocatorProcess(folder, self.labels)
        self.poller = StepPoller(docker_client, f"flowcon.faults={self.run_id}")
        self.submitted: list[str] = []
        self.answered: dict[str, bool] = {}  # job -> admitted, for answered submits
        self.cancelled: set[str] = set()
        self._stopped = threading.Event()  # a job container exited 143 (a rescale's stop)
        self._events: Any = None

    # -- set-up and tear-down

    def start(self) -> None:
        self.alloc.start()
        if not self.alloc.wait_up():
            raise RuntimeError(f"the allocator did not come up: {self._log_tail()}")
        self.poller.start()
        threading.Thread(target=self._watch_events, name="faults-events", daemon=True).start()
        self._submit(self._spec(0))  # a first job takes all 8 GPUs

    def _watch_events(self) -> None:
        filters = {"type": "container", "event": "die", "label": f"flowcon.faults={self.run_id}"}
        with contextlib.suppress(Exception):
            self._events = self.docker.api.events(decode=True, filters=filters)
            for ev in self._events:
                attrs = (ev.get("Actor") or {}).get("Attributes") or {}
                if attrs.get("exitCode") == "143":
                    self._stopped.set()

    def close(self) -> None:
        """Cancel every job (the allocator removes its containers), stop the allocator,
        then remove whatever is left: containers with the run's label, checkpoint volumes."""
        with contextlib.suppress(Exception):
            if not self.alloc.alive():  # killed by a failed run: bring it back to cancel
                self.alloc.start()
                self.alloc.wait_up()
            c = self.alloc.client()
            for job in self.submitted:
                with contextlib.suppress(Exception):
                    c.cancel(job)
        self.alloc.stop()
        self.poller.stop()
        if self._events is not None:
            with contextlib.suppress(Exception):
                self._events.close()
        for c in self.docker.containers.list(
            ignore_removed=True, all=True, filters={"label": f"flowcon.faults={self.run_id}"}
        ):
            with contextlib.suppress(Exception):
                c.remove(force=True)
        from flowcon.executor.lifecycle import Executor

        for job in self.submitted:
            with contextlib.suppress(Exception):
                self.docker.volumes.get(Executor.volume_name(job)).remove(force=True)
        remove_networks(self.docker, self.run_id)

    def _log_tail(self) -> str:
        return self.alloc.log.read_text(errors="replace")[-800:]

    # -- one run

    def _spec(self, i: int) -> dict[str, Any]:
        from flowcon.testing.ratejob import rate_job_spec

        name = f"{self.run_id}-j{i}"
        return rate_job_spec(name, 10**7, None, PROFILE)

    def _submit(self, spec: dict[str, Any]) -> None:
        name = str(spec["name"])
        self.submitted.append(name)
        try:
            out = self.alloc.client().submit(spec)
        except Exception:
            return  # killed before it answered: the job may or may not exist
        self.answered[name] = bool(out.get("admitted"))

    def _active(self) -> list[dict[str, Any]]:
        return active_jobs(self.alloc.client())

    def one_kill(self, i: int) -> Outcome:
        kind = KINDS[i % len(KINDS)]
        problems: list[str] = []
        active = sorted(self._active(), key=lambda j: j.get("submit_time") or 0)
        if len(active) >= MAX_ACTIVE:
            oldest = str(active[0]["name"])
            self.alloc.client().cancel(oldest)
            self.cancelled.add(oldest)
        time.sleep(self.rng.uniform(0.5, 1.5))  # anywhere in a slot
        self._stopped.clear()
        spec = self._spec(i + 1)
        submit = threading.Thread(target=self._submit, args=(spec,), daemon=True)
        submit.start()
        if kind == "submit":
            time.sleep(self.rng.uniform(0.0, 0.05))
        else:
            self._stopped.wait(15)  # no rescale in 15 s: killed anyway, counted below
        self.alloc.kill()
        submit.join(15)
        t0 = time.monotonic()
        self.alloc.start()
        if not self.alloc.wait_up():
            return [f"{kind} {i}: the allocator did not come back: {self._log_tail()}"], None
        waited = self._wait_running(timeout=45)
        took = None if waited is None else time.monotonic() - t0
        if took is None:
            problems.append(f"{kind} {i}: not every active job runs again 45 s after restart")
        if kind == "rescale" and not self._stopped.is_set():
            problems.append(f"{kind} {i}: no rescale stopped a container within 15 s")
        return problems + [f"{kind} {i}: {p}" for p in self.check()], took

    def _containers(self) -> list[Any]:
        return run_containers(self.docker, self.run_id)

    def _wait_running(self, timeout: float) -> float | None:
        return wait_running(self.alloc.client(), self.docker, self.run_id, timeout)

    def check(self) -> list[str]:
        from flowcon.contract import LABEL_JOB

        problems: list[str] = []
        listed = {str(j["name"]): j for j in self.alloc.client().jobs()}
        for job, admitted in self.answered.items():
            if job in self.cancelled:
                continue
            state = (listed.get(job) or {}).get("state")
            if admitted and state not in ("admitted", "running", "completed"):
                problems.append(f"{job}: admitted, now {state or 'missing'}")
        for job, n in self.alloc.admissions().items():
            if n > 1:
                problems.append(f"{job}: {n} admission records (admitted twice)")
        active = {name for name, j in listed.items() if j.get("state") in ("admitted", "running")}
        running = self._containers()
        for c in running:
            job = c.labels.get(LABEL_JOB, "?")
            if job not in active:
                problems.append(f"{job}: container {c.name} runs, the job is not active")
        problems += duplicate_ranks(running)
        time.sleep(1.0)  # one more poll of the new containers' first lines
        return problems + self.poller.regressions()


@contextmanager
def allocator_kill_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[tuple[Callable[[int], Outcome], Callable[[], list[str]]]]:
    """The ``allocator-kill`` scenario: (one kill and restart, the final check)."""
    import docker

    client = docker.from_env(timeout=60)
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-allocator-") as tmp:
        sess = KillSession(client, rng, Path(tmp), dict(labels or {}))
        try:
            sess.start()

            def final() -> list[str]:
                return sess.check() if sess.alloc.alive() else ["the allocator is not running"]

            yield sess.one_kill, final
        finally:
            try:
                sess.close()
            finally:
                client.close()


# -- the store's disk full -----------------------------------------------------------------

DISK_KB = 2048  # the tmpfs the store lives on: room for the schema and a few jobs


def _spec_plain(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 16,
        "iterations": 100000,
        "profile": {"1": 10.0, "2": 18.0, "4": 32.0},
        "best_effort": True,
    }


@contextmanager
def tmpfs(size_kb: int) -> Iterator[Path]:
    """A private tmpfs of ``size_kb`` (needs root, as the agent does); removed after."""
    folder = Path(tempfile.mkdtemp(prefix="flowcon-faults-tmpfs-"))
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        folder.rmdir()
        detail = getattr(exc, "stderr", b"") or b""
        raise RuntimeError(f"cannot mount a tmpfs (root needed): {detail.decode()[:200]}") from exc
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; returns the filler file."""
    path = folder / "filler"
    with contextlib.suppress(OSError), path.open("wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    with contextlib.suppress(OSError), path.open("ab") as fh:  # the last partial blocks
        while True:
            fh.write(b"\0" * 512)
            fh.flush()
    return path


class DiskFullSession:
    """allocator-disk-full: an in-process allocator (plan only, 0.5 s slots) whose store
    lives on a small tmpfs. Each run fills the disk, then a submit, a cancel of the running
    job and a second submit must each be refused with 507 naming the store's problem (no
    5xx other than that, no traceback), every store row must be unchanged, and /healthz
    must keep answering (503 while rounds cannot be written). Space is freed: health is
    "ok" again within three slots and a new submit is admitted. Recovery: space freed to
    health ok."""

    def __init__(self, folder: Path) -> None:
        from flowcon.allocator.config import AllocatorConfig
        from flowcon.allocator.daemon import Allocator

        cfg = AllocatorConfig(
            state_dir=folder / "state", slot_seconds=0.5, listen="127.0.0.1:0", token=TOKEN
        )
        self.folder = folder
        self.alloc = Allocator(cfg, target=None, total_gpus=4)
        self.alloc.start(port=0)
        self.client = self._client()
        self.client.submit(_spec_plain("keep"))

    def _client(self) -> Any:
        from flowcon.client.http import AllocatorClient

        return AllocatorClient(self.alloc.url, TOKEN, timeout=10)

    def rows(self) -> dict[str, Any]:
        st = self.alloc.store
        return {
            "jobs": sorted((r.name, r.state, r.gpus) for r in st.list_jobs()),
            "admissions": len(st.admissions()),
            "allocations": len(st.allocations()),
            "events": len(st.events()),
        }

    def one_run(self, i: int) -> Outcome:
        filler = fill(self.folder)
        time.sleep(1.2)  # rounds now fail to write: let them
        before = self.rows()
        problems = self._refusals(i)
        after = self.rows()
        if after != before:
            problems.append(f"the store changed while refusing: {before} -> {after}")
        filler.unlink()
        took, late = self._recovery(i)
        names = {r.name for r in self.alloc.store.list_jobs()}
        if f"new{i}" in names or f"other{i}" in names or "keep" not in names:
            problems.append(f"a refused request left a trace, or keep was lost: {sorted(names)}")
        return problems + late, took

    def _refusals(self, i: int) -> list[str]:
        """A submit, a cancel and a submit while the disk is full, then /healthz."""
        from flowcon.client.http import ClientError

        problems: list[str] = []
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("submit", partial(self.client.submit, _spec_plain(f"new{i}"))),
            ("cancel", partial(self.client.cancel, "keep")),
            ("submit", partial(self.client.submit, _spec_plain(f"other{i}"))),
        ]
        for what, call in calls:
            try:
                answer = call()
                problems.append(f"{what} while the disk is full was accepted: {answer}")
            except ClientError as exc:
                if exc.status != 507 or "store cannot be written" not in str(exc):
                    problems.append(f"{what} while full answered {exc.status}: {exc}")
        try:
            health = self.client.health()
            problems.append(f"health says ok while no round can be written: {health}")
        except ClientError as exc:
            if exc.status != 503:
                problems.append(f"health while full answered {exc.status}: {exc}")
        return problems

    def _recovery(self, i: int) -> tuple[float | None, list[str]]:
        """Seconds until /healthz is ok again, and a submit that must be admitted."""
        from flowcon.client.http import ClientError

        problems: list[str] = []
        t0 = time.monotonic()
        took = None
        while took is None and time.monotonic() - t0 < 5.0:
            with contextlib.suppress(ClientError):
                if self.client.health().get("status") == "ok":
                    took = time.monotonic() - t0
            time.sleep(0.02)
        if took is None:
            problems.append("health not ok 5 s after space was freed")
        try:
            if not self.client.submit(_spec_plain(f"late{i}")).get("admitted"):
                problems.append("a submit after space was freed was not admitted")
            self.client.cancel(f"late{i}")  # keep the store small for the next run
        except ClientError as exc:
            problems.append(f"a submit after space was freed answered {exc.status}: {exc}")
        return took, problems

    def close(self) -> None:
        with contextlib.suppress(Exception):
            (self.folder / "filler").unlink()
        self.alloc.stop()


@contextmanager
def allocator_disk_full_session(rng: Any) -> Iterator[Callable[[int], Outcome]]:
    """The ``allocator-disk-full`` scenario (needs root for its tmpfs)."""
    del rng  # every run is the same; the moments are the slots'
    with tmpfs(DISK_KB) as folder:
        sess = DiskFullSession(folder)
        try:
            yield sess.one_run
        finally:
            sess.close()


# -- the engine restarted under the allocator ---------------------------------------------

RESTART_KINDS = ("live-restore", "plain")


class EngineRestartSession:
    """allocator-engine-restart: an in-process allocator (1 s slots) drives rate jobs on a
    private dockerd (flowcon/testing/private_engine.py, never the shared engine). Each run
    stops the engine at a random moment, starts it again 1-3 s later, in turn:

    * with ``--live-restore``: the containers keep running while the engine is away, and
      must be untouched (same ids, never restarted);
    * without it: the engine stops the containers (the jobs checkpoint on SIGTERM), and the
      allocator must resume every job from its checkpoint.

    Checks once every active job runs again: the allocator answered throughout, no job
    lost or failed, never two containers of one job's rank, steps never more than one
    checkpoint interval behind, and an engine restart does not use up a job's restart
    budget (``executor.max_restarts``): runs beyond that budget must still resume. Recovery:
    engine answering to every active job running at its stored world size."""

    def __init__(
        self, rng: Any, folder: Path, labels: dict[str, str], max_restarts: int = 3
    ) -> None:
        import docker

        from flowcon.testing.private_engine import PRIVATE_HOST, setup_private

        self.rng = rng
        self.engine, self.created_bridge = setup_private(folder / "dockerd.log", live_restore=True)
        self.docker = docker.DockerClient(base_url=PRIVATE_HOST, timeout=30)
        self.run_id = f"e{uuid.uuid4().hex[:8]}"
        self.labels = {**labels, "flowcon.faults": self.run_id}
        from flowcon.allocator.config import load_config
        from flowcon.allocator.daemon import Allocator
        from flowcon.allocator.target import build_target

        write_config(
            folder / "allocator.yaml",
            "127.0.0.1:0",
            [4, 4],
            {"network": "none", "max_restarts": max_restarts},
        )
        cfg = load_config(folder / "allocator.yaml", {}, folder / "no-secrets")
        self.alloc = Allocator(cfg, build_target(cfg, client=self.docker, extra_labels=self.labels))
        self.alloc.start(port=0)
        self.poller = StepPoller(self.docker, f"flowcon.faults={self.run_id}")
        self.poller.start()
        from flowcon.client.http import AllocatorClient

        self.client = AllocatorClient(self.alloc.url, TOKEN, timeout=10)

    def start(self) -> None:
        submit_rate_jobs(self.client, self.run_id, self._wait_running, 60, "the private engine")

    def _containers(self) -> list[Any]:
        return run_containers(self.docker, self.run_id)

    def _wait_running(self, timeout: float) -> float | None:
        return wait_running(self.client, self.docker, self.run_id, timeout)

    def one_restart(self, i: int) -> Outcome:

        kind = RESTART_KINDS[i % len(RESTART_KINDS)]
        before = {c.id for c in self._containers()}
        time.sleep(self.rng.uniform(0.0, 1.0))  # anywhere in a slot
        self.engine.stop()
        time.sleep(self.rng.uniform(1.0, 3.0))
        answered = True
        with contextlib.suppress(Exception):
            self.client.health()  # the allocator answers while the engine is away
        try:
            self.client.jobs()
        except Exception:
            answered = False
        restarted_at = time.time()
        self.engine.start(live_restore=(kind == "live-restore"))
        t0 = time.monotonic()
        problems = [] if answered else [f"{kind} {i}: the allocator did not answer"]
        waited = self._wait_running(60)
        took = None if waited is None else time.monotonic() - t0
        if took is None:
            problems.append(f"{kind} {i}: not every active job runs 60 s after the engine")
        after = {c.id for c in self._containers()}
        if kind == "live-restore" and after != before:
            problems.append(f"{kind} {i}: containers changed though they kept running")
        if kind == "plain":  # stopped with the engine: each must have started again since
            stale = [c.name for c in self._containers() if _started_at(c) < restarted_at]
            if stale:
                problems.append(f"{kind} {i}: not started again after the engine: {stale}")
        problems += settled_problems(self.client, self._containers(), self.poller, f"{kind} {i}")
        return problems, took

    def close(self) -> None:
        from flowcon.testing.private_engine import teardown_private

        try:
            cancel_all(self.client)
            self.alloc.stop()
            self.poller.stop()
            with contextlib.suppress(Exception):
                for c in self.docker.containers.list(ignore_removed=True, all=True):
                    c.remove(force=True)
            self.docker.close()
        finally:
            teardown_private(self.engine, self.created_bridge)


def _started_at(container: Any) -> float:
    """The container's State.StartedAt as epoch seconds (nanoseconds cut to micro)."""
    from datetime import datetime

    container.reload()
    raw = str(container.attrs["State"]["StartedAt"])
    head, _, frac = raw.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def rate_spec(name: str) -> dict[str, Any]:
    from flowcon.testing.ratejob import rate_job_spec

    return rate_job_spec(name, 10**7, None, PROFILE)


def submit_rate_jobs(
    client: Any, run_id: str, wait: Callable[[float], float | None], timeout: float, where: str
) -> None:
    """Two rate jobs (``<run id>-j0``, ``-j1``), then wait until they run."""
    for i in range(2):
        client.submit(rate_spec(f"{run_id}-j{i}"))
    if wait(timeout) is None:
        raise RuntimeError(f"the jobs never ran on {where}")


@contextmanager
def allocator_engine_restart_session(
    rng: Any, labels: dict[str, str] | None = None, max_restarts: int = 3
) -> Iterator[Callable[[int], Outcome]]:
    """The ``allocator-engine-restart`` scenario on a private dockerd."""
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-alloc-engine-") as tmp:
        sess = EngineRestartSession(rng, Path(tmp), dict(labels or {}), max_restarts)
        try:
            sess.start()
            yield sess.one_restart
        finally:
            sess.close()


# -- a swarm node stopped and started under the allocator ----------------------------------

NODE2_SOCK = os.environ.get("FLOWCON_NODE2_SOCK", "unix:///run/flowcon-node2.sock")
NODE2_PIDFILE = Path("/run/flowcon-node2.pid")  # scripts/swarm-up.sh's second dockerd
SWARM_IMAGES = ("flowcon/testbox:latest",)


def swarm_up() -> bool:
    """``scripts/swarm-up.sh`` (idempotent; starts node 2's dockerd when it does not
    answer); True when it had something to bring up."""
    up = subprocess.run(
        ["bash", str(REPO / "scripts" / "swarm-up.sh"), *SWARM_IMAGES],
        capture_output=True,
        text=True,
        timeout=480,
    )
    if up.returncode != 0:
        raise RuntimeError(f"scripts/swarm-up.sh failed: {(up.stderr or up.stdout)[-600:]}")
    return "already up" not in up.stderr


def stop_node2(timeout: float = 60.0) -> None:
    """SIGTERM to node 2's dockerd (it stops its containers: the jobs checkpoint and exit
    143, as on a drained or rebooted machine); returns once the process is gone."""
    pid = int(NODE2_PIDFILE.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"node 2's dockerd (pid {pid}) still runs {timeout:.0f} s after SIGTERM")


class SwarmNodeRestartSession:
    """allocator-swarm-node-restart: an in-process allocator (1 s slots, the swarm
    executor, checkpoints in a host folder both nodes see) runs two rate jobs on the
    two-node swarm (scripts/swarm-up.sh; node1 the main engine, node2 a second dockerd),
    2 GPUs a node, so each job holds one node. Each run stops node 2's dockerd at a random
    moment (its containers get SIGTERM: the job checkpoints, exit 143), starts it again
    1-3 s later, and checks once every active job runs again:

    * the jobs on node 1 are untouched: the same containers, never restarted;
    * the job on node 2 runs again (rescheduled or resumed), from at most one checkpoint
      interval back; no job failed or lost, never two containers of one job's rank.

    Recovery: node 2's engine answering to every active job running at its stored world
    size. If this session brought the swarm up, it takes it down at the end."""

    def __init__(self, rng: Any, folder: Path, labels: dict[str, str]) -> None:
        import docker

        self.rng = rng
        self.brought_up = swarm_up()
        self.manager = docker.from_env(timeout=60)
        self.node2 = docker.DockerClient(base_url=NODE2_SOCK, timeout=30)
        self.run_id = f"s{uuid.uuid4().hex[:8]}"
        self.labels = {**labels, "flowcon.faults": self.run_id}
        from flowcon.allocator.config import load_config
        from flowcon.allocator.daemon import Allocator
        from flowcon.allocator.target import build_target

        (folder / "ckpt").mkdir()
        write_config(
            folder / "allocator.yaml",
            "127.0.0.1:0",
            [2, 2],
            # the test swarm's engines are below API 1.46
            {
                "backend": "swarm",
                "checkpoint_host_dir": str(folder / "ckpt"),
                "allow_weak_hardening": True,
                # node 2's engine, so its jobs' checkpoint folders are handed to their user
                "node_hosts": {"node2": NODE2_SOCK},
            },
            prefix="node",
        )
        cfg = load_config(folder / "allocator.yaml", {}, folder / "no-secrets")
        self.alloc = Allocator(
            cfg, build_target(cfg, client=self.manager, extra_labels=self.labels)
        )
        self.alloc.start(port=0)
        self.poller = StepPoller([self.manager, self.node2], f"flowcon.faults={self.run_id}")
        self.poller.start()
        from flowcon.client.http import AllocatorClient

        self.client = AllocatorClient(self.alloc.url, TOKEN, timeout=10)

    def start(self) -> None:
        submit_rate_jobs(self.client, self.run_id, self._wait_running, 120, "the swarm")

    def _engines(self) -> list[Any]:
        return [self.manager, self.node2]

    def _wait_running(self, timeout: float) -> float | None:
        return wait_running(self.client, self._engines(), self.run_id, timeout)

    def _on(self, client: Any) -> list[Any]:
        with contextlib.suppress(Exception):
            return run_containers(client, self.run_id)
        return []

    def one_restart(self, i: int) -> Outcome:
        from flowcon.contract import LABEL_JOB

        problems: list[str] = []
        node1 = {c.id: _started_at(c) for c in self._on(self.manager)}
        on_node2 = {c.labels.get(LABEL_JOB) for c in self._on(self.node2)}
        if not node1 or not on_node2:
            return [f"run {i}: the jobs do not hold both nodes, nothing to check"], None
        time.sleep(self.rng.uniform(0.0, 1.0))  # anywhere in a slot
        stop_node2()
        time.sleep(self.rng.uniform(1.0, 3.0))
        try:
            self.client.jobs()  # the allocator answers while the node is away
        except Exception as exc:
            problems.append(f"run {i}: the allocator did not answer: {exc}")
        restarted_at = time.time()
        up = threading.Thread(target=swarm_up, name="faults-swarm-up", daemon=True)
        up.start()  # starts node 2's dockerd; it rejoins the swarm on its own
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            with contextlib.suppress(Exception):
                self.node2.ping()
                break
            time.sleep(0.05)
        t0 = time.monotonic()  # node 2's engine answers
        waited = self._wait_running(120)
        took = None if waited is None else time.monotonic() - t0
        up.join(120)
        if took is None:
            problems.append(f"run {i}: not every active job runs 120 s after node 2 came back")
        stale = [
            c.name
            for c in run_containers(self._engines(), self.run_id)
            if c.labels.get(LABEL_JOB) in on_node2 and _started_at(c) < restarted_at
        ]
        if stale:
            problems.append(f"run {i}: node 2's job not started again after the node: {stale}")
        after = {c.id: _started_at(c) for c in self._on(self.manager)}
        moved = sorted(set(node1) - set(after))
        if moved:
            problems.append(f"run {i}: node 1's containers changed: {moved} are gone")
        restarted = [cid[:12] for cid, t in node1.items() if cid in after and after[cid] != t]
        if restarted:
            problems.append(f"run {i}: node 1's containers restarted: {restarted}")
        running = run_containers(self._engines(), self.run_id)
        problems += settled_problems(self.client, running, self.poller, f"run {i}")
        return problems, took

    def close(self) -> None:
        try:
            cancel_all(self.client)
            self.alloc.stop()
            self.poller.stop()
            sel = {"label": f"flowcon.faults={self.run_id}"}
            with contextlib.suppress(Exception):
                for svc in self.manager.services.list(filters=sel):
                    svc.remove()
            for client in self._engines():
                with contextlib.suppress(Exception):
                    for c in client.containers.list(ignore_removed=True, all=True, filters=sel):
                        c.remove(force=True)
                with contextlib.suppress(Exception):
                    for v in client.volumes.list(filters=sel):
                        v.remove(force=True)
        finally:
            self.manager.close()
            self.node2.close()
            if self.brought_up:
                subprocess.run(
                    ["bash", str(REPO / "scripts" / "swarm-down.sh")],
                    capture_output=True,
                    timeout=120,
                )


@contextmanager
def allocator_swarm_node_restart_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[Callable[[int], Outcome]]:
    """The ``allocator-swarm-node-restart`` scenario on the two-node swarm."""
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-swarm-node-") as tmp:
        sess = SwarmNodeRestartSession(rng, Path(tmp), dict(labels or {}))
        try:
            sess.start()
            yield sess.one_restart
        finally:
            sess.close()


# -- a corrupted checkpoint ------------------------------------------------------------------

EXAMPLE_IMAGE = "flowcon/elastic-example:latest"


class CorruptCheckpointSession:
    """allocator-corrupt-checkpoint: an in-process allocator (engine executor,
    ``max_restarts: 1``, a checkpoint every 10 steps) runs the elastic-example job and a
    rate job beside it. Each run submits a fresh example job, waits for its checkpoint,
    overwrites the checkpoint file with garbage and kills the job's container. The
    executor restarts it from the checkpoint, the job cannot read it, and after its one
    restart the job must be ``failed`` with a reason naming the unreadable checkpoint; the
    rate job's container is untouched and the allocator answers throughout. Recovery: the
    kill to the job's failed state."""

    def __init__(self, folder: Path, labels: dict[str, str]) -> None:
        import docker

        from flowcon.allocator.config import load_config
        from flowcon.allocator.daemon import Allocator
        from flowcon.allocator.target import build_target

        self.docker = docker.from_env(timeout=60)
        self.docker.images.get(EXAMPLE_IMAGE)  # ImageNotFound: not run
        self.run_id = f"c{uuid.uuid4().hex[:8]}"
        self.labels = {**labels, "flowcon.faults": self.run_id}
        write_config(
            folder / "allocator.yaml",
            "127.0.0.1:0",
            [2],
            {"max_restarts": 1, "checkpoint_every": 10},
        )
        cfg = load_config(folder / "allocator.yaml", {}, folder / "no-secrets")
        self.alloc = Allocator(cfg, build_target(cfg, client=self.docker, extra_labels=self.labels))
        self.alloc.start(port=0)
        from flowcon.client.http import AllocatorClient

        self.client = AllocatorClient(self.alloc.url, TOKEN, timeout=10)
        self.jobs: list[str] = []
        self.keep = f"{self.run_id}-keep"

    def start(self) -> None:
        self.jobs.append(self.keep)  # before the submit: close() cancels it either way
        self.client.submit(rate_job_spec_1gpu(self.keep))

    def _container(self, job: str) -> Any | None:
        from flowcon.contract import LABEL_JOB

        found = self.docker.containers.list(
            ignore_removed=True,
            all=True,
            filters={"label": [f"flowcon.faults={self.run_id}", f"{LABEL_JOB}={job}"]},
        )
        return found[0] if found else None

    def _step(self, job: str) -> int:
        c = self._container(job)
        if c is None:
            return -1
        steps = STEP_RE.findall(c.logs(stdout=True, stderr=False).decode(errors="replace"))
        return int(steps[-1]) if steps else -1

    def _wait(self, until: Callable[[], bool], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with contextlib.suppress(Exception):
                if until():
                    return True
            time.sleep(0.2)
        return False

    def one_run(self, i: int) -> Outcome:
        from flowcon.executor.lifecycle import Executor

        problems: list[str] = []
        victim = f"{self.run_id}-v{i}"
        self.client.submit(
            {
                "name": victim,
                "image": EXAMPLE_IMAGE,
                "command": ["python3", "/opt/train.py"],
                "global_batch_size": 32,
                "iterations": 100000,
                "profile": {"1": 20.0},
                "best_effort": True,
                "launcher": "flowcon",
                "scaling": "restart",
                "env": {"STEP_SLEEP": "0.02"},
            }
        )
        self.jobs.append(victim)
        if not self._wait(lambda: self._step(victim) >= 25, 90):
            return [f"run {i}: the example job never reached step 25"], None
        keep_before = self._container(self.keep)  # after the GPUs were re-divided
        c = self._container(victim)
        if c is None:
            return [f"run {i}: the example job's container vanished"], None
        # SIGKILL (no checkpoint on the way out), then garbage in the checkpoint file
        # through the volume's host path at once, before the executor's next poll
        # restarts the container (the running job rewrites it every 10 steps)
        mount = Path(self.docker.volumes.get(Executor.volume_name(victim)).attrs["Mountpoint"])
        t0 = time.monotonic()
        c.kill()
        (mount / "checkpoint.pt").write_bytes(b"not a checkpoint\n")
        failed = self._wait(lambda: self.client.job(victim)["state"] == "failed", 90)
        took = time.monotonic() - t0 if failed else None
        job = self.client.job(victim)
        if not failed:
            problems.append(f"run {i}: the job is {job['state']} 90 s after the kill")
        elif "unreadable" not in str(job.get("reason")):  # the checkpoint's own error
            problems.append(f"run {i}: the failed job's reason does not say why: {job['reason']}")
        keep_after = self._container(self.keep)
        if keep_before is None or keep_after is None or keep_after.id != keep_before.id:
            problems.append(f"run {i}: the rate job's container changed")
        elif keep_after.attrs["State"]["StartedAt"] != keep_before.attrs["State"]["StartedAt"]:
            problems.append(f"run {i}: the rate job's container was restarted")
        with contextlib.suppress(Exception):
            if self.client.health().get("status") != "ok":
                problems.append(f"run {i}: the allocator is unhealthy")
        with contextlib.suppress(Exception):
            self.client.cancel(victim)  # (if it did not fail) its GPU for the next run
        return problems, took

    def close(self) -> None:
        from flowcon.executor.lifecycle import Executor

        try:
            for job in self.jobs:
                with contextlib.suppress(Exception):
                    self.client.cancel(job)
            self.alloc.stop()
        finally:
            for c in self.docker.containers.list(
                ignore_removed=True, all=True, filters={"label": f"flowcon.faults={self.run_id}"}
            ):
                with contextlib.suppress(Exception):
                    c.remove(force=True)
            for job in self.jobs:
                with contextlib.suppress(Exception):
                    self.docker.volumes.get(Executor.volume_name(job)).remove(force=True)
            remove_networks(self.docker, self.run_id)
            self.docker.close()


def rate_job_spec_1gpu(name: str) -> dict[str, Any]:
    from flowcon.testing.ratejob import rate_job_spec

    return rate_job_spec(name, 10**7, None, {1: 4.0})


@contextmanager
def allocator_corrupt_checkpoint_session(
    rng: Any, labels: dict[str, str] | None = None
) -> Iterator[Callable[[int], Outcome]]:
    """The ``allocator-corrupt-checkpoint`` scenario (needs the elastic-example image)."""
    del rng
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-ckpt-") as tmp:
        sess = CorruptCheckpointSession(Path(tmp), dict(labels or {}))
        try:
            sess.start()
            yield sess.one_run
        finally:
            sess.close()
