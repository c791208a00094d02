"""A busybox shell training job for ``flowcon/testbox`` (the engine tests and
benchmarks/bench_rescale.py): it counts steps, prints metric lines, saves its step in the
checkpoint dir every 5 steps and on SIGTERM (exit 143), and resumes from it, so
checkpoint-restart is observable without torch."""

from __future__ import annotations

STEP_JOB = r"""
d=${FLOWCON_CHECKPOINT_DIR:-/tmp}; s=0
[ -f "$d/step" ] && s=$(cat "$d/step")
save() { echo "$s" > "$d/step.tmp" && busybox mv "$d/step.tmp" "$d/step"; }
trap 'save; printf "{\"step\":%d,\"event\":\"preempted\"}\n" "$s"; exit 143' TERM
echo "start rank=$RANK world=$WORLD_SIZE from=$s"
while [ "$s" -lt "${FLOWCON_ITERATIONS:-1000}" ]; do
  sleep ${STEP_SECONDS:-0.2} & wait $!
  s=$((s+1))
  printf '{"step":%d,"ts":%s}\n' "$s" "$EPOCHREALTIME"
  [ $((s % 5)) -eq 0 ] && save
done
save; exit 0
"""
