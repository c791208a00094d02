"""The pending and active jobs' rows in memory (flowcon/allocator/hot_jobs.py): written
through by the store, seen by other threads once committed, dropped on a rollback, handed
out as copies, merged with the terminal rows SQLite holds."""

from __future__ import annotations

import threading

import pytest

from flowcon.allocator.store import JobRecord, Store, new_record
from flowcon.jobspec.spec import JobSpec, ThroughputProfile


def _rec(name: str, submit: float = 0.0, state: str = "admitted") -> JobRecord:
    spec = JobSpec(
        name,
        "flowcon/testbox:latest",
        ("true",),
        8,
        1000,
        submit,
        deadline=100.0,
        profile=ThroughputProfile(((1, 10.0), (2, 18.0))),
    )
    return new_record(spec, state, {1: 10.0, 2: 18.0})


def _in_thread(call):
    out = []
    th = threading.Thread(target=lambda: out.append(call()))
    th.start()
    th.join()
    return out[0]


def test_a_rolled_back_write_is_not_read(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    seen = []

    def failing_round() -> None:
        with st.transaction():
            rec = st.get_job("a")
            assert rec is not None
            rec.gpus = 4
            st.put_job(rec)
            st.put_job(_rec("b"))
            seen.append(st.get_job("a").gpus)  # type: ignore[union-attr]  # its own write
            raise RuntimeError("the round failed")

    with pytest.raises(RuntimeError):
        failing_round()
    assert seen == [4]
    assert st.get_job("a").gpus == 0  # type: ignore[union-attr]
    assert [r.name for r in st.active_jobs()] == ["a"]
    st.close()


def test_other_threads_see_a_write_once_it_commits(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    with st.transaction():
        rec = st.get_job("a")
        assert rec is not None
        rec.gpus = 2
        st.put_job(rec)
        assert _in_thread(lambda: st.get_job("a").gpus) == 0  # type: ignore[union-attr]
        assert _in_thread(st.active_names) == ["a"]
        assert st.get_job("a").gpus == 2  # type: ignore[union-attr]
    assert _in_thread(lambda: st.get_job("a").gpus) == 2  # type: ignore[union-attr]
    st.close()


def test_a_record_read_is_a_copy(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    rec = st.get_job("a")
    assert rec is not None
    rec.placement.append([0, 1])
    rec.measured[2] = 9.0
    rec.gpus = 8
    again = st.get_job("a")
    assert again is not None
    assert (again.placement, again.measured, again.gpus) == ([], {}, 0)
    st.close()


def test_an_ended_job_leaves_memory_and_is_read_from_sqlite(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("b", submit=2.0))
    st.put_job(_rec("a", submit=1.0))
    st.put_job(_rec("c", submit=3.0, state="running"))
    with st.transaction():
        done = st.get_job("b")
        assert done is not None
        done.state = "completed"
        st.put_job(done)
        assert [r.name for r in st.active_jobs()] == ["a", "c"]  # its own write
        assert _in_thread(st.active_names) == ["a", "b", "c"]  # not committed yet
    assert [r.name for r in st.active_jobs()] == ["a", "c"]
    assert [(r.name, r.state) for r in st.list_jobs()] == [
        ("a", "admitted"),
        ("b", "completed"),
        ("c", "running"),
    ]
    assert [r.name for r in st.list_jobs(("completed",))] == ["b"]
    assert [r.name for r in st.list_jobs(("running",))] == ["c"]
    st.close()
    again = Store(tmp_path / "a.db")  # a restart reads the same from SQLite
    assert [(r.name, r.state) for r in again.list_jobs()] == [
        ("a", "admitted"),
        ("b", "completed"),
        ("c", "running"),
    ]
    assert again.active_names() == ["a", "c"]
    again.close()


def test_a_resubmitted_name_is_hot_again(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a", state="cancelled"))
    assert st.active_jobs() == []
    st.put_job(_rec("a", submit=5.0))
    assert [(r.name, r.state, r.submit_time) for r in st.list_jobs()] == [("a", "admitted", 5.0)]
    st.close()


def test_a_commit_moves_the_counts_around_the_rows_in_memory(tmp_path, monkeypatch):
    """A job that ends is seen by a lister in the terminal rows or in memory, never in
    neither: the terminal rows' count moves before the rows in memory change; and a list
    read at the jobs' count is at least as new as it: that count moves after them."""
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    seen = []
    real = st._hot.commit

    def commit():
        seen.append((st.cold_generation, st.generation))
        real()

    monkeypatch.setattr(st._hot, "commit", commit)
    cold, gen = st.cold_generation, st.generation
    with st.transaction():
        rec = st.get_job("a")
        assert rec is not None
        rec.state = "completed"
        st.put_job(rec)
    assert seen == [(cold + 1, gen)]
    assert (st.cold_generation, st.generation) == (cold + 1, gen + 1)
    st.close()
