"""The ``hostile-tenant`` scenario: one user against another's jobs and against the host.

A real in-process allocator (plan-only: no executor, no containers) with two named users,
alice and bob (docs/security.md), an operator's ``executor`` section that allows host paths
under ``/srv/datasets`` only and images under ``flowcon/*`` and
``registry.example.com/ml/*``, and a quota of 2 active jobs for bob. At set-up alice submits
two jobs and bob two (bob is then at his quota). Each run sends one attempt with bob's
token (or a forged one), generated from a seeded ``random.Random``:

* another user's job: its detail, logs, cancel, a dry run or a submit of its name, the name
  written in other ways in the URL;
* the host: volumes with host paths and path tricks, the Docker socket and its folders,
  ``..``, doubled slashes, another user's scoped volume by its engine name;
* images outside the allowlist, keys that ask for more (``owner``, ``privileged``,
  ``cap_add``, ``network_mode``, ``pid``, ``user: 0``), oversized values and bodies;
* forged tokens: another user's name, bob's token altered, other schemes;
* root spelled another way (``00``, ``00:1000``, ``1000:0``, ``+0``) or a uid outside the
  operator's ``executor.uid_range``;
* environment keys that steer the GPU runtime or the loader (``NVIDIA_VISIBLE_DEVICES``,
  ``CUDA_VISIBLE_DEVICES``, ``LD_PRELOAD``, ...) and mounts where the NVIDIA toolkit reads
  device requests;
* a name in the form FlowCon derives for another job's pre-run (``al-train_p1``), and the
  checkpoint volume of alice's job by its engine name.

Invariants: every attempt is answered with a 4xx (none succeeds, none is a 5xx); an
attempt the spec or the reach rules must refuse names the field it expects; no store row
changes (nothing is created, alice's jobs run on untouched); the store stays consistent.
Recovery: seconds from sending the attempt to its answer.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.quota import Quota

from .scenarios import (
    Answer,
    Request,
    RunResult,
    call,
    call_alone,
    store_problems,
    valid_spec,
)

TENANT_TOKENS = {"operator": "op-tenant-t0ken", "alice": "alice-t0ken-x1", "bob": "bob-t0ken-y2"}
ALICE_JOBS = ("al-train", "al-eval")
BOB_JOBS = ("bo-one", "bo-two")
EXECUTOR = {
    "bind_roots": ["/srv/datasets"],
    "images": ["flowcon/*", "registry.example.com/ml/*"],
    "uid_range": "1000-59999",
}
TOTAL_GPUS = 8

HOST_PATHS = [
    "/etc",
    "/etc/shadow",
    "/root",
    "/root/.ssh",
    "/var/lib/docker",
    "/var/run",
    "/var/run/docker.sock",
    "/run",
    "/run/docker.sock",
    "/var",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/home",
    "/usr",
    "/",
    "//etc",
    "/srv/datasets/../../etc",
    "/srv/datasets/./../../root",
    "/srv/datasets/..",
    "/srv/datasets-evil",
    "/srv/dataset",
    "/srv",
    "/srv/datasets/../datasets-evil",
    "/./etc",
]
IMAGES = [
    "evil.example.com/flowcon/x:1",
    "docker.io/library/ubuntu:22.04",
    "ubuntu",
    "registry.example.com/ml-evil/x:1",
    "registry.example.com/mlx",
    "flowcon",
    "localhost:5000/flowcon/x",
]
MORE_KEYS = [
    ("owner", "alice"),
    ("privileged", True),
    ("cap_add", ["SYS_ADMIN"]),
    ("network_mode", "host"),
    ("pid", "host"),
    ("ipc", "host"),
    ("security_opt", ["seccomp=unconfined"]),
    ("devices", ["/dev/sda:/dev/sda"]),
    ("runtime", "runc"),
    ("user", "0"),
    ("user", "root:root"),
    ("user", 0),
]
# uid 0 or gid 0 in other spellings, malformed ids, and ids outside executor.uid_range
ROOT_SPELLINGS: list[Any] = [
    "00",
    "0000",
    "00:1000",
    "1000:0",
    "1000:00",
    "+0",
    "-0",
    " 0",
    "0 ",
    "\u0660",  # an Arabic-Indic zero
    "0x0",
    "root:1000",
    "1000:root",
    "60001:60001",
    "4294967296",
    "1000:1000:0",
    -1,
]
RUNTIME_ENV = [
    ("NVIDIA_VISIBLE_DEVICES", "all"),
    ("NVIDIA_VISIBLE_DEVICES", "0,1,2,3"),
    ("nvidia_visible_devices", "all"),
    ("NVIDIA_DRIVER_CAPABILITIES", "all"),
    ("NVIDIA_REQUIRE_CUDA", ""),
    ("CUDA_VISIBLE_DEVICES", "0,1"),
    ("DOCKER_RESOURCE_GPU", "0"),
    ("LD_PRELOAD", "/tmp/x.so"),
    ("LD_LIBRARY_PATH", "/tmp"),
    ("LD_AUDIT", "/tmp/x.so"),
]
GPU_MOUNTS = [
    "/var/run/nvidia-container-devices/all",
    "/var/run/nvidia-container-devices",
    "/run/nvidia-container-devices/0",
    "/var//run/nvidia-container-devices/GPU-x",
    "/run/./nvidia-container-devices/all",
]
DERIVED_NAMES = ["al-train_p1", "al-train_p2b64", "al-train_m32", "al_train", "bo-one_p1"]


@dataclass
class Attempt:
    """One hostile request and the field its refusal must name (None: any 4xx)."""

    request: Request
    field: str | None = None


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _spec(name: str, **over: Any) -> dict[str, Any]:
    return {**valid_spec(name), **over}


class Attempts:
    """bob's attempts, each kind picked by the seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0

    def _bob(self, kind: str, method: str, path: str, body: Any = None) -> Request:
        raw = None if body is None else json.dumps(body).encode()
        return Request(kind, method, path, raw, _auth(TENANT_TOKENS["bob"]))

    def _fresh(self) -> str:
        self.n += 1
        return f"bo-x{self.n}"

    def next(self) -> Attempt:
        kinds: list[Callable[[], Attempt]] = [
            self.their_job,
            self.their_name,
            self.host_path,
            self.image,
            self.their_volume,
            self.more_keys,
            self.oversized,
            self.forged_token,
            self.root_spelled,
            self.runtime_env,
            self.gpu_mount,
            self.derived_name,
        ]
        return self.rng.choice(kinds)()

    def their_job(self) -> Attempt:
        name = self.rng.choice(ALICE_JOBS)
        written = self.rng.choice(
            [name, quote(name, safe=""), name.replace("-", "%2D"), f"{name}/", f"./{name}"]
        )
        method, suffix = self.rng.choice(
            [("GET", ""), ("GET", "/logs"), ("DELETE", ""), ("DELETE", "/"), ("GET", "/logs/")]
        )
        prefix = self.rng.choice(["/api/v1/jobs/", "/api/v1/jobs//", "/api/v1/./jobs/"])
        return Attempt(self._bob("their_job", method, f"{prefix}{written}{suffix}"))

    def their_name(self) -> Attempt:
        url = self.rng.choice(["/api/v1/jobs", "/api/v1/jobs?dry_run=true"])
        body = _spec(self.rng.choice(ALICE_JOBS))
        if self.rng.random() < 0.5:
            body = {"spec": body}
        return Attempt(self._bob("their_name", "POST", url, body))

    def host_path(self) -> Attempt:
        path = self.rng.choice(HOST_PATHS)
        target = self.rng.choice(["/host", "/data", "/x"])
        mode = self.rng.choice(["", ":ro", ":rw"])
        vols: list[Any] = ["scratch:/scratch"] * self.rng.randrange(0, 2)
        vols.append(
            f"{path}:{target}{mode}"
            if self.rng.random() < 0.6
            else {"source": path, "target": target, "read_only": mode == ":ro"}
        )
        url = self.rng.choice(["/api/v1/jobs", "/api/v1/jobs?dry_run=true"])
        body = _spec(self._fresh(), volumes=vols)
        return Attempt(
            self._bob("host_path", "POST", url, body), f"volumes[{len(vols) - 1}].source"
        )

    def image(self) -> Attempt:
        body = _spec(self._fresh(), image=self.rng.choice(IMAGES))
        return Attempt(self._bob("image", "POST", "/api/v1/jobs", body), "image")

    def their_volume(self) -> Attempt:
        name = self.rng.choice(
            ["flowcon-user-alice.cache", "flowcon-ckpt-al-train", "flowcon-ckpt-alice.al-train"]
        )
        body = _spec(self._fresh(), volumes=[f"{name}:/steal"])
        return Attempt(self._bob("their_volume", "POST", "/api/v1/jobs", body), "volumes[0].source")

    def more_keys(self) -> Attempt:
        key, value = self.rng.choice(MORE_KEYS)
        body = _spec(self._fresh(), **{key: value})
        return Attempt(self._bob("more_keys", "POST", "/api/v1/jobs", body), key)

    def oversized(self) -> Attempt:
        which = self.rng.choice(["env", "volumes", "iterations", "command", "name", "body"])
        if which == "body":
            raw = b"{" + b" " * (2 << 20) + b"}"
            req = Request("oversized", "POST", "/api/v1/jobs", raw, _auth(TENANT_TOKENS["bob"]))
            return Attempt(req)
        values: dict[str, Any] = {
            "env": {f"K{i}": "v" * 200 for i in range(3000)},
            "volumes": [f"v{i}:/v{i}" for i in range(5000)],
            "iterations": 10**400 if self.rng.random() < 0.5 else -1,
            "command": ["x" * 100_000],
            "name": "b" * 10_000,
        }
        body = {**_spec(self._fresh()), which: values[which]}
        raw = json.dumps(body).encode()
        return Attempt(
            Request("oversized", "POST", "/api/v1/jobs", raw, _auth(TENANT_TOKENS["bob"]))
        )

    def root_spelled(self) -> Attempt:
        body = _spec(self._fresh(), user=self.rng.choice(ROOT_SPELLINGS))
        url = self.rng.choice(["/api/v1/jobs", "/api/v1/jobs?dry_run=true"])
        return Attempt(self._bob("root_spelled", "POST", url, body), "user")

    def runtime_env(self) -> Attempt:
        key, value = self.rng.choice(RUNTIME_ENV)
        body = _spec(self._fresh(), env={"OK": "1", key: value})
        return Attempt(self._bob("runtime_env", "POST", "/api/v1/jobs", body), f"env.{key}")

    def gpu_mount(self) -> Attempt:
        target = self.rng.choice(GPU_MOUNTS)
        body = _spec(self._fresh(), volumes=[f"scratch:{target}"])
        return Attempt(self._bob("gpu_mount", "POST", "/api/v1/jobs", body), "volumes[0].target")

    def derived_name(self) -> Attempt:
        url = self.rng.choice(["/api/v1/jobs", "/api/v1/jobs?dry_run=true"])
        body = _spec(self.rng.choice(DERIVED_NAMES))
        return Attempt(self._bob("derived_name", "POST", url, body), "name")

    def forged_token(self) -> Attempt:
        header = self.rng.choice(
            [
                "Bearer alice",
                f"Bearer {TENANT_TOKENS['bob']}x",
                f"Bearer {TENANT_TOKENS['bob'][:-1]}",
                f"Basic {TENANT_TOKENS['alice']}",
                f"Bearer{TENANT_TOKENS['alice']}",
                "Bearer operator",
                f"Bearer {TENANT_TOKENS['alice'].upper()}",
                "",
            ]
        )
        method, path = self.rng.choice(
            [("DELETE", f"/api/v1/jobs/{ALICE_JOBS[0]}"), ("POST", "/api/v1/jobs")]
        )
        body = json.dumps(_spec(self._fresh())).encode() if method == "POST" else None
        headers = {"Content-Type": "application/json"}
        if header:
            headers["Authorization"] = header
        return Attempt(Request("forged_token", method, path, body, headers))


class HostileTenant:
    """The session: the allocator, alice's and bob's jobs, one attempt per run."""

    def __init__(self, rng: random.Random, state_dir: Path) -> None:
        self.rng = rng
        cfg = AllocatorConfig(
            state_dir=state_dir,
            slot_seconds=3600.0,  # plans only when woken: the store is still between runs
            listen="127.0.0.1:0",
            token=TENANT_TOKENS["operator"],
            users=(("alice", TENANT_TOKENS["alice"]), ("bob", TENANT_TOKENS["bob"])),
            quotas={"bob": Quota(max_jobs=2)},
            raw={"executor": EXECUTOR},
        )
        self.alloc = Allocator(cfg, target=None, total_gpus=TOTAL_GPUS)
        self.attempts = Attempts(rng)

    @property
    def port(self) -> int:
        assert self.alloc.server is not None
        return self.alloc.server.port

    def start(self) -> None:
        self.alloc.start(port=0)
        for who, names in (("alice", ALICE_JOBS), ("bob", BOB_JOBS)):
            for name in names:
                req = Request("setup", "POST", "/api/v1/jobs", json.dumps(_spec(name)).encode())
                req.headers = _auth(TENANT_TOKENS[who])
                ans = call(self.port, req)
                if ans.status != 201:
                    raise RuntimeError(f"set-up submit of {name} answered {ans.status}: {ans.body}")

    def stop(self) -> None:
        self.alloc.stop()

    def run(self, i: int) -> RunResult:
        attempt = self.attempts.next()
        store = self.alloc.store
        ans, took, changed = call_alone(self.alloc, self.port, attempt.request)
        problems = check(attempt, ans)
        if changed:
            problems.append(f"{attempt.request.kind}: the store changed: {changed}")
        for name in ALICE_JOBS:
            rec = store.get_job(name)
            if rec is None or not rec.active or rec.owner != "alice":
                problems.append(f"alice's {name} is no longer hers and active: {rec}")
        problems += store_problems(store, TOTAL_GPUS)
        return RunResult(problems, took)


def check(attempt: Attempt, ans: Answer) -> list[str]:
    req = attempt.request
    what = f"{req.kind} {req.method} {req.path[:60]}"
    if ans.status is None:
        if req.kind == "oversized":  # a refused 2 MB body may end in a reset
            return []
        return [f"{what}: no answer ({ans.error})"]
    if not 400 <= ans.status < 500:
        return [f"{what}: answered {ans.status}, not refused: {str(ans.body)[:200]}"]
    if attempt.field is not None:
        field = ans.body.get("field") if isinstance(ans.body, dict) else None
        if field != attempt.field:
            return [f"{what}: refused naming {field!r}, not {attempt.field!r}: {ans.body}"]
    return []


@contextlib.contextmanager
def hostile_tenant_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-tenant-") as tmp:
        sess = HostileTenant(rng, Path(tmp) / "state")
        sess.start()
        try:
            yield sess.run
        finally:
            sess.stop()
