"""``flowcon images``: build and list the training images."""

from __future__ import annotations

import sys
from typing import Any

import click

from flowcon.engine import images as img


def _client() -> Any:
    import docker

    try:
        client = docker.from_env(version="auto", timeout=600)
        client.ping()
    except Exception as exc:  # the engine is down or the socket is missing
        raise click.ClickException(f"no Docker engine answers: {exc}") from exc
    return client


@click.group()
def images() -> None:
    """Training images for replays (VAE, MNIST CNN, MNIST MLP, LSTM, BiRNN, GRU)."""


@images.command("build")
@click.argument("models", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Build every training image (the default).")
@click.option("--force", is_flag=True, help="Rebuild even if the image is current.")
@click.option("--base", default=img.BASE_IMAGE, show_default=True, help="Base image.")
@click.option("-q", "--quiet", is_flag=True, help="No build output.")
def build(models: tuple[str, ...], all_: bool, force: bool, base: str, quiet: bool) -> None:
    """Build training images (base image first if missing); current ones are skipped."""
    client = _client()
    known = [t.model for t in img.training_images()]
    wanted = known if all_ or not models else list(models)
    unknown = [m for m in wanted if m not in known]
    if unknown:
        raise click.BadParameter(
            f"unknown {unknown}; known: {', '.join(known)}", param_hint="MODELS"
        )
    on_log = None if quiet else (lambda line: click.echo(f"  {line}", err=True))
    for model in wanted:
        image = next(t for t in img.training_images() if t.model == model)
        try:
            result = img.build_image(client, image, base=base, force=force, on_log=on_log)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
        state = "built" if result.built else "current"
        click.echo(f"{result.tag}\t{state}\t{result.digest}")


@images.command("list")
def list_() -> None:
    """Training images and whether they are present on the engine."""
    import docker.errors

    client = _client()
    for t in img.training_images():
        try:
            present = client.images.get(t.tag)
            digest = (present.labels or {}).get(img.DIGEST_LABEL, "?")
            click.echo(f"{t.tag}\tpresent\t{digest}")
        except docker.errors.ImageNotFound:
            click.echo(f"{t.tag}\tmissing")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(images())
