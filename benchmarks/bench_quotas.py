"""What per-user quotas cost and whom they protect, on the shared ElasticFlow traces.

Each trace runs in the simulator (our world, ElasticFlow, the trace's published cluster)
with its jobs spread over ``--users`` owners (``flowcon.sim.tenants``: drawn from the job
ids, ``--skew`` 1: user00 submits the most), once without quotas and once per quota
setting, every user held to the same quota by the allocator's rule (flowcon/alloc/quota.py).
It prints a Markdown table per trace (the deadline ratio of all jobs, the quota refusals,
the heaviest user's and the other users' deadlines met) and one JSON line last.

    .venv/bin/python benchmarks/bench_quotas.py [--traces 195job,cluster01] [--users 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from flowcon.alloc.quota import Quota
from flowcon.sim.cli import PUBLISHED_CLUSTERS, SHARED, run_simulation

SETTINGS: tuple[Quota | None, ...] = (
    None,
    Quota(max_gpus=64),
    Quota(max_gpus=32),
    Quota(max_gpus=16),
    Quota(max_gpus=32, max_jobs=10),
)


def label(q: Quota | None) -> str:
    if q is None:
        return "none"
    parts = [
        f"max_gpus {q.max_gpus}" if q.max_gpus else "",
        f"max_jobs {q.max_jobs}" if q.max_jobs else "",
    ]
    return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class Row:
    quota: str
    ratio: float
    refused: int
    heavy_jobs: int
    heavy_met: int
    other_jobs: int
    other_met: int


def row(trace: str, cluster: str, users: int, skew: float, q: Quota | None) -> Row:
    path = SHARED / f"data/elasticflow-traces/{trace}.csv"
    _res, s = run_simulation(
        str(path), cluster, "elasticflow", users=users, user_skew=skew, quota=q
    )
    t: Any = s["tenants"]
    per = t["per_user"]
    others = [v for k, v in per.items() if k != "user00"]
    return Row(
        quota=label(q),
        ratio=float(s["deadline_satisfactory_ratio"]),  # type: ignore[arg-type]
        refused=int(t["quota_refused"]),
        heavy_jobs=per["user00"]["jobs"],
        heavy_met=per["user00"]["deadline_met"],
        other_jobs=sum(v["jobs"] for v in others),
        other_met=sum(v["deadline_met"] for v in others),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="195job,cluster01")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--skew", type=float, default=1.0)
    args = ap.parse_args(argv)
    out: dict[str, list[Row]] = {}
    t0 = time.perf_counter()
    for trace in args.traces.split(","):
        cluster = PUBLISHED_CLUSTERS[trace]
        print(f"\n{trace} on {cluster}, {args.users} users, skew {args.skew}\n")
        print(
            "| quota (per user) | deadline ratio, all jobs | refused by quota |"
            " user00 (heaviest): deadlines met | the other users: deadlines met |"
        )
        print("|---|---|---|---|---|")
        rows = out[trace] = [row(trace, cluster, args.users, args.skew, q) for q in SETTINGS]
        for r in rows:
            hj, hm, oj, om = r.heavy_jobs, r.heavy_met, r.other_jobs, r.other_met
            print(
                f"| {r.quota} | {r.ratio:.3f} | {r.refused} |"
                f" {hm} of {hj} ({hm / hj:.3f}) | {om} of {oj} ({om / oj:.3f}) |"
            )
        sys.stdout.flush()
    print(
        json.dumps(
            {
                "users": args.users,
                "skew": args.skew,
                "traces": {k: [asdict(r) for r in v] for k, v in out.items()},
                "wall_seconds": round(time.perf_counter() - t0, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
