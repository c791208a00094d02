"""The world model of Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads"
(shared/papers/elastic-scaling-saxena.txt), for its generated workload: throughput tables
of the four Table I categories from the job scalability analyzer's analytic model (section
III-B), pure and deterministic.

    T_j(b, k) = b / (t_proc_j(ceil(b / k)) + t_comm(p_j, k)),   infeasible when
    ceil(b / k) > the job's largest per-GPU batch (or k > b, or k > k_max)

Every parameter is fixed here from the paper's text before any measurement:

* t_proc_j(b) = a_j + c_j * b: a per-iteration overhead plus a per-sample cost (III-B1:
  the JSA interpolates a few profiled per-GPU batches; a line is the simplest interpolant).
* t_comm(p, k): a ring all-reduce of 4-byte (fp32, PyTorch) weights, 2 (k-1)/k * 4p / B,
  no latency term; 0 on one GPU. The paper's cluster has 2 P100s per machine (section IV),
  so B is the intra-machine bandwidth for k <= 2 and the network's (10 GbE) beyond.
* Category 1 (resnet50, 24M weights, per-GPU batch <= 32): a_1, c_1 and the 2-GPU
  all-reduce time are the least-squares line through Table II (scaling factors on 2 GPUs
  at per-GPU batches 8..32, whose baseline is T(32, 1)); the network all-reduce from
  section IV-D (one job on 5 GPUs: batch 160 on 5 GPUs ran 1.6x faster than 32 on 2); the
  absolute scale from B_net = 10 Gbit/s (section IV: "10 GbE ... uplinks"). The per-GPU
  limit 32: IV-D's elastic run chose 32 per GPU on 5 GPUs although 256 was allowed and
  Table II rises monotonically with the per-GPU batch, so 32 was the largest that fits.
* Category 2 (alexnet on CIFAR100, 58M, 16..256, "communication bound", per-GPU <= 32 as
  category 1: same range top, same images): category 1's t_proc (assumption: the same
  compute per CIFAR sample), so its 58M weights alone make it communication bound (its
  network-to-compute ratio is 58/24 of category 1's). Section IV-E's "category 1's best
  scaling factor at its minimum batch was 1.3x category 2's" is a check, not a fit:
  solving category 2's scale for it makes category 2 *less* communication bound than
  category 1 (its smaller minimum batch alone explains the 1.3), against Table I.
* Category 3 (vgg11_bn, 10M, 16..1024, "balanced"): its per-GPU limit is 128, the least
  power of two with 1024 on at most k_max = 10 GPUs (Fig. 8(b): Max-BS runs category 3
  jobs, so 1024 fits on <= k_max GPUs); its network-to-compute ratio (4p/B_net over
  t_proc at the limit) is the geometric mean of categories 1 and 2 (assumption:
  "balanced" = between compute and communication bound), same overhead share.
* Category 4 (alexnet on Food101, 58M, 128 only, no elasticity): fixed on 2 GPUs (64 per
  GPU, its limit), as in the A100-table workload; t_proc is category 2's with the
  per-sample cost times (224/32)^2 (ImageNet-size crops vs CIFAR images; assumption).
  Only its length matters: it has one configuration.

Rows: every multiple of ``STEP`` (8) in the category's [min, max] (the paper's range is
continuous; the JSA interpolates); GPU counts 1..k_max (10, section III-C), feasible cells
only. Job lengths (16, 21, 41, 27 min on one GPU at the best feasible batch) are those of
section IV-G, as in the A100-table workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flowcon.alloc.model import ThroughputCurve
from flowcon.sim.saxena_workload import Category

K_MAX = 10  # section III-C ("even for 400 GPUs and k_max = 10")
GPUS_PER_NODE = 2  # section IV: 2 P100 GPUs per machine
B_NET = 10e9 / 8  # bytes/s: 10 GbE (section IV)
BYTES_PER_WEIGHT = 4  # fp32 gradients (PyTorch, section IV)
STEP = 8  # batch-size grid of the rows
# Table II: category 1 on 2 GPUs, batch-size-per-GPU -> throughput scaling factor
TABLE_II = {8: 0.86, 11: 1.06, 16: 1.3, 22: 1.45, 32: 1.66}
IV_D_SPEEDUP = 1.6  # 160 on 5 GPUs vs 32 on 2 GPUs, category 1 (section IV-D)
IV_E_BEST_RATIO = 1.3  # best factor at min batch, category 1 / 2 (IV-E): a check, not fitted
FOOD101_PIXELS = (224 / 32) ** 2  # per-sample compute of category 4 vs category 2

# Table I, with the per-GPU limits argued above and the IV-G job lengths
PAPER_CATEGORIES = (
    Category("compute-bound", "resnet50-cifar100", 32, 256, 16.0, max_per_gpu=32),
    Category("communication-bound", "alexnet-cifar100", 16, 256, 21.0, max_per_gpu=32),
    Category("balanced", "vgg11_bn-cifar100", 16, 1024, 41.0, max_per_gpu=128),
    Category("non-elastic", "alexnet-food101", 128, 128, 27.0, gpus=2, max_per_gpu=64),
)
WEIGHTS = {  # Table I, weights
    "resnet50-cifar100": 24e6,
    "alexnet-cifar100": 58e6,
    "vgg11_bn-cifar100": 10e6,
    "alexnet-food101": 58e6,
}


@dataclass(frozen=True)
class Proc:
    """t_proc(b) = overhead + per_sample * b, seconds per iteration on one GPU."""

    overhead: float
    per_sample: float

    def __call__(self, per_gpu: int) -> float:
        return self.overhead + self.per_sample * per_gpu


@dataclass(frozen=True)
class JobModel:
    """One category's JSA model: processing time, weights, per-GPU batch limit."""

    proc: Proc
    weights: float
    max_per_gpu: int
    fixed_gpus: int | None = None


@dataclass(frozen=True)
class PaperWorld:
    """Bandwidths (bytes/s) and every category's model, by table key (Category.model)."""

    b_intra: float
    b_net: float
    jobs: dict[str, JobModel]

    def comm(self, weights: float, gpus: int) -> float:
        """t_comm(p, k): ring all-reduce, intra-machine up to ``GPUS_PER_NODE`` GPUs."""
        if gpus <= 1:
            return 0.0
        bw = self.b_intra if gpus <= GPUS_PER_NODE else self.b_net
        return 2.0 * (gpus - 1) / gpus * BYTES_PER_WEIGHT * weights / bw

    def feasible(self, model: str, batch: int, gpus: int) -> bool:
        m = self.jobs[model]
        if gpus < 1 or gpus > K_MAX or gpus > batch:
            return False
        if m.fixed_gpus is not None and gpus != m.fixed_gpus:
            return False
        return math.ceil(batch / gpus) <= m.max_per_gpu

    def rate(self, model: str, batch: int, gpus: int) -> float:
        """T_j(b, k) in samples/s; 0.0 when infeasible (the paper's "large negative")."""
        if not self.feasible(model, batch, gpus):
            return 0.0
        m = self.jobs[model]
        return batch / (m.proc(math.ceil(batch / gpus)) + self.comm(m.weights, gpus))

    def scaling_factor(self, model: str, batch: int, gpus: int) -> float:
        """Eq. 1 against T(b_max, 1), b_max the per-GPU limit (elastic categories)."""
        m = self.jobs[model]
        return self.rate(model, batch, gpus) / self.rate(model, m.max_per_gpu, 1)


def fit_table_ii() -> tuple[float, float, float]:
    """Category 1 in units of t_proc(32): (overhead, per-sample, 2-GPU all-reduce) from
    the least-squares line t_proc(b) + t_comm = b / (16 S(b)) through Table II, with
    t_proc(32) = 1 (S(b) = [2b / (t_proc(b) + t_comm)] / [32 / t_proc(32)])."""
    per_gpu = np.array(list(TABLE_II), dtype=float)
    s = np.array(list(TABLE_II.values()))
    slope, intercept = np.polyfit(per_gpu, per_gpu / (16.0 * s), 1)
    overhead = 1.0 - 32.0 * slope
    return float(overhead), float(slope), float(intercept - overhead)


def best_factor(world: PaperWorld, model: str, batch: int) -> float:
    """The best throughput scaling factor of ``model`` at global batch ``batch`` (IV-E)."""
    return max(world.scaling_factor(model, batch, k) for k in range(1, K_MAX + 1))


def calibrate() -> PaperWorld:
    """The world model, every number derived from the paper's text (module docstring)."""
    a1, c1, tc2 = fit_table_ii()
    # IV-D: T(160, 5) = 1.6 T(32, 2), i.e. 160 / (1 + tc5) = 1.6 * 32 / (t(16) + tc2)
    t32_on_2 = a1 + 16 * c1 + tc2
    tc5 = 160.0 * t32_on_2 / (IV_D_SPEEDUP * 32.0) - 1.0
    net_units = tc5 / (2.0 * 4 / 5)  # 4p/B_net in units of t_proc(32)
    p1 = WEIGHTS["resnet50-cifar100"]
    unit = BYTES_PER_WEIGHT * p1 / B_NET / net_units  # seconds of t_proc_1(32)
    b_intra = BYTES_PER_WEIGHT * p1 / (tc2 * unit)
    share = a1  # overhead share of t_proc at the per-GPU limit (t_proc(32) = 1)
    cats = {c.model: c for c in PAPER_CATEGORIES}

    def proc(at_limit: float, limit: int) -> Proc:
        return Proc(share * at_limit, (1.0 - share) * at_limit / limit)

    def model(name: str, at_limit: float) -> JobModel:
        c = cats[name]
        assert c.max_per_gpu is not None
        return JobModel(proc(at_limit, c.max_per_gpu), WEIGHTS[name], c.max_per_gpu, c.gpus)

    jobs = {"resnet50-cifar100": model("resnet50-cifar100", unit)}
    # category 2: category 1's t_proc (same images, same per-GPU limit): its 58M weights
    # alone make it communication bound
    jobs["alexnet-cifar100"] = model("alexnet-cifar100", unit)
    world = PaperWorld(b_intra, B_NET, jobs)
    r1 = network_ratio(world, "resnet50-cifar100")
    r2 = network_ratio(world, "alexnet-cifar100")
    p3 = WEIGHTS["vgg11_bn-cifar100"]
    jobs["vgg11_bn-cifar100"] = model(
        "vgg11_bn-cifar100", BYTES_PER_WEIGHT * p3 / B_NET / math.sqrt(r1 * r2)
    )
    alex = jobs["alexnet-cifar100"].proc
    c4 = cats["alexnet-food101"]
    assert c4.max_per_gpu is not None
    jobs["alexnet-food101"] = JobModel(
        Proc(alex.overhead, alex.per_sample * FOOD101_PIXELS),
        WEIGHTS["alexnet-food101"],
        c4.max_per_gpu,
        c4.gpus,
    )
    return world


def network_ratio(world: PaperWorld, model: str) -> float:
    """4p / B_net over t_proc at the per-GPU limit: how communication bound a job is."""
    m = world.jobs[model]
    return BYTES_PER_WEIGHT * m.weights / world.b_net / m.proc(m.max_per_gpu)


def paper_tables(world: PaperWorld | None = None) -> dict[str, dict[int, ThroughputCurve]]:
    """Throughput tables (iterations/s per GPU count, feasible cells only) of every
    category's rows, in the structure of flowcon.sim.loaders' tables."""
    w = world or calibrate()
    out: dict[str, dict[int, ThroughputCurve]] = {}
    for c in PAPER_CATEGORIES:
        rows: dict[int, ThroughputCurve] = {}
        first = -(-c.low // STEP) * STEP
        batches = sorted({c.low, c.high, *range(first, c.high + 1, STEP)})
        for b in batches:
            pts = {k: w.rate(c.model, b, k) / b for k in range(1, K_MAX + 1)}
            pts = {k: v for k, v in pts.items() if v > 0}
            if not pts:
                raise ValueError(f"{c.model}: batch {b} is feasible on no GPU count")
            rows[b] = ThroughputCurve(pts)
        out[c.model] = rows
    return out
