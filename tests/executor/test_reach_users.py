"""Whom a job's container runs as, and what its spec may steer (pure): root in any
spelling, the operators' uid/gid ranges, names resolved in the image's account files, the
environment keys of the GPU runtime and the loader, the GPU runtime's mount folder, and
roots the operator made read-only. The engine side is in test_node_fs_engine.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.job_specs import spec_on_testbox

from flowcon.allocator.config import ConfigError, ExecutorSection, UserEntry, load_config
from flowcon.executor.backend import ExecutorRefused
from flowcon.executor.container_spec import ContainerSettings, settings_for
from flowcon.executor.node_fs import node_checks, numeric_user, parse_account, resolve_user
from flowcon.executor.reach import Reach, UserRule, is_root
from flowcon.jobspec.keys import RUNTIME_ENV_KEYS, RUNTIME_ENV_PREFIXES, parse_user
from flowcon.jobspec.spec import JobSpecError
from flowcon.schema import SchemaError
from flowcon.schema import validate as schema_validate

spec = spec_on_testbox


# ---------------------------------------------------------------- root in any spelling

ROOT_SPELLINGS = ["0", "00", "0000", "00:1000", "0:0", "1000:0", "1000:00", "root", 0]
ROOT_SPELLINGS += ["1000:root", "root:1000", "0000000000"]


@pytest.mark.parametrize("user", ROOT_SPELLINGS)
def test_uid_or_gid_zero_in_any_spelling_is_refused(user: object) -> None:
    parsed = spec(user=user)
    ((field, why),) = Reach().problems(parsed)
    assert field == "user"
    assert "0 is refused (executor.allow_root is false)" in why
    assert is_root(str(parsed.user))
    assert Reach(allow_root=True).problems(parsed) == []


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("00", "0"), ("0100:0200", "100:200"), (1000, "1000"), ("trainer", "trainer")],
)
def test_numeric_users_are_kept_in_canonical_decimal(raw: object, canonical: str) -> None:
    assert parse_user(raw) == canonical
    assert spec(user=raw).user == canonical


@pytest.mark.parametrize(
    "user",
    ["+0", "-0", " 0", "0 ", "0:+0", "\u0660", "1000:\u0660", "99999999999", "4294967295",
     "1000:4294967295", "0x0", "1e3", 1.0, True, -1, 2**32, "a:b:c", ":1000", "1000:", ""],
)  # fmt: skip
def test_signs_spaces_other_digits_and_huge_numbers_are_refused_naming_user(user: object) -> None:
    with pytest.raises(JobSpecError) as exc:
        spec(user=user)
    assert exc.value.field == "user"
    assert str(exc.value).startswith("user: ")


def test_config_refuses_a_default_user_with_uid_or_gid_zero(tmp_path) -> None:
    for user in ("0", "00:65534", "65534:0", "65534:000", "root"):
        path = tmp_path / "a.yaml"
        path.write_text(f"executor:\n  default_user: '{user}'\n")
        with pytest.raises(ConfigError, match=r"executor\.default_user: .* uid 0 or gid 0"):
            load_config(path, environ={})
    path.write_text("executor:\n  default_user: '65534:65534'\n")
    assert load_config(path, environ={}).section("executor")["default_user"] == "65534:65534"


# ---------------------------------------------------------------- ranges


def _ranged(tmp_path) -> Reach:
    path = tmp_path / "a.yaml"
    path.write_text(
        "allocator:\n"
        "  users:\n"
        "    - {name: alice, token: alice-t0ken, uids: 1000-1999, gids: [1000, 5000-5009]}\n"
        "    - {name: bob, token: bob-t0ken}\n"
        "executor:\n"
        "  uid_range: 1000-60000\n"
    )
    return Reach.from_config(load_config(path, environ={}).section("executor"))


def test_a_users_uid_and_gid_ranges_bound_what_their_specs_name(tmp_path) -> None:
    reach = _ranged(tmp_path)
    for user in ("1000:1000", "1999:5009", "1500"):
        assert reach.problems(replace(spec(user=user), owner="alice")) == [], user
    for user, says in (
        ("2000:1000", "uid 2000 is outside the allowed uids (1000-1999)"),
        ("1000:1001", "gid 1001 is outside the allowed gids (1000, 5000-5009)"),
        ("999:1000", "uid 999 is outside the allowed uids (1000-60000)"),  # the executor's
    ):
        ((field, why),) = reach.problems(replace(spec(user=user), owner="alice"))
        assert field == "user"
        assert says in why
    bob = replace(spec(user="30000:30000"), owner="bob")
    assert reach.problems(bob) == []  # the executor's range only
    assert reach.problems(replace(spec(user="70000:1"), owner="bob"))
    # a spec naming no user runs as the operator's default, whatever the ranges
    assert reach.problems(replace(spec(), owner="alice")) == []
    rule = reach.user_rule("alice")
    assert rule.id_problem(65534, 65534, exempt=True) is None
    assert rule.id_problem(65534, 65534) is not None


def test_ranges_in_the_config_are_checked_naming_the_field() -> None:
    for bad in ("1999-1000", "a-b", "1000-", [], ["1000", "x"], "-5", 2**33, True):
        with pytest.raises(SchemaError) as exc:
            schema_validate(UserEntry, {"name": "alice", "token": "t", "uids": bad}, "u")
        assert "uids" in str(exc.value)
        with pytest.raises(SchemaError) as exc:
            schema_validate(ExecutorSection, {"gid_range": bad}, "executor")
        assert "gid_range" in str(exc.value)


# ---------------------------------------------------------------- names, in the image

PASSWD = """root:x:0:0:root:/root:/bin/sh
trainer:x:1000:1000::/home/trainer:/bin/sh
toor:x:0:1000::/:/bin/sh
odd:x:+5:1000::/:/bin/sh
nobody:x:65534:65534::/:/bin/false
"""
GROUP = "root:x:0:trainer\ntrainer:x:1000:\ndocker:x:999:trainer\nstaff:x:50:\n"


def test_names_resolve_in_the_images_account_files() -> None:
    account = parse_account(PASSWD, GROUP)
    assert numeric_user("trainer", account) == (1000, 1000)
    assert numeric_user("trainer:staff", account) == (1000, 50)
    assert numeric_user("toor", account) == (0, 1000)  # another name of uid 0
    assert numeric_user("1000", account) == (1000, 1000)  # its passwd entry's gid
    assert numeric_user("4242", account) == (4242, 4242)  # no entry: not gid 0
    assert numeric_user("4242:7", None) == (4242, 7)
    for user in ("ghost", "trainer:ghosts", "odd"):
        assert isinstance(numeric_user(user, account), str), user
    assert isinstance(numeric_user("trainer", None), str)


def _settings(user: str | None, rule: UserRule | None = None) -> ContainerSettings:
    return ContainerSettings(user=user, user_rule=rule or UserRule())


def test_the_container_gets_numbers_and_no_root_even_by_another_name() -> None:
    # no engine address: only a full uid:gid runs, and it is still checked
    assert resolve_user(None, "n2", "img", _settings("1000:1000"), {}).user == "1000:1000"
    for user in ("trainer", "1000", None):
        with pytest.raises(ExecutorRefused, match=r"^user: "):
            resolve_user(None, "n2", "img", _settings(user), {})
    with pytest.raises(ExecutorRefused, match="gid 0 is refused"):
        resolve_user(None, "n2", "img", _settings("1000:0"), {})
    with pytest.raises(ExecutorRefused, match="uid 0 is refused"):
        resolve_user(None, "n2", "img", _settings("root"), {})
    ranged = UserRule(uids=(((1000, 1999),),), default_user=None)
    with pytest.raises(ExecutorRefused, match="uid 2000 is outside the allowed uids"):
        resolve_user(None, "n2", "img", _settings("2000:2000", ranged), {})
    # root allowed and no range: the user is the engine's to resolve, as given
    free = _settings("trainer", UserRule(allow_root=True))
    assert resolve_user(None, "n2", "img", free, {}) is free


def test_without_an_engine_the_dry_run_says_what_is_checked_at_start() -> None:
    reach = Reach(bind_roots=("/srv/data",), default_user=None)
    settings = settings_for(spec(volumes=["/srv/data/x:/x"]), 1, reach)
    problems, later = node_checks(None, "flowcon/testbox:latest", settings, {})
    assert problems == []
    assert [c.split(":")[0] for c in later] == ["volumes", "user"]
    numeric = settings_for(spec(user="1000:1000"), 1, reach)
    assert node_checks(None, "img", numeric, {}) == ([], [])


# ---------------------------------------------------------------- what a spec may steer


@pytest.mark.parametrize(
    "key",
    ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
     "CUDA_VISIBLE_DEVICES", "DOCKER_RESOURCE_GPU", "LD_PRELOAD", "LD_LIBRARY_PATH",
     "LD_AUDIT", "ld_preload", "Nvidia_Visible_Devices"],
)  # fmt: skip
def test_env_keys_steering_the_gpu_runtime_or_the_loader_are_refused(key: str) -> None:
    with pytest.raises(JobSpecError) as exc:
        spec(env={key: "x"})
    assert exc.value.field == f"env.{key}"
    assert "steers the GPU runtime or the dynamic loader" in str(exc.value)


def test_the_runtime_key_list_is_one_place_and_other_keys_pass() -> None:
    assert "CUDA_VISIBLE_DEVICES" in RUNTIME_ENV_KEYS
    assert {"NVIDIA_", "LD_", "DOCKER_RESOURCE_"} <= set(RUNTIME_ENV_PREFIXES)
    assert spec(env={"OMP_NUM_THREADS": "4", "HOLD_X": "1", "CUDA_HOME": "/c"}).env


@pytest.mark.parametrize(
    "target",
    ["/var/run/nvidia-container-devices", "/var/run/nvidia-container-devices/GPU-0",
     "/run/nvidia-container-devices/all", "/var//run/nvidia-container-devices/0",
     "/run/./nvidia-container-devices/0", "/run/nvidia-container-devices/"],
)  # fmt: skip
def test_no_volume_is_mounted_where_the_gpu_runtime_reads_device_requests(target: str) -> None:
    with pytest.raises(JobSpecError) as exc:
        spec(volumes=[{"source": "cache", "target": target}])
    assert exc.value.field == "volumes[0].target"
    assert "GPU runtime" in str(exc.value)
    assert spec(volumes=["cache:/run/mine"]).volumes


# ---------------------------------------------------------------- read-only roots


def test_a_mount_under_a_read_only_root_is_read_only_whatever_the_spec_says() -> None:
    cfg = schema_validate(
        ExecutorSection,
        {"bind_roots": ["/srv/scratch", {"path": "/srv/datasets", "read_only": True}]},
        "executor",
    ).model_dump(exclude_unset=True)
    reach = Reach.from_config(cfg)
    assert reach.bind_roots == ("/srv/scratch", "/srv/datasets")
    vols = ["/srv/datasets/mnist:/d", "/srv/scratch/x:/s", "/srv/datasets:/all:rw"]
    mounts = settings_for(spec(volumes=vols), 1, reach).mounts
    assert [m["ReadOnly"] for m in mounts] == [True, False, True]
    assert reach.problems(spec(volumes=vols)) == []
    with pytest.raises(SchemaError, match="bind_roots"):
        schema_validate(ExecutorSection, {"bind_roots": [{"path": "rel"}]}, "executor")
    with pytest.raises(SchemaError, match="bind_roots"):
        schema_validate(ExecutorSection, {"bind_roots": [{"path": "/x", "ro": 1}]}, "executor")


def test_a_dry_run_without_the_node_says_which_checks_happen_at_start(tmp_path) -> None:
    from flowcon.allocator.config import AllocatorConfig
    from flowcon.allocator.daemon import Allocator
    from flowcon.allocator.views import SubmitAnswer
    from flowcon.client.render import dry_run_line

    cfg = AllocatorConfig(
        state_dir=tmp_path / "state",
        raw={"executor": {"bind_roots": [str(tmp_path)], "default_user": None}},
    )
    alloc = Allocator(cfg, target=None, total_gpus=4)
    try:
        body = {
            "name": "d", "image": "flowcon/testbox:latest", "command": "true",
            "global_batch_size": 8, "iterations": 10, "best_effort": True,
            "profile": {"1": 1.0}, "volumes": [f"{tmp_path}/x:/x:ro"],
        }  # fmt: skip
        out = alloc.dry_run(body).to_json()
        later = out["checked_at_start"]
        assert isinstance(later, list)
        assert [str(c).split(":")[0] for c in later] == ["volumes", "user"]
        line = dry_run_line(SubmitAnswer.from_json(out))
        assert "checked when it starts, on its node: volumes: " in line
    finally:
        alloc.store.close()


def test_a_named_default_user_is_not_exempt_from_the_ranges() -> None:
    """The image says which uid a name is: only a numeric default escapes the ranges."""
    from flowcon.executor.reach import UserRule
    from flowcon.jobspec.keys import parse_id_ranges

    ranges = (parse_id_ranges("1000-1999", "uids"),)
    named = UserRule(uids=ranges, default_user="nobody")
    assert not named.exempt("nobody")
    numeric = UserRule(uids=ranges, default_user="65534:65534")
    assert numeric.exempt("65534:65534")
    assert numeric.spec_problem("65534:65534") is None
    assert not numeric.exempt("65534")
