"""A stand-in training job whose speed depends on its batch, for the batch dimension's
engine tests (``flowcon/testbox``, busybox sh, no GPU needed).

Like ``flowcon.testing.ratejob`` it runs at a speed given by its environment, prints
flowcon metric lines, checkpoints its progress and resumes from it after a
checkpoint-restart, and exits 0 when ``FLOWCON_ITERATIONS`` are done. Its speed follows
its GPU count ``WORLD_SIZE`` *and* its global batch ``FLOWCON_GLOBAL_BATCH_SIZE``: each
GPU processes ``PEAK * 2 H l / (l^2 + H^2)`` samples per second at local batch ``l`` (a
peak of ``PEAK`` at ``l = H``: too small a batch leaves the GPU idle, too large one
spills, as a real model does), and, being a job with a batch range, it counts its progress
in iterations of the batch it was submitted with, ``FLOWCON_REFERENCE_BATCH_SIZE``
(samples / that batch; docs/jobs.md), so a batch change does not change the work left.
With ``KB_PER_SAMPLE`` it holds that much memory per sample of its local batch, so a
container memory limit OOM-kills it above some batch (the pre-run's largest-batch search).
"""

from __future__ import annotations

from typing import Any

from flowcon.testing.ratejob import TESTBOX_IMAGE

BATCH_JOB = r"""
d=${FLOWCON_CHECKPOINT_DIR:-/tmp}; s=0
[ -f "$d/step" ] && s=$(cat "$d/step")
w=${WORLD_SIZE:-1}; b=${FLOWCON_GLOBAL_BATCH_SIZE:-16}; b0=${FLOWCON_REFERENCE_BATCH_SIZE:-$b}
l=$(( b / w )); [ "$l" -lt 1 ] && l=1
h=${HALF:-8}; p=${PEAK:-400}
# memory held while it trains: KB_PER_SAMPLE kB per sample of this container's GPUs (a
# container memory limit OOM-kills it beyond)
if [ -n "${KB_PER_SAMPLE:-}" ]; then
  hold=$(head -c $(( l * ${LOCAL_WORLD_SIZE:-1} * KB_PER_SAMPLE * 1024 )) /dev/zero | tr '\000' x)
fi
# milli-iterations of the reference batch per second
r=$(( 1000 * w * p * 2 * h * l / ((l * l + h * h) * b0) ))
now_ms() { t=$EPOCHREALTIME; us=${t#*.}; echo $(( ${t%.*} * 1000 + (1$us - 1000000) / 1000 )); }
save() { echo "$s" > "$d/step.tmp" && mv "$d/step.tmp" "$d/step"; }
trap 'save; exit 143' TERM
n=${FLOWCON_ITERATIONS:-100}
echo "start rank=${RANK:-0} world=$w batch=$b rate=${r}mit/s from=$s"
s0=$s; t0=$(now_ms)
while [ "$s" -lt "$n" ]; do
  sleep ${TICK:-0.25} & wait $!
  s=$(( s0 + ($(now_ms) - t0) * r / 1000000 ))
  [ "$s" -gt "$n" ] && s=$n
  [ "${RANK:-0}" = 0 ] && printf '{"step":%d,"ts":%s,"batch":%d}\n' "$s" "$EPOCHREALTIME" "$b"
  save
done
[ "${RANK:-0}" = 0 ] && printf '{"step":%d,"event":"done","ts":%s}\n' "$s" "$EPOCHREALTIME"
exit 0
"""


def samples_per_second(gpus: int, batch: int, peak: float = 400.0, half: int = 8) -> float:
    """What the job processes on ``gpus`` GPUs at global batch ``batch`` (the script's
    formula, without its integer rounding)."""
    local = max(1, batch // gpus)
    return gpus * peak * 2 * half * local / (local * local + half * half)


def batch_job_spec(name: str, iterations: int, **extra: Any) -> dict[str, Any]:
    """A submit body of the batch job: ``profile: auto`` (the pre-run measures its GPU
    counts and batches), best effort unless ``extra`` says otherwise."""
    spec: dict[str, Any] = {
        "name": name,
        "image": TESTBOX_IMAGE,
        "command": ["sh", "-c", BATCH_JOB],
        "global_batch_size": 16,
        "batch_size_min": 16,
        "batch_size_max": 128,
        "iterations": iterations,
        "profile": "auto",
        "best_effort": True,
        "launcher": "flowcon",
        "scaling": "restart",
        **extra,
    }
    return spec
