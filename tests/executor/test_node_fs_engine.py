"""The node-side checks on the real engine (flowcon/executor/node_fs.py): a job image's
own links do not steer the host-path check, the probe image is the operator's and its
absence fails closed, a read-only root stays read-only through a link, and a user name is
resolved to numbers in the job's image (uid or gid 0 under any name refused)."""

from __future__ import annotations

import pytest
from support.images import ACCOUNTS, built
from support.job_specs import spec_on_testbox
from support.session import TEST_LABEL, TESTBOX_IMAGE

from flowcon.executor.backend import ExecutorError, ExecutorRefused
from flowcon.executor.container_spec import settings_for
from flowcon.executor.node_fs import PROBE_LABEL, check_bind_paths, node_checks, resolve_user
from flowcon.executor.reach import Reach

pytestmark = pytest.mark.docker


spec = spec_on_testbox


def _no_probe_left(docker_client, run_id: str) -> bool:
    found = docker_client.containers.list(
        all=True, ignore_removed=True, filters={"label": [f"{TEST_LABEL}={run_id}", PROBE_LABEL]}
    )
    return not found


def test_a_job_images_own_links_do_not_steer_the_host_path_check(
    docker_client, labeled, test_run_id, tmp_path
) -> None:
    """The job's image makes /var a link into the probe's mount of the root, so that a
    root's link to the host's /var/run would resolve inside the root in a probe of that
    image. The probe is the operator's image: the link leads out, and is refused."""
    data = tmp_path / "data"
    (data / "v" / "run").mkdir(parents=True)
    (data / "x").symlink_to("/var/run")  # the host's /var/run: the Docker socket
    steps = "RUN rm -rf /var && mkdir -p /flowcon-probe/0/v/run && ln -s /flowcon-probe/0/v /var"
    reach = Reach(bind_roots=(str(data),))
    settings = settings_for(spec(volumes=[f"{data}/x:/d:ro"]), 1, reach)
    with built(docker_client, test_run_id, "steer", steps) as evil:
        with pytest.raises(ExecutorRefused, match="leads outside its allowed root"):
            check_bind_paths(docker_client, "node1", evil, settings, labeled())
        # the dry run answers as the start does
        problems, later = node_checks(docker_client, evil, settings, labeled())
        assert [f for f, _ in problems] == ["volumes[0].source"]
        assert later == []
    assert _no_probe_left(docker_client, test_run_id)


def test_a_missing_probe_image_fails_closed(docker_client, labeled, test_run_id, tmp_path):
    data = tmp_path / "data"
    (data / "sets").mkdir(parents=True)
    reach = Reach(bind_roots=(str(data),), probe_image=f"flowcon-test/no-such-probe:{test_run_id}")
    settings = settings_for(spec(volumes=[f"{data}/sets:/d:ro"]), 1, reach)
    with pytest.raises(ExecutorError, match=r"probe image .* \(executor.probe_image\) is not on"):
        check_bind_paths(docker_client, "node1", TESTBOX_IMAGE, settings, labeled())
    # the default probe image checks it, and a path inside the root passes
    ok = settings_for(spec(volumes=[f"{data}/sets:/d:ro"]), 1, Reach(bind_roots=(str(data),)))
    check_bind_paths(docker_client, "node1", TESTBOX_IMAGE, ok, labeled())
    assert _no_probe_left(docker_client, test_run_id)


def test_a_writable_link_into_a_read_only_root_is_refused(
    docker_client, labeled, test_run_id, tmp_path
) -> None:
    top = tmp_path / "top"
    (top / "datasets" / "mnist").mkdir(parents=True)
    (top / "mine").symlink_to("datasets")  # stays under /top, lands in the read-only root
    reach = Reach.from_config(
        {"bind_roots": [str(top), {"path": str(top / "datasets"), "read_only": True}]}
    )
    settings = settings_for(spec(volumes=[f"{top}/mine:/d"]), 1, reach)
    with pytest.raises(ExecutorRefused, match="under the read-only root"):
        check_bind_paths(docker_client, "node1", TESTBOX_IMAGE, settings, labeled())
    direct = settings_for(spec(volumes=[f"{top}/datasets/mnist:/d"]), 1, reach)
    assert direct.mounts[0]["ReadOnly"] is True  # made read-only: passes
    check_bind_paths(docker_client, "node1", TESTBOX_IMAGE, direct, labeled())


def test_a_user_name_is_resolved_in_the_image_and_root_by_any_name_refused(
    docker_client, labeled, test_run_id
) -> None:
    with built(docker_client, test_run_id, "accounts", ACCOUNTS + "\nUSER trainer") as image:
        for user, numbers in (("trainer", "1000:1000"), ("1000", "1000:1000"), ("7", "7:7")):
            s = settings_for(spec(user=user), 1, Reach())
            assert resolve_user(docker_client, "n", image, s, labeled()).user == numbers
        for user, says in (
            ("toor", "uid 0 is refused"),
            ("trainer:wheel", "gid 0 is refused"),
            ("ghost", "'ghost' is not in the image's /etc/passwd"),
        ):
            s = settings_for(spec(user=user), 1, Reach())
            with pytest.raises(ExecutorRefused, match=f"^user: .*{says}"):
                resolve_user(docker_client, "n", image, s, labeled())
            problems, _ = node_checks(docker_client, image, s, labeled())
            assert [f for f, _ in problems] == ["user"]
        # the image's own user (executor.default_user: null), checked the same way
        own = settings_for(spec(), 1, Reach(default_user=None))
        assert resolve_user(docker_client, "n", image, own, labeled()).user == "1000:1000"
        ranged = settings_for(spec(), 1, Reach(default_user=None, uid_range=((2000, 2999),)))
        with pytest.raises(ExecutorRefused, match="uid 1000 is outside the allowed uids"):
            resolve_user(docker_client, "n", image, ranged, labeled())
    # an image with no USER runs as root: refused, as kubelet's runAsNonRoot does
    own = settings_for(spec(), 1, Reach(default_user=None))
    with pytest.raises(ExecutorRefused, match=r"the image's USER.*uid 0 is refused"):
        resolve_user(docker_client, "n", TESTBOX_IMAGE, own, labeled())
    assert _no_probe_left(docker_client, test_run_id)


def test_a_job_images_links_do_not_redirect_whose_folder_is_handed_over(
    docker_client, labeled, test_run_id, tmp_path
) -> None:
    """The job's image makes /flowcon a link to /a/b and the spec binds a folder of the
    root at /a/b/checkpoint, under the link. Handing the checkpoint folder to the job's
    user goes through the operator's probe, so the host folder keeps its owner and mode."""
    from flowcon.executor.backend import WorkerRequest
    from flowcon.executor.backends.engine import EngineBackend

    data = tmp_path / "data"
    (data / "datasets").mkdir(parents=True)
    (data / "datasets").chmod(0o755)
    before = (data / "datasets").stat()
    reach = Reach(bind_roots=(str(data),))
    steps = "RUN mkdir -p /a/b && ln -s /a/b /flowcon"
    job = f"lnk{test_run_id}"
    volume = f"flowcon-ckpt-{job}"
    backend = EngineBackend(docker_client, network="none")
    with built(docker_client, test_run_id, "redirect", steps) as evil:
        settings = settings_for(
            spec(image=evil, volumes=[f"{data}/datasets:/a/b/checkpoint"]), 1, reach
        )
        req = WorkerRequest(
            name=f"flowcon-{job}--n1", job=job, node="n1", image=evil, command=("true",),
            env={}, labels={**labeled(), "flowcon.job": job}, gpus=(), real_gpus=False,
            checkpoint_volume=volume, checkpoint_host_dir=None, grace_s=1.0, network=None,
            settings=settings,
        )  # fmt: skip
        try:
            worker = backend.create(req)
            after = (data / "datasets").stat()
            assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
            assert after.st_mode == before.st_mode
            # the job's own checkpoint volume was handed to its user
            box = docker_client.containers.create(
                TESTBOX_IMAGE, ["ls", "-lnd", "/v"], labels=labeled(),
                volumes={volume: {"bind": "/v", "mode": "ro"}},
            )  # fmt: skip
            try:
                box.start()
                box.wait(timeout=30)
                seen = box.logs().decode().split()[:4]
            finally:
                box.remove(force=True)
            mode, _links, uid, gid = seen
            assert (mode, uid, gid) == ("drwxr-x---", "65534", "65534")
            backend.remove(worker)
        finally:
            for c in docker_client.containers.list(
                all=True, ignore_removed=True, filters={"name": req.name}
            ):
                c.remove(force=True)
            for v in docker_client.volumes.list(filters={"name": volume}):
                v.remove(force=True)
    assert _no_probe_left(docker_client, test_run_id)
