"""The allocator's embedded state: one SQLite file in WAL mode.

Everything the daemon decides is written here before it acts, so a restarted daemon
picks up where it stopped: jobs (current state), admissions and allocations (history of
decisions), events (an append-only log; triggers refuse UPDATE and DELETE) and the raw
measurements the agents sent. One connection guarded by a lock: the HTTP threads and the
planning loop share it, and SQLite serialises writers anyway.
"""

from __future__ import annotations

import errno
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from flowcon.allocator.hot_jobs import HotJobs
from flowcon.allocator.records import JsonObject, spec_from_dict, spec_to_dict
from flowcon.jobspec.spec import JobSpec

# the tables' layout; a job's spec is JSON in ``jobs.spec`` (flowcon.allocator.records),
# read back with the defaults of keys added since, so older rows load unchanged
SCHEMA_VERSION = 1

# States a job moves through. "profiling" = its pre-run (``profile: auto``) runs, no
# admission decision yet; "admitted" = guaranteed but holding no GPUs right now.
PENDING_STATES = ("profiling",)
ACTIVE_STATES = ("admitted", "running")
TERMINAL_STATES = ("completed", "dropped", "cancelled", "failed")
ALL_STATES = PENDING_STATES + ACTIVE_STATES + TERMINAL_STATES
HOT_STATES = PENDING_STATES + ACTIVE_STATES  # kept in memory (flowcon.allocator.hot_jobs)
# the owner of records from before owners: the principal of the shared user_token
LEGACY_OWNER = "user"

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submit_time REAL NOT NULL,
    deadline REAL,
    soft_deadline INTEGER NOT NULL DEFAULT 0,
    iterations REAL NOT NULL,
    done_iterations REAL NOT NULL DEFAULT 0,
    progress_ts REAL,
    observed_ts REAL,
    profile TEXT NOT NULL,
    measured TEXT NOT NULL DEFAULT '{}',
    measured_n TEXT NOT NULL DEFAULT '{}',
    gpus INTEGER NOT NULL DEFAULT 0,
    placement TEXT NOT NULL DEFAULT '[]',
    predicted_finish REAL,
    reason TEXT NOT NULL DEFAULT '',
    finish_time REAL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS admissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    job TEXT NOT NULL,
    admitted INTEGER NOT NULL,
    reason TEXT NOT NULL,
    min_share TEXT NOT NULL,
    measured INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS allocations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    job TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    placement TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    job TEXT,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    received REAL NOT NULL,
    node TEXT NOT NULL,
    job TEXT,
    container_id TEXT NOT NULL,
    name TEXT NOT NULL,
    step REAL,
    its_per_s REAL,
    metric TEXT,
    value REAL,
    gpus INTEGER
);
CREATE INDEX IF NOT EXISTS events_job ON events(job);
CREATE INDEX IF NOT EXISTS measurements_job ON measurements(job, ts);
CREATE INDEX IF NOT EXISTS admissions_job ON admissions(job);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"""


class StoreError(RuntimeError):
    pass


# SQLite's messages (sqlite3.OperationalError) when the database cannot be written.
_FULL = ("database or disk is full",)
_UNWRITABLE = ("disk I/O error", "attempt to write a readonly database", "unable to open")


def write_failure(exc: BaseException) -> tuple[bool, str] | None:
    """(disk full?, SQLite's or the OS's message) when ``exc`` is the store failing to
    write (full disk or quota, I/O error, read-only file system); None for anything else.

    A failed write changes nothing: every write is one statement or one transaction,
    and SQLite rolls a failed one back (tested on a full tmpfs)."""
    if isinstance(exc, sqlite3.OperationalError):
        msg = str(exc)
        if any(m in msg for m in _FULL):
            return True, msg
        if any(m in msg for m in _UNWRITABLE):
            return False, msg
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True, exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EIO):
        return False, exc.strerror or str(exc)
    return None


@dataclass
class JobRecord:
    """One row of ``jobs``; ``profile`` and ``measured`` map GPU count -> iterations/s."""

    name: str
    spec: JobSpec
    state: str
    submit_time: float
    deadline: float | None
    soft_deadline: bool
    iterations: float
    done_iterations: float
    progress_ts: float | None
    profile: dict[int, float]
    observed_ts: float | None = None  # ts of the last step the job itself reported
    measured: dict[int, float] = field(default_factory=dict)
    measured_n: dict[int, float] = field(default_factory=dict)
    gpus: int = 0
    placement: list[list[int]] = field(default_factory=list)  # [[node, GPU index], ...]
    predicted_finish: float | None = None
    reason: str = ""
    finish_time: float | None = None
    updated: float = 0.0

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def owner(self) -> str:
        """Who submitted it; a record from before owners belongs to the legacy ``user``."""
        return self.spec.owner or LEGACY_OWNER

    @property
    def pending(self) -> bool:
        """Submitted, decision not taken yet (its pre-run is running)."""
        return self.state in PENDING_STATES

    @property
    def progress(self) -> float:
        if self.iterations <= 0:
            return 1.0
        return max(0.0, min(1.0, self.done_iterations / self.iterations))

    def copy(self) -> JobRecord:
        """An independent copy (its curves and placement too; the spec is immutable)."""
        new = object.__new__(JobRecord)
        new.__dict__.update(self.__dict__)
        new.profile = dict(self.profile)
        new.measured = dict(self.measured)
        new.measured_n = dict(self.measured_n)
        new.placement = [list(p) for p in self.placement]
        return new

    @property
    def deadline_met(self) -> bool | None:
        """True/False once the job completed; None while it runs or without a deadline."""
        if self.state != "completed" or self.deadline is None or self.finish_time is None:
            return None
        return self.finish_time <= self.deadline


def new_record(spec: JobSpec, state: str, profile: dict[int, float], reason: str = "") -> JobRecord:
    """A job's first record: nothing done yet; hard or soft deadline (the spec's
    ``deadline_kind``), or best effort."""
    return JobRecord(
        name=spec.name,
        spec=spec,
        state=state,
        submit_time=spec.submit_time,
        deadline=spec.deadline,
        soft_deadline=spec.soft_deadline,
        iterations=float(spec.iterations),
        done_iterations=0.0,
        progress_ts=None,
        profile=profile,
        reason=reason,
    )


@dataclass(frozen=True)
class Event:
    id: int
    ts: float
    kind: str
    job: str | None
    data: JsonObject  # the event kind's own fields

    def to_json(self) -> JsonObject:
        return {"id": self.id, "ts": self.ts, "kind": self.kind, "job": self.job, **self.data}


def _curve_to_json(curve: Mapping[int, float]) -> str:
    return json.dumps({str(int(k)): float(v) for k, v in curve.items()}, sort_keys=True)


def _curve_from_json(text: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in json.loads(text or "{}").items()}


class _Decoded:
    """Job rows' JSON texts and what they decode to, both ways: every planning round
    reads and writes each active job, whose spec and curves rarely change, and decoding
    a spec costs more than the rest of the row. A ``JobSpec`` is immutable, so one object
    serves every record read from the same text; curves are handed out as fresh dicts
    (the intake updates a record's ``measured`` in place). At most ``size`` entries a
    kind; a full cache starts over."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._specs: dict[str, JobSpec] = {}
        self._texts: dict[int, tuple[JobSpec, str]] = {}  # id(spec) -> (spec, its text)
        self._curves: dict[str, tuple[tuple[int, float], ...]] = {}
        self._curve_texts: dict[tuple[tuple[int, float], ...], str] = {}

    def _room(self, d: dict[object, object]) -> None:
        if len(d) >= self.size:
            d.clear()

    def spec(self, text: str) -> JobSpec:
        spec = self._specs.get(text)
        if spec is None:
            spec = spec_from_dict(json.loads(text))
            self._room(self._specs)  # type: ignore[arg-type]
            self._specs[text] = spec
            self._room(self._texts)  # type: ignore[arg-type]
            self._texts[id(spec)] = (spec, text)
        return spec

    def spec_text(self, spec: JobSpec) -> str:
        known = self._texts.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
        text = json.dumps(spec_to_dict(spec), sort_keys=True, default=str)
        self._room(self._texts)  # type: ignore[arg-type]
        self._texts[id(spec)] = (spec, text)
        return text

    def curve_text(self, curve: Mapping[int, float]) -> str:
        key = tuple(curve.items())
        text = self._curve_texts.get(key)
        if text is None:
            text = _curve_to_json(curve)
            self._room(self._curve_texts)  # type: ignore[arg-type]
            self._curve_texts[key] = text
        return text

    def curve(self, text: str) -> dict[int, float]:
        items = self._curves.get(text)
        if items is None:
            items = tuple(_curve_from_json(text).items())
            self._room(self._curves)  # type: ignore[arg-type]
            self._curves[text] = items
        return dict(items)


_JOB_COLUMNS = (
    "name, spec, state, submit_time, deadline, soft_deadline, iterations, done_iterations, "
    "progress_ts, observed_ts, profile, measured, measured_n, gpus, placement, "
    "predicted_finish, reason, finish_time, updated"
)


def _jobs_query(states: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The SQL and parameters that read the job rows in ``states``, in ``list_jobs``' order."""
    marks = ",".join("?" for _ in states)
    sql = f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY submit_time, name"
    return sql, tuple(states)


class Store:
    """Thread-safe access to the allocator database."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._depth = 0
        self._decoded = _Decoded()
        # counts committed writes of job rows: what was read of the jobs at one value is
        # current while it holds (read it before the rows: it moves once a write is
        # visible to other connections)
        self.generation = 0
        self._job_writes = 0  # inside the open transaction
        # the same for rows of terminal jobs, and what was read of them at one value
        self.cold_generation = 0
        self._cold_writes = 0
        self._cold: tuple[int, list[JobRecord]] | None = None
        # reads from threads outside a transaction use a connection of their own (WAL:
        # they see the last committed state), so a GET never waits for a planning round
        # that holds the writer; ":memory:" has one database per connection
        self._file = str(path) != ":memory:"
        self._owner: int | None = None  # the thread inside a transaction
        self._local = threading.local()
        self._readers: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._readers_lock = threading.Lock()  # not the writer's: a round holds that one
        self._conn = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        # the pending and active jobs' rows as committed (written through, read from here)
        self._hot: HotJobs[JobRecord] = HotJobs(HOT_STATES, JobRecord.copy)
        with self._lock:  # the writer's connection: no reader of this thread's is opened
            rows = self._conn.execute(*_jobs_query(HOT_STATES)).fetchall()
        self._hot.load(self._job_from_row(r) for r in rows)

    # -- plumbing ---------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            cur = self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name='meta'"
            )
            version = 0
            if cur.fetchone() is not None:
                row = self._conn.execute(
                    "SELECT value FROM meta WHERE key='schema_version'"
                ).fetchone()
                version = int(row["value"]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this flowcon "
                    f"({SCHEMA_VERSION}); upgrade flowcon"
                )
            if version < 1:
                self._conn.executescript("BEGIN;" + _SCHEMA_V1 + "COMMIT;")
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )

    @property
    def schema_version(self) -> int:
        row = self._q1("SELECT value FROM meta WHERE key='schema_version'")
        return int(row["value"]) if row else 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes atomically; nests (inner blocks join the outer transaction)."""
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._conn.execute("BEGIN IMMEDIATE")
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._owner = None
                    self._job_writes = self._cold_writes = 0
                    self._hot.rollback()
                    self._conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self._owner = None
                try:
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._hot.rollback()
                    self._job_writes = self._cold_writes = 0
                    raise
                # the terminal rows' count before the rows in memory (a reader between
                # the two reads them again and finds a job that just ended in both, not
                # in neither), the jobs' count after them (what was read at a count is
                # at least as new as it)
                self.cold_generation += self._cold_writes
                self._hot.commit()
                self.generation += self._job_writes
                self._job_writes = self._cold_writes = 0

    def _exec(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, params)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection a read uses: the writer's inside this thread's transaction (it
        must see its own writes), otherwise the thread's own read connection."""
        if not self._file or self._owner == threading.get_ident():
            with self._lock:
                yield self._conn
            return
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._readers_lock:  # and close those of threads that ended (HTTP requests')
                live = []
                for th, c in self._readers:
                    if th.is_alive():
                        live.append((th, c))
                    else:
                        c.close()
                self._readers = [*live, (threading.current_thread(), conn)]
        yield conn

    def _q1(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Row | None:
        with self._reading() as conn:
            row: sqlite3.Row | None = conn.execute(sql, params).fetchone()
            return row

    def _qall(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._reading() as conn:
            return list(conn.execute(sql, params).fetchall())

    def _rows_of(self, table: str, job: str | None) -> list[sqlite3.Row]:
        """Every row of one of our log tables, oldest first; only ``job``'s when given."""
        if job:
            return self._qall(f"SELECT * FROM {table} WHERE job=? ORDER BY id", (job,))
        return self._qall(f"SELECT * FROM {table} ORDER BY id")

    def close(self) -> None:
        with self._lock, self._readers_lock:
            for _, conn in self._readers:
                conn.close()
            self._readers = []
            self._conn.close()

    # -- jobs -------------------------------------------------------------------------

    def _job_from_row(self, row: sqlite3.Row) -> JobRecord:
        decoded = self._decoded
        return JobRecord(
            name=row["name"],
            spec=decoded.spec(row["spec"]),
            state=row["state"],
            submit_time=row["submit_time"],
            deadline=row["deadline"],
            soft_deadline=bool(row["soft_deadline"]),
            iterations=row["iterations"],
            done_iterations=row["done_iterations"],
            progress_ts=row["progress_ts"],
            observed_ts=row["observed_ts"],
            profile=decoded.curve(row["profile"]),
            measured=decoded.curve(row["measured"]),
            measured_n=decoded.curve(row["measured_n"]),
            gpus=row["gpus"],
            placement=json.loads(row["placement"]),
            predicted_finish=row["predicted_finish"],
            reason=row["reason"],
            finish_time=row["finish_time"],
            updated=row["updated"],
        )

    def put_job(self, job: JobRecord) -> None:
        """Insert or replace a job row (a resubmitted terminal job reuses its name)."""
        job.updated = time.time()
        self._exec(
            f"INSERT OR REPLACE INTO jobs ({_JOB_COLUMNS}) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                job.name,
                self._decoded.spec_text(job.spec),
                job.state,
                job.submit_time,
                job.deadline,
                int(job.soft_deadline),
                job.iterations,
                job.done_iterations,
                job.progress_ts,
                job.observed_ts,
                self._decoded.curve_text(job.profile),
                self._decoded.curve_text(job.measured),
                self._decoded.curve_text(job.measured_n),
                job.gpus,
                json.dumps(job.placement, default=str),
                job.predicted_finish,
                job.reason,
                job.finish_time,
                job.updated,
            ),
        )
        with self._lock:
            cold = int(job.state not in HOT_STATES)
            if self._depth:
                self._job_writes += 1  # counted once the transaction commits
                self._cold_writes += cold
                self._hot.write(job, staged=True)
            else:  # in the order ``transaction`` commits them
                self.cold_generation += cold
                self._hot.write(job, staged=False)
                self.generation += 1

    def _own(self) -> bool:
        """Whether this thread writes the open transaction (it sees its own writes)."""
        return self._owner == threading.get_ident()

    def get_job(self, name: str) -> JobRecord | None:
        hot = self._hot.get(name, self._own())
        if hot is not None:
            return hot
        row = self._q1(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE name=?", (name,))
        return self._job_from_row(row) if row else None

    def _sql_jobs(self, states: tuple[str, ...]) -> list[JobRecord]:
        return [self._job_from_row(r) for r in self._qall(*_jobs_query(states))]

    def list_jobs(
        self, states: tuple[str, ...] | None = None, copies: bool = True
    ) -> list[JobRecord]:
        """The jobs in ``states`` (all without), by submit time then name. The pending
        and active ones come from memory, the terminal ones from SQLite. ``copies=False``
        (a caller that only reads them, such as a view): the pending and active records
        are the store's own, which it replaces on a write and never changes."""
        wanted = tuple(states) if states else ALL_STATES
        hot_states = tuple(s for s in wanted if s in HOT_STATES)
        cold_states = tuple(s for s in wanted if s not in HOT_STATES)
        own = self._own()
        hot = self._hot.rows(hot_states, own, copies) if hot_states else []
        if not cold_states:
            return hot
        cold = self._cold_rows(cold_states, own, copies)
        if not hot:
            return cold
        # a job that ended between the two reads is in both: the later write counts
        by_name = {r.name: r for r in hot}
        for r in cold:
            seen = by_name.get(r.name)
            if seen is None or r.updated >= seen.updated:
                by_name[r.name] = r
        out = list(by_name.values())  # both reads were of ``wanted`` states only
        out.sort(key=lambda r: (r.submit_time, r.name))
        return out

    def _cold_rows(self, states: tuple[str, ...], own: bool, copies: bool) -> list[JobRecord]:
        """The terminal jobs in ``states``: read from SQLite once per change of them
        (``cold_generation``) and kept; the open transaction's writer reads its own."""
        if own and self._cold_writes:
            return self._sql_jobs(states)
        gen = self.cold_generation  # before the rows: a later commit makes it stale
        cached = self._cold
        if cached is None or cached[0] != gen:
            cached = (gen, self._sql_jobs(TERMINAL_STATES))
            if self.cold_generation == gen:
                self._cold = cached
        wanted = frozenset(states)
        rows = [r for r in cached[1] if r.state in wanted]
        return [r.copy() for r in rows] if copies else rows

    def active_jobs(self, copies: bool = True) -> list[JobRecord]:
        """The admitted and running jobs (``copies=False``: see ``list_jobs``)."""
        return self.list_jobs(ACTIVE_STATES, copies)

    def active_names(self) -> list[str]:
        """The active jobs' names, in ``active_jobs``' order, without copying a row."""
        return self._hot.names(ACTIVE_STATES, self._own())

    # -- history ----------------------------------------------------------------------

    def record_admission(
        self,
        job: str,
        admitted: bool,
        reason: str,
        min_share: dict[str, int] | None,
        measured: bool,
        ts: float,
    ) -> None:
        self._exec(
            "INSERT INTO admissions (ts, job, admitted, reason, min_share, measured) "
            "VALUES (?,?,?,?,?,?)",
            (ts, job, int(admitted), reason, json.dumps(min_share, default=str), int(measured)),
        )

    def admissions(self, job: str | None = None) -> list[JsonObject]:
        rows = self._rows_of("admissions", job)
        return [
            {
                "id": r["id"],
                "ts": r["ts"],
                "job": r["job"],
                "admitted": bool(r["admitted"]),
                "reason": r["reason"],
                "min_share": json.loads(r["min_share"]),
                "measured": bool(r["measured"]),
            }
            for r in rows
        ]

    def record_allocation(self, job: str, gpus: int, placement: list[list[int]], ts: float) -> None:
        self._exec(
            "INSERT INTO allocations (ts, job, gpus, placement) VALUES (?,?,?,?)",
            (ts, job, gpus, json.dumps(placement, default=str)),
        )

    def allocations(self, job: str | None = None) -> list[JsonObject]:
        rows = self._rows_of("allocations", job)
        return [
            {
                "id": r["id"],
                "ts": r["ts"],
                "job": r["job"],
                "gpus": r["gpus"],
                "placement": json.loads(r["placement"]),
            }
            for r in rows
        ]

    def append_event(
        self, kind: str, job: str | None = None, ts: float | None = None, **data: object
    ) -> None:
        self._exec(
            "INSERT INTO events (ts, kind, job, data) VALUES (?,?,?,?)",
            (time.time() if ts is None else ts, kind, job, json.dumps(data, default=str)),
        )

    def events(
        self, job: str | None = None, kind: str | None = None, since_id: int = 0
    ) -> list[Event]:
        clauses, params = ["id > ?"], [since_id]
        if job is not None:
            clauses.append("job = ?")
            params.append(job)  # type: ignore[arg-type]
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)  # type: ignore[arg-type]
        rows = self._qall(
            f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY id", tuple(params)
        )
        return [Event(r["id"], r["ts"], r["kind"], r["job"], json.loads(r["data"])) for r in rows]

    # -- measurements -----------------------------------------------------------------

    def add_measurement(
        self,
        *,
        ts: float,
        node: str,
        job: str | None,
        container_id: str,
        name: str,
        step: float | None,
        its_per_s: float | None,
        metric: str | None,
        value: float | None,
        gpus: int | None,
    ) -> None:
        self._exec(
            "INSERT INTO measurements (ts, received, node, job, container_id, name, step, "
            "its_per_s, metric, value, gpus) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (ts, time.time(), node, job, container_id, name, step, its_per_s, metric, value, gpus),
        )

    def measurements(self, job: str | None = None) -> list[JsonObject]:
        rows = self._rows_of("measurements", job)
        return [dict(r) for r in rows]

    # -- settings kept beside the jobs (``meta``) -----------------------------------------

    def get_meta(self, key: str) -> object:
        """The JSON value stored under ``key`` (None when absent or not JSON)."""
        row = self._q1("SELECT value FROM meta WHERE key=?", (key,))
        if row is None:
            return None
        try:
            return json.loads(row["value"])
        except ValueError:
            return None

    def put_meta(self, key: str, value: object) -> None:
        if key == "schema_version":
            raise ValueError("schema_version is the store's own")
        self._exec(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value))
        )

    def count(self, table: str) -> int:
        if table not in ("jobs", "admissions", "allocations", "events", "measurements"):
            raise ValueError(table)
        row = self._q1(f"SELECT COUNT(*) AS n FROM {table}")
        return int(row["n"]) if row else 0
