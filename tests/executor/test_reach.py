"""What a job's containers may reach (flowcon/executor/reach.py): host paths only under the
operator's roots, images from the allowlist, and the hardening every container gets."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.job_specs import spec_on_testbox

from flowcon.allocator.config import ConfigError, ExecutorSection, load_config
from flowcon.executor.container_spec import engine_kwargs, settings_for, swarm_kwargs
from flowcon.executor.reach import Reach
from flowcon.schema import SchemaError, validate

# every one of these was accepted from a user token before (docs/security.md)
HOST_PATHS = [
    "/etc",
    "/var/run",
    "/run",
    "/root",
    "/var/lib/docker",
    "/proc",
    "/dev",
    "/boot",
    "/home",
    "/usr",
    "/srv/datasets/../../etc",
]


spec = spec_on_testbox


@pytest.mark.parametrize("path", HOST_PATHS)
def test_no_host_path_by_default(path: str) -> None:
    if ".." in path:  # refused by the spec itself already, and by the rule
        with pytest.raises(ValueError, match=r"volumes\[0\]\.source"):
            spec(volumes=[f"{path}:/x"])
        assert Reach().source_problem(path)
        return
    ((where, why),) = Reach().problems(spec(volumes=["cache:/cache", f"{path}:/host"]))
    assert where == "volumes[1].source"
    if path in ("/var/run", "/run"):  # the folders that hold the Docker socket
        assert (
            why == f"{path!r} is not allowed: it is or holds the Docker socket (root on the host)"
        )
    else:
        assert why == (
            f"{path!r} is not allowed: host paths must be under an allowed root"
            " (executor.bind_roots is empty: named volumes only)"
        )


def test_host_paths_under_an_allowed_root_only() -> None:
    reach = Reach(bind_roots=("/srv/datasets",))
    assert reach.problems(spec(volumes=["/srv/datasets/imagenet:/data:ro"])) == []
    assert reach.problems(spec(volumes=["/srv/datasets:/data:ro"])) == []
    ((where, why),) = reach.problems(spec(volumes=["/srv/datasets-evil:/data"]))
    assert where == "volumes[0].source"
    assert why == (
        "'/srv/datasets-evil' is not allowed: host paths must be under an allowed root"
        " (executor.bind_roots: /srv/datasets)"
    )
    assert reach.problems(spec(volumes=["/etc:/hostetc"]))[0][0] == "volumes[0].source"


def test_the_docker_socket_and_its_folders_stay_refused_under_any_root() -> None:
    reach = Reach(bind_roots=("/var", "/run"))
    for path in ("/var/run", "/run", "/var", "/var/run/docker.sock"):
        why = reach.source_problem(path)
        assert why
        assert "Docker socket" in why
    assert reach.source_problem("/var/cache/data") is None


def test_images_from_the_allowlist_only() -> None:
    reach = Reach(images=("registry.example.com/ml/*", "flowcon/*"))
    assert reach.problems(spec(image="flowcon/testbox:latest")) == []
    assert reach.problems(spec(image="registry.example.com/ml/bert:1")) == []
    ((where, why),) = reach.problems(spec(image="evil.example.com/flowcon/x:1"))
    assert where == "image"
    assert "executor.images (registry.example.com/ml/*, flowcon/*)" in why
    assert Reach().problems(spec(image="anything:1")) == []  # default: any


def test_config_names_the_field_of_a_bad_setting() -> None:
    for raw, field in (
        ({"bind_roots": ["relative/dir"]}, "bind_roots"),
        ({"bind_roots": ["/"]}, "bind_roots"),
        ({"cap_add": ["SYS_ADMIN"]}, "cap_add"),
        ({"pids_limit": 10}, "pids_limit"),
        ({"images": ["a b"]}, "images"),
    ):
        with pytest.raises(SchemaError) as exc:
            validate(ExecutorSection, raw, "executor")
        assert field in str(exc.value)
    reach = Reach.from_config({"cap_add": ["cap_net_bind_service"], "pids_limit": 512})
    assert reach.cap_add == ("NET_BIND_SERVICE",)
    assert reach.pids_limit == 512


def test_every_container_is_hardened_on_both_backends() -> None:
    settings = settings_for(spec(), 1, Reach(cap_add=("CHOWN",), pids_limit=1024))
    eng = engine_kwargs(settings)
    assert eng["cap_drop"] == ["ALL"]
    assert eng["cap_add"] == ["CHOWN"]
    assert eng["security_opt"] == ["no-new-privileges"]
    assert eng["pids_limit"] == 1024
    assert eng["ipc_mode"] == "private"
    assert "privileged" not in eng
    assert "pid_mode" not in eng
    sw = swarm_kwargs(settings)
    assert sw["cap_drop"] == ["ALL"]
    assert sw["cap_add"] == ["CHOWN"]
    assert sw["resources"]["Limits"]["Pids"] == 1024


def test_a_named_users_volumes_are_their_own() -> None:
    """``cache`` in alice's spec and in bob's are two volumes; neither can name the
    other's (the ``flowcon-`` namespace is refused in a spec), unless the operator
    shares the name."""
    reach = Reach(shared_volumes=("datasets",))
    vols = ["cache:/cache", "datasets:/data:ro"]

    def sources(owner: str | None) -> list[object]:
        mounts = settings_for(replace(spec(volumes=vols), owner=owner), 1, reach).mounts
        return [m["Source"] for m in mounts]

    assert sources("alice") == ["flowcon-user-alice.cache", "datasets"]
    assert sources("bob") == ["flowcon-user-bob.cache", "datasets"]
    for shared in ("operator", "user", None):  # the shared token, records from before
        assert sources(shared) == ["cache", "datasets"]
    with pytest.raises(ValueError, match="namespace"):
        spec(volumes=["flowcon-user-alice.cache:/steal"])
    assert Reach.from_config({"shared_volumes": ["a", "b"]}).shared_volumes == ("a", "b")


def test_the_operators_default_limits_apply_when_the_spec_gives_none() -> None:
    reach = Reach.from_config({"default_cpus_per_gpu": 4, "default_memory_per_gpu": "16g"})
    s = settings_for(spec(), 2, reach)
    assert s.nano_cpus == 8 * 10**9  # 4 CPUs per GPU x 2 GPUs
    assert s.memory == 32 * 2**30
    own = settings_for(spec(cpus_per_gpu=1.5, memory="6g"), 2, reach)
    assert own.nano_cpus == 3 * 10**9  # the spec's own win
    assert own.memory == 6 * 2**30
    assert settings_for(spec(), 2).nano_cpus is None  # no default: no limit, as before
    with pytest.raises(SchemaError) as exc:
        validate(ExecutorSection, {"default_memory_per_gpu": "lots"}, "executor")
    assert "default_memory_per_gpu" in str(exc.value)


def test_root_is_refused_unless_allowed_and_the_default_user_applies(tmp_path) -> None:
    for user in ("0", "0:0", "root", "root:wheel", 0):
        ((where, why),) = Reach().problems(spec(user=user))
        assert where == "user"
        assert "uid 0 is refused (executor.allow_root is false)" in why
    assert Reach(allow_root=True).problems(spec(user="0")) == []
    assert Reach().problems(spec(user="1000:1000")) == []
    reach = Reach.from_config({"default_user": "1000:1000"})
    assert settings_for(spec(), 1, reach).user == "1000:1000"
    assert settings_for(spec(user="2000"), 1, reach).user == "2000"
    # without a default_user in the config: nobody, not the image's own (root) user;
    # null in the config: the image's own
    assert settings_for(spec(), 1).user == "65534:65534"
    assert Reach.from_config({}).default_user == "65534:65534"
    assert settings_for(spec(), 1, Reach.from_config({"default_user": None})).user is None
    no_config = load_config(None, {}, tmp_path / "no-secrets").section("executor")
    assert Reach.from_config(no_config).default_user == "65534:65534"
    path = tmp_path / "allocator.yaml"
    path.write_text("executor: {default_user: '0:0'}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path, {}, tmp_path / "no-secrets")
    assert "executor.default_user: '0:0' is uid 0" in str(exc.value)
    path.write_text("executor: {default_user: '0:0', allow_root: true}\n")
    assert load_config(path, {}, tmp_path / "no-secrets").section("executor")["allow_root"]
