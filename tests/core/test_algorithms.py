"""Algorithm 1 and 2 of the paper, the section 5.3 example, and itval back-off."""

from __future__ import annotations

import pytest

from flowcon.core.backoff import Itval
from flowcon.core.list_limits import algorithm1, classify
from flowcon.core.lists import ListName
from flowcon.core.pool_change import apply_change, pool_change

NL, WL, CL = ListName.NL, ListName.WL, ListName.CL
ALPHA = 0.05


@pytest.mark.parametrize(
    ("current", "g", "expected"),
    [
        (NL, 0.01, WL),  # line 4-6
        (WL, 0.01, CL),  # line 7-9
        (CL, 0.01, CL),  # slow and already completing: stays
        (NL, 0.05, NL),  # G >= alpha (line 10) keeps NL
        (WL, 0.5, NL),  # lines 10-13: back to NL from WL
        (CL, 0.05, NL),  # ... and from CL
    ],
)
def test_classify_transitions(current: ListName, g: float, expected: ListName) -> None:
    assert classify(current, g, ALPHA) is expected


def test_slow_container_needs_two_slow_intervals_to_reach_cl() -> None:
    lists = {"a": NL, "b": NL}
    g = {"a": 0.001, "b": 0.9}
    r1 = algorithm1(lists, g, {"a": 0.5, "b": 0.5}, beta=2, alpha=ALPHA)
    assert r1.lists == {"a": WL, "b": NL}
    r2 = algorithm1(r1.lists, g, {c: d.limit for c, d in r1.decisions.items()}, 2, ALPHA)
    assert r2.lists == {"a": CL, "b": NL}


def test_section_5_3_example() -> None:
    """VAE alone has converged (CL); MNIST starts (NL, not measured yet: G = 1).
    The paper: VAE's limit becomes 0.25 and MNIST's 1 (here G/sumG, close to 1)."""
    lists = {"vae": CL, "mnist": NL}
    g = {"vae": 0.004, "mnist": 1.0}
    r = algorithm1(lists, g, {"vae": 1.0, "mnist": 1.0}, beta=2, alpha=ALPHA, fresh=set())
    assert r.decisions["vae"].limit == pytest.approx(0.25)  # max(0.004/1.004, 1/(2*2))
    assert "floor" in r.decisions["vae"].reason
    assert r.decisions["mnist"].limit == pytest.approx(1.0 / 1.004)
    assert r.decisions["mnist"].limit > 0.99
    assert not r.all_completing


def test_cl_gets_g_share_when_above_floor() -> None:
    lists = {"a": CL, "b": NL}
    g = {"a": 0.04, "b": 0.06}  # a's share 0.4 > 1/(2*2)
    r = algorithm1(lists, g, {}, beta=2, alpha=ALPHA, fresh=set())
    assert r.decisions["a"].limit == pytest.approx(0.4)
    assert r.decisions["b"].limit == pytest.approx(0.6)


def test_wl_limit_unchanged() -> None:
    lists = {"a": NL, "b": NL, "c": WL}
    g = {"a": 0.01, "b": 1.0, "c": 0.02}
    r = algorithm1(lists, g, {"a": 0.3, "b": 0.3, "c": 0.37}, beta=2, alpha=ALPHA, fresh={"a"})
    assert r.lists == {"a": WL, "b": NL, "c": WL}  # only the fresh one moved
    assert r.decisions["a"].limit == 0.3
    assert r.decisions["c"].limit == 0.37
    assert r.decisions["b"].limit == pytest.approx(1.0 / 1.03)


def test_all_in_cl_means_free_competition() -> None:
    lists = {"a": CL, "b": WL}
    g = {"a": 0.0, "b": 0.01}
    r = algorithm1(lists, g, {"a": 0.25, "b": 0.4}, beta=2, alpha=ALPHA)
    assert r.lists == {"a": CL, "b": CL}
    assert r.all_completing
    assert {d.limit for d in r.decisions.values()} == {1.0}


def test_all_in_cl_equal_rule_gives_each_one_over_c() -> None:
    lists = {"a": CL, "b": WL, "c": CL}
    g = {"a": 0.0, "b": 0.01, "c": 0.02}
    limits = {"a": 0.25, "b": 0.4, "c": 0.35}
    r = algorithm1(lists, g, limits, beta=2, alpha=ALPHA, all_cl="equal")
    assert r.lists == {"a": CL, "b": CL, "c": CL}
    assert r.all_completing  # itval still doubles (line 17)
    assert [d.limit for d in r.decisions.values()] == pytest.approx([1 / 3] * 3)
    assert {d.reason for d in r.decisions.values()} == {"all-CL: equal shares 1/|c|"}
    # the rule only applies when every container is in CL; one still in WL: as before
    lists2 = {"a": CL, "b": NL}
    free = algorithm1(lists2, {"a": 0.0, "b": 1.0}, limits, beta=2, alpha=ALPHA)
    equal = algorithm1(lists2, {"a": 0.0, "b": 1.0}, limits, beta=2, alpha=ALPHA, all_cl="equal")
    assert equal == free
    assert not equal.all_completing
    # a container alone in CL has the whole host under either rule
    alone = algorithm1({"a": CL}, {"a": 0.0}, {}, beta=2, alpha=ALPHA, all_cl="equal")
    assert alone.decisions["a"].limit == 1.0
    assert algorithm1({}, {}, {}, beta=2, alpha=ALPHA, all_cl="equal").decisions == {}


def test_listener_run_does_not_move_twice_on_same_g() -> None:
    lists = {"a": NL}
    r = algorithm1(lists, {"a": 0.0}, {}, 2, ALPHA, fresh={"a"})
    assert r.lists["a"] is WL
    again = algorithm1(r.lists, {"a": 0.0}, {}, 2, ALPHA, fresh=set())
    assert again.lists["a"] is WL


def test_zero_growth_everywhere_does_not_divide_by_zero() -> None:
    r = algorithm1({"a": CL, "b": WL}, {"a": 0.0, "b": 0.0}, {"b": 0.5}, 2, ALPHA, fresh=set())
    assert r.decisions["a"].limit == pytest.approx(0.25)
    assert r.decisions["b"].limit == 0.5


def test_backoff_doubles_caps_and_resets() -> None:
    it = Itval(initial=20, cap=100)
    assert [it.double() for _ in range(4)] == [40, 80, 100, 100]
    assert it.reset() == 20
    with pytest.raises(ValueError, match="need 0 < itval"):
        Itval(initial=20, cap=10)


def test_algorithm2_new_and_finished() -> None:
    lists = {"a": CL, "b": WL}
    change = pool_change(set(lists), {"a", "c"})
    assert change.new == {"c"}
    assert change.finished == {"b"}
    assert change.changed
    assert apply_change(lists, change) == {"a": CL, "c": NL}
    assert not pool_change({"a"}, {"a"}).changed


def test_non_finite_g_counts_as_no_growth() -> None:
    g = {"a": float("nan"), "b": float("inf"), "c": 1.0, "d": -3.0}
    r = algorithm1({k: NL for k in g}, g, {}, 2, ALPHA)
    assert r.lists == {"a": WL, "b": WL, "c": NL, "d": WL}
    assert r.decisions["c"].limit == 1.0
    assert all(0.0 <= d.limit <= 1.0 for d in r.decisions.values())


def test_normalize_never_overflows() -> None:
    from flowcon.core.growth import MAX_G, normalize

    assert normalize(1e300, 1e-300) == MAX_G
    assert normalize(2.0, 4.0) == 0.5
