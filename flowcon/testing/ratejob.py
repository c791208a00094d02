"""A stand-in training job that runs at its profile's speed, for machines without GPUs.

It runs on ``flowcon/testbox`` (busybox sh) under the real executor: it reads its GPU count
from ``WORLD_SIZE``, advances ``RATE_<world>`` milli-iterations per second of wall time
(so its speed follows the throughput curve it was admitted with, or a deliberately different
one), prints flowcon metric lines, checkpoints its step and resumes from it after a
checkpoint-restart, and exits 0 when ``FLOWCON_ITERATIONS`` are done, after its completion
marker line (``flowcon.contract.EVENT_DONE``; 143 on SIGTERM).
Progress is computed from the clock, not counted per sleep, so fork overhead on a busy
machine does not slow it down.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TESTBOX_IMAGE = "flowcon/testbox:latest"

RATE_JOB = r"""
d=${FLOWCON_CHECKPOINT_DIR:-/tmp}; s=0
[ -f "$d/step" ] && s=$(cat "$d/step")
eval "r=\${RATE_${WORLD_SIZE:-1}:-1000}"
now_ms() { t=$EPOCHREALTIME; us=${t#*.}; echo $(( ${t%.*} * 1000 + (1$us - 1000000) / 1000 )); }
save() { echo "$s" > "$d/step.tmp" && mv "$d/step.tmp" "$d/step"; }
trap 'save; exit 143' TERM
n=${FLOWCON_ITERATIONS:-100}
echo "start rank=${RANK:-0} world=${WORLD_SIZE:-1} rate=${r}mit/s from=$s"
s0=$s; t0=$(now_ms)
while [ "$s" -lt "$n" ]; do
  sleep ${TICK:-0.25} & wait $!
  s=$(( s0 + ($(now_ms) - t0) * r / 1000000 ))
  [ "$s" -gt "$n" ] && s=$n
  [ "${RANK:-0}" = 0 ] && printf '{"step":%d,"ts":%s}\n' "$s" "$EPOCHREALTIME"
  save
done
[ "${RANK:-0}" = 0 ] && printf '{"step":%d,"event":"done","ts":%s}\n' "$s" "$EPOCHREALTIME"
exit 0
"""


def rate_env(rates: Mapping[int, float]) -> dict[str, str]:
    """RATE_<gpus> variables (milli-iterations/s) for iterations/s by GPU count; counts in
    between use the largest listed count below them, like ThroughputCurve.at."""
    out: dict[str, str] = {}
    pts = sorted((int(g), float(v)) for g, v in rates.items())
    for world in range(1, 65):
        below = [v for g, v in pts if g <= world]
        if below:
            out[f"RATE_{world}"] = str(int(round(below[-1] * 1000)))
    return out


def rate_job_spec(
    name: str,
    iterations: int,
    deadline: float | str | None,
    profile: Mapping[int, float],
    actual: Mapping[int, float] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A submit body: admitted with ``profile``, running at ``actual`` (default: profile)."""
    spec: dict[str, Any] = {
        "name": name,
        "image": TESTBOX_IMAGE,
        "command": ["sh", "-c", RATE_JOB],
        "global_batch_size": 64,
        "iterations": iterations,
        "profile": {int(g): float(v) for g, v in profile.items()},
        "env": rate_env(actual or profile),
        # one container per node that reads WORLD_SIZE itself, as flowcon.elastic's main
        "launcher": "flowcon",
        **extra,
    }
    if deadline is None:
        spec["best_effort"] = True
    else:
        spec["deadline"] = deadline
    return spec
