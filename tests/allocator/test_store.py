"""The allocator's SQLite store: schema, round trips, append-only events, restart."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from flowcon.allocator.config import AllocatorConfig, ensure_token, load_config
from flowcon.allocator.store import SCHEMA_VERSION, JobRecord, Store, StoreError
from flowcon.jobspec.spec import JobSpec


def _rec(name: str = "a", **kw: object) -> JobRecord:
    base = dict(
        name=name,
        spec=JobSpec(name, "flowcon/testbox:latest", ("true",), 8, 1000, 10.0, deadline=100.0),
        state="admitted",
        submit_time=10.0,
        deadline=100.0,
        soft_deadline=False,
        iterations=1000.0,
        done_iterations=0.0,
        progress_ts=None,
        profile={1: 10.0, 2: 18.0},
    )
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def test_schema_is_versioned_and_wal(tmp_path):
    st = Store(tmp_path / "a.db")
    assert st.schema_version == SCHEMA_VERSION
    mode = st._q1("PRAGMA journal_mode")
    assert mode is not None
    assert mode[0] == "wal"
    st.close()


def test_newer_schema_is_refused(tmp_path):
    st = Store(tmp_path / "a.db")
    st._exec("UPDATE meta SET value='99' WHERE key='schema_version'")
    st.close()
    with pytest.raises(StoreError, match="newer"):
        Store(tmp_path / "a.db")


def test_job_round_trip_survives_reopen(tmp_path):
    st = Store(tmp_path / "a.db")
    rec = _rec(measured={2: 9.5}, measured_n={2: 3}, gpus=2, placement=[[0, 0], [0, 1]])
    st.put_job(rec)
    st.close()
    st = Store(tmp_path / "a.db")
    got = st.get_job("a")
    assert got is not None
    assert got.profile == {1: 10.0, 2: 18.0}
    assert got.measured == {2: 9.5}
    assert got.measured_n == {2: 3}
    assert got.placement == [[0, 0], [0, 1]]
    assert [j.name for j in st.active_jobs()] == ["a"]
    assert st.get_job("nope") is None


def test_events_are_append_only(tmp_path):
    st = Store(tmp_path / "a.db")
    st.append_event("admitted", "a", reason="fits")
    st.append_event("rescaled", "a", old_gpus=0, new_gpus=2)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        st._exec("UPDATE events SET kind='x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        st._exec("DELETE FROM events")
    ev = st.events(job="a")
    assert [e.kind for e in ev] == ["admitted", "rescaled"]
    assert ev[1].data == {"old_gpus": 0, "new_gpus": 2}


def test_transaction_rolls_back_everything(tmp_path):
    st = Store(tmp_path / "a.db")
    # the raise inside the transaction is what is tested
    with pytest.raises(RuntimeError), st.transaction():  # noqa: PT012
        st.put_job(_rec("x"))
        st.append_event("admitted", "x")
        raise RuntimeError("boom")
    assert st.get_job("x") is None
    assert st.count("events") == 0


def test_token_file_is_generated_0600_and_stable(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state")
    tok = ensure_token(cfg)
    assert len(tok) >= 32
    mode = stat.S_IMODE(cfg.token_path.stat().st_mode)
    assert mode == 0o600
    assert ensure_token(cfg) == tok
    cfg.token = "fixed"
    assert ensure_token(cfg) == "fixed"


def test_config_resolves_state_dir_and_rejects_typos(tmp_path):
    p = tmp_path / "alloc.yaml"
    p.write_text("allocator:\n  listen: 127.0.0.1:9999\n  state_dir: st\n  slot_seconds: 2\n")
    cfg = load_config(p)
    assert cfg.port == 9999
    assert cfg.slot_seconds == 2.0
    assert cfg.db_path == (tmp_path / "st" / "allocator.db").resolve()
    p.write_text("allocator:\n  slot_second: 2\n")
    with pytest.raises(ValueError, match="slot_second"):
        load_config(p)
    p.write_text("allocator: [1\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_config(p)


def test_config_policy_is_one_the_simulator_knows(tmp_path):
    from flowcon.policy_registry import POLICIES

    p = tmp_path / "alloc.yaml"
    assert load_config(None).policy == "elasticflow"
    for name in POLICIES:
        p.write_text(f"allocator:\n  policy: {name}\n")
        assert load_config(p).policy == name
    p.write_text("allocator:\n  policy: fifo\n")
    with pytest.raises(
        ValueError, match=r'allocator\.policy: "fifo" is not allowed: one of elasticflow, '
    ):
        load_config(p)


def test_write_failures_are_told_apart_from_bugs() -> None:
    import errno
    import sqlite3

    from flowcon.allocator.api import _failure
    from flowcon.allocator.store import write_failure

    full = sqlite3.OperationalError("database or disk is full")
    assert write_failure(full) == (True, "database or disk is full")
    assert write_failure(OSError(errno.ENOSPC, "No space left on device")) == (
        True,
        "No space left on device",
    )
    assert write_failure(sqlite3.OperationalError("attempt to write a readonly database")) == (
        False,
        "attempt to write a readonly database",
    )
    assert write_failure(sqlite3.OperationalError("no such table: jobs")) is None  # a bug
    assert write_failure(ValueError("x")) is None
    status, body, _ = _failure("POST", "/api/v1/jobs", full)
    assert status == 507
    assert "nothing was changed" in body["error"]  # type: ignore[index]
    status, body, _ = _failure("POST", "/api/v1/jobs", OSError(errno.EROFS, "Read-only"))
    assert status == 503
    assert body["store"] == "Read-only"  # type: ignore[index]
    status, body, _ = _failure("GET", "/x", KeyError("boom"))
    assert status == 500
    assert body["error"].startswith("internal error")  # type: ignore[index]
