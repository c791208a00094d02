"""Executor backend for one plain Docker engine (the embedded default).

Every node of the placement is a logical node on this engine: a job placed on node1 and
node2 of a declared inventory runs two containers here, which is how multi-node jobs are
exercised on a CPU-only machine. Networking:

* ``auto`` (default): every job gets its own bridge network ``flowcon-net-<job>`` (with
  the job's labels, removed with it), so containers of different jobs cannot reach each
  other; MASTER_ADDR is 127.0.0.1 for a one-container job (its workers share the
  container), else the rank-0 container's name.
* ``host``: host networking, MASTER_ADDR=127.0.0.1, a per-job MASTER_PORT.
* any other value: an existing network name, MASTER_ADDR = rank-0 container name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from flowcon.contract import CHECKPOINT_MOUNT, LABEL_GPUS, LABEL_JOB, LABEL_NODE, LABEL_RANK
from flowcon.executor.backend import (
    ExecutorError,
    ExecutorRefused,
    LogLine,
    Worker,
    WorkerRequest,
    connect_engine,
    engine_errors,
    engine_since,
    jobs_labelled,
    log_lines_of,
    volume_labels,
    volume_refusal,
)
from flowcon.executor.container_spec import SdkKwargs, engine_kwargs
from flowcon.executor.node_fs import (
    check_bind_paths,
    needs_owning,
    own_sources,
    own_volumes,
    resolve_user,
)
from flowcon.executor.visibility import container_labels, job_env
from flowcon.executor.workers import DEFAULT_MASTER_PORT, WorkerSlot, allocate_master_port

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

_STATE = {
    "running": "running",
    "paused": "running",
    "restarting": "starting",
    "created": "created",
    "exited": "exited",
    "removing": "exited",
    "dead": "dead",
}


def network_name(job: str) -> str:
    return f"flowcon-net-{job}"


def worker_from_container(c: Container) -> Worker:
    """A Worker from a docker-py container (labels carry node, rank and GPUs)."""
    attrs = c.attrs or {}
    labels = dict((attrs.get("Config") or {}).get("Labels") or c.labels or {})
    st = attrs.get("State") or {}
    state = _STATE.get(str(st.get("Status", "")), "unknown")
    code = st.get("ExitCode")
    if state == "exited" and st.get("OOMKilled"):
        state = "dead"
    try:
        rank = int(labels.get(LABEL_RANK, "0"))
    except ValueError:
        rank = 0
    return Worker(
        id=cast(str, c.id),  # None only for a model built without the engine's attrs
        name=cast(str, c.name),
        job=labels.get(LABEL_JOB, ""),
        node=labels.get(LABEL_NODE, ""),
        node_rank=rank,
        gpus=tuple(g for g in labels.get(LABEL_GPUS, "").split(",") if g),
        state=state,
        exit_code=int(code) if isinstance(code, int) and state != "running" else None,
        labels=labels,
        image=str((attrs.get("Config") or {}).get("Image", "")),
    )


def _job_env(req: WorkerRequest) -> dict[str, str]:
    """The worker's environment with the executor's NVIDIA variables (its GPUs, or none)."""
    try:
        return job_env(req.env, req.gpus)
    except ValueError as exc:
        raise ExecutorError(f"job {req.job}: {req.name}: {exc}") from None


class EngineBackend:
    kind = "engine"

    def __init__(self, client: DockerClient | None = None, network: str = "auto") -> None:
        if client is None:
            client = connect_engine(timeout=60)
        self.client = client
        self.network = network

    def list_workers(self, selector: Mapping[str, str]) -> list[Worker]:
        labels = [f"{k}={v}" for k, v in selector.items()]
        filters: dict[str, str | list[str] | bool] = {"label": labels}
        try:
            found = self.client.containers.list(all=True, filters=filters, ignore_removed=True)
        except engine_errors() as exc:
            raise ExecutorError(f"listing job containers: {exc}") from exc
        return [worker_from_container(c) for c in found]

    def master_addr(
        self,
        job: str,
        slots: Sequence[WorkerSlot],
        rank0_name: str,
        labels: Mapping[str, str],
        port: int | None = None,
        grow: bool = False,
    ) -> tuple[str, int, str | None]:
        if self.network == "host":
            return "127.0.0.1", port or allocate_master_port(job, ()), "host"
        if self.network != "auto":
            return rank0_name, DEFAULT_MASTER_PORT, self.network
        # every job its own bridge, one container too: Docker isolates user-defined bridges
        # from each other, so no job reaches another's containers (the default bridge
        # would let them)
        name = network_name(job)
        import docker.errors

        try:
            self.client.networks.get(name)
        except docker.errors.NotFound:
            try:
                self.client.networks.create(name, driver="bridge", labels=dict(labels))
            except docker.errors.APIError as exc:
                raise ExecutorError(f"creating network {name}: {exc}") from exc
        if len(slots) == 1 and not grow:
            return "127.0.0.1", DEFAULT_MASTER_PORT, name  # its workers share the container
        return rank0_name, DEFAULT_MASTER_PORT, name

    def create(self, req: WorkerRequest) -> Worker:
        import docker.errors
        from docker.types import DeviceRequest, Mount

        # a host path's real path on this node stays under its allowed root
        check_bind_paths(self.client, req.node, req.image, req.settings, req.labels)
        # whom it runs as, in numbers resolved in its image on the node, and allowed
        resolved = resolve_user(self.client, req.node, req.image, req.settings, req.labels)
        req = replace(req, settings=resolved)
        if req.checkpoint_host_dir:
            mount = Mount(CHECKPOINT_MOUNT, req.checkpoint_host_dir, type="bind")
            checkpoint = {"Source": req.checkpoint_host_dir, "Type": "bind"}
        else:
            self._ensure_volume(req.checkpoint_volume, req.labels)
            mount = Mount(CHECKPOINT_MOUNT, req.checkpoint_volume, type="volume")
            checkpoint = {"Source": req.checkpoint_volume, "Type": "volume"}
        spec_kwargs = engine_kwargs(req.settings)
        kwargs: SdkKwargs = {
            **spec_kwargs,
            "image": req.image,
            "command": list(req.command),
            "name": req.name,
            # the image's own flowcon.* labels blanked, its NVIDIA_* variables overridden
            # (flowcon/executor/visibility.py)
            "labels": container_labels(
                self.image_labels(req.image), {**dict(req.settings.labels), **dict(req.labels)}
            ),
            "environment": _job_env(req),
            "mounts": [mount, *spec_kwargs["mounts"]],
            "detach": True,
            "stop_signal": "SIGTERM",
        }
        if req.init:
            kwargs["init"] = True
        if req.network == "host":
            kwargs["network_mode"] = "host"
        elif req.network:
            kwargs["network"] = req.network
        if req.real_gpus:
            kwargs["device_requests"] = [
                DeviceRequest(device_ids=list(req.gpus), capabilities=[["gpu"]])
            ]
        try:
            c = self.client.containers.create(**kwargs)
        except docker.errors.ImageNotFound as exc:
            raise ExecutorError(
                f"job {req.job}: image {req.image} not found on the engine"
            ) from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise ExecutorError(
                    f"job {req.job}: a container named {req.name} already exists but is not "
                    "managed by this executor (remove it or check its labels)"
                ) from exc
            raise ExecutorError(f"job {req.job}: creating {req.name}: {exc}") from exc
        user = req.settings.user
        try:
            if user is not None and needs_owning(user):
                # fresh volumes are root's: hand them to the job's user before it starts,
                # through the operator's probe, never along the job image's own paths
                sources = own_sources(req.settings, checkpoint)
                own_volumes(self.client, req.settings.probe_image, sources, user, req.labels)
        except ExecutorError as exc:
            self._quiet_remove(c)
            raise ExecutorError(f"job {req.job}: {exc}") from exc
        try:
            c.start()
            c.reload()
        except docker.errors.APIError as exc:
            self._quiet_remove(c)
            raise ExecutorError(f"job {req.job}: starting {req.name}: {exc}") from exc
        return worker_from_container(c)

    def _ensure_volume(self, name: str, labels: Mapping[str, str]) -> None:
        import docker.errors

        try:
            found = self.client.volumes.get(name)
        except docker.errors.NotFound:
            self.client.volumes.create(name, labels=volume_labels(labels))
            return
        why = volume_refusal(found.attrs.get("Labels"), labels)
        if why is not None:  # another job's checkpoint: never mounted into this one
            raise ExecutorRefused(f"checkpoint volume {name}: {why}: not mounted")

    def _get(self, worker: Worker) -> Container | None:
        import docker.errors

        try:
            return self.client.containers.get(worker.id)
        except docker.errors.NotFound:
            return None

    def stop(self, worker: Worker, grace_s: float) -> None:
        import docker.errors

        c = self._get(worker)
        if c is None:
            return
        try:
            c.stop(timeout=max(0, math.ceil(grace_s)))
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            raise ExecutorError(f"stopping {worker.name}: {exc}") from exc

    def kill(self, worker: Worker, signal: str) -> None:
        """``docker kill --signal`` (the leave signal of stop-free scale-in)."""
        import docker.errors

        c = self._get(worker)
        if c is None:
            return
        try:
            c.kill(signal=signal)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # not running any more
                return
            raise ExecutorError(f"signalling {worker.name} ({signal}): {exc}") from exc

    def image_labels(self, image: str) -> Mapping[str, str]:
        try:
            img = self.client.images.get(image)
        except engine_errors():
            return {}
        return dict(((img.attrs or {}).get("Config") or {}).get("Labels") or {})

    def restart(self, worker: Worker) -> None:
        import docker.errors

        c = self._get(worker)
        if c is None:
            raise ExecutorError(f"{worker.name} vanished before it could be restarted")
        try:
            c.start()
        except docker.errors.APIError as exc:
            raise ExecutorError(f"restarting {worker.name}: {exc}") from exc

    def remove(self, worker: Worker) -> None:
        c = self._get(worker)
        if c is not None:
            self._quiet_remove(c)

    @staticmethod
    def _quiet_remove(c: Container) -> None:
        import docker.errors

        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise ExecutorError(f"removing {c.name}: {exc}") from exc

    def logs(self, worker: Worker) -> list[str]:
        c = self._get(worker)
        if c is None:
            return []
        try:
            raw = c.logs(stdout=True, stderr=False)
        except engine_errors() as exc:
            log.warning("logs of %s: %s", worker.name, exc)
            return []
        return bytes(raw).decode(errors="replace").splitlines()

    def read_logs(
        self, worker: Worker, after_ns: int = 0, tail: int | None = None
    ) -> list[LogLine]:
        """``docker logs --timestamps [--since] [--tail]`` of the worker's container."""
        c = self._get(worker)
        if c is None:
            return []
        kwargs: SdkKwargs = {"stdout": True, "stderr": True, "timestamps": True}
        since = engine_since(after_ns)
        if since is not None:
            kwargs["since"] = since
        if tail is not None:
            kwargs["tail"] = max(0, int(tail))
        try:
            raw = cast(bytes, c.logs(**kwargs))  # stream=False: the bytes, not a stream
        except engine_errors() as exc:
            if getattr(exc, "status_code", None) in (404, 409):
                return []  # removed, or being removed (the job ended), since the look-up
            raise ExecutorError(f"logs of {worker.name}: {exc}") from exc
        return log_lines_of(bytes(raw), after_ns)

    def job_objects(self, selector: Mapping[str, str]) -> set[str]:
        flt = {"label": [f"{k}={v}" for k, v in selector.items()]}
        try:
            nets, vols = (
                self.client.networks.list(filters=flt),
                self.client.volumes.list(filters=flt),
            )
        except engine_errors() as exc:
            raise ExecutorError(f"listing job networks and volumes: {exc}") from exc
        return jobs_labelled([*nets, *vols])

    def cleanup(self, job: str, volume: str | None) -> None:
        import docker.errors

        try:
            self.client.networks.get(network_name(job)).remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            log.warning("removing network of %s: %s", job, exc)
        if volume:
            try:
                found = self.client.volumes.get(volume)
                why = volume_refusal(found.attrs.get("Labels"), {LABEL_JOB: job}, (LABEL_JOB,))
                if why is not None:
                    log.warning("checkpoint volume %s kept: %s", volume, why)
                    return
                found.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                log.warning("removing checkpoint volume %s: %s", volume, exc)
