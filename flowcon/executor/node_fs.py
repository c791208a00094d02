"""What the executor checks and prepares on the node that runs a worker, through that
node's engine, without running anything there.

Two things cannot be decided from the job spec alone, because they depend on the node's
own file system:

* **where a host path really leads.** ``executor.bind_roots`` allows host paths under the
  operator's roots, but a symbolic link under a root (``/srv/datasets/x -> /etc``) would
  take Docker's bind mount outside it. ``host_path_problems`` resolves each path component
  by component on the node: a *probe* container (created from an image already on the node,
  never started) binds the allowed root read-only, and the engine's archive ``stat`` reports
  each link's target fully resolved inside that container. A target outside the probe's
  mount of the root leaves the root: the path is refused. Links that stay inside the root
  are followed; an absolute link is resolved in the probe's scope, so only relative links
  inside a root are accepted (docs/security.md).
* **who owns a fresh volume.** A job runs as a non-root user (``executor.default_user``),
  but a new named volume (the job's checkpoint volume, a user's own named volume) is created
  owned by root, so the job could not write its checkpoint. ``own_mount_points`` hands the
  volume's top folder to the container's user by extracting one directory entry onto it
  with the engine's archive call (``PUT /containers/{id}/archive``), on a container that is
  created but not started: no process of the job's image ever runs as root for it.

Both need the engine of the worker's node: the local engine on the engine backend; on
Swarm the manager's own node or a node listed in ``executor.node_hosts``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import posixpath
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from flowcon.contract import CHECKPOINT_MOUNT, LABEL_JOB, LABEL_MANAGED_BY, USER_VOLUME_PREFIX
from flowcon.executor.backend import ExecutorError, ExecutorRefused, engine_errors
from flowcon.executor.container_spec import ContainerSettings, SdkKwargs
from flowcon.executor.reach import is_root, root_of

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

PROBE_ROOT = "/flowcon-probe"  # where a probe container binds the roots and volumes
PROBE_LABEL = "flowcon.probe"  # on every probe container, so a leftover one can be found
_SYMLINK = 1 << 27  # Go's os.ModeSymlink in the archive stat's "mode"
_MAX_LINKS = 40  # as the kernel's ELOOP bound


@dataclass(frozen=True)
class HostPath:
    """A spec's host path to check: the field that named it, the path and its root."""

    field: str
    source: str
    root: str


def numeric_owner(user: str) -> tuple[int, int] | None:
    """(uid, gid) of ``uid[:gid]`` (gid 0 when absent, as the engine runs it); None for a
    name, which only the image's passwd file resolves."""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return None
    return int(uid), int(gid or 0)


def needs_owning(user: str | None) -> bool:
    """A container running as ``user`` cannot write a root-owned fresh volume."""
    return user is not None and not is_root(user)


def _api(client: DockerClient) -> Any:
    """The SDK's low-level client: a requests session with the engine's base URL. The
    archive calls it lacks (the stat's ``HEAD``, ``copyUIDGID``) are made on it; its stubs
    do not declare ``_url``."""
    return client.api


def own_mount_points(
    client: DockerClient, container_id: str, targets: Sequence[str], user: str
) -> None:
    """Give the top folder of each mount at ``targets`` of the created (not started)
    container to ``user``: its mode 0750, owned by uid:gid, or by the name the image's
    passwd file resolves (the engine's ``copyUIDGID``). ExecutorError when the engine
    refuses."""
    if not targets:
        return
    owner = numeric_owner(user)
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for target in targets:
            entry = tarfile.TarInfo(target.strip("/"))
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, 0o750, now
            entry.uid, entry.gid = owner if owner is not None else (0, 0)
            tar.addfile(entry)
    api = _api(client)
    url = api._url("/containers/{0}/archive", container_id)
    params = {"path": "/", "copyUIDGID": "0" if owner is not None else "1"}
    try:
        answer = api.put(url, params=params, data=buf.getvalue())
    except engine_errors() as exc:
        raise ExecutorError(f"handing {', '.join(targets)} to user {user}: {exc}") from exc
    if answer.status_code >= 300:
        raise ExecutorError(
            f"handing {', '.join(targets)} to user {user}: the engine answered"
            f" {answer.status_code}: {answer.text.strip()}"
        )


def probe_image(client: DockerClient, wanted: str) -> str:
    """An image on the node to make a probe from (``wanted``, the job's, when it is there:
    the probe never starts, so any image's file system serves)."""
    try:
        client.images.get(wanted)
        return wanted
    except engine_errors():
        pass
    try:
        present = client.images.list()
    except engine_errors() as exc:
        raise ExecutorError(f"listing images for a probe: {exc}") from exc
    for img in present:
        if img.tags:
            return str(img.tags[0])
    raise ExecutorError(f"no image on the node to check host paths with (wanted {wanted})")


def probe(
    client: DockerClient,
    image: str,
    mounts: Sequence[Mapping[str, object]],
    labels: Mapping[str, str],
    user: str | None = None,
) -> Container:
    """A created, never started container of ``image`` with ``mounts``, no network; the
    caller removes it (``remove_probe``). It keeps the worker's labels (a test's label)
    but not the ones the executor finds its workers by: it is nobody's worker."""
    from docker.types import Mount

    mine = {k: v for k, v in labels.items() if k not in (LABEL_MANAGED_BY, LABEL_JOB)}

    kwargs: SdkKwargs = {
        "image": probe_image(client, image),
        "entrypoint": ["/flowcon-probe-never-runs"],
        "command": [],
        "network_mode": "none",
        "labels": {**mine, PROBE_LABEL: "true"},
        "mounts": [
            Mount(
                str(m["Target"]),
                str(m["Source"]),
                type=cast(Literal["bind", "volume"], str(m.get("Type", "volume"))),
                read_only=bool(m.get("ReadOnly", False)),
                labels=m.get("Labels"),  # type: ignore[arg-type]
            )
            for m in mounts
        ],
    }
    if user is not None:
        kwargs["user"] = user
    try:
        return client.containers.create(**kwargs)
    except engine_errors() as exc:
        raise ExecutorError(f"creating a probe container: {exc}") from exc


def remove_probe(container: Container) -> None:
    try:
        container.remove(force=True)
    except engine_errors() as exc:
        log.warning("removing probe container %s: %s", container.short_id, exc)


def _stat(client: DockerClient, container_id: str, path: str) -> dict[str, object] | None:
    """The engine's archive stat of ``path`` in the container (None: no such path)."""
    api = _api(client)
    url = api._url("/containers/{0}/archive", container_id)
    try:
        answer = api.head(url, params={"path": path})
    except engine_errors() as exc:
        raise ExecutorError(f"checking {path} on the node: {exc}") from exc
    if answer.status_code == 404:
        return None
    header = answer.headers.get("X-Docker-Container-Path-Stat")
    if answer.status_code >= 300 or not header:
        raise ExecutorError(
            f"checking {path} on the node: the engine answered {answer.status_code}"
        )
    try:
        stat = json.loads(base64.b64decode(header))
    except (binascii.Error, ValueError) as exc:
        raise ExecutorError(f"checking {path} on the node: unreadable stat ({exc})") from exc
    return stat if isinstance(stat, dict) else None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_in_root(client: DockerClient, container_id: str, mount: str, rel: str) -> str | None:
    """Follow ``rel`` below ``mount`` (the probe's mount of a root) component by component;
    the resolved path, or None when a link leads outside ``mount``."""
    cur, links = mount, 0
    parts = [p for p in rel.split("/") if p and p != "."]
    while parts:
        cur = posixpath.join(cur, parts.pop(0))
        stat = _stat(client, container_id, cur)
        if stat is None:  # missing: the engine refuses or creates it, under the root
            return posixpath.join(cur, *parts) if parts else cur
        mode = stat.get("mode")
        if isinstance(mode, int) and mode & _SYMLINK:
            links += 1
            target = str(stat.get("linkTarget") or "")
            if links > _MAX_LINKS or not target or not _under(target, mount):
                return None
            cur = target
    return cur


def host_path_problems(
    client: DockerClient, image: str, paths: Sequence[HostPath], labels: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(field, why) for each host path whose real path on the node leaves its root."""
    if not paths:
        return []
    roots = sorted({p.root for p in paths})
    where = {root: f"{PROBE_ROOT}/{i}" for i, root in enumerate(roots)}
    mounts = [{"Target": where[r], "Source": r, "Type": "bind", "ReadOnly": True} for r in roots]
    box = probe(client, image, mounts, labels)
    try:
        out: list[tuple[str, str]] = []
        for p in paths:
            rel = posixpath.relpath(posixpath.normpath(p.source), p.root)
            if resolve_in_root(client, str(box.id), where[p.root], rel) is None:
                out.append(
                    (
                        p.field,
                        f"{p.source!r} is not allowed: it leads outside its allowed root"
                        f" {p.root} through a symbolic link (resolved on the node)",
                    )
                )
        return out
    finally:
        remove_probe(box)


def bind_paths(settings: ContainerSettings) -> list[HostPath]:
    """The spec's host paths, each with the allowed root it lies under."""
    out = []
    for i, m in enumerate(settings.mounts):
        if m.get("Type") != "bind":
            continue
        source = str(m.get("Source", ""))
        root = root_of(source, settings.bind_roots)
        if root is None:  # admitted under an older config: refused all the same
            raise ExecutorRefused(
                f"volumes[{i}].source: {source!r} is not allowed: host paths must be under"
                f" an allowed root (executor.bind_roots: {', '.join(settings.bind_roots)})"
            )
        out.append(HostPath(f"volumes[{i}].source", source, root))
    return out


def check_bind_paths(
    client: DockerClient | None,
    node: str,
    image: str,
    settings: ContainerSettings,
    labels: Mapping[str, str],
) -> None:
    """Refuse (ExecutorError naming the field) a host path that leaves its root on the
    node; ``client`` None: the node's engine cannot be reached, so none is mounted."""
    paths = bind_paths(settings)
    if not paths:
        return
    if client is None:
        raise ExecutorRefused(
            f"{paths[0].field}: {paths[0].source!r} cannot be checked on node {node}: no"
            " engine address for it (executor.node_hosts), so no host path is mounted there"
        )
    problems = host_path_problems(client, image, paths, labels)
    if problems:
        raise ExecutorRefused("; ".join(f"{f}: {why}" for f, why in problems))


def own_targets(settings: ContainerSettings) -> list[str]:
    """Mount points to hand to the container's user: the checkpoint folder and the user's
    own named volumes mounted writable (never a shared volume, never a host path)."""
    own = [
        str(m["Target"])
        for m in settings.mounts
        if m.get("Type") == "volume"
        and str(m.get("Source", "")).startswith(USER_VOLUME_PREFIX)
        and not m.get("ReadOnly")  # nothing can be written there, nor is it to be
    ]
    return [CHECKPOINT_MOUNT, *own]
