"""The contract shared by the training side, the agent and the allocator.

Stdlib only and free of I/O, so every side (a training image, the agent, the allocator
service, the simulator) can import it without pulling anything else in. Everything that
crosses a process boundary is named here once:

- container labels (``flowcon.*``, Traefik style): what opts a container in and what the
  allocator stamps on the containers it runs;
- environment variables a job container receives (torchrun's names plus ``FLOWCON_*``);
- exit codes a job reports to the executor;
- the metric line a job prints and the measurement message the agent sends the allocator.
"""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict

# ------------------------------------------------------------------ labels (agent side)
# A container opts in to CPU control with ``flowcon.enable=true``; its progress metric is
# named by ``flowcon.metric`` (a key of its metric lines, or the ``value`` group of
# ``flowcon.metric.regex`` for scripts that print their own format).
LABEL_ENABLE: Final = "flowcon.enable"
LABEL_METRIC: Final = "flowcon.metric"
LABEL_METRIC_GOAL: Final = "flowcon.metric.goal"
LABEL_METRIC_REGEX: Final = "flowcon.metric.regex"
LABEL_CPUS_MIN: Final = "flowcon.cpus.min"
LABEL_CPUS_MAX: Final = "flowcon.cpus.max"
# Whether the job sizes its thread pool from its CPU quota (``flowcon.report`` does):
# ``adaptive`` says so before its first metric line, ``fixed`` that it never does; without
# the label the agent learns it from the ``threads`` key of the job's metric lines.
LABEL_THREADS: Final = "flowcon.threads"
THREADS_ADAPTIVE: Final = "adaptive"
THREADS_FIXED: Final = "fixed"
# ``flowcon.gpu.share=true`` (a boolean as flowcon.enable): a container that shares a GPU
# with others gets a CUDA MPS share (active thread percentage and pinned memory limit) from
# the same lists as its CPU, applied at its next start (docs/agent.md, "GPU shares").
LABEL_GPU_SHARE: Final = "flowcon.gpu.share"
# Where (inside the container) the agent's share for it is found at start: a JSON file
# named by the container's short id, in the host's gpu_share_dir mounted read-only here.
GPU_SHARE_MOUNT: Final = "/flowcon/gpu-share"
ENV_GPU_SHARE_FILE: Final = "FLOWCON_GPU_SHARE_FILE"  # overrides the file's path
# The allocator's job a container belongs to: the agent measures its throughput even when
# its CPU limit is not managed, and reports it for that job.
LABEL_JOB: Final = "flowcon.job"

# ------------------------------------------------------------------ labels (allocator side)
LABEL_MANAGED_BY: Final = "flowcon.managed-by"
MANAGED_BY_ALLOCATOR: Final = "flowcon-allocator"
LABEL_RANK: Final = "flowcon.rank"  # node rank of the container (rank 0 hosts the master)
LABEL_NODE: Final = "flowcon.node"
LABEL_GPUS: Final = "flowcon.gpus"
LABEL_WORLD_SIZE: Final = "flowcon.world-size"
LABEL_MASTER_PORT: Final = "flowcon.master-port"  # the job's MASTER_PORT (host networking)
LABEL_LAUNCHER: Final = "flowcon.launcher"  # none | torchrun | flowcon (the job spec's)
LABEL_ROLE: Final = "flowcon.role"  # ROLE_JOB, or ROLE_PROFILE for the pre-run
# The principal who submitted the job (a named user's jobs; none for the operator and the
# shared tokens): on its containers, network and checkpoint volume
LABEL_OWNER: Final = "flowcon.owner"
# The labels the allocator's executor sets on its containers (config executor.labels may
# add others, never these).
EXECUTOR_LABELS: Final = (
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_RANK,
    LABEL_NODE,
    LABEL_GPUS,
    LABEL_WORLD_SIZE,
    LABEL_MASTER_PORT,
    LABEL_LAUNCHER,
    LABEL_ROLE,
    LABEL_OWNER,
)
ROLE_JOB: Final = "job"
ROLE_PROFILE: Final = "profile"
# How the executor scales the job's containers: SCALING_STOPFREE or SCALING_RESTART (below).
LABEL_SCALING: Final = "flowcon.scaling"
# A stop-free container's own store address as the executor gave it (FLOWCON_STORE_ADDR; port
# 0: its launcher's ``launcher_started`` line says the port): the executor finds the job's
# coordinator from it (the lowest-index container's), and a container without it cannot
# take over coordination (launched before stores moved).
LABEL_STORE_ADDR: Final = "flowcon.store"
# An image label: ``flowcon.elastic=stopfree`` declares that the image's training runs
# flowcon.elastic's stop-free runtime; a job spec without ``scaling`` then scales stop-free.
LABEL_ELASTIC: Final = "flowcon.elastic"

# ------------------------------------------------------------------ labels (replay)
LABEL_REPLAY: Final = "flowcon.replay"  # the run id that scopes a replay's agent
LABEL_REPLAY_JOB: Final = "flowcon.replay.job"

# ------------------------------------------------------------------ environment
# torchrun's variables, with the values torchrun gives them.
ENV_WORLD_SIZE: Final = "WORLD_SIZE"
ENV_RANK: Final = "RANK"
ENV_LOCAL_RANK: Final = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE: Final = "LOCAL_WORLD_SIZE"
ENV_GROUP_RANK: Final = "GROUP_RANK"
ENV_NODE_RANK: Final = "NODE_RANK"
ENV_MASTER_ADDR: Final = "MASTER_ADDR"
ENV_MASTER_PORT: Final = "MASTER_PORT"
ENV_GROUP_WORLD_SIZE: Final = "GROUP_WORLD_SIZE"
ENV_ROLE_RANK: Final = "ROLE_RANK"
ENV_ROLE_NAME: Final = "ROLE_NAME"
ENV_ROLE_WORLD_SIZE: Final = "ROLE_WORLD_SIZE"
ENV_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
ENV_MAX_RESTARTS: Final = "TORCHELASTIC_MAX_RESTARTS"
ENV_RUN_ID: Final = "TORCHELASTIC_RUN_ID"
ENV_USE_AGENT_STORE: Final = "TORCHELASTIC_USE_AGENT_STORE"
# FlowCon's own.
ENV_JOB: Final = "FLOWCON_JOB"
ENV_NODE: Final = "FLOWCON_NODE"
ENV_GPUS: Final = "FLOWCON_GPUS"  # this container's GPU ids, comma-separated
ENV_PLACEMENT: Final = "FLOWCON_PLACEMENT"  # node:gpu,gpu;node:gpu of the whole job
ENV_NUM_NODES: Final = "FLOWCON_NUM_NODES"
ENV_GLOBAL_BATCH_SIZE: Final = "FLOWCON_GLOBAL_BATCH_SIZE"
ENV_LOCAL_BATCH_SIZE: Final = "FLOWCON_LOCAL_BATCH_SIZE"
# Set for a job with a batch range: the global batch it was submitted with (the spec's
# global_batch_size), which its learning rate is meant for; FLOWCON_GLOBAL_BATCH_SIZE is the
# batch picked for its GPU count (flowcon.elastic.lr.HybridScaling scales the LR by their ratio).
ENV_REFERENCE_BATCH_SIZE: Final = "FLOWCON_REFERENCE_BATCH_SIZE"
ENV_ITERATIONS: Final = "FLOWCON_ITERATIONS"
ENV_CHECKPOINT_DIR: Final = "FLOWCON_CHECKPOINT_DIR"
ENV_CHECKPOINT_EVERY: Final = "FLOWCON_CHECKPOINT_EVERY"
ENV_THREADS: Final = "FLOWCON_THREADS"  # the training images' torch thread pool override
# 0 turns off flowcon.report's thread adaptation (the pool follows the CPU limit)
ENV_ADAPT_THREADS: Final = "FLOWCON_ADAPT_THREADS"

# Stop-free scaling (flowcon.elastic, EDL section 4.2, Elan sections IV-V).
# "stopfree": workers join and leave a running job; "restart": checkpoint-restart.
ENV_SCALING: Final = "FLOWCON_SCALING"
SCALING_STOPFREE: Final = "stopfree"
SCALING_RESTART: Final = "restart"
# Set on the job's first container: its launcher process hosts the job's TCPStore on
# MASTER_ADDR:MASTER_PORT (workers are its children, so a worker's crash keeps the store).
ENV_STORE_HOST: Final = "FLOWCON_STORE_HOST"
# Stop-free: "host:port" where this container's launcher hosts its own store (port 0: any
# free port; the launcher passes the address it serves on to its workers in the same
# variable). Coordination moves to such a store when the coordinator's container leaves or
# dies (docs/elastic.md, "Stop-free scaling", the coordinator).
ENV_STORE_ADDR: Final = "FLOWCON_STORE_ADDR"
# The job's rendezvous secret (set by the executor, never shown by the API): the store keys
# live under a prefix derived from it and a store proves it knows it (rendezvous.py).
ENV_RENDEZVOUS_SECRET: Final = "FLOWCON_RENDEZVOUS_SECRET"
# A worker's stable id in the job (container name and local rank, set by the launcher).
ENV_WORKER_ID: Final = "FLOWCON_WORKER_ID"
# Set on workers started into a running job; their RANK/WORLD_SIZE are assigned at the switch.
ENV_JOIN: Final = "FLOWCON_JOIN"
# The world size the job has after the scale event a joiner belongs to: the running ranks
# switch once that many workers (running + ready joiners) are there.
ENV_TARGET_WORLD: Final = "FLOWCON_TARGET_WORLD"
# The signal that asks a worker's container to leave at the next agreed step boundary
# (the launcher forwards it to its workers); SIGTERM still means checkpoint and stop the job.
LEAVE_SIGNAL: Final = "SIGUSR1"
# Elan's progressive linear scaling (flowcon.elastic.lr): after a change of the global batch
# size the learning rate moves linearly to its new value over this many steps (0: at once).
ENV_LR_RAMP_STEPS: Final = "FLOWCON_LR_RAMP_STEPS"
# Straggler removal in stop-free jobs (EDL section 5.2): "RATIO,CONSECUTIVE" (default
# "1.2,10": slower than 1.2 x the median step time for 10 consecutive steps); "0" turns it off.
ENV_STRAGGLER: Final = "FLOWCON_STRAGGLER"
# Seconds a stop-free job holds leave requests so that those of one scale-in (signalled one
# container after another) leave at the same boundary (default 1.0; 0: at the next one).
ENV_LEAVE_SETTLE_S: Final = "FLOWCON_LEAVE_SETTLE_S"

# The allocator's principals that are not named users (flowcon/allocator/auth.py): a job
# of theirs mounts named volumes by their own names; a named user's are scoped to them.
SHARED_PRINCIPALS: Final = ("operator", "user", "reader", "agent")
# A named user's named volume NAME is the engine's volume USER_VOLUME_PREFIX + "OWNER.NAME"
# (the "flowcon-" namespace no spec may name), unless the operator shares it.
USER_VOLUME_PREFIX: Final = "flowcon-user-"

# Where the executor mounts a job's checkpoint volume in each of its containers.
CHECKPOINT_MOUNT: Final = "/flowcon/checkpoint"

# ------------------------------------------------------------------ exit codes
EXIT_OK: Final = 0
# 128 + SIGTERM, as a shell reports it: stopped by the executor after writing a checkpoint;
# the executor restarts it (rescale), it is not a failure.
EXIT_PREEMPTED: Final = 143
# A worker (container) that left a running job at an agreed step boundary (scale-in or
# straggler removal); the job goes on without it, the executor removes the container.
EXIT_LEFT: Final = 144

# ------------------------------------------------------------------ metric lines
# One JSON object per line on stdout (``flowcon.report``): ``step`` and ``ts`` plus any
# metric values; a line with an ``event`` key is a notice, not a measurement.
LINE_STEP: Final = "step"
LINE_TS: Final = "ts"
LINE_EVENT: Final = "event"
# The job's own completion marker, printed once (rank 0) when all its iterations are done:
# ``{"step": N, "event": "done"}`` (``flowcon.elastic`` prints it). Workers that exit 0
# are a completion only with this marker or progress that reached the job's iterations
# (flowcon/core/completion.py): a node restart or an engine stop can end a task with 0.
EVENT_DONE: Final = "done"
# Thread-aware jobs (the agent's ``control: hybrid``): the integer torch thread count the
# job uses now, on its metric lines; a job whose lines carry it sizes its thread pool from
# its CPU quota, so the agent may limit it by quota without oversubscribing it.
LINE_THREADS: Final = "threads"


class Measurement(TypedDict):
    """One container's measurement, as the agent POSTs it to the allocator
    (``/api/v1/measurements``). ``iterations_per_second`` is None when no new step came
    since the last report (a repeated rate must not count as a new measurement)."""

    container_id: str
    name: str
    job: str | None
    step: int | None
    iterations_per_second: float | None
    metric: str | None
    value: float | None
    ts: float
    step_ts: float | None
    # The container's use of the host's GPUs over the same interval, a fraction (NVML;
    # flowcon.core.gpu_usage), sent with the throughput; absent or None: no GPU measured
    # (an older agent, a CPU container, no NVML). Older allocators ignore it.
    gpu_utilization: NotRequired[float | None]


class MeasurementReport(TypedDict):
    """The body of one POST to ``/api/v1/measurements``."""

    node: str
    measurements: list[Measurement]
    # What the node's NVIDIA container toolkit does with a container's own
    # NVIDIA_VISIBLE_DEVICES: one of TOOLKIT_STATES (flowcon/agent/toolkit.py); absent: an
    # older agent. Older allocators ignore it.
    toolkit: NotRequired[str]


TOOLKIT_STATES: Final = ("envvar-accepted", "envvar-refused", "no-toolkit", "unknown")


MEASUREMENT_FIELDS: Final = tuple(Measurement.__annotations__)

# ------------------------------------------------------------------ CLI exit codes
# What ``flowcon submit`` (and ``flowcon submit --dry-run``, for "would be ...") exits
# with, so a script can branch on the decision (docs/jobs.md, "Commands").
CLI_EXIT_ADMITTED: Final = 0  # admitted (dry run: would be admitted now)
CLI_EXIT_ERROR: Final = 1  # anything else: allocator unreachable, refused token, conflict
CLI_EXIT_INVALID: Final = 2  # invalid input: spec, file, options (click's usage errors too)
CLI_EXIT_DROPPED: Final = 3  # dropped: the deadline cannot be guaranteed (dry run: would be)
CLI_EXIT_PENDING: Final = 4  # no decision yet: profile: auto still profiling (--no-wait)
