"""Every scheduling policy by name: the one table ``flowcon simulate --policy`` and the
allocator's ``policy:`` setting choose from.

Each entry holds the name, a one-line description, whether the live allocator may run it
(``live``; the others exist for the simulator only), and a factory that builds the policy
from ``PolicyOptions`` (the options a driver sets: the overhead charged in admission,
ElasticFlow's ``sticky``/``lossless_replan``, the throughput tables Pollux picks batch
sizes from). The policies themselves live in flowcon.alloc (the product: ElasticFlow, EDF),
flowcon.baselines (the papers' baselines, the batch-size-aware variants) and flowcon.repro
(the published simulator's rules); this module sits above them, so flowcon.alloc imports
none of them. A factory imports its module when a policy is made, so importing this table
stays light (the allocator's config and the ``simulate`` command's options read it).

What ``--world published`` runs for a name (the published simulator's own loops and
policies) is that world's business: flowcon/sim/cli.py, ``_run_published``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from flowcon.alloc.model import ThroughputCurve

if TYPE_CHECKING:
    from flowcon.alloc.types import Policy

# model -> global batch size -> curve (flowcon.sim.loaders.Tables)
Tables = Mapping[str, Mapping[int, ThroughputCurve]]


@dataclass(frozen=True)
class PolicyOptions:
    """What a driver may set on the policy it makes. ``sticky``/``lossless_replan`` tune
    ElasticFlow only (see ``ElasticFlowPolicy``); ``tables``: Pollux's batch sizes."""

    overhead: float = 0.0
    sticky: bool = False
    lossless_replan: bool = True
    tables: Tables | None = None


@dataclass(frozen=True)
class PolicyEntry:
    """One policy name: its description, its factory (None: no policy object, a whole
    simulator loop of its own, see ``flowcon.sim.cli``), and whether the live allocator
    may be configured with it."""

    name: str
    description: str
    make: Callable[[PolicyOptions], Policy] | None
    live: bool = True


def _elasticflow(name: str, rank: str) -> Callable[[PolicyOptions], Policy]:
    """ElasticFlow under ``name``, spare GPUs by ``rank`` (``default``: ``DEFAULT_RANK``)."""

    def make(o: PolicyOptions) -> Policy:
        from flowcon.alloc.policy import DEFAULT_RANK, ElasticFlowPolicy

        pol = ElasticFlowPolicy(
            overhead=o.overhead,
            sticky=o.sticky,
            lossless_replan=o.lossless_replan,
            rank=DEFAULT_RANK if rank == "default" else rank,
        )
        pol.name = name
        return pol

    return make


def _edf(admission: bool) -> Callable[[PolicyOptions], Policy]:
    def make(o: PolicyOptions) -> Policy:
        from flowcon.alloc.policy import EDFPolicy

        return EDFPolicy(admission=admission, overhead=o.overhead)

    return make


def _gandiva(o: PolicyOptions) -> Policy:
    from flowcon.baselines.static import GandivaPolicy

    return GandivaPolicy()


def _tiresias(o: PolicyOptions) -> Policy:
    from flowcon.baselines.static import TiresiasPolicy

    return TiresiasPolicy()


def _themis(o: PolicyOptions) -> Policy:
    from flowcon.baselines.fairness import ThemisPolicy

    return ThemisPolicy()


def _chronus(o: PolicyOptions) -> Policy:
    from flowcon.baselines.deadline import ChronusPolicy

    return ChronusPolicy()


def _pollux(o: PolicyOptions) -> Policy:
    from flowcon.baselines.goodput import PolluxPolicy

    return PolluxPolicy(o.tables) if o.tables is not None else PolluxPolicy()


def _elastic_tiresias(o: PolicyOptions) -> Policy:
    from flowcon.baselines.elastic import ElasticTiresiasPolicy

    return ElasticTiresiasPolicy()


def _elan(backfill: bool) -> Callable[[PolicyOptions], Policy]:
    def make(o: PolicyOptions) -> Policy:
        from flowcon.baselines.elastic import ElanPolicy

        return ElanPolicy(backfill=backfill)

    return make


# Saxena's optimizer (flowcon.baselines.saxena): policy name -> (batch rule, mode)
SAXENA: Mapping[str, tuple[str, str]] = {
    "saxena-dp": ("elastic", "drop"),
    "saxena-dp-queue": ("elastic", "queue"),
    "max-bs": ("max", "drop"),
    "min-bs": ("min", "drop"),
    "random-bs": ("random", "drop"),
    "max-bs-queue": ("max", "queue"),
    "min-bs-queue": ("min", "queue"),
    "random-bs-queue": ("random", "queue"),
}


def _saxena(name: str) -> Callable[[PolicyOptions], Policy]:
    def make(o: PolicyOptions) -> Policy:
        from flowcon.baselines.saxena import SaxenaPolicy

        return SaxenaPolicy(*SAXENA[name])

    return make


def _elasticflow_batch(o: PolicyOptions) -> Policy:
    from flowcon.alloc.policy import DEFAULT_RANK, ElasticFlowPolicy
    from flowcon.baselines.elasticflow_batch import ElasticFlowBatchPolicy

    inner = ElasticFlowPolicy(
        overhead=o.overhead, sticky=o.sticky, lossless_replan=o.lossless_replan, rank=DEFAULT_RANK
    )
    return ElasticFlowBatchPolicy(inner)


def _elasticflow_published_engine(o: PolicyOptions) -> Policy:
    from flowcon.repro.published_policies import ElasticFlowPublished

    return ElasticFlowPublished()


_ENTRIES: tuple[PolicyEntry, ...] = (
    PolicyEntry(
        "elasticflow",
        "ElasticFlow: admission by minimum satisfactory share + marginal return",
        _elasticflow("elasticflow", "default"),
    ),
    PolicyEntry("edf", "Earliest deadline first, elastic, no admission control", _edf(False)),
    PolicyEntry(
        "edf-admission", "EDF allocation behind ElasticFlow's admission control", _edf(True)
    ),
    PolicyEntry("gandiva", "Static requested GPUs, arrival order, non-preemptive", _gandiva),
    PolicyEntry(
        "tiresias", "Static requested GPUs, 2D least attained service, preemptive", _tiresias
    ),
    PolicyEntry(
        "themis", "Themis: finish-time fairness, worst rho first each lease, static GPUs", _themis
    ),
    PolicyEntry(
        "chronus",
        "Chronus: SLO admission by lease plan, leases, EDF then shortest best-effort",
        _chronus,
    ),
    PolicyEntry(
        "pollux",
        "Pollux: goodput (throughput x statistical efficiency), batch per GPU count",
        _pollux,
    ),
    PolicyEntry(
        "elastic-tiresias",
        "EDL's elastic Tiresias: 2D-LAS with compaction and expansion",
        _elastic_tiresias,
    ),
    PolicyEntry(
        "e-fifo",
        "Elan's elastic FIFO: start at min_res in order, GPUs by marginal gain",
        _elan(False),
    ),
    PolicyEntry("e-bf", "Elan's elastic backfill: E-FIFO with EASY backfilling", _elan(True)),
    PolicyEntry(
        "elasticflow-fast",
        "ElasticFlow, spare GPUs by next-slot iterations per extra GPU / T(1)",
        _elasticflow("elasticflow-fast", "fast"),
    ),
    PolicyEntry(
        "elasticflow-paper",
        "ElasticFlow, spare GPUs by Algorithm 2's GPU time saved (paper)",
        _elasticflow("elasticflow-paper", "paper"),
    ),
    PolicyEntry(
        "saxena-dp",
        "Saxena DP over jobs x GPUs x batch sizes; a job that does not fit is dropped",
        _saxena("saxena-dp"),
    ),
    PolicyEntry(
        "saxena-dp-queue",
        "Saxena DP over jobs x GPUs x batch sizes; a job that does not fit waits",
        _saxena("saxena-dp-queue"),
    ),
    PolicyEntry(
        "max-bs",
        "Saxena's optimizer at each job's largest batch (Max-BS), drop mode",
        _saxena("max-bs"),
    ),
    PolicyEntry(
        "min-bs",
        "Saxena's optimizer at each job's smallest batch (Min-BS), drop mode",
        _saxena("min-bs"),
    ),
    PolicyEntry(
        "random-bs",
        "Saxena's optimizer at a seeded random batch of the range (Random-BS), drop",
        _saxena("random-bs"),
    ),
    PolicyEntry("max-bs-queue", "Max-BS, queue mode", _saxena("max-bs-queue")),
    PolicyEntry("min-bs-queue", "Min-BS, queue mode", _saxena("min-bs-queue")),
    PolicyEntry("random-bs-queue", "Random-BS, queue mode", _saxena("random-bs-queue")),
    PolicyEntry(
        "elasticflow-batch",
        "ElasticFlow admission and allocation over (GPU count, batch size)",
        _elasticflow_batch,
    ),
    PolicyEntry(
        "elasticflow-published",
        "The published ElasticFlow simulator's own loop (--world published only)",
        None,
        live=False,
    ),
    PolicyEntry(
        "elasticflow-published-engine",
        "The published simulator's ElasticFlow admission rules in our engine",
        _elasticflow_published_engine,
        live=False,
    ),
)

REGISTRY: Mapping[str, PolicyEntry] = MappingProxyType({e.name: e for e in _ENTRIES})

# name -> description of the policies the live allocator may run (its ``policy:`` setting)
POLICIES: Mapping[str, str] = MappingProxyType({e.name: e.description for e in _ENTRIES if e.live})

# every name ``flowcon simulate --policy`` accepts
SIMULATOR_POLICIES: tuple[str, ...] = tuple(REGISTRY)


def make_policy(
    name: str,
    overhead: float = 0.0,
    *,
    sticky: bool = False,
    lossless_replan: bool = True,
    tables: Tables | None = None,
) -> Policy:
    """The policy ``name`` (a key of ``REGISTRY`` with a factory), as ``flowcon simulate
    --policy`` and the allocator's ``policy:`` setting choose it."""
    entry = REGISTRY.get(name)
    if entry is None or entry.make is None:
        known = [e.name for e in _ENTRIES if e.make is not None]
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")
    return entry.make(PolicyOptions(overhead, sticky, lossless_replan, tables))
