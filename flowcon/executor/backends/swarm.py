"""Executor backend for Docker Swarm: one single-replica service per job per node.

Each service is pinned with ``node.labels.flowcon.node==<name>`` (scripts/swarm-up.sh
labels the nodes) and uses restart condition ``none``: the executor, not Swarm, decides
whether a dead worker is restarted from its checkpoint, so both backends behave alike and a
job that exits after its SIGTERM checkpoint is not restarted behind the allocator's back.

Networking: services join the ``host`` network. MASTER_ADDR is the swarm address of the
node holding rank 0 and MASTER_PORT a per-job port, so workers on different nodes reach each
other as long as the nodes' addresses route to each other (true on one machine, where both
"nodes" share the host network namespace, and on real clusters with reachable node IPs).
Overlay networks are not used: they need iptables/bridges that node 2 here runs without.

Checkpoints: a named volume is node-local, so a job whose rank 0 moves to another node
starts from step 0 there unless ``checkpoint_host_dir`` points at shared storage (NFS, or
any host path on this one-machine swarm). Only rank 0 reads the checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from flowcon.contract import CHECKPOINT_MOUNT, LABEL_GPUS, LABEL_JOB, LABEL_NODE, LABEL_RANK
from flowcon.engine.logs import parse_ts
from flowcon.executor.backend import (
    EngineJson,
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
from flowcon.executor.container_spec import SdkKwargs, swarm_kwargs
from flowcon.executor.hardening import (
    NO_NEW_PRIVILEGES_API,
    NodeHardening,
    api_of_engine,
    assess,
    parse_api,
    userns_of,
)
from flowcon.executor.node_fs import (
    check_bind_paths,
    needs_owning,
    own_sources,
    own_volumes,
    resolve_user,
)
from flowcon.executor.node_hosts import NodeHost, parse_node_hosts
from flowcon.executor.visibility import container_labels, job_env
from flowcon.executor.workers import WorkerSlot, allocate_master_port

# types-docker leaves most methods of ``Service`` and ``ServiceCollection`` unannotated:
# calls of those carry ``type: ignore[no-untyped-call]``.
if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.services import Service

log = logging.getLogger(__name__)

NODE_LABEL = "flowcon.node"  # the swarm node label scripts/swarm-up.sh sets
_STARTING = {"new", "pending", "assigned", "accepted", "preparing", "ready", "starting"}


def _created_ns(task: EngineJson) -> int:
    """A task's ``CreatedAt`` (RFC 3339 UTC, as the engine's log timestamps) in
    nanoseconds since the epoch; 0 when it has none or it does not parse."""
    parsed = parse_ts(str(task.get("CreatedAt") or "").encode() + b" ")
    return parsed[0] if parsed is not None else 0


def current_task(tasks: Sequence[EngineJson]) -> EngineJson:
    """The service's current task: the one created last (a restart is a new task). Not
    the one updated last: an old task's status can still change after its successor was
    created (its node reporting back after a restart), and its ``Version.Index`` then
    passes the new task's."""
    return max(tasks, key=lambda t: (_created_ns(t), (t.get("Version") or {}).get("Index", 0)))


def worker_from_service(svc: Service, tasks: list[EngineJson]) -> Worker:
    spec = svc.attrs.get("Spec") or {}
    labels = dict(spec.get("Labels") or {})
    replicas = ((spec.get("Mode") or {}).get("Replicated") or {}).get("Replicas", 1)
    state, code, node_lost = "starting", None, False
    if tasks:
        last = current_task(tasks)
        status = last.get("Status") or {}
        st = str(status.get("State", ""))
        raw = (status.get("ContainerStatus") or {}).get("ExitCode")
        if st == "running":
            state = "running"
        elif st in _STARTING:
            state = "starting"
        elif st == "complete":
            state, code = "exited", 0
        elif st in ("failed", "shutdown") and raw in (None, 0):
            # A container that exits 0 completes; a failed task showing 0 kept its running
            # status: its node's engine stopped or restarted under it and lost the
            # container ("No such container"). A shut-down task showing 0 (often with no
            # container at all) was stopped by the swarm, not ended by the job. Neither is
            # a success, nor the job's crash.
            state, node_lost = "dead", True
        elif st in ("failed", "shutdown"):
            state, code = "exited", int(raw) if isinstance(raw, int) else 1
        elif st == "rejected":
            state, code = "dead", None
        else:  # orphaned, remove
            state = "dead"
    elif replicas == 0:
        state = "exited"
    try:
        rank = int(labels.get(LABEL_RANK, "0"))
    except ValueError:
        rank = 0
    image = str(((spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}).get("Image", ""))
    return Worker(
        id=cast(str, svc.id),  # None only for a model built without the engine's attrs
        name=svc.name,
        job=labels.get(LABEL_JOB, ""),
        node=labels.get(LABEL_NODE, ""),
        node_rank=rank,
        gpus=tuple(g for g in labels.get(LABEL_GPUS, "").split(",") if g),
        state=state,
        exit_code=code,
        labels=labels,
        image=image.split("@", 1)[0],
        node_lost=node_lost,
    )


MIN_API = "1.24"  # docker-py's oldest: a client is made with it, then asks the engine


def connect_node(host: NodeHost) -> DockerClient:
    """A client of a node's engine: over its socket, ssh (the ssh client and its keys), or
    TCP with mutual TLS (the engine's certificate checked against ``ca_cert``)."""
    import docker
    from docker.tls import TLSConfig

    if host.scheme == "ssh":
        return docker.DockerClient(
            base_url=host.url, version="auto", timeout=60, use_ssh_client=True
        )
    if host.tls is not None:
        url = "https://" + host.url.split("://", 1)[1] if host.scheme != "https" else host.url
        tls = TLSConfig(
            client_cert=(host.tls.client_cert, host.tls.client_key),
            ca_cert=host.tls.ca_cert,
            verify=host.tls.ca_cert,
        )
        # not the environment's CA bundle: requests lets REQUESTS_CA_BUNDLE override a
        # session's CA, so the node's CA is set with the environment ignored, then the
        # engine's API version asked (what version="auto" does, but over this session)
        client = docker.DockerClient(base_url=url, version=MIN_API, timeout=60, tls=tls)
        client.api.trust_env = False
        client.api._version = client.api._retrieve_server_version()  # type: ignore[attr-defined]
        return client
    return docker.DockerClient(base_url=host.url, version="auto", timeout=60)


def with_no_new_privileges(
    kwargs: SdkKwargs, node: NodeHardening, manager_api: tuple[int, int] | None
) -> None:
    """Add ``ContainerSpec.Privileges.NoNewPrivileges`` to a service's ``kwargs`` where
    the node's engine and the manager both speak API 1.46 (docker-py has no parameter:
    the raw field goes into its ``Privileges`` mapping)."""
    from docker.types import Privileges

    if not node.no_new_privileges or manager_api is None or manager_api < NO_NEW_PRIVILEGES_API:
        return
    privileges = kwargs.get("privileges") or Privileges()
    privileges["NoNewPrivileges"] = True
    kwargs["privileges"] = privileges


class SwarmBackend:
    kind = "swarm"

    def __init__(
        self,
        client: DockerClient | None = None,
        node_clients: Mapping[str, DockerClient] | None = None,
        stop_poll_s: float = 0.1,
        node_hosts: Mapping[str, str | NodeHost] | None = None,
        allow_weak_hardening: bool = False,
    ) -> None:
        """``client`` talks to a manager; ``node_clients`` (by flowcon.node name, from
        ``executor.node_hosts``, whose engine addresses are connected to when first
        needed: unix://, ssh:// or tcp:// with mutual TLS, anything else is refused)
        reach the other nodes' engines: to check host paths and prepare volumes where a
        worker runs, to remove checkpoint volumes there, and to read the hardening each
        node can apply (``allow_weak_hardening``: jobs may go to a node lacking some)."""
        if client is None:
            client = connect_engine(timeout=60)
        self.client = client
        self.node_clients = dict(node_clients or {})
        self.stop_poll_s = stop_poll_s
        self.node_hosts = parse_node_hosts(node_hosts)
        self.allow_weak_hardening = allow_weak_hardening
        self._hardening: dict[str, NodeHardening] = {}  # by node, once read
        self._own_node: str | None = None  # the manager's flowcon.node label, once read
        self._unprepared: set[str] = set()  # nodes already warned about

    def own_node(self) -> str:
        """The flowcon.node label of the manager this backend talks to ("" if none)."""
        if self._own_node is None:
            try:
                node_id = str((self.client.info().get("Swarm") or {}).get("NodeID", ""))
                node = self.client.nodes.get(node_id)
                labels = (node.attrs.get("Spec") or {}).get("Labels") or {}
                self._own_node = str(labels.get(NODE_LABEL, ""))
            except engine_errors() as exc:
                log.warning("reading the manager's own swarm node: %s", exc)
                return ""
        return self._own_node

    def node_client(self, node: str) -> DockerClient | None:
        """The engine of swarm node ``node`` (None: not reachable from here)."""
        if node not in self.node_clients and node in self.node_hosts:
            import docker

            host = self.node_hosts[node]
            try:
                self.node_clients[node] = connect_node(host)
            except docker.errors.DockerException as exc:
                log.warning("node %s: engine %s: %s", node, host.url, exc)
        if node in self.node_clients:
            return self.node_clients[node]
        return self.client if node and node == self.own_node() else None

    def node_hardening(self, node: str) -> NodeHardening:
        """What ``node``'s engine applies to a job (its API version and user namespaces,
        from its engine when reachable, else its swarm description), read once; a gap is
        logged once per node."""
        if node not in self._hardening:
            api, userns = self._engine_facts(node)
            found = assess(node, api, userns, self.allow_weak_hardening)
            if found.missing:
                log.warning("%s", found.describe())
            self._hardening[node] = found
        return self._hardening[node]

    def hardening(self) -> list[NodeHardening]:
        """Every labelled swarm node's hardening (the node view)."""
        try:
            nodes = self.client.nodes.list()
        except engine_errors() as exc:
            raise ExecutorError(f"listing swarm nodes: {exc}") from exc
        labels = [(n.attrs.get("Spec") or {}).get("Labels") or {} for n in nodes]
        names = sorted({str(lab.get(NODE_LABEL, "")) for lab in labels} - {""})
        return [self.node_hardening(n) for n in names]

    def _engine_facts(self, node: str) -> tuple[tuple[int, int] | None, bool]:
        """(API version, user namespaces) of ``node``'s engine: asked of the engine when
        it is reachable, else the API of the release its swarm description names (user
        namespaces then unknown: taken as off)."""
        client = self.node_client(node)
        if client is not None:
            try:
                api = parse_api(str(client.version().get("ApiVersion", "")))
                return api, userns_of(client.info().get("SecurityOptions"))
            except engine_errors() as exc:
                log.warning("node %s: reading its engine's version: %s", node, exc)
        try:
            found = self.client.nodes.list(filters={"node.label": f"{NODE_LABEL}={node}"})
        except engine_errors() as exc:
            raise ExecutorError(f"looking up swarm node {node}: {exc}") from exc
        if not found:
            return None, False
        engine = (found[0].attrs.get("Description") or {}).get("Engine") or {}
        return api_of_engine(str(engine.get("EngineVersion", ""))), False

    def _manager_api(self) -> tuple[int, int] | None:
        try:
            return parse_api(str(self.client.version().get("ApiVersion", "")))
        except engine_errors():
            return None

    def _prepare_volumes(self, client: DockerClient | None, req: WorkerRequest) -> None:
        """Hand the worker's fresh volumes to its non-root user on its node, before the
        swarm starts it: the checkpoint volume is created there now, with its labels, and
        a probe container (never started) owns its top folder."""
        user = req.settings.user
        if user is None or not needs_owning(user):
            return
        if client is None:
            if req.node not in self._unprepared:
                self._unprepared.add(req.node)
                log.warning(
                    "node %s: no engine address (executor.node_hosts): a job running there"
                    " as %s finds its fresh checkpoint volume owned by root",
                    req.node,
                    user,
                )
            return
        if req.checkpoint_host_dir:
            checkpoint = {"Source": req.checkpoint_host_dir, "Type": "bind"}
        else:
            try:
                found = client.volumes.get(req.checkpoint_volume)
            except engine_errors():
                try:
                    client.volumes.create(req.checkpoint_volume, labels=volume_labels(req.labels))
                except engine_errors() as exc:
                    raise ExecutorError(
                        f"job {req.job}: creating {req.checkpoint_volume} on {req.node}: {exc}"
                    ) from exc
            else:  # another job's checkpoint: never mounted into this one
                why = volume_refusal(found.attrs.get("Labels"), req.labels)
                if why is not None:
                    raise ExecutorRefused(
                        f"checkpoint volume {req.checkpoint_volume} on {req.node}: {why}:"
                        " not mounted"
                    )
            checkpoint = {"Source": req.checkpoint_volume, "Type": "volume"}
        # through the operator's probe image, never the job's (its links would steer it)
        sources = own_sources(req.settings, checkpoint)
        try:
            own_volumes(client, req.settings.probe_image, sources, user, req.labels)
        except ExecutorError as exc:
            raise ExecutorError(f"job {req.job}: {exc}") from exc

    def _tasks(self, svc: Service) -> list[EngineJson]:
        try:
            return list(svc.tasks())  # type: ignore[no-untyped-call]
        except engine_errors():
            return []

    def list_workers(self, selector: Mapping[str, str]) -> list[Worker]:
        filters = {"label": [f"{k}={v}" for k, v in selector.items()]}
        try:
            services = self.client.services.list(filters=filters)
        except engine_errors() as exc:
            raise ExecutorError(f"listing job services: {exc}") from exc
        return [worker_from_service(s, self._tasks(s)) for s in services]

    def node_addr(self, name: str) -> str:
        try:
            nodes = self.client.nodes.list(filters={"node.label": f"{NODE_LABEL}={name}"})
        except engine_errors() as exc:
            raise ExecutorError(f"looking up swarm node {name}: {exc}") from exc
        if not nodes:
            raise ExecutorError(f"no swarm node labelled {NODE_LABEL}={name}")
        addr = str((nodes[0].attrs.get("Status") or {}).get("Addr", ""))
        if not addr or addr == "0.0.0.0":
            manager = (nodes[0].attrs.get("ManagerStatus") or {}).get("Addr", "")
            addr = str(manager).rsplit(":", 1)[0]
        if not addr:
            raise ExecutorError(f"swarm node {name} has no address")
        return addr

    def master_addr(
        self,
        job: str,
        slots: Sequence[WorkerSlot],
        rank0_name: str,
        labels: Mapping[str, str],
        port: int | None = None,
        grow: bool = False,
    ) -> tuple[str, int, str | None]:
        return self.node_addr(slots[0].node), port or allocate_master_port(job, ()), "host"

    def kill(self, worker: Worker, signal: str) -> None:
        """Signal the container of the service's running task. Swarm has no "service
        kill": the task names its container, which is killed on its node's engine (the
        manager's, or the ``node_clients`` one of the worker's node)."""
        import docker.errors

        svc = self._get(worker)
        if svc is None:
            return
        running = [
            t for t in self._tasks(svc) if str((t.get("Status") or {}).get("State")) == "running"
        ]
        ids = [
            str(((t.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID", ""))
            for t in running
        ]
        clients = [self.node_clients[worker.node]] if worker.node in self.node_clients else []
        clients.append(self.client)
        for cid in [i for i in ids if i]:
            for client in clients:
                try:
                    client.containers.get(cid).kill(signal=signal)
                    break
                except docker.errors.NotFound:
                    continue
                except docker.errors.APIError as exc:
                    if exc.status_code == 409:
                        break
                    raise ExecutorError(f"signalling {worker.name} ({signal}): {exc}") from exc
            else:
                raise ExecutorError(f"signalling {worker.name}: container {cid[:12]} not found")

    def image_labels(self, image: str) -> Mapping[str, str]:
        for client in [self.client, *self.node_clients.values()]:
            try:
                img = client.images.get(image)
            except engine_errors():
                continue
            return dict(((img.attrs or {}).get("Config") or {}).get("Labels") or {})
        return {}

    def create(self, req: WorkerRequest) -> Worker:
        import docker.errors
        from docker.types import Mount, RestartPolicy, ServiceMode

        hardened = self.node_hardening(req.node)
        if not hardened.allowed:
            raise ExecutorRefused(f"job {req.job}: {hardened.describe()}")
        node_client = self.node_client(req.node)
        # a host path's real path on the worker's node stays under its allowed root
        check_bind_paths(node_client, req.node, req.image, req.settings, req.labels)
        # whom it runs as, in numbers resolved in its image on the node, and allowed
        resolved = resolve_user(node_client, req.node, req.image, req.settings, req.labels)
        req = replace(req, settings=resolved)
        self._prepare_volumes(node_client, req)
        if req.checkpoint_host_dir:
            mount = Mount(CHECKPOINT_MOUNT, req.checkpoint_host_dir, type="bind")
        else:
            mount = Mount(
                CHECKPOINT_MOUNT,
                req.checkpoint_volume,
                type="volume",
                labels=volume_labels(req.labels),
            )
        # Swarm has no device requests: the NVIDIA runtime (default-runtime=nvidia on the
        # node) exposes what NVIDIA_VISIBLE_DEVICES names, set here for every worker (its
        # GPUs, or none) over the image's ENV; the image's own flowcon.* labels are blanked
        # (flowcon/executor/visibility.py)
        try:
            env = job_env(req.env, req.gpus)
        except ValueError as exc:
            raise ExecutorError(f"job {req.job}: {req.name}: {exc}") from None
        spec_kwargs = swarm_kwargs(req.settings)
        labels = container_labels(
            self.image_labels(req.image), {**dict(req.settings.labels), **dict(req.labels)}
        )
        kwargs: SdkKwargs = {
            **spec_kwargs,
            "name": req.name,
            "command": list(req.command),
            "env": [f"{k}={v}" for k, v in env.items()],
            "labels": labels,
            "container_labels": labels,
            "constraints": [f"node.labels.{NODE_LABEL}=={req.node}"],
            "mode": ServiceMode("replicated", replicas=1),
            "restart_policy": RestartPolicy(condition="none"),
            "stop_grace_period": int(req.grace_s * 1e9),
            "stop_signal": "SIGTERM",
            "mounts": [mount, *spec_kwargs["mounts"]],
        }
        if req.init:
            kwargs["init"] = True
        if req.network:
            kwargs["networks"] = [req.network]
        with_no_new_privileges(kwargs, hardened, self._manager_api())
        try:
            svc = self.client.services.create(req.image, **kwargs)  # type: ignore[no-untyped-call]
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise ExecutorError(
                    f"job {req.job}: a service named {req.name} already exists but is not "
                    "managed by this executor"
                ) from exc
            raise ExecutorError(f"job {req.job}: creating service {req.name}: {exc}") from exc
        svc.reload()
        return worker_from_service(svc, [])

    def _get(self, worker: Worker) -> Service | None:
        import docker.errors

        try:
            svc = self.client.services.get(worker.id)  # type: ignore[no-untyped-call]
            return cast("Service", svc)
        except docker.errors.NotFound:
            return None

    def stop(self, worker: Worker, grace_s: float) -> None:
        """Scale to 0 (Swarm sends SIGTERM, SIGKILL after the grace period) and wait."""
        svc = self._get(worker)
        if svc is None:
            return
        try:
            svc.scale(0)
        except engine_errors() as exc:
            raise ExecutorError(f"stopping {worker.name}: {exc}") from exc
        deadline = time.monotonic() + grace_s + 15.0
        while time.monotonic() < deadline:
            states = {str((t.get("Status") or {}).get("State")) for t in self._tasks(svc)}
            if not states & ({"running"} | _STARTING):
                return
            time.sleep(self.stop_poll_s)
        log.warning("%s still running %.0fs after SIGTERM", worker.name, grace_s + 15.0)

    def restart(self, worker: Worker) -> None:
        """A new task with the same spec (the job resumes from its checkpoint)."""
        svc = self._get(worker)
        if svc is None:
            raise ExecutorError(f"{worker.name} vanished before it could be restarted")
        try:
            replicas = (svc.attrs["Spec"].get("Mode") or {}).get("Replicated", {}).get("Replicas")
            if replicas == 0:
                svc.scale(1)
            else:
                svc.force_update()  # type: ignore[no-untyped-call]
        except engine_errors() as exc:
            raise ExecutorError(f"restarting {worker.name}: {exc}") from exc

    def remove(self, worker: Worker) -> None:
        import docker.errors

        svc = self._get(worker)
        if svc is None:
            return
        try:
            svc.remove()  # type: ignore[no-untyped-call]
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise ExecutorError(f"removing {worker.name}: {exc}") from exc

    def logs(self, worker: Worker) -> list[str]:
        svc = self._get(worker)
        if svc is None:
            return []
        try:
            chunks = svc.logs(stdout=True, stderr=False, follow=False)
            raw = b"".join(chunks)
        except engine_errors() as exc:
            log.warning("logs of %s: %s", worker.name, exc)
            return []
        return raw.decode(errors="replace").splitlines()

    def read_logs(
        self, worker: Worker, after_ns: int = 0, tail: int | None = None
    ) -> list[LogLine]:
        """``docker service logs --timestamps [--since] [--tail]`` of the worker's service
        (every task of it: a restarted worker's earlier output too)."""
        svc = self._get(worker)
        if svc is None:
            return []
        kwargs: SdkKwargs = {
            "stdout": True,
            "stderr": True,
            "timestamps": True,
            "follow": False,
        }
        since = engine_since(after_ns)
        if since is not None:
            kwargs["since"] = since
        if tail is not None:
            kwargs["tail"] = max(0, int(tail))
        try:
            raw = b"".join(svc.logs(**kwargs))
        except engine_errors() as exc:
            if getattr(exc, "status_code", None) in (404, 409):
                return []  # removed, or being removed (the job ended), since the look-up
            raise ExecutorError(f"logs of {worker.name}: {exc}") from exc
        lines = log_lines_of(raw, after_ns)
        lines.sort(key=lambda ln: ln.ts_ns)  # tasks' outputs arrive one after another
        return lines

    def job_objects(self, selector: Mapping[str, str]) -> set[str]:
        """The checkpoint volumes' jobs on every node this backend can reach (job services
        use the host network: no network of their own)."""
        flt = {"label": [f"{k}={v}" for k, v in selector.items()]}
        jobs: set[str] = set()
        for client in [self.client, *self.node_clients.values()]:
            try:
                jobs |= jobs_labelled(client.volumes.list(filters=flt))
            except engine_errors() as exc:
                raise ExecutorError(f"listing checkpoint volumes: {exc}") from exc
        return jobs

    def cleanup(self, job: str, volume: str | None) -> None:
        if not volume:
            return
        import docker.errors

        # a just-removed service's container may hold the volume for a moment
        for client in [self.client, *self.node_clients.values()]:
            for attempt in range(20):
                try:
                    found = client.volumes.get(volume)
                    labels = found.attrs.get("Labels")
                    why = volume_refusal(labels, {LABEL_JOB: job}, (LABEL_JOB,))
                    if why is not None:
                        log.warning("checkpoint volume %s kept: %s", volume, why)
                        break
                    found.remove(force=True)
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as exc:
                    if attempt == 19:
                        log.warning("removing checkpoint volume %s: %s", volume, exc)
                    time.sleep(0.25)
                except engine_errors() as exc:
                    log.warning("removing checkpoint volume %s: %s", volume, exc)
                    break
