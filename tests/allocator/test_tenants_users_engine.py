"""A named user against the node on the real engine, through the allocator's API: root in
any spelling, an id outside the user's range, a user name that is root in the job's image,
the GPU runtime's and the loader's keys, and host paths leading out of a root through a
link are refused at submit and in the dry run alike; a user name the image resolves runs
as its numbers, with no supplementary group from the image."""

from __future__ import annotations

from typing import Any

import pytest
from support.allocator_daemon import containers, daemon_env, engine_config, wait_for
from support.images import ACCOUNTS, built

from flowcon.client.http import AllocatorClient, ClientError
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

ALICE = "alice-users-t0ken"


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    users = f"[{{name: alice, token: {ALICE}, uids: 1000-1999, gids: [1000-1999]}}]"
    config = engine_config(users=users) + f"  bind_roots: [{tmp_path / 'data'}]\n"
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config=config)


def test_users_and_links_are_refused_at_submit_as_at_start(env, docker_client, tmp_path) -> None:
    _cfg, start, rid = env
    data = tmp_path / "data"
    (data / "sets").mkdir(parents=True)
    (data / "etc").symlink_to("/etc")
    (data / "up").symlink_to("../../../../../../../../..")
    steps = ACCOUNTS + "\nUSER trainer"
    with built(docker_client, rid, "tenant", steps) as image:
        alloc = start()
        alice = AllocatorClient(alloc.url, ALICE, timeout=30)

        def body(name: str, **extra: Any) -> dict[str, Any]:
            base = rate_job_spec(name, 10**6, None, {1: 1.0}, image=image)
            return {**base, **extra, "env": {**base["env"], **extra.get("env", {})}}

        refused: list[tuple[dict[str, Any], str]] = [
            ({"user": u}, "user") for u in ("00", "0000", "00:1000", "1000:0", "1000:000")
        ]
        refused += [
            ({"user": "2000:1000"}, "user"),  # outside alice's uids
            ({"user": "1000:5000"}, "user"),  # outside alice's gids
            ({"user": "toor"}, "user"),  # uid 0 by another name, in the image
            ({"user": "ghost"}, "user"),  # not in the image
            ({"user": "+0"}, "user"),
            ({"env": {"LD_PRELOAD": "/x.so"}}, "env.LD_PRELOAD"),
            ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env.NVIDIA_VISIBLE_DEVICES"),
            ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES"),
            ({"volumes": ["c:/var/run/nvidia-container-devices/all"]}, "volumes[0].target"),
            ({"volumes": [f"{data}/etc:/d:ro"]}, "volumes[0].source"),
            ({"volumes": [f"{data}/etc/shadow:/d:ro"]}, "volumes[0].source"),
            ({"volumes": [f"{data}/up/etc:/d:ro"]}, "volumes[0].source"),
        ]
        for extra, field in refused:
            for send in (alice.dry_run, alice.submit):
                with pytest.raises(ClientError) as exc:
                    send(body(f"r{rid}", **extra))
                assert exc.value.status == 400, (extra, exc.value)
                assert exc.value.body["field"] == field, (extra, exc.value.body)
        assert not containers(docker_client, rid)

        # on the engine backend nothing is left for the start to check
        ok = body(f"g{rid}", user="trainer", volumes=[f"{data}/sets:/d:ro"])
        assert alice.dry_run(ok)["checked_at_start"] == []
        ok["command"] = ["sh", "-c", "sleep 600"]
        assert alice.submit(ok)["admitted"] is True
        (c,) = wait_for(lambda: containers(docker_client, rid, f"g{rid}"), 60)
        c.reload()
        assert c.attrs["Config"]["User"] == "1000:1000"  # numbers, resolved in the image
        status = wait_for(lambda: _status(c), 30)
        assert "Uid:\t1000\t1000\t1000\t1000" in status
        assert "Gid:\t1000\t1000\t1000\t1000" in status
        groups = next(line for line in status.splitlines() if line.startswith("Groups:"))
        assert groups.split()[1:] == ["1000"]  # not the image's "root:x:0:trainer"
        alice.cancel(f"g{rid}")
        wait_for(lambda: not containers(docker_client, rid, f"g{rid}"), 60)


def _status(c) -> str | None:
    code, out = c.exec_run(["cat", "/proc/1/status"])
    return out.decode() if code == 0 else None
