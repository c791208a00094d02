"""Repeated comparisons, pure: run order, busy-host decision, CPU-seconds, aggregation
(numbers checked by hand in the comments)."""

from __future__ import annotations

import pytest

from flowcon.replay.repeat import (
    NONE,
    BusyLimits,
    HostLoad,
    RunFigures,
    Spread,
    aggregate,
    busy_reason,
    change,
    cpu_seconds_by_job,
    headline,
    run_order,
    variant_control,
    variant_dir,
    variant_key,
    variants_for,
)


def test_order_alternates_so_drift_cancels() -> None:
    order = run_order(["flowcon"], 3)
    assert order == [["none", "flowcon"], ["flowcon", "none"], ["none", "flowcon"]]
    flat = [p for rep in order for p in rep]
    assert flat == ["none", "flowcon", "flowcon", "none", "none", "flowcon"]
    many = run_order(variants_for(["quota", "weights"]), 2)
    assert many == [
        ["none", "flowcon[quota]", "flowcon[weights]"],
        ["flowcon[weights]", "flowcon[quota]", "none"],
    ]
    assert run_order(["flowcon"], 1) == [["none", "flowcon"]]
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        run_order(["flowcon"], 0)


def test_variant_names() -> None:
    assert variants_for([]) == ["flowcon"]
    assert variants_for(["weights", "quota", "weights"]) == ["flowcon[weights]", "flowcon[quota]"]
    assert variant_key(None) == "flowcon"
    assert variant_key("cpuset") == "flowcon[cpuset]"
    assert variant_control("flowcon[hybrid]") == "hybrid"
    assert variant_control("flowcon") is None
    assert variant_control(NONE) is None
    assert variant_dir("flowcon[weights]") == "flowcon-weights"
    assert variant_dir("none") == "none"
    assert variant_dir("flowcon") == "flowcon"


@pytest.mark.parametrize(
    ("load1", "busy", "expect"),
    [
        (0.4, 0.10, None),  # 0.4 <= 0.5 x 2, 10 % <= 25 %
        (1.0, 0.25, None),  # at the limits: still quiet
        (1.2, 0.10, ["load average 1.20 > 1.00"]),
        (0.2, 0.30, ["30 % busy over 3 s > 25 %"]),
        (3.0, 0.90, ["load average 3.00", "90 % busy"]),
    ],
)
def test_busy_host_decision(load1: float, busy: float, expect: list[str] | None) -> None:
    reason = busy_reason(HostLoad(load1, busy, 3.0, 2), BusyLimits())
    if expect is None:
        assert reason is None
    else:
        assert reason is not None
        for words in expect:
            assert words in reason
    looser = BusyLimits(max_load_per_cpu=2.0, max_busy=0.95)
    assert busy_reason(HostLoad(load1, busy, 3.0, 2), looser) is None


def test_cpu_seconds_sum_rate_times_interval() -> None:
    samples = [(1.0, "a", 1.0), (2.5, "b", 1.0), (2.0, "a", 0.5), (4.0, "a", 1.0), (1.5, "b", 2.0)]
    # a: 0.5 x (2-1) + 1.0 x (4-2) = 2.5; b: 1.0 x (2.5-1.5) = 1.0 (first sample starts the clock)
    assert cpu_seconds_by_job(samples) == {"a": pytest.approx(2.5), "b": pytest.approx(1.0)}
    assert cpu_seconds_by_job([(3.0, "c", 2.0)]) == {"c": 0.0}


def test_change_and_spread() -> None:
    assert change(100, 80) == pytest.approx(-0.2)
    assert change(None, 80) is None
    assert change(0, 1) is None
    assert change(1, None) is None
    s = Spread.of([-0.1, None, -0.3, 0.2])
    assert (s.median, s.low, s.high, s.n) == (pytest.approx(-0.1), -0.3, 0.2, 3)  # type: ignore[comparison-overlap]
    assert Spread.of([None]).to_dict() == {"median": None, "min": None, "max": None, "n": 0}


def figs(jct: dict[str, float | None], cpu: dict[str, float], span: float | None) -> RunFigures:
    return RunFigures(jct=jct, cpu_seconds=cpu, makespan=span)


REPS = [
    {
        NONE: figs({"a": 100, "b": 200}, {"a": 100, "b": 300}, 250),
        "flowcon": figs({"a": 80, "b": 210}, {"a": 90, "b": 270}, 240),
    },
    {
        "flowcon": figs({"a": 60, "b": 180}, {"a": 66, "b": 330}, 270),
        NONE: figs({"a": 120, "b": 200}, {"a": 110, "b": 300}, 260),
    },
]


def test_aggregate_hand_checked() -> None:
    out = aggregate(REPS, ["flowcon"])
    assert out["repeats"] == 2
    v = out["variants"]["flowcon"]
    assert v["repeats"] == 2
    assert v["control"] is None
    a, b = v["jobs"]
    assert a["job"] == "a"
    assert b["job"] == "b"
    # a: JCT changes -20 % (80/100) and -50 % (60/120): median -35 %
    assert a["jct_none"] == pytest.approx(110)
    assert a["jct"] == pytest.approx(70)
    assert a["jct_change"] == {
        "median": pytest.approx(-0.35),
        "min": pytest.approx(-0.5),
        "max": pytest.approx(-0.2),
        "n": 2,
    }
    assert a["jct_changes"] == [pytest.approx(-0.2), pytest.approx(-0.5)]
    # b: +5 % and -10 %: median -2.5 %
    assert b["jct_change"]["median"] == pytest.approx(-0.025)
    assert (b["jct_change"]["min"], b["jct_change"]["max"]) == (
        pytest.approx(-0.1),
        pytest.approx(0.05),
    )
    # CPU-seconds: a 90/100 = -10 %, 66/110 = -40 % -> -25 %; b -10 %, +10 % -> 0
    assert a["cpu_s_change"]["median"] == pytest.approx(-0.25)
    assert b["cpu_s_change"]["median"] == pytest.approx(0.0)
    assert a["cpu_s_none"] == pytest.approx(105)
    assert b["cpu_s"] == pytest.approx(300)
    # totals: 360/400 = -10 %, 396/410 = -3.41 % -> -6.71 %
    assert v["cpu_s_total_change"]["median"] == pytest.approx((-0.1 - 14 / 410) / 2)
    # makespan: 240/250 = -4 %, 270/260 = +3.85 % -> -0.077 %
    assert v["makespan_change"]["median"] == pytest.approx((-0.04 + 10 / 260) / 2)
    assert v["makespan_none"] == pytest.approx(255)
    assert v["makespan"] == pytest.approx(255)
    # best job per repetition: -20 %, -50 % -> -35 %; worst: +5 %, -10 % -> -2.5 %
    assert v["best_job_change"]["median"] == pytest.approx(-0.35)
    assert v["worst_job_change"]["median"] == pytest.approx(-0.025)
    assert headline(out) == {
        "flowcon": {
            "best_job_change": pytest.approx(-0.35),
            "worst_job_change": pytest.approx(-0.025),
            "makespan_change": pytest.approx((-0.04 + 10 / 260) / 2),
            "repeats": 2,
        }
    }


def test_aggregate_several_variants_and_a_failed_job() -> None:
    reps = []
    for none_a, q_a, w_a in ((100, 90, 70), (100, 70, 110), (100, 120, None)):
        reps.append(
            {
                NONE: figs({"a": none_a}, {}, none_a),
                "flowcon[quota]": figs({"a": q_a}, {}, q_a),
                "flowcon[weights]": figs({"a": w_a}, {}, w_a),  # no makespan when a job failed
            }
        )
    out = aggregate(reps, ["flowcon[quota]", "flowcon[weights]"])
    q = out["variants"]["flowcon[quota]"]
    assert q["control"] == "quota"
    # -10 %, -30 %, +20 %: median -10 %
    assert q["jobs"][0]["jct_change"] == {
        "median": pytest.approx(-0.1),
        "min": pytest.approx(-0.3),
        "max": pytest.approx(0.2),
        "n": 3,
    }
    w = out["variants"]["flowcon[weights]"]
    # the third repetition's job failed (no JCT): two changes, -30 % and +10 %
    assert w["jobs"][0]["jct_change"]["n"] == 2
    assert w["jobs"][0]["jct_change"]["median"] == pytest.approx(-0.1)
    assert w["best_job_change"]["n"] == 2
    assert w["makespan_change"]["n"] == 2
