"""benchmarks/bench_replay.py without an engine: its options, its scenario list (named
and generated), its variants, and the keys of its final JSON line."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from flowcon.replay.repeat import NONE, RunFigures, aggregate


def bench() -> ModuleType:
    from benchmarks import bench_replay

    return bench_replay


def parse(mod: ModuleType, monkeypatch: pytest.MonkeyPatch, *argv: str):
    monkeypatch.setattr(sys, "argv", ["bench_replay.py", *argv])
    return mod.parse_args()


def test_defaults_and_generated_mixes(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = bench()
    args = parse(mod, monkeypatch)
    assert args.scenarios == ["fixed", "random-5"]
    assert args.repeat == 3
    assert args.controls == ["quota"]
    args = parse(mod, monkeypatch, "--generated", "2", "--seed", "1000", "--threads", "pinned")
    scs = mod.scenarios(args)
    assert [s.name for s in scs] == ["gen5-s1000", "gen5-s1001"]
    assert all(len(s.jobs) == 5 and s.threads == "pinned" for s in scs)
    args = parse(mod, monkeypatch, "fixed", "--generated", "1", "--no-adapt-threads")
    scs = mod.scenarios(args)
    assert [s.name for s in scs] == ["fixed", "gen5-s1000"]
    assert all(s.adapt_threads is False for s in scs)
    args = parse(
        mod, monkeypatch, "random-10", "--agent-set", "all_cl=equal", "--agent-set", "beta=3"
    )
    (sc,) = mod.scenarios(args)
    assert sc.agent_config()["all_cl"] == "equal"
    assert sc.agent_config()["beta"] == 3
    with pytest.raises(SystemExit):
        parse(mod, monkeypatch, "--agent-set", "all_cl")


def test_controls_and_json_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = bench()
    args = parse(mod, monkeypatch, "--controls", "default,weights,weights")
    assert mod.variants(args.controls) == ["flowcon", "flowcon[weights]"]
    with pytest.raises(SystemExit):
        parse(mod, monkeypatch, "--controls", "quota,shares")
    one = RunFigures({"a": 100.0, "b": 50.0}, {}, 100.0)
    two = RunFigures({"a": 60.0, "b": 55.0}, {}, 90.0)
    summary = aggregate(
        [{NONE: one, "flowcon": two, "flowcon[weights]": one}], mod.variants(args.controls)
    )
    keyed = mod.by_control(summary)
    assert keyed["default"] == {
        "best_job_change": pytest.approx(-0.4),
        "worst_job_change": pytest.approx(0.1),
        "makespan_change": pytest.approx(-0.1),
        "repeats": 1,
    }
    assert keyed["weights"]["makespan_change"] == 0.0
