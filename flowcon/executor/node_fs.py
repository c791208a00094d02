"""What the executor checks and prepares on the node that runs a worker, through that
node's engine, without running anything there.

Two things cannot be decided from the job spec alone, because they depend on the node's
own file system:

* **where a host path really leads.** ``executor.bind_roots`` allows host paths under the
  operator's roots, but a symbolic link under a root (``/srv/datasets/x -> /etc``) would
  take Docker's bind mount outside it. ``host_path_problems`` resolves each path component
  by component on the node: a *probe* container (created from the operator's
  ``executor.probe_image``, never the job's, whose own links would steer the resolution;
  never started) binds the allowed root read-only at a fixed path, and the engine's archive
  ``stat`` reports each link's target fully resolved inside that container. A target
  outside the probe's mount of the root leaves the root: the path is refused. Links that
  stay inside the root are followed; an absolute link is resolved in the probe's scope, so
  only relative links inside a root are accepted (docs/security.md). A writable mount that
  resolves into a root the operator made read-only is refused too.
* **whom the container runs as.** A user name, a uid without a gid, or (with
  ``executor.default_user: null``) the image's own user has its number only in the image's
  ``/etc/passwd`` and ``/etc/group``. ``resolve_user`` reads both through the archive call
  of a created, never started container of the job's image, checks the numbers against
  the operator's rule (``UserRule``: no uid or gid 0, the ranges) and gives the container
  the numeric ``uid:gid``, so the engine resolves nothing (nor adds the image's
  supplementary groups) at start. A name that does not resolve is refused.
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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from flowcon.contract import CHECKPOINT_MOUNT, LABEL_JOB, LABEL_MANAGED_BY, USER_VOLUME_PREFIX
from flowcon.executor.backend import ExecutorError, ExecutorRefused, engine_errors
from flowcon.executor.container_spec import ContainerSettings, SdkKwargs
from flowcon.executor.reach import UserRule, is_root, root_of
from flowcon.jobspec.keys import MAX_ID, split_user

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

log = logging.getLogger(__name__)

PROBE_ROOT = "/flowcon-probe"  # where a probe container binds the roots and volumes
PROBE_LABEL = "flowcon.probe"  # on every probe container, so a leftover one can be found
_SYMLINK = 1 << 27  # Go's os.ModeSymlink in the archive stat's "mode"
_MAX_LINKS = 40  # as the kernel's ELOOP bound
_MAX_ACCOUNT_FILE = 4 << 20  # bytes of an image's /etc/passwd or /etc/group read at most


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


def require_probe_image(client: DockerClient, image: str) -> str:
    """``image`` (the operator's ``executor.probe_image``) when it is on the node; an
    ExecutorError otherwise: no other image stands in for it (the job's own links would
    steer the check)."""
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ExecutorError(
            f"the probe image {image} (executor.probe_image) is not on the node: build it"
            " there (images/testbox/build.sh makes flowcon/testbox:latest); no host path is"
            " mounted until then"
        ) from None
    except engine_errors() as exc:
        raise ExecutorError(f"looking up the probe image {image}: {exc}") from exc
    return image


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
    exact: bool = False,
) -> Container:
    """A created, never started container of ``image`` (``exact``: that image only; else
    any image on the node when it is missing) with ``mounts``, no network; the
    caller removes it (``remove_probe``). It keeps the worker's labels (a test's label)
    but not the ones the executor finds its workers by: it is nobody's worker."""
    from docker.types import Mount

    mine = {k: v for k, v in labels.items() if k not in (LABEL_MANAGED_BY, LABEL_JOB)}

    kwargs: SdkKwargs = {
        "image": image if exact else probe_image(client, image),
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
    client: DockerClient,
    image: str,
    paths: Sequence[HostPath],
    labels: Mapping[str, str],
    read_only_roots: Sequence[str] = (),
    writable: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    """(field, why) for each host path whose real path on the node leaves its root, or
    (``writable``: the fields of writable mounts) leads into one of ``read_only_roots``;
    ``image`` is the operator's probe image, which must be on the node."""
    if not paths:
        return []
    require_probe_image(client, image)
    roots = sorted({p.root for p in paths})
    where = {root: f"{PROBE_ROOT}/{i}" for i, root in enumerate(roots)}
    mounts = [{"Target": where[r], "Source": r, "Type": "bind", "ReadOnly": True} for r in roots]
    box = probe(client, image, mounts, labels, exact=True)
    try:
        out: list[tuple[str, str]] = []
        for p in paths:
            rel = posixpath.relpath(posixpath.normpath(p.source), p.root)
            real = resolve_in_root(client, str(box.id), where[p.root], rel)
            if real is None:
                out.append(
                    (
                        p.field,
                        f"{p.source!r} is not allowed: it leads outside its allowed root"
                        f" {p.root} through a symbolic link (resolved on the node)",
                    )
                )
                continue
            host = p.root.rstrip("/") + real[len(where[p.root]) :]
            held = [r for r in read_only_roots if _under(host, r) or _under(r, host)]
            if p.field in writable and held:
                out.append(
                    (
                        p.field,
                        f"{p.source!r} is not allowed writable: it leads to {host}, under"
                        f" the read-only root {held[0]} (resolved on the node)",
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
    node; ``client`` None: the node's engine cannot be reached, so none is mounted. The
    probe is made of ``settings.probe_image`` (the operator's), never of ``image``."""
    paths = bind_paths(settings)
    if not paths:
        return
    if client is None:
        raise ExecutorRefused(
            f"{paths[0].field}: {paths[0].source!r} cannot be checked on node {node}: no"
            " engine address for it (executor.node_hosts), so no host path is mounted there"
        )
    writable = frozenset(
        f"volumes[{i}].source"
        for i, m in enumerate(settings.mounts)
        if m.get("Type") == "bind" and not m.get("ReadOnly")
    )
    problems = host_path_problems(
        client, settings.probe_image, paths, labels, settings.read_only_roots, writable
    )
    if problems:
        raise ExecutorRefused("; ".join(f"{f}: {why}" for f, why in problems))


def own_targets(settings: ContainerSettings) -> list[str]:
    """Mount points to hand to the container's user: the checkpoint folder and the user's
    own named volumes mounted writable (never a shared volume, never a host path)."""
    return [CHECKPOINT_MOUNT, *(str(m["Target"]) for m in _own_volumes(settings))]


def _own_volumes(settings: ContainerSettings) -> list[Mapping[str, str | bool]]:
    return [
        m
        for m in settings.mounts
        if m.get("Type") == "volume"
        and str(m.get("Source", "")).startswith(USER_VOLUME_PREFIX)
        and not m.get("ReadOnly")  # nothing can be written there, nor is it to be
    ]


def own_sources(
    settings: ContainerSettings, checkpoint: Mapping[str, str]
) -> list[Mapping[str, object]]:
    """What to hand to the container's user, as mounts (Source, Type): the job's checkpoint
    (``checkpoint``: its volume, or its folder under ``checkpoint_host_dir``) and the
    user's own named volumes mounted writable; never a shared volume or a spec's host
    path."""
    own = [{"Source": str(m["Source"]), "Type": "volume"} for m in _own_volumes(settings)]
    return [dict(checkpoint), *own]


def own_volumes(
    client: DockerClient,
    image: str,
    sources: Sequence[Mapping[str, object]],
    user: str,
    labels: Mapping[str, str],
) -> None:
    """Give the top folder of each of ``sources`` to the numeric ``user``, through a probe
    of the operator's ``image`` (``executor.probe_image``) that mounts each at
    ``PROBE_ROOT/N``: the job's image (its links: ``/flowcon -> /srv/datasets``) is never on
    the path the engine extracts along, so nothing but these volumes changes owner."""
    if not sources:
        return
    if numeric_owner(user) is None:
        raise ExecutorError(f"user {user!r} is not a numeric uid:gid: no volume is handed to it")
    mounts = [
        {"Target": f"{PROBE_ROOT}/{i}", "Source": m["Source"], "Type": m.get("Type", "volume")}
        for i, m in enumerate(sources)
    ]
    box = probe(client, require_probe_image(client, image), mounts, labels, exact=True)
    try:
        own_mount_points(client, str(box.id), [str(m["Target"]) for m in mounts], user)
    finally:
        remove_probe(box)


# ---------------------------------------------------------------- the container's user


@dataclass(frozen=True)
class Account:
    """An image's ``/etc/passwd`` and ``/etc/group``: name -> (uid, gid), name -> gid."""

    users: Mapping[str, tuple[int, int]]
    groups: Mapping[str, int]
    uid_gid: Mapping[int, int]  # uid -> the primary gid of its first passwd entry


def _ids_of(line: str, fields: int) -> list[str] | None:
    parts = line.split(":")
    return parts if len(parts) >= fields and parts[0] else None


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and int(text) <= MAX_ID else None


def parse_account(passwd: str, group: str) -> Account:
    """The entries of a passwd and a group file; lines that do not parse are skipped (a
    name they would give is then not found, and refused)."""
    users: dict[str, tuple[int, int]] = {}
    uid_gid: dict[int, int] = {}
    for line in passwd.splitlines():
        parts = _ids_of(line, 4)
        if parts is None:
            continue
        uid, gid = _number(parts[2]), _number(parts[3])
        if uid is None or gid is None:
            continue
        users.setdefault(parts[0], (uid, gid))
        uid_gid.setdefault(uid, gid)
    groups: dict[str, int] = {}
    for line in group.splitlines():
        parts = _ids_of(line, 3)
        gid = _number(parts[2]) if parts is not None else None
        if parts is not None and gid is not None:
            groups.setdefault(parts[0], gid)
    return Account(users, groups, uid_gid)


def numeric_user(user: str, account: Account | None) -> tuple[int, int] | str:
    """(uid, gid) that ``user`` names in the image (``account``; None: not read, only a
    full ``uid:gid`` resolves), or why it does not resolve. A uid without a gid gets the
    primary gid of its passwd entry, or (no entry) the uid's own number."""
    uid, gid = split_user(user)
    if isinstance(uid, str):
        if account is None or uid not in account.users:
            return f"user {uid!r} is not in the image's /etc/passwd"
        number, primary = account.users[uid]
    else:
        number = uid
        primary = account.uid_gid.get(uid, uid) if account is not None else -1
    if gid is None:
        if primary < 0:
            return f"the gid of uid {number} is in the image's /etc/passwd, not read"
        return number, primary
    if isinstance(gid, str):
        if account is None or gid not in account.groups:
            return f"group {gid!r} is not in the image's /etc/group"
        return number, account.groups[gid]
    return number, gid


def _read_file(container: Container, path: str, hops: int = 0) -> str:
    """A text file of the created container's image ('' when absent), through the
    archive call; a link is followed inside the container, a few times at most."""
    import docker.errors

    try:
        stream, _stat = container.get_archive(path)
        data = b""
        for chunk in stream:
            data += chunk
            if len(data) > _MAX_ACCOUNT_FILE + 1024:
                raise ExecutorError(f"{path} of the image is larger than {_MAX_ACCOUNT_FILE}")
    except docker.errors.NotFound:
        return ""
    except engine_errors() as exc:
        raise ExecutorError(f"reading {path} of the image: {exc}") from exc
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(iter(tar.getmembers()), None)
        if member is not None and member.issym() and hops < 4:
            target = posixpath.join(posixpath.dirname(path), member.linkname)
            return _read_file(container, posixpath.normpath(target), hops + 1)
        if member is None or not member.isfile():
            return ""
        handle = tar.extractfile(member)
        return handle.read().decode("utf-8", "replace") if handle is not None else ""


def image_account(client: DockerClient, image: str, labels: Mapping[str, str]) -> Account:
    """The passwd and group files of ``image`` on the node, read from a created, never
    started container of it (nothing of the image runs)."""
    box = probe(client, image, [], labels, exact=True)
    try:
        return parse_account(_read_file(box, "/etc/passwd"), _read_file(box, "/etc/group"))
    finally:
        remove_probe(box)


def image_user(client: DockerClient, image: str) -> str:
    """The image's own ``USER`` (``Config.User``; empty: root)."""
    try:
        attrs = client.images.get(image).attrs or {}
    except engine_errors() as exc:
        raise ExecutorError(f"inspecting image {image} for its user: {exc}") from exc
    return str((attrs.get("Config") or {}).get("User") or "") or "0"


def resolve_user(
    client: DockerClient | None,
    node: str,
    image: str,
    settings: ContainerSettings,
    labels: Mapping[str, str],
) -> ContainerSettings:
    """``settings`` with the user the container runs as in numbers (``uid:gid``), checked
    against ``settings.user_rule``; ExecutorRefused naming ``user`` when it does not
    resolve in the image or is not allowed. ``client`` None: the node's engine cannot be
    reached, so only a full numeric ``uid:gid`` runs there."""
    rule: UserRule = settings.user_rule
    if rule.passes_anything:
        return settings
    from_image = settings.user is None
    if from_image:
        if client is None:
            raise ExecutorRefused(
                f"user: the image's own user cannot be checked on node {node}: no engine"
                " address for it (executor.node_hosts)"
            )
        user = image_user(client, image)
    else:
        user = str(settings.user)
    # a name (or a uid without a gid) is resolved; the name root is refused as it is
    if not rule.allow_root and "root" in split_user(user):
        ids: tuple[int, int] | str = (0, 0)
    else:
        ids = numeric_user(user, None)
        if isinstance(ids, str) and client is not None:
            ids = numeric_user(user, image_account(client, image, labels))
    shown = f"{user!r} (the image's USER)" if from_image else repr(user)
    if isinstance(ids, str):
        where = f"image {image}" if client is not None else f"node {node} (no engine address)"
        raise ExecutorRefused(
            f"user: {shown} cannot be resolved to a uid:gid in {where}: {ids}; name a"
            " uid:gid, e.g. 1000:1000"
        )
    why = rule.id_problem(*ids, exempt=not from_image and rule.exempt(user))
    if why is not None:
        raise ExecutorRefused(f"user: {shown} is uid:gid {ids[0]}:{ids[1]}, not allowed: {why}")
    return replace(settings, user=f"{ids[0]}:{ids[1]}")


# ---------------------------------------------------------------- before a submit


def _needs_image(settings: ContainerSettings) -> bool:
    """The user's numbers are only in the image (a name, a uid without a gid, or the
    image's own user), and the operator's rule needs them."""
    if settings.user_rule.passes_anything:
        return False
    if settings.user is None:
        return True
    uid, gid = split_user(settings.user)
    return not (isinstance(uid, int) and isinstance(gid, int))


def node_checks(
    client: DockerClient | None, image: str, settings: ContainerSettings, labels: Mapping[str, str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The node-side checks of a worker's ``settings`` run now on ``client``'s engine (the
    node, on the engine backend), before any job exists: (field, why) for each refusal, and
    the checks that could not run now and happen when it starts, on its node (``client``
    None: every one of them; an image not on the engine yet: the user)."""
    later: list[str] = []
    out: list[tuple[str, str]] = []
    paths = bind_paths(settings)
    if paths and client is None:
        later.append("volumes: the real path of each host path (its links), on its node")
    elif paths and client is not None:
        writable = frozenset(
            f"volumes[{i}].source"
            for i, m in enumerate(settings.mounts)
            if m.get("Type") == "bind" and not m.get("ReadOnly")
        )
        try:
            out += host_path_problems(
                client, settings.probe_image, paths, labels, settings.read_only_roots, writable
            )
        except ExecutorError as exc:  # e.g. the probe image is not on the engine
            later.append(f"volumes: the real path of each host path, on its node ({exc})")
    if not _needs_image(settings):
        return out, later
    if client is None:
        later.append("user: its uid:gid, resolved in the image on its node")
        return out, later
    try:
        resolve_user(client, "local", image, settings, labels)
    except ExecutorRefused as exc:
        out.append(("user", str(exc).removeprefix("user: ")))
    except ExecutorError as exc:  # e.g. the image is not on the engine yet
        later.append(f"user: its uid:gid, resolved in the image on its node ({exc})")
    return out, later
