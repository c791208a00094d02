"""``flowcon allocator``: run the allocator daemon (docs/allocator.md)."""

from __future__ import annotations

from pathlib import Path

import click

from flowcon.allocator.config import ENV_CONFIG, ConfigError

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar=ENV_CONFIG,
    help=f"Allocator config file (env {ENV_CONFIG}).",
)


@click.command()
@config_option
@click.option("--listen", help="HOST:PORT to serve the API on (overrides the config).")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Where the DB lives.")
@click.option(
    "--slot",
    type=click.FloatRange(min=0, min_open=True),
    help="Scheduling slot in seconds (overrides the config).",
)
def allocator(
    config_path: str | None, listen: str | None, state_dir: str | None, slot: float | None
) -> None:
    """Run the elastic GPU allocator daemon (ElasticFlow admission + allocation)."""
    from flowcon.allocator.config import check_listen, load_config
    from flowcon.allocator.daemon import run_daemon
    from flowcon.executor.backend import EngineConnectError

    try:
        cfg = load_config(config_path)
        if listen:
            cfg.listen = check_listen(listen)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if state_dir:
        cfg.state_dir = Path(state_dir).expanduser().resolve()
    if slot:
        cfg.slot_seconds = slot
    try:
        run_daemon(cfg)
    except (ConfigError, OSError, EngineConnectError) as exc:
        raise click.ClickException(str(exc)) from None
