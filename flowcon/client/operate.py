"""The operator's commands: ``scale``, ``migrate``, ``drain``, ``undrain``, ``nodes``.

Their Docker and Kubernetes equivalents (docs/allocator.md, "Operating jobs and nodes"):
``flowcon scale`` ~ ``docker service scale`` / ``kubectl scale``, ``flowcon drain`` ~
``docker node update --availability drain`` / ``kubectl drain`` (it waits, with progress,
until the node is empty), ``flowcon undrain`` ~ ``--availability active`` / ``kubectl
uncordon``, ``flowcon nodes`` ~ ``docker node ls`` / ``kubectl get nodes``.
"""

from __future__ import annotations

import json
import sys
import time

import click

from flowcon.allocator.cli import config_option
from flowcon.allocator.views import NodeView
from flowcon.client.commands import _client, _fail, _token_opt, _url_opt
from flowcon.client.http import AllocatorClient


def _raw(config_path: str | None, url: str | None, token: str | None) -> AllocatorClient:
    return _client(config_path, url, token).client


def nodes_table(rows: list[NodeView], url: str, now: float) -> object:
    """The ``flowcon nodes`` table (rich): like ``kubectl get nodes`` with GPU columns."""
    from rich.table import Table

    table = Table(title=f"allocator {url}")
    for col in ("NAME", "STATUS", "GPUS", "USED", "JOBS", "AVOIDED", "TOOLKIT", "HARDENING"):
        table.add_column(col, justify="right" if col in ("GPUS", "USED") else "left")
    for n in rows:
        avoided = ", ".join(
            f"gpu {a.get('gpu')} ({a.get('reason') or 'avoided'}, "
            f"{max(0, int(float(str(a.get('until') or 0)) - now))} s left)"
            for a in n.avoided
        )
        status = n.status
        if n.drained_since is not None:
            status += ",SchedulingDisabled"
        table.add_row(
            n.name,
            status,
            str(n.gpus),
            str(n.used),
            ", ".join(n.jobs) or "-",
            avoided or "-",
            n.toolkit or "-",
            n.hardening or "-",
        )
    return table


@click.command()
@config_option
@_url_opt
@_token_opt
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def nodes(config_path: str | None, url: str | None, token: str | None, output: str) -> None:
    """The GPU nodes: status (Ready, Draining, Drained, Avoided), GPUs, used, jobs."""
    from rich.console import Console

    client = _raw(config_path, url, token)
    try:
        rows = [NodeView.from_json(n) for n in client.nodes()]
    except Exception as exc:
        _fail(exc)
        return
    if output == "json":
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    Console(file=sys.stdout, width=120).print(nodes_table(rows, client.url, time.time()))


@click.command()
@click.argument("name")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="Hold the job at N GPUs.")
@click.option("--auto", is_flag=True, help="Give the GPU count back to the policy.")
@config_option
@_url_opt
@_token_opt
def scale(
    name: str,
    gpus: int | None,
    auto: bool,
    config_path: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Scale a running job to N GPUs (within its bounds; a deadline job not below its
    guaranteed share) until `--auto` gives the count back to the policy. Stop-free jobs
    rescale without a restart; others by checkpoint-restart."""
    if auto == (gpus is not None):
        raise click.UsageError("give exactly one of --gpus N and --auto")
    client = _raw(config_path, url, token)
    try:
        client.scale(name, None if auto else gpus)
    except Exception as exc:
        _fail(exc)
        return
    if auto:
        click.echo(f"job/{name} scaled by the policy again")
    else:
        click.echo(f"job/{name} scaled to {gpus} GPUs (held until --auto)")


@click.command()
@click.argument("name")
@click.option("--to", "node", required=True, help="The node to move the job's workers to.")
@config_option
@_url_opt
@_token_opt
def migrate(
    name: str, node: str, config_path: str | None, url: str | None, token: str | None
) -> None:
    """Move a running job's workers to NODE at the next planning round (stop-free where
    its runtime allows, else by checkpoint-restart)."""
    client = _raw(config_path, url, token)
    try:
        client.migrate(name, node)
    except Exception as exc:
        _fail(exc)
        return
    click.echo(f"job/{name} migrating to {node}")


@click.command()
@click.argument("node")
@click.option("--force", is_flag=True, help="Drain even if deadline guarantees are lost.")
@click.option("--no-wait", is_flag=True, help="Return at once instead of waiting until empty.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Seconds to wait for the node to empty (0: no limit); exit 1 when it ran out.",
)
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True)
@config_option
@_url_opt
@_token_opt
def drain(
    node: str,
    force: bool,
    no_wait: bool,
    timeout: float,
    interval: float,
    config_path: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Take NODE out of scheduling and move every job on it elsewhere (stop-free where the
    job's runtime allows, else by checkpoint-restart); waits, with progress, until the
    node is empty."""
    client = _raw(config_path, url, token)
    try:
        view = NodeView.from_json(client.drain(node, force))
    except Exception as exc:
        _fail(exc)
        return
    click.echo(f"node/{node} cordoned")
    if no_wait:
        return
    start = time.monotonic()
    last: list[str] | None = None
    while view.jobs:
        if view.jobs != last:
            click.echo(f"  waiting for {len(view.jobs)} job(s) to move: {', '.join(view.jobs)}")
            last = view.jobs
        if timeout and time.monotonic() - start > timeout:
            raise click.ClickException(
                f"node {node} not empty after {timeout:.0f} s: {', '.join(view.jobs)}"
            )
        time.sleep(interval)
        try:
            view = NodeView.from_json(client.node(node))
        except Exception as exc:
            _fail(exc)
            return
    click.echo(f"node/{node} drained ({time.monotonic() - start:.1f} s)")


@click.command()
@click.argument("node")
@config_option
@_url_opt
@_token_opt
def undrain(node: str, config_path: str | None, url: str | None, token: str | None) -> None:
    """Put NODE back into scheduling (``kubectl uncordon``)."""
    client = _raw(config_path, url, token)
    try:
        client.undrain(node)
    except Exception as exc:
        _fail(exc)
        return
    click.echo(f"node/{node} uncordoned")
