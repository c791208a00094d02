"""Fault injection with figures: each scenario runs N times, its invariant is
checked after every run, and the table says how many runs broke it.

    python3 benchmarks/faults.py                       # every implemented scenario
    python3 benchmarks/faults.py --scenario api --runs 1000 --seed 7
    python3 benchmarks/faults.py --scenario agent-foreign-change --runs 10 --repeat 3
    python3 benchmarks/faults.py --scenario agent-foreign-change --replay 4:1808234871

Each run has its own seed, drawn from ``--seed``, and prints one line on stderr (scenario,
session, run, seed, outcome); ``--replay RUN:SEED`` sets up a fresh session and runs that
one run with that seed again (a session's earlier runs are not replayed: a run that
depends on them may need its whole session, ``--seed`` as printed at the start).
``--repeat N`` runs each scenario's whole session N times in a row, each with a fresh
set-up, so a rare interleaving gets many chances.

Prints a table (scenario, runs, violations, recovery p50/p95) and, as its last line, one
JSON object: per scenario {"runs", "violations", "recovery_p95_s"} (null for a scenario
that is not implemented yet; those are listed as such, not counted as passing).

Scenarios implemented:

  hostile-tenant
        one named user (bob) against another's (alice's) jobs and against the host, on a
        real in-process allocator (plan-only) with the operator's reach rules and a quota:
        their job's detail, logs, cancel and name; host paths and path tricks; another
        user's volume; images outside the allowlist; keys asking for more; oversized
        values; forged tokens (benchmarks/faults/tenants.py). Invariant: every attempt is
        refused with a 4xx naming the expected field, no store row changes, alice's jobs
        stay hers and active. Recovery: seconds to the answer.
  api   generated requests against a real in-process allocator (plan-only, no executor)
        over real HTTP: bad JSON and YAML, huge or lying bodies, wrong, missing and
        under-privileged tokens, unknown fields and wrong types, names with ``../`` and
        shell characters in bodies and URLs, junk query arguments, wrong methods, and
        concurrent submits and cancels of one name from several threads. Invariant: no
        answer is 5xx (or missing); a hostile request is refused with a 4xx; every store
        row is identical before and after a refused request; the store is consistent
        after each run (see ``store_problems``); a race leaves its name in the one state
        its answered submits and cancels imply. Recovery: seconds from sending the
        request(s) to the last answer.
  inputs each file of tests/data/malformed (agent and allocator configs, job specs, replay
        scenarios, traces, throughput tables) through its real loader: refused with the
        loader's error naming the file; a traceback-type error or an accepted file is a
        violation. Recovery: seconds the loader took to refuse.
  interrupted-commands
        benchmarks/bench_rescale.py, bench_allocator.py, bench_agent.py and this script
        (its allocator-kill scenario), in turn, stopped by SIGTERM or SIGINT at a random
        moment of their run (real engine): each must exit 130 without a traceback and leave
        no container, network or volume. Recovery: seconds from the signal to its exit.
  agent-kill
        SIGKILL of a real ``flowcon agent`` at a random moment of its round, restarted each
        time, with 6 managed and 2 unmanaged containers (benchmarks/faults/agent.py):
        state file valid, originals unchanged, engine = recorded limits after the next
        round, unmanaged untouched, a final SIGTERM restores. Recovery: restart to the
        end of the first complete round.
  agent-engine-restart
        a private dockerd with --live-restore (flowcon/testing/private_engine.py) stopped
        and started under a real agent, 6 managed + 2 unmanaged containers: the agent
        stays up, logs the engine back, resumes control within 5 s with its lists intact,
        engine = recorded limits. Recovery: engine answering -> first complete round.
  agent-foreign-change
        with a real agent running (6 managed + 2 unmanaged containers), one managed
        container is, in turn, given a new CPU limit by someone else (``docker update``),
        paused for 2-3 rounds, or removed, at a random moment of a round
        (benchmarks/faults/agent.py). Invariants: the agent stays up; a foreign limit
        wins (the container is let go, its limit never written again, docs/agent.md);
        a paused one stays tracked; a removed one leaves the state; the agent-kill
        checks hold for the rest; the final SIGTERM restores. Recovery: the fault to
        the round that shows its effect.
  allocator-kill
        SIGKILL of a real ``flowcon allocator`` (engine executor, rate jobs on testbox)
        0-50 ms after a submit went out, or the moment a rescale stopped a job's old
        containers (benchmarks/faults/allocator.py); restarted on its state directory.
        Invariants: no answered job lost, none admitted twice, never two containers of
        one job's rank, none of an inactive job, a job's new containers start no more
        than one checkpoint interval behind. Recovery: restart to every active job
        running again at its stored world size.
  allocator-disk-full
        an in-process allocator (plan only) whose SQLite store lives on a 2 MB tmpfs
        (root needed): the disk is filled, then a submit, a cancel and a submit must each
        be refused with 507 naming the store's problem, no store row may change, /healthz
        answers 503; space is freed and a new submit is admitted. Recovery: space freed
        to /healthz ok.
  allocator-engine-restart
        a private dockerd (flowcon/testing/private_engine.py) under an in-process allocator
        running two rate jobs, stopped at a random moment and started 1-3 s later, in turn with
        --live-restore (the containers must be untouched) and without (the jobs must resume
        from their checkpoints, without using up their restart budget). Checks: the
        allocator answers throughout, no job lost or failed, no duplicate rank, steps
        within one checkpoint interval. Recovery: engine back to every job running.
  allocator-corrupt-checkpoint
        an in-process allocator (max_restarts 1, a checkpoint every 10 steps) runs the
        elastic-example job beside a rate job; the example job is killed (SIGKILL) and its
        checkpoint file overwritten with garbage before the executor restarts it. It must
        end failed with a reason naming the unreadable checkpoint, the rate job's
        container untouched, the allocator healthy. Recovery: the kill to the failed state.
  agent-hostile-output
        about 10^5 hostile lines from 4 managed containers (garbage JSON, NaN/inf/null,
        partial lines, invalid UTF-8, 10 MB lines, a regex label built to backtrack): a
        fresh agent reads them all without dying, peak RSS under 256 MB, no traceback,
        the regex switched off. Recovery: seconds until everything was read; JSON adds
        peak_rss_mb.
  agent-scale (only with --scenario agent-scale)
        300 testbox containers, every third labeled, started in bursts of 50 (4 at a
        time) under a real agent, then removed: no unlabeled container touched, every
        labeled one limited, the state emptied; figures: seconds to limit all after the
        last burst, agent CPU seconds per round, peak RSS.

A scenario whose set-up fails (no engine) is reported "not run", not passed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import inspect
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.store import (
    ACTIVE_STATES,
    ALL_STATES,
    TERMINAL_STATES,
    JobRecord,
    Store,
)
from flowcon.jobspec.spec import NAME_RE

REPO = Path(__file__).resolve().parents[2]

# -- the framework ------------------------------------------------------------------------


@dataclass
class RunResult:
    """One run of a scenario: what broke its invariant (empty: nothing) and how long the
    system took to answer/recover."""

    violations: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    figures: dict[str, float] = field(default_factory=dict)  # e.g. peak_rss_mb: max kept


# a scenario's session: set up once, yields "do run i", torn down after every run
Session = Callable[[random.Random], AbstractContextManager[Callable[[int], RunResult]]]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    default_runs: int
    session: Session | None = None  # None: not implemented yet
    on_request: str = ""  # why it runs only when named with --scenario


@dataclass
class Summary:
    name: str
    runs: int = 0
    violations: int = 0
    messages: list[str] = field(default_factory=list)
    recovery: list[float] = field(default_factory=list)
    implemented: bool = True
    error: str = ""  # the scenario could not run (no engine, say)
    figures: dict[str, float] = field(default_factory=dict)  # the runs' maxima

    def pct(self, q: float) -> float | None:
        if not self.recovery:
            return None
        if len(self.recovery) == 1:
            return self.recovery[0]
        return statistics.quantiles(self.recovery, n=100, method="inclusive")[int(q) - 1]

    def to_json(self) -> dict[str, Any]:
        if not self.implemented:
            return {"runs": 0, "violations": None, "recovery_p95_s": None, "implemented": False}
        if self.error:
            return {
                "runs": self.runs,
                "violations": None,
                "recovery_p95_s": None,
                "error": self.error,
            }
        p95 = self.pct(95)
        return {
            "runs": self.runs,
            "violations": self.violations,
            "recovery_p95_s": None if p95 is None else round(p95, 4),
            **{k: round(v, 3) for k, v in sorted(self.figures.items())},
        }


SEED_RANGE = 2**31


def run_scenario(
    sc: Scenario,
    runs: int,
    seed: int,
    repeat: int = 1,
    replay: tuple[int, int] | None = None,
) -> Summary:
    """``runs`` runs of ``sc`` in one session, ``repeat`` sessions in a row (each set up
    afresh); a run counts as one violation however many checks fail. ``replay``: (run,
    seed), that one run alone in a fresh session."""
    out = Summary(sc.name, implemented=sc.session is not None)
    if sc.session is None:
        return out
    seeds = random.Random(seed)  # each session's and each run's seed, drawn in order
    try:
        if replay is not None:
            _runs(sc, random.Random(replay[1]), [replay], out, "replay")
            return out
        for k in range(repeat):
            rng = random.Random(seeds.randrange(SEED_RANGE))
            plan = [(i, seeds.randrange(SEED_RANGE)) for i in range(runs)]
            _runs(sc, rng, plan, out, f"session {k + 1}/{repeat}")
    except Exception as exc:  # the scenario's set-up failed: not run, not passed
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def _runs(
    sc: Scenario, rng: random.Random, plan: list[tuple[int, int]], out: Summary, session: str
) -> None:
    """The runs ``plan`` lists ((index, seed) each) in one session of ``sc``; the
    session's generator is seeded with a run's seed right before that run."""
    assert sc.session is not None
    with sc.session(rng) as run:
        for n, (i, run_seed) in enumerate(plan):
            rng.seed(run_seed)
            t0 = time.monotonic()
            result = run(i)
            if n == len(plan) - 1 and isinstance(run, FinalCheck):
                # The scenario's end-of-session invariant counts with its last run.
                result.violations.extend(f"final: {v}" for v in run.final())
            out.runs += 1
            where = f"{session} run {i} seed {run_seed}"
            verdict = f"{len(result.violations)} violation(s)" if result.violations else "ok"
            print(
                f"[{sc.name}] {where}: {verdict} ({time.monotonic() - t0:.2f} s;"
                f" replay: --scenario {sc.name} --replay {i}:{run_seed})",
                file=sys.stderr,
                flush=True,
            )
            if result.violations:
                out.violations += 1
                out.messages.extend(f"{where}: {v}" for v in result.violations)
            if result.recovery_s is not None:
                out.recovery.append(result.recovery_s)
            for key, value in result.figures.items():
                out.figures[key] = max(value, out.figures.get(key, value))


class FinalCheck:
    """A session's run callable with an invariant checked once, after its last run
    (the agent's "a final SIGTERM leaves every managed container unthrottled")."""

    def __init__(
        self,
        run: Callable[[int], tuple[list[str], float | None]],
        final: Callable[[], list[str]],
    ) -> None:
        self._run = run
        self.final = final

    def __call__(self, i: int) -> RunResult:
        problems, took = self._run(i)
        return RunResult(problems, took)


# -- the API scenario ---------------------------------------------------------------------

TOKENS = {
    "operator": "op-t0ken",
    "user": "us3r-t0ken",
    "read": "re4d-t0ken",
    "agent": "ag3nt-t0ken",
}
PROFILE = {"1": 10.0, "2": 18.0, "4": 32.0}
HOSTILE_NAMES = [
    "../../etc/passwd",
    "..",
    "../x",
    "a/../../b",
    "job;rm -rf /",
    "$(reboot)",
    "`id`",
    "a b",
    "Job",
    "-lead",
    "trail-",
    "x" * 41,
    "j\x00b",
    "j\nb",
    "jöb",
    "job|cat",
    "job&&true",
    "'",
    '"',
    "%2e%2e%2f",
    "",
]


@dataclass
class Request:
    """One generated HTTP request; ``hostile``: it must be refused with a 4xx."""

    kind: str
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hostile: bool = True
    length: str | None = "auto"  # Content-Length: "auto", a literal value, None = omitted


@dataclass
class Answer:
    status: int | None
    body: Any
    error: str = ""


def call(port: int, req: Request, timeout: float = 15.0) -> Answer:
    """Send ``req`` over a fresh connection exactly as built (lying Content-Length,
    none, huge bodies) and read the answer; a refused body may end in a reset."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(req.method, req.path, skip_accept_encoding=True)
        for k, v in req.headers.items():
            conn.putheader(k, v)
        if req.length == "auto" and (req.body is not None or req.method in ("POST", "PUT")):
            conn.putheader("Content-Length", str(len(req.body or b"")))
        elif req.length not in (None, "auto"):
            conn.putheader("Content-Length", str(req.length))
        conn.endheaders()
        sent_error = ""
        if req.body:
            try:
                conn.send(req.body)
            except OSError as exc:  # the server refused before reading: its answer is queued
                sent_error = f"send: {exc!r}"
        try:
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            return Answer(None, None, f"{sent_error} read: {exc!r}".strip())
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw[:200]
        return Answer(resp.status, body)
    finally:
        conn.close()


def _auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}", "Content-Type": "application/json"}


def valid_spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 16,
        "iterations": 100000,
        "profile": PROFILE,
        "best_effort": True,
    }


def _submit(spec: Any, role: str = "user", hostile: bool = True, kind: str = "") -> Request:
    body = json.dumps(spec).encode()
    return Request(kind or "spec", "POST", "/api/v1/jobs", body, _auth(role), hostile)


class ApiRequests:
    """The request generator: a seeded ``random.Random`` picks the kind and its details."""

    def __init__(self, rng: random.Random, known: list[str]) -> None:
        self.rng = rng
        self.known = known  # names of jobs that exist (any state)

    def pick_name(self) -> str:
        return self.rng.choice([*self.known, "fz-none"])

    def next(self) -> Request:
        kinds: list[Callable[[], Request]] = [
            self.bad_json,
            self.huge_body,
            self.bad_length,
            self.bad_token,
            self.wrong_role,
            self.unknown_field,
            self.wrong_type,
            self.hostile_name_body,
            self.hostile_name_url,
            self.bad_query,
            self.bad_method,
            self.bad_measurements,
            self.valid_op,
        ]
        return self.rng.choice(kinds)()

    def bad_json(self) -> Request:
        good = json.dumps(valid_spec("fz-json"))
        bodies = [
            good[: self.rng.randrange(1, len(good))].encode(),  # truncated
            b"{'name': 'x'}",
            b"\xff\xfe\x00garbage",
            b"[1, 2, 3]",
            b"null",
            b'"a string"',
            b"   ",
            b"{" * 5000,  # deep nesting
            b"[" * 100000,  # deeper than the parser's recursion limit
            good.replace('"true"', "[" * 900 + '"true"' + "]" * 900).encode(),  # parses, deep
            good.replace(
                '"command"', '"env": {"A": ' + "[" * 900 + "]" * 900 + '}, "command"'
            ).encode(),
            good.replace('"name"', '"name", "x"').encode(),
            b"NaN",
            ("{" + ",".join(f'"k{i}": {i}' for i in range(2000)) + "}").encode(),
        ]
        body = self.rng.choice(bodies)
        headers = _auth("user")
        if self.rng.random() < 0.3:
            headers["Content-Type"] = "application/yaml"
            yamls = [
                b"name: [unclosed",
                b"- a\n- b\n",
                b"!!python/object/apply:os.system [ls]",
                b"[" * 100000,
            ]
            body = self.rng.choice([*yamls, body])
        return Request("bad_json", "POST", "/api/v1/jobs", body, headers)

    def huge_body(self) -> Request:
        size = self.rng.choice([(1 << 20) + 1, 2 << 20, 8 << 20])
        path = self.rng.choice(["/api/v1/jobs", "/api/v1/measurements"])
        role = "user" if path == "/api/v1/jobs" else "agent"
        body = b'{"name": "' + b"a" * size + b'"}'
        return Request("huge_body", "POST", path, body, _auth(role))

    def bad_length(self) -> Request:
        length = self.rng.choice([None, "-1", "abc", "99999999999", "1e3"])
        body = None if length is None else b"{}"
        return Request("bad_length", "POST", "/api/v1/jobs", body, _auth("user"), length=length)

    def bad_token(self) -> Request:
        header = self.rng.choice(
            [
                None,
                "",
                "Bearer",
                "Bearer ",
                "Bearer wrong",
                "Basic " + TOKENS["operator"],
                "bearer " + TOKENS["user"][:-1],
                "Bearer " + TOKENS["user"] + "x",
                "Bearer " + "\u00e9" * 10,
                "Bearer " + "a" * 8000,
            ]
        )
        headers = {"Content-Type": "application/json"}
        if header is not None:
            headers["Authorization"] = header
        method, path = self.rng.choice(
            [
                ("POST", "/api/v1/jobs"),
                ("GET", "/api/v1/jobs"),
                ("DELETE", "/api/v1/jobs/fz-keep"),
                ("POST", "/api/v1/measurements"),
                ("GET", "/api/v1/history"),
                ("GET", "/api/v1/jobs/fz-keep/logs"),
            ]
        )
        body = json.dumps(valid_spec("fz-tok")).encode() if method == "POST" else None
        return Request("bad_token", method, path, body, headers)

    def wrong_role(self) -> Request:
        role, method, path = self.rng.choice(
            [
                ("read", "POST", "/api/v1/jobs"),
                ("agent", "POST", "/api/v1/jobs"),
                ("read", "DELETE", "/api/v1/jobs/fz-keep"),
                ("agent", "DELETE", "/api/v1/jobs/fz-keep"),
                ("user", "POST", "/api/v1/measurements"),
                ("read", "POST", "/api/v1/measurements"),
                ("agent", "GET", "/api/v1/jobs"),
            ]
        )
        body = json.dumps(valid_spec("fz-role")).encode() if method == "POST" else None
        return Request("wrong_role", method, path, body, _auth(role))

    def unknown_field(self) -> Request:
        spec = valid_spec("fz-unknown")
        where = self.rng.choice(["top", "metric", "volumes", "key"])
        if where == "top":
            spec[self.rng.choice(["privileged", "gpu", "Name", "__proto__", "cap_add"])] = True
        elif where == "metric":
            spec["metric"] = {"name": "loss", "regex": "loss=(\\S+)", "goal": 0.1, "extra": 1}
        elif where == "volumes":
            spec["volumes"] = [{"source": "/", "target": "/host", "mode": "rw", "propagation": 1}]
        else:
            spec["profile"] = {"one": 10.0}
        return _submit(spec, kind="unknown_field")

    def wrong_type(self) -> Request:
        spec: dict[str, Any] = valid_spec("fz-types")
        key, value = self.rng.choice(
            [
                ("iterations", "many"),
                ("iterations", -5),
                ("iterations", 1.5),
                ("iterations", True),
                ("global_batch_size", None),
                ("deadline", "yesterday"),
                ("deadline", -1),
                ("deadline", [1]),
                ("profile", {"1": -3.0}),
                ("profile", {"1": float("inf")}),
                ("profile", "../../etc/passwd"),
                ("profile", "/etc/passwd"),
                ("profile", []),
                ("min_gpus", 0),
                ("max_gpus", "all"),
                ("env", ["A=1"]),
                ("env", {"A": {"b": 1}}),
                ("command", 5),
                ("command", []),
                ("image", "img; rm -rf /"),
                ("image", "$(id)"),
                ("volumes", ["/:/host"]),
                ("volumes", "x"),
                ("labels", {"flowcon.managed": 1}),
                ("memory", "1k"),
                ("shm_size", "lots"),
                ("workdir", "rel/path"),
                ("launcher", "bash"),
                ("deadline_kind", "maybe"),
                ("metric", {"regex": "(a+)+$"}),
                ("best_effort", "yes"),
            ]
        )
        if key == "deadline":
            spec.pop("best_effort")
        spec[key] = value
        if self.rng.random() < 0.2:
            spec.pop(self.rng.choice(["name", "image", "command", "iterations"]))
        body = json.dumps(spec, allow_nan=True).encode()
        return Request("wrong_type", "POST", "/api/v1/jobs", body, _auth("user"))

    def hostile_name_body(self) -> Request:
        spec = valid_spec("x")
        spec["name"] = self.rng.choice([*HOSTILE_NAMES, 5, None, ["a"], {"a": 1}])
        dry = self.rng.random() < 0.3
        req = _submit(spec, kind="hostile_name")
        if dry:
            req.path += "?dry_run=true"
        return req

    def hostile_name_url(self) -> Request:
        from urllib.parse import quote

        name = self.rng.choice(HOSTILE_NAMES[:-1])
        raw = self.rng.random() < 0.5
        plain = name.isascii() and all(c.isprintable() and c not in " \n" for c in name)
        seg = name if raw and plain else quote(name, safe="")
        method = self.rng.choice(["DELETE", "GET", "DELETE"])
        suffix = self.rng.choice(["", "", "/logs"]) if method == "GET" else ""
        role = "user" if method == "DELETE" else "read"
        return Request("hostile_url", method, f"/api/v1/jobs/{seg}{suffix}", None, _auth(role))

    def bad_query(self) -> Request:
        req = self.rng.choice(
            [
                Request("bad_query", "GET", "/api/v1/history?since=soon", None, _auth("read")),
                Request(
                    "bad_query", "GET", "/api/v1/jobs/fz-keep/logs?tail=-1", None, _auth("read")
                ),
                Request(
                    "bad_query", "GET", "/api/v1/jobs/fz-keep/logs?rank=x", None, _auth("read")
                ),
                Request(
                    "bad_query", "GET", "/api/v1/jobs/fz-keep/logs?after=1e9", None, _auth("read")
                ),
                _submit(valid_spec("fz-query"), kind="bad_query"),
            ]
        )
        if req.method == "POST":
            req.path += "?dry_run=" + self.rng.choice(["maybe", "2", "yes please"]).replace(
                " ", "%20"
            )
        return req

    def bad_method(self) -> Request:
        method, path = self.rng.choice(
            [
                ("PUT", "/api/v1/jobs"),
                ("PATCH", "/api/v1/jobs/fz-keep"),
                ("POST", "/api/v1/jobs/fz-keep"),
                ("DELETE", "/api/v1/jobs"),
                ("GET", "/api/v1/measurements"),
                ("POST", "/api/v2/jobs"),
                ("DELETE", "/api/v1/jobs/"),
                ("POST", "/api/v1/jobs/fz-keep/logs"),
                ("GET", "/api/v1/nope"),
            ]
        )
        body = b"{}" if method in ("PUT", "PATCH", "POST") else None
        return Request("bad_method", method, path, body, _auth("operator"))

    def bad_measurements(self) -> Request:
        body = self.rng.choice(
            [
                {},
                {"node": ""},
                {"node": 5, "measurements": []},
                {"node": "n", "measurements": {}},
                {"node": "n"},
                [],
                {"node": "n" * 10, "measurements": "all"},
            ]
        )
        return Request(
            "bad_measurements",
            "POST",
            "/api/v1/measurements",
            json.dumps(body).encode(),
            _auth("agent"),
        )

    def valid_op(self) -> Request:
        """Allowed requests (answers 2xx, 404 or 409): they may change the store."""
        name = self.pick_name()
        choice = self.rng.random()
        if choice < 0.4:
            req = _submit(valid_spec(name), hostile=False, kind="valid_submit")
        elif choice < 0.7:
            req = Request(
                "valid_cancel", "DELETE", f"/api/v1/jobs/{name}", None, _auth("user"), False
            )
        elif choice < 0.85:
            m = {
                "container_id": "c" * 12,
                "job": name,
                "step": self.rng.choice([1, -1, "x", None, 1e308]),
                "iterations_per_second": self.rng.choice([5.0, float("nan"), -1, "fast"]),
            }
            body = json.dumps({"node": "n1", "measurements": [m, 5, None]}).encode()
            req = Request(
                "valid_measure", "POST", "/api/v1/measurements", body, _auth("agent"), False
            )
        else:
            path = self.rng.choice(
                ["/api/v1/jobs", f"/api/v1/jobs/{name}", "/api/v1/history", "/healthz", "/metrics"]
            )
            req = Request("valid_read", "GET", path, None, _auth("read"), False)
        return req


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for "a refused request changed nothing"."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table in ("meta", "jobs", "admissions", "allocations", "events", "measurements"):
        rows = store._qall(f"SELECT * FROM {table} ORDER BY rowid")
        out[table] = [tuple(r) for r in rows]
    return out


def job_problems(store: Store, rec: JobRecord) -> list[str]:
    """What is inconsistent about one stored job (see ``store_problems``)."""
    bad: list[str] = []
    tag = f"job {rec.name!r}"
    if not NAME_RE.match(rec.name):
        bad.append(f"{tag}: a name the API must refuse is stored")
    if rec.state not in ALL_STATES:
        bad.append(f"{tag}: unknown state {rec.state!r}")
    if rec.state in ACTIVE_STATES and rec.finish_time is not None:
        bad.append(f"{tag}: {rec.state} with a finish time")
    if rec.state in TERMINAL_STATES and (rec.finish_time is None or rec.gpus):
        bad.append(f"{tag}: {rec.state} with finish {rec.finish_time} and {rec.gpus} GPUs")
    adm = store.admissions(rec.name)
    last = adm[-1]["admitted"] if adm else None
    if rec.state != "profiling" and last is None:
        bad.append(f"{tag}: {rec.state} without an admission row")
    if (rec.state in ACTIVE_STATES and last is False) or (rec.state == "dropped" and last):
        bad.append(f"{tag}: {rec.state} but its last admission says admitted={last}")
    kinds = [e.kind for e in store.events(job=rec.name)]
    if kinds.count("admitted") != sum(1 for a in adm if a["admitted"]):
        bad.append(f"{tag}: {kinds.count('admitted')} admitted events, admissions {adm}")
    if rec.state == "cancelled" and kinds[-1:] != ["cancelled"]:
        bad.append(f"{tag}: cancelled but its last event is {kinds[-1:]}")
    return bad


def store_problems(store: Store, total_gpus: int) -> list[str]:
    """What makes the allocator's store inconsistent (empty: consistent): a bad state or
    name, a finish time on a live job or none on an ended one, GPUs held by an ended job
    or more than the cluster has, a job whose last admission contradicts its state,
    "admitted" events not matching admitted admission rows, or a cancelled job whose last
    event is not its cancellation."""
    bad: list[str] = []
    jobs = store.list_jobs()
    for rec in jobs:
        bad += job_problems(store, rec)
    used = sum(r.gpus for r in jobs if r.state in ACTIVE_STATES)
    if used > total_gpus:
        bad.append(f"{used} GPUs held by active jobs, the cluster has {total_gpus}")
    return bad


def call_alone(alloc: Allocator, port: int, req: Request) -> tuple[Answer, float, list[str]]:
    """``req`` sent while the planning round's lock is held, so only it may change the
    store: its answer, the seconds it took and the store's tables it changed."""
    with alloc._lock:
        before = snapshot(alloc.store)
        t0 = time.monotonic()
        ans = call(port, req)
        took = time.monotonic() - t0
        after = snapshot(alloc.store)
    return ans, took, [t for t in before if before[t] != after[t]]


class ApiFuzz:
    """The API scenario's session: one allocator, one request (or one race) per run."""

    RACE_SHARE = 0.08  # part of the runs that are concurrent submit/cancel races
    RACE_THREADS = 6
    TOTAL_GPUS = 4

    def __init__(self, rng: random.Random, state_dir: Path) -> None:
        self.rng = rng
        cfg = AllocatorConfig(
            state_dir=state_dir,
            slot_seconds=3600.0,  # the loop plans only when woken: the store is still
            listen="127.0.0.1:0",
            token=TOKENS["operator"],
            user_token=TOKENS["user"],
            read_token=TOKENS["read"],
            agent_token=TOKENS["agent"],
        )
        self.alloc = Allocator(cfg, target=None, total_gpus=self.TOTAL_GPUS)
        self.known = ["fz-keep", "fz-a", "fz-b"]
        self.requests = ApiRequests(rng, self.known)
        self.races = 0

    @property
    def port(self) -> int:
        assert self.alloc.server is not None
        return self.alloc.server.port

    def start(self) -> None:
        self.alloc.start(port=0)
        answer = call(self.port, _submit(valid_spec("fz-keep"), hostile=False))
        if answer.status != 201:
            raise RuntimeError(f"set-up submit answered {answer.status}: {answer.body}")

    def stop(self) -> None:
        self.alloc.stop()

    def run(self, i: int) -> RunResult:
        if self.rng.random() < self.RACE_SHARE:
            return self.race()
        return self.one(self.requests.next())

    def one(self, req: Request) -> RunResult:
        ans, took, changed = call_alone(self.alloc, self.port, req)
        problems = self.check_answer(req, ans)
        if ans.status is not None and 400 <= ans.status < 500 and changed:
            problems.append(f"{req.kind}: refused ({ans.status}) but changed {changed}")
        problems += store_problems(self.alloc.store, self.TOTAL_GPUS)
        return RunResult(problems, took)

    @staticmethod
    def check_answer(req: Request, ans: Answer) -> list[str]:
        what = f"{req.kind} {req.method} {req.path[:60]}"
        if ans.status is None:
            return [f"{what}: no answer ({ans.error})"]
        if ans.status >= 500:
            return [f"{what}: {ans.status} {str(ans.body)[:200]}"]
        if req.hostile and not 400 <= ans.status < 500:
            return [f"{what}: hostile request answered {ans.status} {str(ans.body)[:200]}"]
        if not isinstance(ans.body, dict) and req.path.startswith("/api/"):
            return [f"{what}: {ans.status} without a JSON object body"]
        return []

    def race(self) -> RunResult:
        """Several threads submit and cancel one new name at once; the answers must add
        up to the name's final state."""
        self.races += 1
        name = f"fz-race-{self.races}"
        ops = ["submit", "cancel"] * (self.RACE_THREADS // 2)
        self.rng.shuffle(ops)
        answers: list[tuple[str, Answer]] = []
        lock = threading.Lock()
        barrier = threading.Barrier(len(ops))

        def worker(op: str) -> None:
            if op == "submit":
                req = _submit(valid_spec(name), hostile=False, kind="race_submit")
            else:
                req = Request(
                    "race_cancel", "DELETE", f"/api/v1/jobs/{name}", None, _auth("user"), False
                )
            barrier.wait(timeout=10)
            ans = call(self.port, req)
            with lock:
                answers.append((op, ans))

        threads = [threading.Thread(target=worker, args=(op,)) for op in ops]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=30)
        took = time.monotonic() - t0
        problems = self.check_race(name, answers)
        self.known.append(name)
        if len(self.known) > 12:
            self.known.pop(3)
        problems += store_problems(self.alloc.store, self.TOTAL_GPUS)
        return RunResult(problems, took)

    def check_race(self, name: str, answers: list[tuple[str, Answer]]) -> list[str]:
        bad: list[str] = []
        admitted = cancelled = 0
        for op, ans in answers:
            ok = {"submit": (200, 201, 409), "cancel": (200, 404, 409)}[op]
            if ans.status not in ok:
                bad.append(f"race {op} {name}: {ans.status} {str(ans.body)[:200]} {ans.error}")
            admitted += op == "submit" and ans.status == 201
            cancelled += op == "cancel" and ans.status == 200
        store = self.alloc.store
        rec = store.get_job(name)
        adm = store.admissions(name)
        kinds = [e.kind for e in store.events(job=name)]
        if len(adm) != admitted or sum(a["admitted"] for a in adm) != admitted:
            bad.append(f"race {name}: {admitted} submits answered 201, admissions {adm}")
        if kinds.count("cancelled") != cancelled:
            bad.append(f"race {name}: {cancelled} cancels answered 200, events {kinds}")
        live = admitted - cancelled
        if live not in (0, 1):
            bad.append(f"race {name}: {admitted} admitted and {cancelled} cancelled")
        state = rec.state if rec else None
        want = "active" if live == 1 else ("cancelled" if admitted else None)
        got = "active" if state in ACTIVE_STATES else state
        if got != want:
            bad.append(f"race {name}: state {state}, answers imply {want}")
        if rec is not None and rec.active:  # leave it ended: races must not fill the cluster
            call(
                self.port,
                Request("race_cleanup", "DELETE", f"/api/v1/jobs/{name}", None, _auth("user")),
            )
        return bad


@contextmanager
def api_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    with tempfile.TemporaryDirectory(prefix="flowcon-faults-") as tmp:
        fuzz = ApiFuzz(rng, Path(tmp) / "state")
        fuzz.start()
        try:
            yield fuzz.run
        finally:
            fuzz.stop()


@contextmanager
def hostile_tenant_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """One user against another's jobs and the host (benchmarks/faults/tenants.py)."""
    from .tenants import hostile_tenant_session as session

    with session(rng) as run:
        yield run


# -- the inputs scenario ------------------------------------------------------------------

CORPUS = REPO / "tests" / "data" / "malformed"


def load_input(kind: str, path: Path) -> Any:
    """A corpus file through the real loader of its kind (the corpus folder's name)."""
    from flowcon.agent import config as agent_config
    from flowcon.allocator.config import load_config
    from flowcon.jobspec.spec import load_jobspec
    from flowcon.replay.scenario import load_scenario
    from flowcon.sim.loaders import load_throughputs, load_trace

    loaders: dict[str, Callable[[], Any]] = {
        "agent": lambda: agent_config.load(path, environ={}),
        "allocator": lambda: load_config(path, environ={}, secrets_dir=path.parent / "-"),
        "jobspec": lambda: load_jobspec(path, now=0.0),
        "scenario": lambda: load_scenario(path),
        "throughput": lambda: load_throughputs(path.parent),
        "trace": lambda: load_trace(path, load_throughputs(CORPUS / "throughput" / "good")),
    }
    return loaders[kind]()


def corpus_files() -> list[tuple[str, Path]]:
    """(kind, file) of every malformed file (not the helpers they point at)."""
    helpers = {"good", "profile-bad.csv", "profile-notutf8.csv", "profile-list.yml"}
    out = []
    for path in sorted(CORPUS.rglob("*")):
        rel = path.relative_to(CORPUS)
        if path.is_file() and not helpers & set(rel.parts):
            out.append((rel.parts[0], path))
    return out


@contextmanager
def inputs_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """Each run loads one corpus file (cycling): it must be refused with a ValueError
    (the loaders' error types; not UnicodeDecodeError) naming the file."""
    files = corpus_files()

    def run(i: int) -> RunResult:
        kind, path = files[i % len(files)]
        t0 = time.monotonic()
        try:
            load_input(kind, path)
        except UnicodeDecodeError as exc:
            return RunResult([f"{path.name}: UnicodeDecodeError {exc}"], time.monotonic() - t0)
        except ValueError as exc:
            took = time.monotonic() - t0
            if str(path) not in str(exc):
                return RunResult([f"{kind}/{path.name}: message without the file: {exc}"], took)
            return RunResult([], took)
        except Exception as exc:  # a traceback-type error: the violation this counts
            return RunResult([f"{kind}/{path.name}: {type(exc).__name__} {exc}"])
        return RunResult([f"{kind}/{path.name}: accepted"], time.monotonic() - t0)

    yield run


# -- the interrupted-commands scenario ---------------------------------------------------


def _leftovers(client: Any, run: str) -> list[str]:
    """What a bench_rescale run ``run`` left in the engine."""
    from flowcon.executor.backends.engine import network_name
    from flowcon.executor.lifecycle import Executor

    job = f"bench-{run}"
    left = [
        f"container {c.id[:12]}"
        for c in client.containers.list(
            all=True, sparse=True, filters={"label": f"flowcon.bench={run}"}
        )
    ]
    names = {"volume": Executor.volume_name(job), "network": network_name(job)}
    for kind, name in names.items():
        found = client.volumes.list(filters={"name": name}) if kind == "volume" else None
        if kind == "network":
            found = client.networks.list(names=[name])
        left += [f"{kind} {name}" for f in found or [] if f.name == name]
    return left


def interrupted_commands(
    run_id: str, label: str, extra: dict[str, str] | None = None
) -> list[tuple[str, list[str]]]:
    """The commands the interrupted-commands scenario stops, in turn: every benchmark that
    creates engine objects, and this script itself (its allocator-kill scenario), each
    labelling what it creates with ``label`` and ``extra`` (a test's labels)."""
    bench = REPO / "benchmarks"
    py = sys.executable
    more = [a for k, v in (extra or {}).items() for a in ("--label", f"{k}={v}")]
    commands = [
        ("bench_rescale", [py, str(bench / "bench_rescale.py"), "--image",
                           "flowcon/testbox:latest", "--rescales", "50", "--grace", "5",
                           "--run-id", run_id, "--label", label]),
        ("bench_allocator", [py, str(bench / "bench_allocator.py"), "--slot", "1",
                             "--label", label]),
        ("bench_agent", [py, str(bench / "bench_agent.py"), "--sizes", "3", "--rounds",
                         "100", "--gap", "1", "--sources", "auto", "--label", label]),
        ("faults", [py, str(bench / "faults.py"), "--scenario", "allocator-kill",
                    "--label", label]),
    ]  # fmt: skip
    return [(name, cmd + more) for name, cmd in commands]


def _checkout_env() -> dict[str, str]:
    """The environment of a command started from here: this checkout's flowcon first (an
    installed copy may be another checkout's)."""
    path = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def labelled_leftovers(client: Any, label: str) -> list[str]:
    """Containers, volumes and networks carrying ``label`` (k=v)."""
    flt = {"label": label}
    left = [
        f"container {c.id[:12]}"
        for c in client.containers.list(ignore_removed=True, all=True, filters=flt)
    ]
    left += [f"volume {v.name}" for v in client.volumes.list(filters=flt)]
    left += [f"network {n.name}" for n in client.networks.list(filters=flt)]
    return left


@contextmanager
def interrupted_session(
    rng: random.Random, labels: dict[str, str] | None = None
) -> Iterator[Callable[[int], RunResult]]:
    """Each run starts one command of ``interrupted_commands`` in turn (bench_rescale,
    bench_allocator, bench_agent, faults.py), sends SIGTERM or SIGINT at a random moment of
    its run (0 to 4 s after its first container exists) and checks it exits 130 without a
    traceback and leaves no container, network or volume. Recovery: seconds from the signal
    to its exit. Needs the engine and flowcon/testbox:latest."""
    import signal
    import subprocess
    import uuid

    import docker

    client = docker.from_env()

    def sweep(run: str, label: str) -> None:
        for c in client.containers.list(all=True, sparse=True, filters={"label": label}):
            c.remove(force=True)
        for v in client.volumes.list(filters={"label": label}):
            with contextlib.suppress(Exception):
                v.remove(force=True)
        for n in client.networks.list(filters={"label": label}):
            with contextlib.suppress(Exception):
                n.remove()
        subprocess.run(["docker", "network", "rm", f"flowcon-net-bench-{run}"], capture_output=True)
        subprocess.run(
            ["docker", "volume", "rm", "-f", f"flowcon-ckpt-bench-{run}"], capture_output=True
        )

    def run(i: int) -> RunResult:
        run_id = f"f{uuid.uuid4().hex[:6]}"
        label = f"flowcon.faults.interrupted={run_id}"
        name, cmd = interrupted_commands(run_id, label, labels or LABELS)[i % 4]
        sig = rng.choice([signal.SIGTERM, signal.SIGINT])
        proc = subprocess.Popen(
            cmd, env=_checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        problems: list[str] = []
        took = None
        try:
            end = time.monotonic() + 120
            sel = {"label": label}
            while time.monotonic() < end and proc.poll() is None:
                if client.containers.list(all=True, sparse=True, filters=sel):  # type: ignore[arg-type]
                    break
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 4.0))
            if proc.poll() is not None:
                return RunResult([f"{name}: exited {proc.returncode} before the signal"])
            t0 = time.monotonic()
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
            took = time.monotonic() - t0
            if proc.returncode != 130 or "Traceback" in err:
                problems.append(f"{name} {sig.name}: exit {proc.returncode}: {err[-300:]}")
            left = labelled_leftovers(client, label)
            if name == "bench_rescale":
                left += _leftovers(client, run_id)
            problems += [f"{name} {sig.name}: left {x}" for x in sorted(set(left))]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            sweep(run_id, label)
        return RunResult(problems, took)

    try:
        yield run
    finally:
        client.close()


@contextmanager
def agent_kill_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """kill -9 of a real agent at random moments (benchmarks/faults/agent.py)."""
    from .agent import agent_kill_session as session

    with session(rng, dict(LABELS)) as (run, final):
        yield FinalCheck(run, final)


@contextmanager
def agent_engine_restart_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """A private dockerd restarted under a real agent (benchmarks/faults/agent.py)."""
    from .agent import agent_engine_restart_session as session

    with session(rng, dict(LABELS)) as (run, final):
        yield FinalCheck(run, final)


@contextmanager
def agent_foreign_change_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """Someone else updates, pauses or removes a managed container (faults/agent.py)."""
    from .agent import agent_foreign_change_session as session

    with session(rng, dict(LABELS)) as (run, final):
        yield FinalCheck(run, final)


@contextmanager
def agent_hostile_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """~10^5 hostile metric lines from 4 containers (benchmarks/faults/agent.py)."""
    from .agent import agent_hostile_session as session

    with session(rng, dict(LABELS)) as run:

        def one(i: int) -> RunResult:
            problems, took, peak = run(i)
            return RunResult(problems, took, {"peak_rss_mb": peak})

        yield one


@contextmanager
def agent_scale_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """300 containers, 100 labeled, in bursts under a real agent (faults/agent.py)."""
    from .agent import agent_scale_session as session

    with session(rng, dict(LABELS)) as run:

        def one(i: int) -> RunResult:
            problems, took, figures = run(i)
            return RunResult(problems, took, figures)

        yield one


@contextmanager
def allocator_kill_session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
    """kill -9 of a real allocator mid-submit and mid-rescale (faults/allocator.py)."""
    from .allocator import allocator_kill_session as session

    with session(rng, dict(LABELS)) as (run, final):
        yield FinalCheck(run, final)


def _outcome_session(module: str, name: str) -> Callable[[random.Random], Any]:
    """A scenario of benchmarks/``module``.py whose session yields ``run(i) -> (problems,
    recovery seconds)``, as one of this framework's sessions."""

    @contextmanager
    def session(rng: random.Random) -> Iterator[Callable[[int], RunResult]]:
        make = getattr(importlib.import_module(f".{module}", __package__), name)
        takes_labels = "labels" in inspect.signature(make).parameters
        with make(rng, dict(LABELS)) if takes_labels else make(rng) as run:

            def one(i: int) -> RunResult:
                problems, took = run(i)
                return RunResult(problems, took)

            yield one

    session.__doc__ = f"benchmarks/faults/{module}.py's {name}"
    return session


# the store's tmpfs filled; a private dockerd restarted; a corrupted checkpoint;
allocator_disk_full_session = _outcome_session("allocator", "allocator_disk_full_session")
allocator_engine_restart_session = _outcome_session("allocator", "allocator_engine_restart_session")
allocator_corrupt_checkpoint_session = _outcome_session(
    "allocator", "allocator_corrupt_checkpoint_session"
)
# node 2 of the two-node swarm stopped and started
allocator_swarm_node_restart_session = _outcome_session(
    "allocator", "allocator_swarm_node_restart_session"
)


# -- the scenarios ------------------------------------------------------------------------

# KEY=VALUE labels (--label) on everything a session creates, for the sessions that label
LABELS: dict[str, str] = {}

SCENARIOS = [
    Scenario("api", "1,000 generated hostile and concurrent API requests", 1000, api_session),
    Scenario(
        "hostile-tenant",
        "1,000 attempts by one user on another's jobs and on the host",
        1000,
        hostile_tenant_session,
    ),
    Scenario(
        "agent-kill",
        "kill -9 of the agent at random moments of a round",
        20,
        agent_kill_session,
    ),
    Scenario(
        "agent-engine-restart",
        "a private engine (--live-restore) restarted under a running agent",
        5,
        agent_engine_restart_session,
    ),
    Scenario(
        "agent-foreign-change",
        "a managed container's limit changed by someone else, paused, or removed mid-round",
        9,
        agent_foreign_change_session,
    ),
    Scenario(
        "agent-hostile-output",
        "~10^5 generated metric lines: garbage, NaN, 10 MB lines, a backtracking regex",
        1,
        agent_hostile_session,
    ),
    Scenario(
        "agent-scale",
        "300 containers, 100 labeled, in bursts",
        1,
        agent_scale_session,
        on_request="its first run hung this host's dockerd 20.10 at ~210 containers "
        "(docs/reliability.md)",
    ),
    Scenario(
        "allocator-kill",
        "kill -9 of the allocator mid-submit and mid-rescale, restarted on its state",
        10,
        allocator_kill_session,
    ),
    Scenario(
        "allocator-engine-restart",
        "a private engine restarted under a running allocator, with and without live-restore",
        6,
        allocator_engine_restart_session,
    ),
    Scenario(
        "allocator-swarm-node-restart",
        "node 2 of the two-node swarm stopped and started under a running allocator",
        3,
        allocator_swarm_node_restart_session,
    ),
    Scenario(
        "allocator-disk-full",
        "the store's disk full under a running allocator, then freed",
        5,
        allocator_disk_full_session,
    ),
    Scenario(
        "allocator-corrupt-checkpoint",
        "a job's checkpoint file overwritten with garbage, then its container killed",
        3,
        allocator_corrupt_checkpoint_session,
    ),
    Scenario(
        "interrupted-commands",
        "bench_rescale, bench_allocator, bench_agent, faults.py stopped by SIGTERM/SIGINT",
        8,
        interrupted_session,
    ),
    Scenario(
        "inputs",
        "the malformed YAML and CSV corpus, each file once",
        len(corpus_files()),
        inputs_session,
    ),
]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def report(summaries: list[Summary]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="FlowCon fault injection")
    for col in ("scenario", "runs", "violations", "recovery p50", "recovery p95"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for s in summaries:
        if not s.implemented:
            table.add_row(s.name, "-", "not yet implemented", "-", "-")
            continue
        if s.error:
            table.add_row(s.name, str(s.runs), f"not run: {s.error[:60]}", "-", "-")
            continue
        table.add_row(s.name, str(s.runs), str(s.violations), _fmt(s.pct(50)), _fmt(s.pct(95)))
    console = Console(width=110)
    console.print(table)
    for s in summaries:
        for msg in s.messages[:20]:
            console.print(f"[red]{s.name}[/red] {msg}", markup=True, highlight=False)
    print(json.dumps({s.name: s.to_json() for s in summaries}, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", choices=[s.name for s in SCENARIOS])
    ap.add_argument("--runs", type=int, help="runs per scenario (default: its own count)")
    ap.add_argument("--seed", type=int, default=15, help="draws every session's and run's seed")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each scenario's whole session N times, each set up afresh",
    )
    ap.add_argument(
        "--replay",
        metavar="RUN:SEED",
        help="one run again in a fresh session, as its stderr line printed it (one --scenario)",
    )
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=VALUE on everything it creates"
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat: must be at least 1")
    if args.runs is not None and args.runs < 1:
        ap.error("--runs: must be at least 1")
    replay: tuple[int, int] | None = None
    if args.replay is not None:
        run_i, sep, run_seed = args.replay.partition(":")
        if not (sep and run_i.isdigit() and run_seed.isdigit()):
            ap.error(f"--replay: {args.replay!r} is not RUN:SEED (two whole numbers)")
        if not args.scenario or len(args.scenario) != 1:
            ap.error("--replay: name exactly one --scenario")
        replay = (int(run_i), int(run_seed))
    LABELS.update(kv.split("=", 1) for kv in args.label)
    chosen = [
        s for s in SCENARIOS if ((s.name in args.scenario) if args.scenario else not s.on_request)
    ]
    for s in SCENARIOS:
        if s.on_request and s not in chosen:
            print(f"{s.name}: run only with --scenario {s.name}: {s.on_request}", file=sys.stderr)
    print(f"faults: --seed {args.seed}, {args.repeat} session(s) per scenario", file=sys.stderr)
    summaries = [
        run_scenario(s, args.runs or s.default_runs, args.seed, args.repeat, replay) for s in chosen
    ]
    report(summaries)
    return 1 if any(s.violations or s.error for s in summaries) else 0
