"""The ``flowcon`` command.

Subcommands live in the module that owns them and are imported only when invoked,
so ``flowcon status`` does not pay for matplotlib or the simulator.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

import click

from flowcon import logsetup

# name -> "module:attribute" of a click.Command
SUBCOMMANDS: dict[str, str] = {
    "agent": "flowcon.agent.cli:agent",
    "status": "flowcon.agent.cli:status",
    "simulate": "flowcon.sim.cli:simulate",
    "replay": "flowcon.replay.cli:replay",
    "allocator": "flowcon.allocator.cli:allocator",
    "submit": "flowcon.client.commands:submit",
    "jobs": "flowcon.client.commands:jobs",
    "cancel": "flowcon.client.commands:cancel",
    "job": "flowcon.client.commands:job_cmd",
    "logs": "flowcon.client.commands:logs",
    "scale": "flowcon.client.operate:scale",
    "migrate": "flowcon.client.operate:migrate",
    "drain": "flowcon.client.operate:drain",
    "undrain": "flowcon.client.operate:undrain",
    "nodes": "flowcon.client.operate:nodes",
    "images": "flowcon.engine.images_cli:images",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._available())

    def _available(self) -> dict[str, str]:
        out = {}
        for name, target in SUBCOMMANDS.items():
            module = target.split(":")[0]
            if importlib.util.find_spec(module) is not None:
                out[name] = target
        return out

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._available().get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        cmd = getattr(module, attr)
        assert isinstance(cmd, click.Command)
        return cmd


def setup_logging(verbose: int) -> None:
    """FLOWCON_LOG_LEVEL (any case), else INFO (-vv: DEBUG); a bad value is a usage error."""
    try:
        logsetup.setup_logging(logging.DEBUG if verbose > 1 else logging.INFO)
    except logsetup.LogLevelError as exc:
        raise click.UsageError(str(exc)) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="flowcon")
def main(verbose: int) -> None:
    """FlowCon: resource control for deep-learning training on Docker hosts."""
    setup_logging(verbose)


if __name__ == "__main__":
    main()
