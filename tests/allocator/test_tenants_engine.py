"""Two named users on the real engine: one cannot touch the other's running job, mount a
host path outside the operator's roots or another user's volume; the job's container is
hardened as docs/security.md says."""

from __future__ import annotations

import pytest
from support.allocator_daemon import containers, daemon_env, engine_config, wait_for

from flowcon.client.http import AllocatorClient, ClientError
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

ALICE, BOB = "alice-engine-t0ken", "bob-engine-t0ken"


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    users = f"[{{name: alice, token: {ALICE}}}, {{name: bob, token: {BOB}}}]"
    config = engine_config(users=users) + f"  bind_roots: [{tmp_path / 'data'}]\n"
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config=config)


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
        mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert mounts["/cache"]["Name"] == volume  # alice's own, not the name "c..."
        started = c.attrs["State"]["StartedAt"]

        for call in (bob.job, bob.logs, bob.cancel):
            with pytest.raises(ClientError) as exc:
                call(name)
            assert exc.value.status == 403
            assert "belongs to alice" in str(exc.value)
        for vols, field in (
            (["/etc:/hostetc"], "volumes[0].source"),
            (["/var/run:/r"], "volumes[0].source"),
            ([f"{volume}:/steal"], "volumes[0].source"),
        ):
            with pytest.raises(ClientError) as exc:
                bob.submit(rate_job_spec(f"b{rid}", 10, None, {1: 1.0}, volumes=vols))
            assert exc.value.status == 400
            assert exc.value.body["field"] == field
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
