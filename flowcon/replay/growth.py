"""Growth efficiency G over time per job, read from the agent's decision log.

Every round the agent logs one line per container it manages (``flowcon/agent/limit_executor.py``)::

    2026-11-24 14:51:05,041 INFO flowcon.agent.decision decision container=NAME id=ID
    list=NL->CL old=... new=... cpus=... g=0.8123 reason="..." trigger=round outcome=updated

Under policy ``flowcon`` the agent acts on those decisions; under ``none`` the replay runs
it with ``dry_run: true`` (outcome ``dry-run`` or ``unchanged``), so G is measured on the
same jobs without changing any limit. The time stamp is the agent's local wall clock at
millisecond resolution, on the same host as the replay.
"""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

log = logging.getLogger(__name__)

GROWTH_FIELDS = ("t", "job", "g", "list", "outcome")

_DECISION = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ flowcon\.agent\.decision decision "
    r"container=(?P<container>\S+) id=\S+ list=\S+->(?P<list>\S+) old=\S+ new=\S+ cpus=\S+ "
    # what the agent applied besides cpus (shares=, cpuset=, control=, ...), any order
    r"(?:\w+=\S+ )*"
    r"g=(?P<g>\S+) reason=(?:\"(?:[^\"\\]|\\.)*\"|\S+) trigger=\S+ outcome=(?P<outcome>\S+)"
)


@dataclass(frozen=True)
class GrowthPoint:
    t: float  # seconds after the replay start
    job: str  # the scenario's job name
    g: float  # growth efficiency the agent computed for this round
    list: str  # the job's list after the decision: NL, WL or CL ("-" if none yet)
    outcome: str  # updated, unchanged, dry-run, failed, vanished


def parse_growth(text: str, container_prefix: str, t0: float) -> list[GrowthPoint]:
    """The decision lines of an agent log about containers named ``container_prefix+JOB``.

    Other lines, other containers' decisions and lines without a G (``g=-``) are
    skipped; ``t0`` (epoch seconds of the replay start) turns time stamps into offsets.
    """
    points: list[GrowthPoint] = []
    for line in text.splitlines():
        m = _DECISION.match(line)
        if m is None or not m["container"].startswith(container_prefix):
            continue
        try:
            g = float(m["g"])
            stamp = datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue  # g=- (no estimate yet) or a garbled time stamp
        job = m["container"][len(container_prefix) :]
        points.append(GrowthPoint(round(stamp - t0, 3), job, g, m["list"], m["outcome"]))
    return points


def read_agent_growth(log_path: Path, container_prefix: str, t0: float) -> list[GrowthPoint]:
    """parse_growth on a log file; an unreadable file gives no points (logged)."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError as exc:
        log.warning("no growth timeline: cannot read %s (%s)", log_path, exc)
        return []
    return parse_growth(text, container_prefix, t0)


def write_growth(points: list[GrowthPoint], path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(GROWTH_FIELDS)
        for p in points:
            w.writerow([f"{p.t:.3f}", p.job, f"{p.g:.6g}", p.list, p.outcome])
    return path


def read_growth(path: Path) -> list[GrowthPoint]:
    """growth.csv back; a missing file gives no points, a bad row is skipped (logged)."""
    if not path.exists():
        return []
    points = []
    with path.open(newline="") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            try:
                points.append(
                    GrowthPoint(
                        float(row["t"]), row["job"], float(row["g"]), row["list"], row["outcome"]
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s line %d skipped: %s", path, n, exc)
    return points
