"""Training images on the real engine: the build is cached and the image trains."""

from __future__ import annotations

import pytest
from test_images import check_lines, metric_lines

from flowcon.engine import images as img


@pytest.mark.docker
def test_image_build_is_cached_and_runs(docker_client, labeled, cleanup_containers) -> None:
    import docker.errors

    try:
        docker_client.images.get(img.BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{img.BASE_IMAGE} not built yet (images/base/build.sh)")
    first = img.ensure_images(docker_client, ["gru"])[0]
    again = img.ensure_images(docker_client, ["gru"])[0]
    assert again.built is False
    assert again.digest == first.digest
    container = docker_client.containers.run(
        first.tag,
        detach=True,
        labels=labeled(),
        network_mode="none",
        environment={"FLOWCON_ITERATIONS": "3", "FLOWCON_SEQ_LEN": "10"},
    )
    status = container.wait(timeout=120)
    out = container.logs(stdout=True, stderr=False).decode()
    assert status["StatusCode"] == 0, container.logs().decode()
    check_lines(metric_lines(out), 3)
    with pytest.raises(ValueError, match="unknown training image"):
        img.ensure_images(docker_client, ["nope"])
