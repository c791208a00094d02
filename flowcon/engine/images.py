"""Build the training images (images/<model>/Dockerfile) on the local engine.

The build context is staged in memory: the model's Dockerfile, the shared training
code (images/train) and a minimal ``flowcon`` package holding only report.py, so an
image does not change when unrelated parts of the package do. A digest of that
context plus the base image id is stored as a label; a build is skipped while the
image with the same digest exists (and the engine's layer cache covers the rest).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BASE_IMAGE = os.environ.get("FLOWCON_BASE_IMAGE", "flowcon/base:bookworm")
IMAGE_PREFIX = "flowcon/train-"
DIGEST_LABEL = "flowcon.context-digest"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # .../flowcon
REPO_ROOT = PACKAGE_ROOT.parent


def images_dir() -> Path:
    return Path(os.environ.get("FLOWCON_IMAGES_DIR", REPO_ROOT / "images"))


# The minimal package a training script imports ``flowcon.report`` from.
_PACKAGE_INIT = b'"""Metric lines for FlowCon (training-image copy)."""\n'


@dataclass(frozen=True)
class TrainingImage:
    model: str
    dockerfile: Path

    @property
    def tag(self) -> str:
        return f"{IMAGE_PREFIX}{self.model}:latest"


# The training images this module builds: images/<model>/Dockerfile, all sharing
# images/train. Other folders of images/ (base, testbox, examples) have their own scripts.
MODELS = ("vae", "mnist", "mnist-mlp", "lstm", "birnn", "gru")
# Each script's default FLOWCON_ITERATIONS (a test keeps these equal to the scripts), so
# a replay can scale a job's work without knowing the script.
DEFAULT_ITERATIONS = {
    "vae": 2000,
    "mnist": 600,
    "mnist-mlp": 1000,
    "lstm": 1000,
    "birnn": 2500,
    "gru": 2500,
}


def training_images(root: Path | None = None) -> list[TrainingImage]:
    """The training images whose Dockerfile exists under ``root`` (images/)."""
    root = root or images_dir()
    return [
        TrainingImage(m, root / m / "Dockerfile")
        for m in MODELS
        if (root / m / "Dockerfile").is_file()
    ]


def image_tag(model: str) -> str:
    return f"{IMAGE_PREFIX}{model}:latest"


def _context_files(image: TrainingImage) -> list[tuple[str, bytes]]:
    train = image.dockerfile.parent.parent / "train"
    files = [("Dockerfile", image.dockerfile.read_bytes())]
    for path in sorted(train.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        files.append((f"train/{path.relative_to(train).as_posix()}", path.read_bytes()))
    files.append(("flowcon/__init__.py", _PACKAGE_INIT))
    files.append(("flowcon/report.py", (PACKAGE_ROOT / "report.py").read_bytes()))
    return files


def context_digest(files: list[tuple[str, bytes]], base_id: str) -> str:
    h = hashlib.sha256(base_id.encode())
    for name, data in files:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def context_tar(files: list[tuple[str, bytes]]) -> io.BytesIO:
    """Deterministic tarball (fixed mtimes and owners) so layer caching is stable."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def ensure_base_image(client: Any, base: str = BASE_IMAGE) -> str:
    """Id of the base image, building it with images/base/build.sh if missing."""
    import docker.errors

    try:
        return str(client.images.get(base).id)
    except docker.errors.ImageNotFound:
        pass
    script = images_dir() / "base" / "build.sh"
    log.info("base image %s missing: running %s (a few minutes)", base, script)
    result = subprocess.run(["bash", str(script), base], check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{script} failed with exit code {result.returncode}")
    return str(client.images.get(base).id)


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: an image with the same context digest was present
    digest: str


def build_image(
    client: Any,
    image: TrainingImage,
    base: str = BASE_IMAGE,
    force: bool = False,
    on_log: Callable[[str], None] | None = None,
) -> BuildResult:
    import docker.errors

    base_id = ensure_base_image(client, base)
    files = _context_files(image)
    digest = context_digest(files, base_id)
    if not force:
        try:
            present = client.images.get(image.tag)
            if (present.labels or {}).get(DIGEST_LABEL) == digest:
                return BuildResult(image.tag, False, digest)
        except docker.errors.ImageNotFound:
            pass
    log.info("building %s", image.tag)
    stream = client.api.build(
        fileobj=context_tar(files),
        custom_context=True,
        tag=image.tag,
        buildargs={"BASE_IMAGE": base},
        labels={DIGEST_LABEL: digest},
        rm=True,
        forcerm=True,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            raise RuntimeError(f"building {image.tag}: {chunk['error'].strip()}")
        text = chunk.get("stream", "").rstrip()
        if text and on_log is not None:
            on_log(text)
    return BuildResult(image.tag, True, digest)


def ensure_images(
    client: Any, models: list[str] | None = None, base: str = BASE_IMAGE, force: bool = False
) -> list[BuildResult]:
    """Build the named training images (all when None), skipping current ones."""
    available = {img.model: img for img in training_images()}
    wanted = list(available) if models is None else models
    unknown = [m for m in wanted if m not in available]
    if unknown:
        raise ValueError(f"unknown training image(s) {unknown}; known: {sorted(available)}")
    return [build_image(client, available[m], base=base, force=force) for m in wanted]


def model_of(tag: str) -> str | None:
    """'flowcon/train-vae:latest' -> 'vae'; None for images that are not ours."""
    name = tag.split(":", 1)[0]
    return name[len(IMAGE_PREFIX) :] if name.startswith(IMAGE_PREFIX) else None
