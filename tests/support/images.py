"""Tiny images built FROM the testbox for one test (labelled with its label, removed
afterwards): a job image with links or account files of its own."""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator

import pytest

from support.session import TEST_LABEL, TESTBOX_IMAGE


@contextlib.contextmanager
def built(docker_client, run_id: str, name: str, steps: str) -> Iterator[str]:
    """A tiny image FROM the testbox with ``steps`` (Dockerfile lines), labelled with the
    test's label; removed afterwards."""
    try:
        docker_client.images.get(TESTBOX_IMAGE)
    except Exception:
        pytest.skip(f"{TESTBOX_IMAGE} not built (images/testbox/build.sh)")
    tag = f"flowcon-test/{name}:{run_id}"
    dockerfile = f"FROM {TESTBOX_IMAGE}\n{steps}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entry = tarfile.TarInfo("Dockerfile")
        entry.size = len(dockerfile)
        tar.addfile(entry, io.BytesIO(dockerfile))
    buf.seek(0)
    docker_client.images.build(
        fileobj=buf, custom_context=True, tag=tag, labels={TEST_LABEL: run_id}, rm=True
    )
    try:
        yield tag
    finally:
        docker_client.images.remove(tag, force=True)


ACCOUNTS = (
    "RUN printf 'root:x:0:0::/:/bin/sh\\ntrainer:x:1000:1000::/:/bin/sh\\n"
    "toor:x:0:1000::/:/bin/sh\\n' > /etc/passwd"
    " && printf 'root:x:0:trainer\\ntrainer:x:1000:\\nwheel:x:0:\\n' > /etc/group"
)
