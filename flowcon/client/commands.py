"""The allocator's client commands: ``submit`` (``--dry-run``, ``-``), ``jobs``, ``job``,
``logs`` and ``cancel`` (docs/jobs.md, "Commands"; exit codes in ``flowcon.contract``,
``CLI_EXIT_*``). What they print is ``flowcon.client.render``; the daemon's own command,
``flowcon allocator``, is ``flowcon.allocator.cli``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
import yaml

from flowcon.allocator.cli import config_option
from flowcon.allocator.config import (
    ENV_TOKEN,
    ENV_URL,
    ConfigError,
    client_cacert,
    client_settings,
)
from flowcon.allocator.records import JsonObject
from flowcon.allocator.views import JobView, LogLineView, SubmitAnswer
from flowcon.client.http import AllocatorApi, AllocatorClient, ClientError
from flowcon.client.render import (
    describe_job,
    dry_run_line,
    jobs_console,
    jobs_fingerprint,
    log_line,
    print_jobs,
    render_jobs,
    submit_line,
)
from flowcon.contract import (
    CLI_EXIT_ADMITTED,
    CLI_EXIT_DROPPED,
    CLI_EXIT_ERROR,
    CLI_EXIT_INVALID,
    CLI_EXIT_PENDING,
)
from flowcon.textfile import NotText, read_text, safe_load_yaml

_url_opt = click.option("--url", envvar=ENV_URL, help=f"Allocator URL (env {ENV_URL}).")
_token_opt = click.option("--token", envvar=ENV_TOKEN, help=f"API token (env {ENV_TOKEN}).")


def _client(config_path: str | None, url: str | None, token: str | None) -> AllocatorApi:
    try:
        u, t = client_settings(config_path, url, token)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return AllocatorApi(AllocatorClient(u, t, cacert=client_cacert(config_path)))


def _fail(exc: Exception, what: str = "request") -> None:
    """The daemon's error as one line; a refused input (400) exits ``CLI_EXIT_INVALID``."""
    if isinstance(exc, ClientError):
        msg = str(exc)
        field = exc.body.get("field")
        if field == "quota" or "owner" in exc.body:
            raise click.ClickException(msg)  # refused for who asks, not for what: exit 1
        if field is not None or exc.status == 400:
            raise InvalidInput(f"invalid {what}: {exc.body.get('error', msg)}")
        elif exc.status == 401:
            msg = f"{msg} (give --token, {ENV_TOKEN}, or the config with the daemon's token)"
        elif exc.status == 403:
            msg = (
                f"{msg} (submit, its dry run and cancel need the user or operator token; "
                "reads any but agent)"
            )
        raise click.ClickException(msg)
    raise exc


def read_spec_file(path: Path) -> JsonObject:
    """The spec as a mapping, with a profile file inlined (the daemon cannot read the
    client's files). Checked locally first so a typo fails before any network call."""
    try:
        text = read_text(path)
    except (OSError, NotText) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None
    return read_spec_text(text, path.parent, str(path))


def read_spec_text(text: str, base_dir: Path, label: str) -> JsonObject:
    """``read_spec_file`` for a spec's text (a file's, or standard input's with ``-``);
    a profile file is read relative to ``base_dir``."""
    from flowcon.jobspec.spec import JobSpecError, load_profile, parse_jobspec

    try:
        parse_jobspec(text, base_dir=base_dir)
        data = safe_load_yaml(text)
    except JobSpecError as exc:
        raise InvalidInput(f"invalid spec {label}: {exc}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read {label}: {exc}") from None
    prof = data.get("profile")
    if isinstance(prof, str) and prof != "auto":
        data["profile"] = {g: v for g, v in load_profile(base_dir / prof).points}
    return dict(data)


class InvalidInput(click.ClickException):
    """Invalid input (spec, file, option): exit code ``CLI_EXIT_INVALID``."""

    exit_code = CLI_EXIT_INVALID


def _exit_code(out: SubmitAnswer) -> int:
    """What submit (and its dry run) exits with for the allocator's answer."""
    decision = out.decision
    if decision == "profiling":
        return CLI_EXIT_PENDING
    if decision == "cancelled":
        return CLI_EXIT_ERROR
    return CLI_EXIT_ADMITTED if out.admitted else CLI_EXIT_DROPPED


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False, allow_dash=True, path_type=str))
@config_option
@_url_opt
@_token_opt
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON answer.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate and say whether it would be admitted now (GPUs, predicted finish); "
    "creates nothing (like sbatch --test-only).",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    help="With profile: auto, wait for the pre-run and the decision (default) or return "
    "at once with 'profiling'.",
)
@click.option(
    "--timeout",
    type=float,
    default=1800.0,
    show_default=True,
    help="Give up waiting for a profiling decision after this many seconds.",
)
def submit(
    spec: str,
    config_path: str | None,
    url: str | None,
    token: str | None,
    as_json: bool,
    dry_run: bool,
    wait: bool,
    timeout: float,
) -> None:
    """Submit a job spec (a YAML file, or - for standard input); prints "admitted" with
    its GPUs or "dropped" with the reason.

    Exit codes: 0 admitted, 3 dropped, 2 invalid input, 4 still profiling (--no-wait),
    1 any other error. --dry-run exits with the same codes for "would be admitted /
    dropped" and creates nothing. A spec with ``profile: auto`` is pre-run first (1, 2,
    4, ... GPUs); the command shows each measured point and then the decision, unless
    --no-wait."""
    import json

    if spec == "-":
        data = read_spec_text(sys.stdin.read(), Path.cwd(), "<stdin>")
    else:
        path = Path(spec)
        if not path.is_file():
            raise InvalidInput(f"cannot read {spec}: no such file")
        data = read_spec_file(path)
    client = _client(config_path, url, token)
    try:
        if dry_run:
            out = client.dry_run(data)
        else:
            out = client.submit(data)
            if out.decision == "profiling" and wait:
                name = str(out.name if out.name is not None else data.get("name"))
                out = wait_for_decision(client, name, out, timeout)
    except Exception as exc:
        _fail(exc, "spec")
        return
    if as_json:
        click.echo(json.dumps(out.json, indent=2))
    else:
        spec_name = data.get("name")
        click.echo(dry_run_line(out) if dry_run else submit_line(out, spec_name))
    sys.exit(_exit_code(out))


def wait_for_decision(
    client: AllocatorApi, name: str, first: SubmitAnswer, timeout: float, every: float = 1.0
) -> SubmitAnswer:
    """Poll the job while its pre-run runs; print each profiled point on stderr; return an
    answer shaped like a direct submit's once the daemon decided."""
    import time

    click.echo(
        f"profiling {name} at {', '.join(map(str, first.counts))} GPUs "
        f"(up to {first.profile_seconds} s each)...",
        err=True,
    )
    seen: set[int] = set()
    end = time.monotonic() + timeout
    while True:
        job = client.job(name)
        for e in job.events:
            if e.kind == "profile_point" and e.id not in seen:
                seen.add(e.id)
                rate = e.data.get("iterations_per_s")
                got = "no steady rate" if rate is None else f"{rate:.3g} it/s"
                took = f"{e.data.get('seconds', 0):.0f} s"
                click.echo(f"  {e.data.get('gpus')} GPU(s): {got} (after {took})", err=True)
        if job.state != "profiling":
            adm = job.admissions[-1] if job.admissions else None
            admitted = adm is not None and adm.admitted
            decision = "admitted" if admitted else "dropped"
            if job.state == "cancelled":
                decision = "cancelled"
            return SubmitAnswer.from_json(
                {
                    "name": name,
                    "decision": decision,
                    "admitted": admitted,
                    "reason": (adm.reason if adm is not None else "") or job.reason,
                    "gpus": job.gpus,
                    "min_share": adm.min_share if adm is not None else None,
                    "profile": job.profile,
                    "state": job.state,
                }
            )
        if time.monotonic() > end:
            raise click.ClickException(
                f"{name} is still profiling after {timeout:.0f} s (the daemon keeps going; "
                "see flowcon jobs)"
            )
        time.sleep(every)


ACTIVE = ("profiling", "admitted", "running")


@click.command()
@config_option
@_url_opt
@_token_opt
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json", "name"]),
    default="table",
    show_default=True,
    help="table; wide (more columns); json; name (job/NAME per line, like kubectl).",
)
@click.option("--json", "as_json", is_flag=True, help="Same as -o json.")
@click.option("-q", "--quiet", is_flag=True, help="Only the job names (like docker ps -q).")
@click.option("--all/--active", "show_all", default=True, help="Include finished jobs.")
@click.option(
    "-A",
    "--all-users",
    is_flag=True,
    help="Every user's jobs (like kubectl -A); default: a user's own (the operator and "
    "readers see every job).",
)
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="Refresh until Ctrl-C (like kubectl get -w / watch); on a terminal the table is "
    "redrawn in place, otherwise printed again whenever it changes.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--watch-count",
    type=click.IntRange(min=1),
    default=None,
    help="With --watch: stop after this many refreshes (scripts, tests).",
)
def jobs(
    config_path: str | None,
    url: str | None,
    token: str | None,
    output: str,
    as_json: bool,
    quiet: bool,
    show_all: bool,
    all_users: bool,
    watch: bool,
    interval: float,
    watch_count: int | None,
) -> None:
    """List jobs: name, owner, state, GPUs, progress, deadline, predicted finish."""
    if as_json:
        output = "json"
    if quiet:
        output = "quiet"
    client = _client(config_path, url, token)
    try:
        me = None if all_users else client.own_name()
    except Exception as exc:
        _fail(exc)
        raise  # not reached: _fail raises

    def fetch() -> list[JobView]:
        try:
            rows = client.jobs()
        except Exception as exc:
            _fail(exc)
            raise  # not reached: _fail raises
        if me is not None:
            rows = [r for r in rows if r.owner == me]
        return rows if show_all else [r for r in rows if r.state in ACTIVE]

    if not watch:
        print_jobs(fetch(), output, client.url)
        return
    watch_jobs(fetch, output, client.url, interval, watch_count)


def watch_jobs(
    fetch: Callable[[], list[JobView]],
    output: str,
    url: str,
    interval: float,
    count: int | None = None,
) -> None:
    """``flowcon jobs --watch``: on a terminal a rich ``Live`` table redrawn every
    ``interval`` seconds; otherwise the listing printed again whenever it changed (a log
    a script can read). Stops after ``count`` refreshes, or at Ctrl-C."""
    import time

    console = jobs_console(output == "wide")
    n = 0
    try:
        if console.is_terminal and output not in ("json", "name", "quiet"):
            from rich.live import Live

            with Live(render_jobs(fetch(), output, url), console=console) as live:
                n = 1
                while count is None or n < count:
                    time.sleep(interval)
                    live.update(render_jobs(fetch(), output, url))
                    n += 1
            return
        last: list[tuple[object, ...]] | None = None
        while count is None or n < count:
            if n:
                time.sleep(interval)
            rows = fetch()
            n += 1
            if jobs_fingerprint(rows) != last:
                last = jobs_fingerprint(rows)
                print_jobs(rows, output, url)
                if output in ("json", "name", "quiet"):
                    click.echo("---")  # one listing ends (a YAML document separator)
    except KeyboardInterrupt:
        return


@click.command("job")
@click.argument("name")
@config_option
@_url_opt
@_token_opt
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text (like kubectl describe) or the API's JSON.",
)
def job_cmd(
    name: str, config_path: str | None, url: str | None, token: str | None, output: str
) -> None:
    """One job: its spec (env values hidden), state, GPUs and placement over time, events,
    predicted finish against its deadline."""
    import json
    import time

    client = _client(config_path, url, token)
    try:
        job = client.job(name)
    except Exception as exc:
        _fail(exc)
        return
    if output == "json":
        click.echo(json.dumps(job.to_json(), indent=2))
    else:
        click.echo(describe_job(job, time.time()))


TERMINAL = ("completed", "dropped", "cancelled", "failed")
# -f asks each page from this long before the newest line it printed, and skips the lines
# it printed already: a worker's line that reached the engine's log a moment after another
# worker's newer one is still printed (a single cursor would pass over it)
FOLLOW_OVERLAP_NS = 2_000_000_000


@click.command()
@click.argument("name")
@config_option
@_url_opt
@_token_opt
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends or Ctrl-C.")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    default=None,
    help="Only this worker container's output (its node rank, flowcon.rank; GROUP_RANK in it).",
)
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Last N lines of each.")
@click.option("-t", "--timestamps", is_flag=True, help="Show the engine's timestamps.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
def logs(
    name: str,
    config_path: str | None,
    url: str | None,
    token: str | None,
    follow: bool,
    rank: int | None,
    tail: int | None,
    timestamps: bool,
    interval: float,
) -> None:
    """The output of a job's worker containers (Swarm: services), in time order; each line
    prefixed with its rank when the job has several workers. Logs exist while the job's
    containers do: they are removed when it ends."""
    import time

    client = _client(config_path, url, token)
    first = True
    newest = 0  # the newest line's timestamp (ns)
    seen: set[LogLineView] = set()  # lines printed in the last FOLLOW_OVERLAP_NS
    try:
        while True:
            after = None if first else str(max(0, newest - FOLLOW_OVERLAP_NS))
            page = client.logs(name, rank=rank, after=after, tail=tail if first else None)
            ranks = page.ranks
            if rank is not None and ranks and rank not in ranks and not follow:
                raise click.ClickException(
                    f"job {name} has no worker of rank {rank} (ranks: {', '.join(map(str, ranks))})"
                )
            prefix = rank is None and len(ranks) > 1
            for ln in page.lines:
                if ln in seen:
                    continue
                seen.add(ln)
                newest = max(newest, ln.ts_ns)
                click.echo(log_line(ln, prefix, timestamps))
            if page.note and first:
                click.echo(page.note, err=True)  # once, also when following
            first = False
            if not follow or page.state in TERMINAL:
                return
            seen = {k for k in seen if k.ts_ns > newest - FOLLOW_OVERLAP_NS}
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    except click.ClickException:
        raise
    except Exception as exc:
        _fail(exc)


@click.command()
@click.argument("names", nargs=-1, required=True)
@config_option
@_url_opt
@_token_opt
def cancel(
    names: tuple[str, ...], config_path: str | None, url: str | None, token: str | None
) -> None:
    """Cancel jobs: their containers stop and their GPUs go to the others. Exits 1 when
    any could not be cancelled, naming them."""
    client = _client(config_path, url, token)
    failed: list[str] = []
    for name in names:
        try:
            out = client.cancel(name)
        except ClientError as exc:
            if exc.status in (0, 401, 403):  # the same for every name: say it once
                _fail(exc)
            click.echo(f"cannot cancel {name}: {exc}", err=True)
            failed.append(name)
            continue
        click.echo(f"cancelled {out.name}")
    if failed:
        raise click.ClickException(f"not cancelled: {', '.join(failed)}")
