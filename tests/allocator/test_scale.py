"""The allocator at a cluster's size (benchmarks/bench_scale.py): reads that do not wait
for a planning round, job rows decoded once per distinct text, master ports read once a
round, an API backlog for a burst of clients, a daemon driven round by round."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import replace

from flowcon.allocator.api import ApiServer
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.store import JobRecord, Store, new_record
from flowcon.client.http import AllocatorClient
from flowcon.jobspec.spec import JobSpec, ThroughputProfile
from flowcon.testing.fake_executor import declared_inventory, fake_target


def _rec(name: str) -> JobRecord:
    spec = JobSpec(
        name,
        "flowcon/testbox:latest",
        ("true",),
        8,
        1000,
        10.0,
        deadline=100.0,
        profile=ThroughputProfile(((1, 10.0), (2, 18.0))),
    )
    return new_record(spec, "admitted", {1: 10.0, 2: 18.0})


def test_a_read_from_another_thread_does_not_wait_for_a_transaction(tmp_path):
    """A GET runs while the planning loop holds the writer: it sees the last committed
    state at once instead of waiting for the round to commit."""
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    inside, release = threading.Event(), threading.Event()

    def round_() -> None:
        with st.transaction():
            rec = st.get_job("a")
            assert rec is not None
            rec.state = "running"
            st.put_job(rec)
            mine = st.get_job("a")  # its own write, inside the transaction
            assert mine is not None
            assert mine.state == "running"
            inside.set()
            release.wait(10)

    th = threading.Thread(target=round_)
    th.start()
    assert inside.wait(10)
    t0 = time.monotonic()
    seen = st.list_jobs()
    took = time.monotonic() - t0
    release.set()
    th.join()
    assert took < 2.0
    assert [r.state for r in seen] == ["admitted"]  # committed state only
    assert st.get_job("a").state == "running"  # type: ignore[union-attr]
    st.close()


def test_memory_store_reads_through_its_one_connection():
    st = Store(":memory:")
    st.put_job(_rec("a"))
    got: list[JobRecord] = []
    th = threading.Thread(target=lambda: got.extend(st.list_jobs()))
    th.start()
    th.join()
    assert [r.name for r in got] == ["a"]
    st.close()


def test_decoded_rows_share_the_spec_but_not_the_curves(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    one, two = st.get_job("a"), st.get_job("a")
    assert one is not None
    assert two is not None
    assert one.spec is two.spec  # immutable: decoded once
    one.measured[2] = 9.0  # the intake folds a measurement into a record in place
    assert two.measured == {}
    assert st.get_job("a").profile == {1: 10.0, 2: 18.0}  # type: ignore[union-attr]


def test_a_changed_spec_is_written_as_its_own_text(tmp_path):
    st = Store(tmp_path / "a.db")
    rec = _rec("a")
    st.put_job(rec)
    rec.spec = replace(rec.spec, master_port=29555)
    st.put_job(rec)
    st.close()
    again = Store(tmp_path / "a.db").get_job("a")
    assert again is not None
    assert again.spec.master_port == 29555


def test_reader_connections_of_ended_threads_are_closed(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    for _ in range(5):
        th = threading.Thread(target=st.list_jobs)
        th.start()
        th.join()
    assert len(st._readers) <= 1
    st.close()
    assert st._readers == []


def _spec_body(name: str) -> dict[str, object]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 8,
        "iterations": 100000,
        "best_effort": True,
        "profile": {"1": 10.0, "2": 18.0, "4": 30.0},
    }


def _daemon(tmp_path, nodes: int = 4) -> Allocator:
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=60.0, listen="127.0.0.1:0")
    return Allocator(cfg, fake_target(declared_inventory(nodes, 8)))


def test_a_round_reads_the_jobs_once_for_all_its_launches(tmp_path):
    """Each launch needs the master ports every live job holds: read once a round, not
    once a launch (which made a daemon with 500 jobs to start take 53 s), and still
    unique among the jobs launched in the same round."""
    alloc = _daemon(tmp_path)
    for i in range(12):
        alloc.submit(_spec_body(f"j{i}"))
    calls = []
    real = alloc.store.list_jobs

    def counting(states=None, copies=True):
        calls.append(states)
        return real(states, copies)

    alloc.store.list_jobs = counting  # type: ignore[method-assign]
    alloc.plan_round(force=True)
    launched = alloc.target.executor.backend.calls.get("launch", 0)  # type: ignore[union-attr]
    assert launched >= 4
    assert len([c for c in calls if c and "profiling" in c]) == 1  # the live jobs' ports
    ports = [r.spec.master_port for r in real() if r.gpus > 0]
    assert None not in ports
    assert len(set(ports)) == len(ports)
    alloc.stop()


def test_plan_round_runs_the_loop_once_without_a_loop_thread(tmp_path):
    alloc = _daemon(tmp_path)
    alloc.start(port=0, plan_loop=False)
    assert alloc._loop is None
    client = AllocatorClient(alloc.url, alloc.token, timeout=10)
    client.submit(_spec_body("a"))
    rounds = alloc.rounds
    plan = alloc.plan_round(force=True)
    assert alloc.rounds == rounds + 1
    assert plan.allocation["a"] > 0
    assert alloc.target.executor.job("a") is not None  # type: ignore[union-attr]
    alloc.stop()


def test_the_api_holds_a_burst_of_connections_while_it_is_not_accepting():
    """50 clients connecting while the accepting thread is busy wait in the backlog
    instead of being reset."""
    server = ApiServer(object(), "t")  # type: ignore[arg-type]  # never serves: not started
    socks = []
    try:
        for _ in range(60):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=2)
            socks.append(s)
        assert len(socks) == 60
    finally:
        for s in socks:
            s.close()
        server.httpd.server_close()


def _count_encodes(monkeypatch) -> list[str]:
    """The names of the jobs ``JobView.encoded`` encodes from now on, in order."""
    from flowcon.allocator.views import JobView

    encoded: list[str] = []
    real = JobView.encoded

    def counting(rec, spec_text):
        encoded.append(rec.name)
        return real(rec, spec_text)

    monkeypatch.setattr(JobView, "encoded", staticmethod(counting))
    return encoded


def test_the_job_list_is_encoded_once_per_change_of_the_store(tmp_path, monkeypatch):

    alloc = _daemon(tmp_path)
    alloc.start(port=0, plan_loop=False)
    client = AllocatorClient(alloc.url, alloc.token, timeout=10)
    client.submit(_spec_body("a"))
    encoded = _count_encodes(monkeypatch)
    first = [j["name"] for j in client.jobs()]
    assert [j["name"] for j in client.jobs()] == first == ["a"]
    assert encoded == ["a"]  # the second list was the first one's body
    client.submit(_spec_body("b"))  # a write: the next list is encoded afresh
    assert [j["name"] for j in client.jobs()] == ["a", "b"]
    assert encoded == ["a", "a", "b"]
    alloc.plan_round(force=True)
    gpus = {j["name"]: j["gpus"] for j in client.jobs()}
    assert gpus == {r.name: r.gpus for r in alloc.store.list_jobs()}
    assert len(encoded) == 5
    alloc.stop()


def test_the_jobs_generation_moves_with_job_rows_only_once_committed(tmp_path):
    st = Store(tmp_path / "a.db")
    st.put_job(_rec("a"))
    g = st.generation
    st.add_measurement(ts=1.0, node="n", job="a", container_id="c", name="c", step=None,
                       its_per_s=None, metric="loss", value=0.5, gpus=None)  # fmt: skip
    st.append_event("x", "a")
    assert st.generation == g  # not a change of any job's row
    with st.transaction():
        st.put_job(_rec("b"))
        assert st.generation == g  # not visible to other readers yet
    assert st.generation == g + 1
    try:
        with st.transaction():
            st.put_job(_rec("c"))
            raise RuntimeError
    except RuntimeError:
        pass
    assert st.generation == g + 1  # rolled back: nothing changed
    assert st.active_names() == ["a", "b"]
    st.close()


def test_a_row_without_step_or_rate_writes_no_job(tmp_path):
    """The agents' rows for containers that print no steps: stored, the job untouched
    (so a GET's encoded list stays current)."""
    from flowcon.allocator.intake import MeasurementIntake

    st = Store(tmp_path / "a.db")
    rec = _rec("a")
    rec.gpus, rec.state = 1, "running"
    st.put_job(rec)
    intake = MeasurementIntake(st)
    g = st.generation
    row = {"container_id": "c1", "job": "a", "metric": "loss", "value": 0.5, "ts": 5.0}
    assert intake.ingest("n", row, 10.0) == "stored"  # type: ignore[arg-type]
    assert st.generation == g
    assert st.count("measurements") == 1
    stepped = {**row, "step": 40, "ts": 6.0}
    assert intake.ingest("n", stepped, 10.0) == "applied"  # type: ignore[arg-type]
    assert st.generation == g + 1
    assert st.get_job("a").done_iterations == 40  # type: ignore[union-attr]
    st.close()


def test_a_jobs_curve_is_kept_until_its_points_change(tmp_path):
    from flowcon.allocator.intake import MeasurementIntake

    st = Store(tmp_path / "a.db")
    intake = MeasurementIntake(st, min_measurements=1)
    rec = _rec("a")
    first = intake.curve(rec)
    assert intake.curve(rec) is first
    rec.measured, rec.measured_n = {2: 9.0}, {2: 1}
    refined = intake.curve(rec)
    assert refined is not first
    assert refined.at(2) == 9.0
    assert first.at(2) == 18.0
    st.close()


def test_submits_that_arrive_together_share_a_plan(tmp_path):
    """Each plan covers every active job: a burst of submits is answered from plans made
    after each admission, not one plan each (at 2,000 jobs a plan takes a second and
    one each saturated the store's writer)."""
    from flowcon.allocator.planner import Planner

    st = Store(tmp_path / "a.db")
    planner = Planner(st, 64, 60.0, clock=lambda: 120.0)
    plans = []
    schedule = planner.policy.schedule

    def slow_schedule(now, state):
        plans.append(len(state.jobs))
        time.sleep(0.05)
        return schedule(now, state)

    planner.policy.schedule = slow_schedule  # type: ignore[method-assign]
    answers = {}
    start = threading.Barrier(20)

    def submit(i: int) -> None:
        spec = replace(_rec(f"j{i}").spec, deadline=None, best_effort=True, submit_time=120.0)
        start.wait()
        answers[i] = planner.submit(spec, now=120.0)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(a.admitted for a in answers.values())
    assert len(plans) < 20
    assert all(a.gpus >= 1 for a in answers.values())  # placed by a plan that saw it
    by_store = {r.name: r.gpus for r in st.active_jobs()}
    assert sum(by_store.values()) <= 64
    st.close()


def test_a_listed_job_encodes_as_its_view_with_the_spec_encoded_once():
    """``GET /api/v1/jobs`` splices each spec's cached JSON into the job's: the same
    object, keys in the same order, as encoding the whole view; env values hidden."""
    import json

    from flowcon.allocator.views import JobView, SpecTexts

    rec = _rec("a")
    rec.spec = replace(rec.spec, env={"API_KEY": "hunter2"})
    rec.placement = [[0, 1]]
    rec.measured = {2: 17.5}
    texts = SpecTexts()
    whole = json.dumps(JobView.of(rec).to_json(), default=str)
    spliced = JobView.encoded(rec, texts(rec.spec))
    assert json.loads(spliced) == json.loads(whole)
    assert list(json.loads(spliced)) == list(json.loads(whole))
    assert "hunter2" not in spliced
    assert texts(rec.spec) is texts(rec.spec)  # encoded once per spec object
    hidden = json.loads(JobView.encoded(rec, "{}"))
    assert hidden["spec"] == {}
    assert hidden["owner"] == rec.owner


def test_a_submit_answers_with_the_planning_loops_next_plan(tmp_path):
    """With the planning loop running, a submit wakes it and answers with its plan (the
    one that starts the job's containers) instead of making a second plan beside it;
    without a loop it plans itself."""
    alloc = _daemon(tmp_path)
    alloc.start(port=0)
    planners: list[str] = []
    real = alloc.planner.plan

    def counting(now=None, force=True):
        planners.append(threading.current_thread().name)
        return real(now, force)

    alloc.planner.plan = counting  # type: ignore[method-assign]
    try:
        code, answer = alloc.submit(_spec_body("a"))
        assert code == 201
        assert answer.gpus > 0  # type: ignore[attr-defined]
        # the loop's plans only (a second wake after the answer may plan once more)
        assert planners
        assert set(planners) == {"allocator-plan"}
    finally:
        alloc.stop()


def test_a_submit_plans_itself_when_the_loop_does_not_answer(tmp_path):
    alloc = _daemon(tmp_path)
    alloc.planner.wake_loop = lambda: None  # a loop that never plans
    alloc.planner.loop_wait_s = 0.05
    code, answer = alloc.submit(_spec_body("a"))
    assert code == 201
    assert answer.gpus > 0  # type: ignore[attr-defined]


def test_a_list_after_a_write_encodes_only_the_jobs_written(tmp_path, monkeypatch):
    """The job list keeps each job's JSON by the record the store hands out: after one
    job is written, the next list encodes that job only; an ended job (read from SQLite,
    kept until a terminal row changes) is not encoded again."""

    alloc = _daemon(tmp_path)
    for name in ("a", "b", "c"):
        alloc.submit(_spec_body(name))
    alloc.cancel("c")
    alloc.jobs_body()
    encoded = _count_encodes(monkeypatch)
    rec = alloc.store.get_job("b")
    assert rec is not None
    rec.reason = "changed"
    alloc.store.put_job(rec)
    listed = json.loads(alloc.jobs_body())["jobs"]
    assert encoded == ["b"]
    assert [(j["name"], j["state"]) for j in listed] == [
        ("a", "running"),
        ("b", "running"),
        ("c", "cancelled"),
    ]
    assert listed[1]["reason"] == "changed"
    alloc.store.close()


def _list_in_thread(alloc: Allocator) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []
    th = threading.Thread(target=lambda: got.append(alloc.jobs_body()))
    th.start()
    return th, got


def test_a_list_being_encoded_answers_others_with_the_last_one(tmp_path, monkeypatch):
    """While one call encodes the list afresh after a round, another answers at once with
    the last list (a round's changes lag at most LIST_STALE_S); after a submit, or once
    that list is older, it waits for the fresh one."""
    import flowcon.allocator.daemon as daemon_mod

    alloc = _daemon(tmp_path)
    alloc.submit(_spec_body("a"))
    before = alloc.jobs_body()
    alloc.plan_round(force=True)  # a round: every running job's row changes
    with alloc._jobs_lock:  # another call is encoding
        th, got = _list_in_thread(alloc)
        th.join(timeout=5)
        assert got == [before]  # at once, the last list
    fresh = alloc.jobs_body()
    assert fresh != before
    alloc.submit(_spec_body("b"))  # a request changed jobs: no list from before it
    with alloc._jobs_lock:
        th, got = _list_in_thread(alloc)
        th.join(timeout=0.3)
        assert th.is_alive()  # it waits for the encoding
    th.join(timeout=5)
    assert [j["name"] for j in json.loads(got[0])["jobs"]] == ["a", "b"]
    monkeypatch.setattr(daemon_mod, "LIST_STALE_S", 0.0)
    alloc.plan_round(force=True)
    with alloc._jobs_lock:
        th, got = _list_in_thread(alloc)
        th.join(timeout=0.3)
        assert th.is_alive()  # the last list is too old to answer with
    th.join(timeout=5)
    assert got
    assert got[0] != fresh
    alloc.store.close()
