"""The hardening a Swarm node can apply (flowcon/executor/hardening.py): no-new-privileges
from Engine API 1.46; jobs go to an older node only with user namespaces or the
operator's allowance; the raw field is passed where both ends speak 1.46."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.executor.backends.swarm import with_no_new_privileges
from flowcon.executor.hardening import api_of_engine, assess, parse_api, userns_of


@pytest.mark.parametrize(
    ("engine", "api"),
    [
        ("20.10.24+dfsg1", (1, 41)),
        ("26.1.5", (1, 45)),
        ("27.3.1", (1, 46)),
        ("28.0.0", (1, 46)),
        ("18.09", None),
        ("", None),
        ("weird", None),
    ],
)
def test_engine_releases_map_to_their_api(engine, api) -> None:
    assert api_of_engine(engine) == api


def test_the_rule() -> None:
    weak = assess("node2", (1, 41), userns=False, allow_weak=False)
    assert weak.missing == ("no-new-privileges",)
    assert not weak.allowed
    assert "node node2: Engine API 1.41 cannot apply no-new-privileges" in weak.describe()
    assert "executor.allow_weak_hardening" in weak.describe()
    assert assess("node2", (1, 41), userns=True, allow_weak=False).allowed  # contained
    allowed = assess("node2", (1, 45), userns=False, allow_weak=True)
    assert allowed.allowed
    assert allowed.missing
    assert not assess("n", None, userns=False, allow_weak=False).allowed  # unknown: old
    strong = assess("n", parse_api("1.46"), userns=False, allow_weak=False)
    assert strong.allowed
    assert strong.no_new_privileges
    assert not strong.missing


def test_user_namespaces_are_read_from_security_options() -> None:
    assert userns_of(["name=seccomp,profile=default", "name=userns"])
    assert not userns_of(["name=seccomp,profile=default", "name=rootless"])
    assert not userns_of(None)


def test_no_new_privileges_goes_into_the_raw_spec_where_both_ends_speak_1_46() -> None:
    strong = assess("n", (1, 47), userns=False, allow_weak=False)
    kwargs: dict[str, Any] = {}
    with_no_new_privileges(kwargs, strong, (1, 46))
    assert kwargs["privileges"]["NoNewPrivileges"] is True
    for node, manager in ((strong, (1, 45)), (assess("n", (1, 45), False, True), (1, 47))):
        kwargs = {}
        with_no_new_privileges(kwargs, node, manager)
        assert "privileges" not in kwargs


def test_the_node_views_word_for_each_case() -> None:
    from flowcon.executor.hardening import assess

    assert assess("n", (1, 46), False, False).state == "full"
    assert assess("n", (1, 41), True, False).state == "userns"
    assert assess("n", (1, 41), False, True).state == "weak-allowed"
    assert assess("n", (1, 41), False, False).state == "weak-refused"
    assert assess("n", None, False, False).state == "weak-refused"


def test_flowcon_nodes_shows_each_nodes_hardening() -> None:
    from flowcon.allocator.views import NodeView
    from flowcon.client.operate import nodes_table

    view = NodeView("node2", 4, 0, "Ready", hardening="weak-refused")
    assert NodeView.from_json(view.to_json()) == view
    assert NodeView.from_json(NodeView("n", 1, 0, "Ready").to_json()).hardening is None
    table: Any = nodes_table([view], "http://127.0.0.1:1", now=0.0)
    assert [c.header for c in table.columns][-1] == "HARDENING"
    assert list(table.columns[-1].cells) == ["weak-refused"]
