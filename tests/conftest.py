"""Shared fixtures. Every container a test creates carries TEST_LABEL and is removed
by the test (pass or fail); the session end sweeps anything a crashed test left."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from support.session import REPO, SESSION_ID, SESSION_LABEL, TEST_LABEL

# The Ctrl-C tests send SIGINT to a child `flowcon`/benchmark process. A shell that starts
# pytest in the background without job control (`.ci/run &` from a script) starts it with
# SIGINT ignored, every child inherits that, and Python then installs no KeyboardInterrupt
# handler: the child never sees the Ctrl-C and the test times out (3 such failures in a CI
# run started that way, 2026-11-26). A handler, unlike SIG_IGN, is reset to the default at
# exec, so the children start as under a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def remove_labeled(client, label: str) -> None:
    """Force-remove every container carrying ``label`` (``key`` or ``key=value``)."""
    for c in client.containers.list(ignore_removed=True, all=True, filters={"label": label}):
        with contextlib.suppress(Exception):
            c.remove(force=True)


def _docker_client():
    import docker

    try:
        client = docker.from_env(timeout=30)
        client.ping()
        return client
    except Exception:
        return None


@pytest.fixture(scope="session")
def docker_client():
    client = _docker_client()
    if client is None:
        pytest.skip("no Docker engine answers (run scripts/ensure-engine.sh)")
    yield client
    remove_labeled(client, f"{SESSION_LABEL}={SESSION_ID}")


TRIXIE_SCRIPT = REPO / "scripts" / "engine-trixie.sh"


@pytest.fixture(scope="session")
def trixie_engine(docker_client) -> Iterator[str]:
    """Debian trixie's dockerd (Docker 26.1, API 1.45) as a private second engine
    (scripts/engine-trixie.sh); yields its DOCKER_HOST. Skips, with the reason, only
    where trixie's docker.io cannot be fetched, and never in CI (CI is set): there it
    fails. Stopped at the end if this session started it."""
    import subprocess

    def sh(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(TRIXIE_SCRIPT), *args], capture_output=True, text=True, timeout=timeout
        )

    if os.geteuid() != 0:
        pytest.skip("the trixie engine needs root (it starts a second dockerd)")
    fetch = sh("fetch", timeout=600)
    if fetch.returncode != 0:
        why = f"trixie's docker.io cannot be fetched: {fetch.stderr.strip()[-400:]}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    url = sh("host", timeout=10).stdout.strip()
    was_up = (
        subprocess.run(["docker", "-H", url, "version"], capture_output=True, timeout=30).returncode
        == 0
    )
    up = sh("up", timeout=300)
    if up.returncode != 0:
        pytest.fail(f"scripts/engine-trixie.sh up failed: {up.stderr.strip()[-800:]}")
    yield url
    if not was_up:
        sh("down", timeout=120)


@pytest.fixture
def test_run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def labeled(test_run_id: str):
    """Label set for containers of one test: the test label plus a per-test run id."""

    def make(**extra: str) -> dict[str, str]:
        labels = {TEST_LABEL: test_run_id, SESSION_LABEL: SESSION_ID}
        labels.update(extra)
        return labels

    return make


@pytest.fixture
def cleanup_containers(docker_client, test_run_id: str) -> Iterator[None]:
    """Remove every container of this test, pass or fail."""
    yield
    remove_labeled(docker_client, f"{TEST_LABEL}={test_run_id}")


# -- the pure lane stays pure --------------------------------------------------------------
# scripts/test.sh runs -m "not docker and not swarm" before the engine exists. A test that
# needs the engine but is not marked would be skipped there (docker_client skips) or fail
# late; both are caught here instead: at collection (an unmarked test using the engine
# fixtures) and, in the pure lane (FLOWCON_PURE_LANE=1), at run time (an unmarked test that
# opens a Docker client).
_ENGINE_FIXTURES = {"docker_client", "cleanup_containers", "trixie_engine"}
_ENGINE_MARKERS = ("docker", "swarm")


def _needs_engine(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in _ENGINE_MARKERS)


def misnamed(item: pytest.Item) -> str | None:
    """Tests are laid out by the module they test (tests/<package>/test_<module>*.py) and
    named for what they need: a file of engine tests ends in ``_engine.py``, of swarm tests
    in ``_swarm.py``, and such a file holds nothing else; every other file is pure."""
    stem = item.path.stem
    swarm, docker = item.get_closest_marker("swarm"), item.get_closest_marker("docker")
    if swarm is not None and not stem.endswith("_swarm"):
        return "a swarm test belongs in a *_swarm.py file"
    if swarm is None and docker is not None and not stem.endswith("_engine"):
        return "an engine test belongs in a *_engine.py file"
    if swarm is None and stem.endswith("_swarm"):
        return "a *_swarm.py file holds only tests marked swarm"
    if docker is None and stem.endswith("_engine"):
        return "a *_engine.py file holds only tests marked docker"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [
        item.nodeid
        for item in items
        if not _needs_engine(item) and _ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))
    ]
    if unmarked:
        raise pytest.UsageError(
            "tests that use the engine fixtures must be marked @pytest.mark.docker: "
            + ", ".join(unmarked)
        )
    wrong = [f"{item.nodeid} ({why})" for item in items if (why := misnamed(item))]
    if wrong:
        raise pytest.UsageError("tests in the wrong file: " + ", ".join(wrong))
    # The minutes-long calibration first: under pytest-xdist (scripts/test.sh) one worker
    # starts on it at once while the others share the rest, so it does not end the run alone.
    items.sort(key=lambda item: item.get_closest_marker("calibration") is None)


@pytest.fixture(autouse=True)
def _no_engine_in_pure_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    if os.environ.get("FLOWCON_PURE_LANE") != "1" or _needs_engine(request.node):
        yield
        return
    import docker

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail(
            f"{request.node.nodeid} opens a Docker client but is not marked "
            "@pytest.mark.docker (it would need the engine)",
            pytrace=False,
        )

    mp = pytest.MonkeyPatch()
    mp.setattr(docker, "from_env", refuse)
    mp.setattr(docker, "DockerClient", refuse)
    mp.setattr(docker.client, "DockerClient", refuse)
    mp.setattr(docker.api.client.APIClient, "__init__", refuse)
    try:
        yield
    finally:
        mp.undo()
