"""Summarise single replay runs (`flowcon replay run --policy ...`) made one by one.

A `--compare --repeat N` run varies only the control mode between its variants; a study
of another agent setting (say `--agent-set all_cl=equal` against the default) runs each
policy on its own and pairs the runs here. Repetition i pairs the i-th run given for each
policy; a policy given fewer runs than another reuses its last one (the output says so).

    python3 benchmarks/pair_runs.py none=A/none free=B/free1,B/free2 equal=C/eq1,C/eq2 \
        --out summary.json

Prints per variant against `none` the median JCT change per job with its min-max, the
makespan and CPU-seconds changes (the same aggregate as `flowcon replay --compare
--repeat N`), and with `--against KEY` each variant's change against that variant, per
repetition. The last line is one JSON object: per variant `best_job_change`,
`worst_job_change`, `makespan_change` (fractions, negative = faster) and `repeats`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flowcon.replay.recorder import figures, read_run
from flowcon.replay.repeat import NONE, RunFigures, aggregate, change, headline


def parse_runs(items: list[str]) -> dict[str, list[Path]]:
    """``KEY=DIR[,DIR...]`` items; KEY ``none`` is the baseline and must be given."""
    runs: dict[str, list[Path]] = {}
    for item in items:
        key, sep, dirs = item.partition("=")
        paths = [Path(d) for d in dirs.split(",") if d]
        if not sep or not key or not paths:
            raise ValueError(f"{item!r}: expected KEY=DIR[,DIR...]")
        if key in runs:
            raise ValueError(f"{key!r} given twice")
        for p in paths:
            if not (p / "result.json").is_file():
                raise ValueError(f"{key}: {p} holds no result.json (not a replay run folder)")
        runs[key] = paths
    if NONE not in runs:
        raise ValueError("no none=DIR: the runs without FlowCon are the baseline")
    if len(runs) < 2:
        raise ValueError("give at least one variant besides none")
    return runs


def repetitions(runs: dict[str, list[Path]]) -> list[dict[str, RunFigures]]:
    n = max(len(v) for v in runs.values())
    return [
        {
            key: figures(read_run(d := dirs[min(i, len(dirs) - 1)]), str(d))
            for key, dirs in runs.items()
        }
        for i in range(n)
    ]


def against(reps: list[dict[str, RunFigures]], base: str, key: str) -> dict[str, Any]:
    """``key``'s JCT, makespan and CPU-seconds changes against ``base``, per repetition."""
    jobs = list(reps[0][NONE].jct)
    return {
        "jobs": {j: [change(r[base].jct.get(j), r[key].jct.get(j)) for r in reps] for j in jobs},
        "makespan_change": [change(r[base].makespan, r[key].makespan) for r in reps],
        "cpu_s_change": [
            change(sum(r[base].cpu_seconds.values()), sum(r[key].cpu_seconds.values()))
            for r in reps
        ],
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="KEY=DIR[,DIR...]")
    ap.add_argument("--against", metavar="KEY", help="also compare each variant with KEY")
    ap.add_argument("--out", type=Path, help="write the whole summary as JSON here")
    args = ap.parse_args(argv)
    try:
        runs = parse_runs(args.runs)
    except ValueError as exc:
        ap.error(str(exc))
    if args.against is not None and args.against not in runs:
        ap.error(f"--against {args.against!r}: not one of {', '.join(runs)}")
    reps = repetitions(runs)
    variants = [k for k in runs if k != NONE]
    summary = aggregate(reps, variants)
    summary["runs"] = {k: [str(d) for d in v] for k, v in runs.items()}
    reused = [k for k, v in runs.items() if len(v) < len(reps)]
    if reused:
        print(f"reused in later repetitions (fewer runs given): {', '.join(reused)}")
    for key, v in summary["variants"].items():
        print(f"{key} against none ({v['repeats']} repetitions): median [min, max]")
        for row in v["jobs"]:
            c = row["jct_change"]
            print(
                f"  {row['job']:<18} {row['jct_none']:8.1f} s -> {row['jct']:8.1f} s  "
                f"{_pct(c['median'])} [{_pct(c['min'])}, {_pct(c['max'])}]"
            )
        m, cs = v["makespan_change"], v["cpu_s_total_change"]
        print(
            f"  makespan {v['makespan_none']:.1f} s -> {v['makespan']:.1f} s  "
            f"{_pct(m['median'])} [{_pct(m['min'])}, {_pct(m['max'])}]; "
            f"CPU-seconds {_pct(cs['median'])}"
        )
    if args.against is not None:
        summary["against"] = {
            k: against(reps, args.against, k) for k in variants if k != args.against
        }
        for key, a in summary["against"].items():
            print(f"{key} against {args.against}, per repetition")
            for job, changes in a["jobs"].items():
                print(f"  {job:<18} " + "  ".join(_pct(c) for c in changes))
            print(f"  makespan {'  '.join(_pct(c) for c in a['makespan_change'])}")
            print(f"  CPU-seconds {'  '.join(_pct(c) for c in a['cpu_s_change'])}")
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(headline(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
