"""benchmarks/pair_runs.py on run folders written by the recorder (no engine): pairing
by repetition, reuse of a shorter list, the comparison against a chosen variant, and
bad arguments refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.recorder import write_run


def bench() -> ModuleType:
    from benchmarks import pair_runs

    return pair_runs


def run_dir(root: Path, name: str, policy: str, jct: dict[str, float]) -> Path:
    """A run whose jobs all start at 0 and take ``jct`` seconds, each one CPU busy."""
    result = RunResult("mix", policy, name, 0.0, 2, 0.1, 20.0)
    for job, secs in jct.items():
        result.jobs.append(JobRecord(job, "img", 0.0, 0.0, secs, 0))
        result.samples += [Sample(0.0, job, 1.0, None, None), Sample(secs, job, 1.0, None, None)]
    write_run(result, root / name)
    return root / name


def test_pairs_by_repetition_and_compares_against_a_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = bench()
    none = run_dir(tmp_path, "none", "none", {"a": 100.0, "b": 200.0})
    free = [run_dir(tmp_path, f"free{i}", "flowcon", {"a": 50.0, "b": 160.0 + i}) for i in (1, 2)]
    equal = [run_dir(tmp_path, f"eq{i}", "flowcon", {"a": 50.0, "b": 100.0}) for i in (1, 2)]
    out = tmp_path / "summary.json"
    argv = [
        f"none={none}",
        "free=" + ",".join(map(str, free)),
        "equal=" + ",".join(map(str, equal)),
    ]
    assert mod.main([*argv, "--against", "free", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "reused in later repetitions (fewer runs given): none" in text
    last = json.loads(text.strip().splitlines()[-1])
    assert last["equal"] == {
        "best_job_change": pytest.approx(-0.5),
        "worst_job_change": pytest.approx(-0.5),
        "makespan_change": pytest.approx(-0.5),
        "repeats": 2,
    }
    assert last["free"]["makespan_change"] == pytest.approx((161 / 200 + 162 / 200) / 2 - 1)
    summary = json.loads(out.read_text())
    vs = summary["against"]["equal"]
    assert vs["makespan_change"] == pytest.approx([100 / 161 - 1, 100 / 162 - 1])
    assert vs["jobs"]["a"] == [0.0, 0.0]
    assert "free" not in summary["against"]
    assert summary["runs"]["none"] == [str(none)]


def test_bad_arguments_are_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = bench()
    none = run_dir(tmp_path, "none", "none", {"a": 1.0})
    one = run_dir(tmp_path, "one", "flowcon", {"a": 1.0})
    for argv, reason in [
        ([f"free={one}"], "no none=DIR"),
        ([f"none={none}"], "at least one variant"),
        ([f"none={none}", f"free={tmp_path}"], "holds no result.json"),
        ([f"none={none}", "free"], "expected KEY=DIR"),
        ([f"none={none}", f"free={one}", "--against", "equal"], "--against 'equal'"),
    ]:
        with pytest.raises(SystemExit):
            mod.main(argv)
        assert reason in capsys.readouterr().err
