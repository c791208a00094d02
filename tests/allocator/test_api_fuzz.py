"""The API under generated hostile and concurrent requests (benchmarks/faults.py
scenario ``api``), on a real in-process allocator (plan-only) over real HTTP: only 4xx for
hostile requests, never a 5xx, a refused request changes no store row, the store stays
consistent. Also the regressions the scenario found, and checks that its checkers fail."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.faults import scenarios as faults
from flowcon.allocator.store import Store


@pytest.fixture
def fuzz(tmp_path: Path) -> Iterator[object]:
    f = faults.ApiFuzz(random.Random(15), tmp_path / "state")
    f.start()
    yield f
    f.stop()


def test_200_generated_requests_fixed_seed_no_violation() -> None:
    api = next(s for s in faults.SCENARIOS if s.name == "api")
    summary = faults.run_scenario(api, 200, seed=15)
    assert summary.runs == 200
    assert summary.violations == 0, summary.messages[:10]
    assert summary.recovery
    assert summary.to_json()["recovery_p95_s"] is not None


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        (b"[" * 100000, "application/json"),
        (b'{"name": ' + b"[" * 100000, "application/json"),
        (b"[" * 100000, "application/yaml"),
        (b"[" * 900 + b"]" * 900, "application/yaml"),  # valid YAML, too deep for PyYAML
    ],
    ids=["json-array", "json-in-object", "yaml-unclosed", "yaml-valid"],
)
def test_deeply_nested_body_is_400_not_500(fuzz, body: bytes, ctype: str) -> None:
    """Found by the scenario: a body nested past the parser's recursion limit raised
    RecursionError, answered 500."""
    headers = {**faults._auth("user"), "Content-Type": ctype}
    req = faults.Request("deep", "POST", "/api/v1/jobs", body, headers)
    result = fuzz.one(req)
    assert result.violations == []
    ans = faults.call(fuzz.port, req)
    assert ans.status == 400
    assert "nested too deeply" in ans.body["error"]


def test_concurrent_submits_and_cancels_add_up(fuzz) -> None:
    for _ in range(5):
        assert fuzz.race().violations == []
    assert fuzz.races == 5


def test_refused_request_that_changes_the_store_is_a_violation(fuzz, monkeypatch) -> None:
    """The checker itself: a refusal with a side effect is reported."""
    real = fuzz.alloc.cancel

    def cancel_with_side_effect(name: str, who: object = None) -> dict[str, object]:
        fuzz.alloc.store.append_event("sneaky", name)
        return real(name, who)  # type: ignore[no-any-return]

    monkeypatch.setattr(fuzz.alloc, "cancel", cancel_with_side_effect)
    req = faults.Request("x", "DELETE", "/api/v1/jobs/fz-none", None, faults._auth("user"))
    result = fuzz.one(req)
    assert any("changed ['events']" in v for v in result.violations)


def test_hostile_request_answered_2xx_is_a_violation() -> None:
    req = faults.Request("hostile_name", "POST", "/api/v1/jobs", b"{}", {})
    assert faults.ApiFuzz.check_answer(req, faults.Answer(201, {})) != []
    assert faults.ApiFuzz.check_answer(req, faults.Answer(500, {})) != []
    assert faults.ApiFuzz.check_answer(req, faults.Answer(None, None, "reset")) != []
    assert faults.ApiFuzz.check_answer(req, faults.Answer(400, {"error": "x"})) == []


def test_store_problems_finds_an_inconsistent_store(tmp_path: Path) -> None:
    from flowcon.allocator.store import JobRecord
    from flowcon.jobspec.spec import JobSpec

    def rec(name: str, state: str, its: float, profile: dict[int, float]) -> JobRecord:
        spec = JobSpec(name, "flowcon/testbox:latest", ("true",), 1, 10, 1.0)
        return JobRecord(name, spec, state, 1.0, None, False, its, 0.0, None, profile, gpus=3)

    store = Store(tmp_path / "db.sqlite")
    ok = rec("ok", "running", 10.0, {1: 1.0})
    ok.gpus = 2
    store.put_job(ok)
    store.record_admission("ok", True, "fits", None, False, 1.0)
    store.append_event("admitted", "ok")
    assert faults.store_problems(store, total_gpus=4) == []
    store.put_job(rec("../x", "cancelled", 10.0, {}))
    store.put_job(rec("big", "admitted", 1.0, {}))
    problems = faults.store_problems(store, total_gpus=4)
    text = "\n".join(problems)
    assert "a name the API must refuse is stored" in text
    assert "cancelled with finish None and 3 GPUs" in text
    assert "without an admission row" in text
    assert "5 GPUs held by active jobs" in text
    store.close()


def test_framework_reports_not_implemented_and_not_run_honestly() -> None:
    """faults.py never counts a scenario it did not run as passed."""

    def broken(rng: random.Random) -> Iterator[object]:
        raise RuntimeError("no engine")

    missing = faults.run_scenario(faults.Scenario("x", "later", 5), 5, seed=1)
    assert missing.to_json() == {
        "runs": 0,
        "violations": None,
        "recovery_p95_s": None,
        "implemented": False,
    }
    failed = faults.run_scenario(faults.Scenario("y", "engine", 5, broken), 5, seed=1)  # type: ignore[arg-type]
    assert failed.to_json()["violations"] is None
    assert "no engine" in failed.error
    assert faults.main(["--scenario", "inputs", "--runs", "3"]) == 0


def test_each_run_has_a_printed_seed_that_replays_it(capsys: pytest.CaptureFixture[str]) -> None:
    """--repeat sets a session up afresh N times; every run prints its seed, and --replay
    RUN:SEED gives that run the same draws again."""
    sessions: list[int] = []
    draws: dict[tuple[int, int], float] = {}  # (session, run) -> the run's first draw

    @contextlib.contextmanager
    def session(rng: random.Random) -> Iterator[object]:
        sessions.append(len(sessions))
        k = sessions[-1]

        def run(i: int) -> faults.RunResult:
            draws[(k, i)] = rng.random()
            return faults.RunResult(["broken"] if i == 2 else [], 0.01)

        yield run

    sc = faults.Scenario("z", "seeds", 3, session)  # type: ignore[arg-type]
    out = faults.run_scenario(sc, 3, seed=7, repeat=2)
    assert len(sessions) == 2
    assert (out.runs, out.violations) == (6, 2)
    assert len(set(draws.values())) == 6  # every run its own seed
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[z]")]
    assert len(lines) == 6
    failing = lines[2]
    assert "session 1/2 run 2 seed " in failing
    assert "1 violation(s)" in failing
    assert "ok" in lines[0]
    replay = failing.split("--replay ")[1].rstrip(")")
    run_i, run_seed = (int(x) for x in replay.split(":"))
    again = faults.run_scenario(sc, 1, seed=0, replay=(run_i, run_seed))
    assert again.runs == 1
    assert draws[(2, 2)] == draws[(0, 2)]  # the same draws as the printed run
    assert any(f"seed {run_seed}" in m for m in out.messages)


def test_faults_cli_refuses_bad_repeat_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, field in (
        (["--repeat", "0"], "--repeat"),
        (["--scenario", "inputs", "--replay", "x"], "--replay"),
        (["--replay", "1:2"], "--replay"),  # needs exactly one --scenario
    ):
        with pytest.raises(SystemExit) as exc:
            faults.main(argv)
        assert exc.value.code == 2
        assert field in capsys.readouterr().err
