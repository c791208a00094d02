"""The node-side checks' pure parts (flowcon/executor/node_fs.py): which mount points are
handed to the job's user, which host paths are resolved below which root, whose uid:gid a
user string names. The engine side is tested in test_tenants_engine.py and
test_reach_swarm.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flowcon.contract import CHECKPOINT_MOUNT
from flowcon.executor.backend import ExecutorRefused
from flowcon.executor.container_spec import settings_for
from flowcon.executor.node_fs import (
    HostPath,
    bind_paths,
    check_bind_paths,
    needs_owning,
    numeric_owner,
    own_targets,
)
from flowcon.executor.reach import Reach
from flowcon.jobspec.spec import parse_jobspec


def spec(**kw: object):
    raw = {
        "name": "j", "image": "flowcon/testbox:latest", "command": ["true"],
        "global_batch_size": 8, "iterations": 10, "best_effort": True, "profile": {1: 1.0},
    }  # fmt: skip
    raw.update(kw)
    return parse_jobspec(raw)


def test_only_the_checkpoint_and_the_users_own_writable_volumes_are_handed_over() -> None:
    vols = ["cache:/cache", "ro:/ro:ro", "shared:/shared", "/srv/data/a:/a"]
    reach = Reach(bind_roots=("/srv/data",), shared_volumes=("shared",))
    s = settings_for(replace(spec(volumes=vols), owner="alice"), 1, reach)
    assert own_targets(s) == [CHECKPOINT_MOUNT, "/cache"]
    # the operator's (and the shared token's) named volumes are nobody's own
    assert own_targets(settings_for(spec(volumes=vols), 1, reach)) == [CHECKPOINT_MOUNT]


def test_each_host_path_is_checked_below_its_deepest_root() -> None:
    reach = Reach(bind_roots=("/srv", "/srv/data"))
    s = settings_for(spec(volumes=["cache:/c", "/srv/data/x:/x", "/srv/y:/y:ro"]), 1, reach)
    assert bind_paths(s) == [
        HostPath("volumes[1].source", "/srv/data/x", "/srv/data"),
        HostPath("volumes[2].source", "/srv/y", "/srv"),
    ]
    # a spec admitted under an older config is refused all the same
    old = settings_for(spec(volumes=["/srv/y:/y"]), 1, Reach(bind_roots=("/srv",)))
    with pytest.raises(ExecutorRefused, match=r"volumes\[0\]\.source: '/srv/y' is not allowed"):
        bind_paths(settings_for(spec(volumes=["/srv/y:/y"]), 1, Reach(bind_roots=("/opt",))))
    # a node whose engine cannot be reached mounts no host path
    with pytest.raises(ExecutorRefused, match="cannot be checked on node node2"):
        check_bind_paths(None, "node2", "img", old, {})
    check_bind_paths(None, "node2", "img", settings_for(spec(), 1), {})  # none to check


@pytest.mark.parametrize(
    ("user", "owner"),
    [("1000", (1000, 0)), ("1000:2000", (1000, 2000)), ("alice", None), ("1000:staff", None)],
)
def test_a_numeric_user_names_its_owner(user: str, owner: tuple[int, int] | None) -> None:
    assert numeric_owner(user) == owner


def test_only_a_non_root_user_needs_its_volumes() -> None:
    assert needs_owning("65534:65534")
    assert not needs_owning("0")
    assert not needs_owning("root:root")
    assert not needs_owning(None)
