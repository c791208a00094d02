"""What a job's container sees of the node: its GPUs and the reserved labels (pure: no engine).

GPUs: the NVIDIA container toolkit exposes to a container the GPUs its
``NVIDIA_VISIBLE_DEVICES`` names, and ``all`` when an image says so (every CUDA base
image has ``ENV NVIDIA_VISIBLE_DEVICES=all``). Under the NVIDIA runtime as the engine's
default runtime a job container would then see every GPU of its node whatever the
executor placed it on. So every job container gets ``NVIDIA_VISIBLE_DEVICES`` set by the
executor, on both backends and whatever the inventory's source: exactly the job's GPU ids
on that node (NVML's UUIDs, or the ids the operator declared), or ``void`` (no GPU, no
driver library) for a worker without GPUs. A container's environment wins over its
image's, so the image's value never reaches the toolkit. ``NVIDIA_DRIVER_CAPABILITIES``
is set to ``compute,utility`` likewise (an image's ``all`` would mount the display and
video libraries too).

Labels: Docker merges an image's labels into its containers' (the container's win where
both set a key). An image's ``flowcon.enable=true flowcon.cpus.min=9999`` would opt the
job's container in to a node agent's CPU control with a floor of its choosing, although a
job spec may set no ``flowcon.*`` label. ``reserved_blanks`` gives every reserved key an
image carries that FlowCon does not set itself an empty value on the container, and the
agent reads an empty label as absent (flowcon/agent/pool.py). ``flowcon.elastic``, the
image's declaration of its scaling mode, is read by the executor from the image
(``ExecutorBase.scaling_of``) and blanked on the container like the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flowcon import contract

ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
NO_GPU = "void"  # the toolkit's "nothing": no GPU and no driver library in the container
JOB_CAPABILITIES = "compute,utility"
# NVIDIA_VISIBLE_DEVICES's own words: never a GPU id
_KEYWORDS = frozenset({"all", "none", "void", ""})

RESERVED_PREFIX = "flowcon."
# The labels a node agent acts on: blanked on every job container FlowCon does not set
# them on, whether or not the image could be read (a Swarm node pulls the image itself).
AGENT_LABELS = (
    contract.LABEL_ENABLE,
    contract.LABEL_METRIC,
    contract.LABEL_METRIC_GOAL,
    contract.LABEL_METRIC_REGEX,
    contract.LABEL_CPUS_MIN,
    contract.LABEL_CPUS_MAX,
    contract.LABEL_THREADS,
    contract.LABEL_GPU_SHARE,
    contract.LABEL_REPLAY,
    contract.LABEL_REPLAY_JOB,
)


def gpu_env(gpus: Sequence[str]) -> dict[str, str]:
    """The NVIDIA variables of a job container holding ``gpus`` (their ids, in order).
    ValueError naming the id when one is not a plain GPU id (a toolkit keyword, or one with
    a comma or whitespace, which would widen the list)."""
    for gpu in gpus:
        if gpu.strip().lower() in _KEYWORDS or any(c == "," or c.isspace() for c in gpu):
            raise ValueError(
                f"GPU id {gpu!r} is not a GPU's UUID or index (NVIDIA_VISIBLE_DEVICES)"
            )
    return {
        ENV_VISIBLE_DEVICES: ",".join(gpus) if gpus else NO_GPU,
        ENV_DRIVER_CAPABILITIES: JOB_CAPABILITIES,
    }


def job_env(env: Mapping[str, str], gpus: Sequence[str]) -> dict[str, str]:
    """``env`` with the executor's NVIDIA variables over whatever ``env`` said of them."""
    return {**dict(env), **gpu_env(gpus)}


def reserved_blanks(image_labels: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    """An empty value for every ``flowcon.*`` key of ``image_labels``, and every label an
    agent acts on (``AGENT_LABELS``), that ``labels`` (what FlowCon sets on the container)
    does not set: the container's labels win over its image's, so none of the image's
    reaches a node agent, even where the image could not be read first."""
    keys = [*AGENT_LABELS, *(k for k in image_labels if k.startswith(RESERVED_PREFIX))]
    return {key: "" for key in keys if key not in labels}


def container_labels(image_labels: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` plus the blanks of the image's reserved keys (``reserved_blanks``)."""
    return {**reserved_blanks(image_labels, labels), **dict(labels)}
