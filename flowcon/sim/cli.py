"""``flowcon simulate``: replay a job trace against a scheduling policy."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from flowcon.policy_registry import SIMULATOR_POLICIES

if TYPE_CHECKING:  # rich is imported lazily: the CLI starts fast
    from rich.console import Console

    from flowcon.alloc.model import Job, Topology
    from flowcon.alloc.quota import Quota
    from flowcon.alloc.types import Policy
    from flowcon.sim.engine import SimResult
    from flowcon.sim.loaders import Tables

SHARED = Path(
    os.environ.get("FLOWCON_SHARED", Path(__file__).resolve().parents[2].parent / "shared")
)
DEFAULT_THROUGHPUTS = SHARED / "data/throughputs/A100"
# each shared trace's cluster in the published evaluation (shared/data/README.md)
PUBLISHED_CLUSTERS = {
    "195job": "16x8",
    "cluster01": "64x8",
    "cluster02": "64x8",
    "cluster03": "64x8",
    "cluster05": "64x8",
    "cluster04": "128x8",
}


def run_simulation(
    trace: str,
    cluster: str,
    policy: str,
    throughputs: str | None = None,
    slot: float = 60.0,
    overhead: float = 10.0,
    place: bool = True,
    progress: bool = False,
    world: str = "ours",
    batch_ranges: bool = False,
    jitter: int = 0,
    seed: int = 0,
    *,
    users: int = 0,
    user_skew: float = 0.0,
    quota: Quota | None = None,
) -> tuple[object, dict[str, object]]:
    """Load, simulate, summarise. Returns (SimResult, summary dict). ``world``: ``ours`` or
    ``published`` (the published ElasticFlow simulator's world, see flowcon/sim/world.py).
    ``batch_ranges``: jobs without a batch-size range get the default one
    (``flowcon.alloc.batch.default_range``: half to twice their batch, table rows only).
    ``jitter`` > 0: each submission moved by up to that many whole seconds, drawn with
    ``seed`` (``flowcon.sim.perturb.jitter_submissions``; the summary says so).
    ``users`` > 0: the jobs get that many owners (``flowcon.sim.tenants``, drawn with
    ``seed``, ``user_skew`` for a few heavy users), each held to ``quota`` if given (the
    allocator's rule, flowcon/alloc/quota.py); the summary counts the quota refusals."""
    from flowcon.alloc.model import Topology
    from flowcon.sim.engine import Simulator
    from flowcon.sim.loaders import load_throughputs, load_trace
    from flowcon.sim.outputs import summarize

    wall0 = time.perf_counter()
    topo = Topology.from_spec(cluster)
    tables = load_throughputs(throughputs or DEFAULT_THROUGHPUTS)
    jobs = load_trace(trace, tables)
    if jitter:
        from flowcon.sim.perturb import jitter_submissions

        jobs = jitter_submissions(jobs, seed, jitter)
    if batch_ranges:
        from flowcon.alloc.batch import with_default_ranges

        with_default_ranges(jobs, tables)
    quotas = _tenants(jobs, users, seed, user_skew, quota)
    if quotas and world != "ours":
        raise ValueError("per-user quotas run in our world (--world ours)")
    if world == "published":
        res = _run_published(jobs, topo, policy, slot, overhead, tables)
        summary = summarize(res)
        summary["world"] = world
        summary["trace"] = str(trace)
        _note_jitter(summary, jitter, seed)
        summary["wall_seconds"] = round(time.perf_counter() - wall0, 3)
        return res, summary
    if world != "ours":
        raise ValueError(f"unknown world {world!r}; choose ours or published")
    if policy == "elasticflow-published":
        raise ValueError(
            "elasticflow-published is the published simulator's own loop: run it with "
            "--world published (elasticflow-published-engine runs its admission rules in "
            "our world)"
        )
    pol = _policy(policy, overhead, tables)
    if progress and jobs:
        from rich.progress import Progress

        with Progress(console=_stderr_console(), transient=True) as bar:
            task = bar.add_task(f"{policy} {Path(trace).name}", total=len(jobs))
            sim = Simulator(
                jobs, topo, pol, slot=slot, overhead=overhead, place=place,
                on_progress=lambda n: bar.advance(task, n), quotas=quotas,
            )  # fmt: skip
            res = sim.run()
    else:
        res = Simulator(
            jobs, topo, pol, slot=slot, overhead=overhead, place=place, quotas=quotas
        ).run()
    summary = summarize(res)
    if users:
        summary["tenants"] = _tenant_summary(res, users, user_skew, quota)
    summary["world"] = world
    summary["trace"] = str(trace)
    _note_jitter(summary, jitter, seed)
    summary["wall_seconds"] = round(time.perf_counter() - wall0, 3)
    return res, summary


def _tenants(
    jobs: list[Job], users: int, seed: int, skew: float, quota: Quota | None
) -> dict[str, Quota]:
    """Owners for the trace's jobs and each owner's quota (empty: no users or no quota)."""
    if users <= 0:
        return {}
    from flowcon.sim.tenants import assign_owners, owner_name

    assign_owners(jobs, users, seed, skew)
    return {owner_name(k): quota for k in range(users)} if quota is not None else {}


def _tenant_summary(
    res: SimResult, users: int, skew: float, quota: Quota | None
) -> dict[str, object]:
    """Users, their quota, and per user: jobs, quota refusals, deadlines met."""
    from dataclasses import asdict

    per: dict[str, dict[str, int]] = {}
    for r in res.results:
        row = per.setdefault(r.job.owner, {"jobs": 0, "quota_refused": 0, "deadline_met": 0})
        row["jobs"] += 1
        row["quota_refused"] += int(r.quota_refused)
        row["deadline_met"] += int(r.job.deadline is not None and r.met_deadline)
    return {
        "users": users,
        "skew": skew,
        "quota": None if quota is None else asdict(quota),
        "quota_refused": sum(row["quota_refused"] for row in per.values()),
        "per_user": dict(sorted(per.items())),
    }


def _note_jitter(summary: dict[str, object], jitter: int, seed: int) -> None:
    if jitter:
        summary["jitter"] = {"seconds": jitter, "seed": seed}


def _policy(name: str, overhead: float, tables: Tables | None = None) -> Policy:
    """The policy ``name`` from the registry (flowcon/policy_registry.py); ``pollux`` gets
    the throughput tables (its batch sizes)."""
    from flowcon.policy_registry import make_policy

    return make_policy(name, overhead=overhead, tables=tables)


def _run_published(
    jobs: list[Job],
    topo: Topology,
    policy: str,
    slot: float,
    overhead: float,
    tables: Tables | None = None,
) -> SimResult:
    """``policy`` as the published simulator defines it, in its world; FlowCon's own
    policies (``elasticflow``) keep their admission margin of two ``overhead``s."""
    from flowcon.repro.published_baselines import simulate_gandiva, simulate_tiresias
    from flowcon.repro.published_elasticflow import simulate_elasticflow_published
    from flowcon.repro.published_policies import EDFPublished
    from flowcon.sim.engine import Simulator
    from flowcon.sim.world import published_world

    if policy == "elasticflow-published":
        return simulate_elasticflow_published(jobs, topo)
    if policy == "gandiva":
        return simulate_gandiva(jobs, topo)
    if policy == "tiresias":
        return simulate_tiresias(jobs, topo)
    pol = EDFPublished() if policy == "edf" else _policy(policy, overhead, tables)
    return Simulator(jobs, topo, pol, slot=slot, overhead=0.0, world=published_world(policy)).run()


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@click.command("simulate")
@click.option("--trace", required=True, type=click.Path(dir_okay=False), help="Trace CSV.")
@click.option("--cluster", default="16x8", show_default=True, help="NODESxGPUS, e.g. 64x8.")
@click.option(
    "--policy",
    default="elasticflow",
    show_default=True,
    type=click.Choice(SIMULATOR_POLICIES),
)
@click.option(
    "--world",
    default="ours",
    show_default=True,
    type=click.Choice(["ours", "published"]),
    help="ours: FlowCon's world model; published: the published ElasticFlow simulator's "
    "(timing, per-policy overheads, deadline check, batch declines, its baselines).",
)
@click.option(
    "--throughputs",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of <model>.csv throughput tables (default: shared A100 profiles).",
)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output directory.")
@click.option("--slot", default=60.0, show_default=True, help="Scheduling slot, seconds.")
@click.option(
    "--overhead",
    default=10.0,
    show_default=True,
    help="Seconds of progress lost per rescale or migration.",
)
@click.option(
    "--batch-ranges",
    is_flag=True,
    help="Jobs without batch_size_min/max get a range of half to twice their batch size "
    "(table rows only), for the batch-size-aware policies.",
)
@click.option(
    "--jitter",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Move each submission by up to this many whole seconds (a perturbed copy of the "
    "trace, drawn with --seed), to see how much a result owes to the trace's luck.",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of --jitter and --users."
)
@click.option(
    "--users",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Give the jobs this many owners (the traces have none), drawn from their ids.",
)
@click.option(
    "--user-skew",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="0: owners uniform; > 0: a few users submit most jobs (Zipf-like weights).",
)
@click.option(
    "--quota-gpus",
    default=None,
    type=click.IntRange(min=1),
    help="Each user's max_gpus: GPUs guaranteed to their deadline jobs (needs --users).",
)
@click.option(
    "--quota-jobs",
    default=None,
    type=click.IntRange(min=1),
    help="Each user's max_jobs: their active jobs (needs --users).",
)
@click.option("--no-placement", is_flag=True, help="Skip buddy placement (counts only).")
@click.option("--no-plots", is_flag=True, help="Write the CSV/JSON but no PNG plots.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr (default: only when stderr is a terminal).",
)
def simulate(
    trace: str,
    cluster: str,
    policy: str,
    throughputs: str | None,
    out: str | None,
    slot: float,
    overhead: float,
    no_placement: bool,
    no_plots: bool,
    progress: bool | None,
    world: str,
    batch_ranges: bool,
    jitter: int,
    seed: int,
    users: int,
    user_skew: float,
    quota_gpus: int | None,
    quota_jobs: int | None,
) -> None:
    """Simulate a trace on a GPU cluster; the last stdout line is a JSON summary."""
    from flowcon.alloc.quota import Quota
    from flowcon.sim.loaders import InputError

    if progress is None:
        progress = sys.stderr.isatty()
    if slot <= 0:
        raise click.BadParameter("must be > 0", param_hint="--slot")
    quota = None
    if quota_gpus is not None or quota_jobs is not None:
        if not users:
            raise click.BadParameter("needs --users N", param_hint="--quota-gpus/--quota-jobs")
        quota = Quota(max_gpus=quota_gpus, max_jobs=quota_jobs)
    try:
        res, summary = run_simulation(
            trace, cluster, policy, throughputs, slot, overhead, not no_placement, progress, world,
            batch_ranges, jitter, seed, users=users, user_skew=user_skew, quota=quota,
        )  # fmt: skip
    except (InputError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if out:
        from flowcon.sim.engine import SimResult
        from flowcon.sim.outputs import write_jobs_csv, write_plots

        assert isinstance(res, SimResult)
        od = Path(out)
        od.mkdir(parents=True, exist_ok=True)
        write_jobs_csv(res, od / "jobs.csv")
        (od / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        plots = [] if no_plots else write_plots(res, od)
        names = ["jobs.csv", "summary.json", *(p.name for p in plots)]
        click.echo(f"wrote {od}/: {', '.join(names)}")
    click.echo(json.dumps(summary))
