"""Hash of every job's simulated outcome, to show that a speed change leaves decisions alone.

For each case (policy, world, trace) the hash covers, per job in result order: id, admitted,
reason, start, finish, GPU-seconds, rescales, migrations (floats by ``repr``, i.e. exactly).
Run it on the old and the new code and compare the JSON lines:

    PYTHONPATH=/work/main python3 benchmarks/decision_hash.py > old.json
    PYTHONPATH=$PWD       python3 benchmarks/decision_hash.py > new.json
    diff old.json new.json

``--cases`` restricts to names such as ``elasticflow/ours/cluster04``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

from flowcon.sim.cli import PUBLISHED_CLUSTERS, SHARED, run_simulation
from flowcon.sim.engine import SimResult

# (policy, world, traces): the set docs/simulator.md "Speed" names
CASES: list[tuple[str, str, tuple[str, ...]]] = [
    ("elasticflow", "ours", ("195job", "cluster01", "cluster02", "cluster03", "cluster04")),
    ("elasticflow", "published", ("195job", "cluster01", "cluster04", "cluster05")),
    ("elasticflow-paper", "ours", ("195job",)),
    ("elasticflow-paper", "published", ("cluster01",)),
    ("edf-admission", "ours", ("195job",)),
    ("elasticflow-published-engine", "published", ("195job", "cluster01")),
]


def outcome_hash(results: SimResult) -> str:
    """sha256 over the per-job outcomes of a ``SimResult``."""
    h = hashlib.sha256()
    for r in results.results:
        row = (
            r.job.job_id,
            r.admitted,
            r.reason,
            repr(r.start),
            repr(r.finish),
            repr(r.gpu_seconds),
            r.rescales,
            r.migrations,
        )
        h.update(repr(row).encode())
        h.update(b"\n")
    return h.hexdigest()


def decisions_hash(admitted: dict[str, bool], decisions: dict[float, dict[str, int]]) -> str:
    """sha256 over admission decisions (by job name) and the GPU count of every job at
    every decision time: what the live planner and the simulator must agree on (the rule
    of tests/allocator/test_planner_matches_simulator.py)."""
    h = hashlib.sha256()
    for name in sorted(admitted):
        h.update(f"{name} {admitted[name]}\n".encode())
    for t in sorted(decisions):
        h.update(f"{t!r} {sorted(decisions[t].items())!r}\n".encode())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", default=None, help="policy/world/trace names")
    args = ap.parse_args()
    for policy, world, traces in CASES:
        for trace in traces:
            name = f"{policy}/{world}/{trace}"
            if args.cases and name not in args.cases:
                continue
            path = SHARED / "data/elasticflow-traces" / f"{trace}.csv"
            t0, c0 = time.perf_counter(), time.process_time()
            res, s = run_simulation(str(path), PUBLISHED_CLUSTERS[trace], policy, world=world)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert isinstance(res, SimResult)
            row = {"case": name, "hash": outcome_hash(res), "admitted": s.get("admitted")}
            print(json.dumps(row), flush=True)
            print(f"{name}: wall {wall:.2f} s, cpu {cpu:.2f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
