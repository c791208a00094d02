"""Two named users on the real engine: one cannot touch the other's running job, mount a
host path outside the operator's roots or another user's volume; the job's container is
hardened as docs/security.md says."""

from __future__ import annotations

from typing import Any

import pytest
from support.allocator_daemon import containers, daemon_env, engine_config, wait_for

from flowcon.client.http import AllocatorClient, ClientError
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

ALICE, BOB = "alice-engine-t0ken", "bob-engine-t0ken"


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    users = f"[{{name: alice, token: {ALICE}}}, {{name: bob, token: {BOB}}}]"
    config = (
        engine_config(users=users)
        + f"  bind_roots: [{tmp_path / 'data'}]\n"
        + "  images: ['flowcon/*']\n"
    )
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config=config)


def _exec(c, script: str) -> str | None:
    """``script``'s output in the running container (None when it failed)."""
    code, out = c.exec_run(["sh", "-c", script])
    return out.decode().strip() if code == 0 else None


def test_one_user_cannot_reach_anothers_job_or_the_host(env, docker_client, tmp_path) -> None:
    _cfg, start, rid = env
    alloc = start()
    alice = AllocatorClient(alloc.url, ALICE, timeout=30)
    bob = AllocatorClient(alloc.url, BOB, timeout=30)
    name = f"t{rid}"
    volume = f"flowcon-user-alice.c{rid}"
    spec = rate_job_spec(name, 10**6, None, {1: 1.0}, volumes=[f"c{rid}:/cache"])
    try:
        assert alice.submit(spec)["admitted"] is True
        (c,) = wait_for(lambda: containers(docker_client, rid, name), 60)
        c.reload()
        host = c.attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["PidsLimit"] == 4096
        assert host["IpcMode"] == "private"
        assert host["PidMode"] == ""  # its own PID namespace
        assert host["NetworkMode"] != "host"
        # no user in the spec: nobody, not the image's root, and the fresh checkpoint
        # volume was handed to it before the job started (the job checkpoints into it)
        assert c.attrs["Config"]["User"] == "65534:65534"
        owner = wait_for(lambda: _exec(c, "stat -c %u:%g /flowcon/checkpoint/step"), 60)
        assert owner == "65534:65534"
        assert _exec(c, "id -u") == "65534"
        mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert mounts["/cache"]["Name"] == volume  # alice's own, not the name "c..."
        started = c.attrs["State"]["StartedAt"]

        for call in (bob.job, bob.logs, bob.cancel):
            with pytest.raises(ClientError) as exc:
                call(name)
            assert exc.value.status == 403
            assert "belongs to alice" in str(exc.value)
        host_paths = ["/etc", "/var/run", "/run", "/root", "/var/lib/docker", "/proc", "/dev"]
        host_paths += ["/boot", "/home", "/usr", "/", f"{tmp_path}/data/../..", volume]
        refused: list[tuple[dict[str, Any], str]] = [
            ({"volumes": [f"{p}:/steal"]}, "volumes[0].source") for p in host_paths
        ]
        refused += [
            ({"user": "0"}, "user"),
            ({"user": "root:root"}, "user"),
            ({"image": "evil.example.com/x:1"}, "image"),
            ({"network": "host"}, "network"),  # a spec cannot ask for the host's network
        ]
        for extra, field in refused:
            for send in (bob.submit, bob.dry_run):
                with pytest.raises(ClientError) as exc:
                    send({**rate_job_spec(f"b{rid}", 10, None, {1: 1.0}), **extra})
                assert exc.value.status == 400, (extra, exc.value)
                assert exc.value.body["field"] == field, (extra, exc.value.body)
        # under the operator's root a host path is fine
        (tmp_path / "data").mkdir(exist_ok=True)
        ok = rate_job_spec(f"b{rid}", 10**6, None, {1: 1.0}, volumes=[f"{tmp_path}/data:/d:ro"])
        assert bob.dry_run(ok)["dry_run"] is True

        c.reload()
        assert c.status == "running"
        assert c.attrs["State"]["StartedAt"] == started  # untouched by all of it
        alice.cancel(name)
        wait_for(lambda: not containers(docker_client, rid, name), 60)
    finally:
        for v in docker_client.volumes.list(filters={"name": volume}):
            v.remove(force=True)


def test_a_symlink_out_of_an_allowed_root_is_refused_on_the_node(
    env, docker_client, tmp_path
) -> None:
    """A host path under the operator's root that leads out of it through a link is
    refused, resolved on the node: at submit and in the dry run on the engine backend
    (the executor's start-time refusal: test_node_fs_engine.py), no container runs; a
    link that stays inside the root is mounted."""
    _cfg, start, rid = env
    data = tmp_path / "data"
    (data / "sets" / "mnist").mkdir(parents=True)
    (data / "sets" / "mnist" / "hello.txt").write_text("ok\n")
    (data / "etc").symlink_to("/etc")  # the escape
    (data / "up").symlink_to("../../../../../../../../etc")
    (data / "sets" / "latest").symlink_to("mnist")  # inside the root
    alloc = start()
    bob = AllocatorClient(alloc.url, BOB, timeout=30)
    bad = [f"b{rid}", f"u{rid}"]
    for name, source in zip(bad, (data / "etc", data / "up" / "passwd"), strict=True):
        spec = rate_job_spec(name, 10**6, None, {1: 1.0}, volumes=[f"{source}:/d:ro"])
        # as written it is under the root; resolved on the node (here the local engine)
        # at submit and in the dry run, as the executor resolves it at start
        for send in (bob.dry_run, bob.submit):
            with pytest.raises(ClientError) as exc:
                send(spec)
            assert exc.value.status == 400, exc.value
            assert exc.value.body["field"] == "volumes[0].source", exc.value.body
            assert "leads outside its allowed root" in str(exc.value)
        assert not containers(docker_client, rid, name)
    good = f"g{rid}"
    spec = rate_job_spec(
        good,
        10**6,
        None,
        {1: 1.0},
        volumes=[f"{data}/sets/latest:/d:ro"],
        command=["sh", "-c", "cat /d/hello.txt; sleep 600"],
    )
    assert bob.submit(spec)["admitted"] is True
    (c,) = wait_for(lambda: containers(docker_client, rid, good), 60)
    wait_for(lambda: "ok" in c.logs().decode(), 30)
    bob.cancel(good)
