"""What a job's containers may reach, as the operator's ``executor`` section allows (pure).

A job spec comes from a user; the containers it becomes run on shared nodes. The operator
decides what they may touch, and the executor enforces it on both backends:

* **host paths**: a volume whose source is a host path must lie under one of
  ``executor.bind_roots`` (default none: named volumes only). ``/``, ``..`` and the Docker
  socket (or a folder that holds it) stay refused whatever the roots;
* **named volumes**: a named user's are their own: ``cache`` in alice's spec is the
  engine's ``flowcon-user-alice.cache``, which no other user's spec can name, unless the
  operator lists ``cache`` in ``executor.shared_volumes``;
* **images**: the image must match one of ``executor.images`` (glob patterns such as
  ``registry.example.com/ml/*``; default ``*``: any);
* **user**: uid 0 and gid 0 (``root``, in any spelling: ids are numbers) are refused unless
  ``executor.allow_root``; a named user's ``uids``/``gids`` (``allocator.users``) and the
  operator's ``executor.uid_range``/``gid_range`` bound the ids a spec may name; a spec
  that names no user runs as ``executor.default_user`` (default ``65534:65534``, nobody;
  null: the image's own user). A user name, a uid without a gid and the image's own user
  are resolved to numbers in the image on the node before the container is made, and
  checked the same way (flowcon/executor/node_fs.py, ``UserRule``);
* **CPU and memory**: a spec that gives no limit gets the operator's
  ``executor.default_cpus_per_gpu`` and ``default_memory_per_gpu`` (times its GPUs);
* **the container itself** (``hardening``): every capability dropped except
  ``executor.cap_add`` (a few of Docker's defaults), ``no-new-privileges``, Docker's
  default seccomp profile (never ``unconfined``), a pids limit (``executor.pids_limit``),
  private IPC and PID namespaces.

``problems`` lists what a spec asks beyond that, each as (field, message) naming the rule;
the allocator refuses such a submit (and its dry run) with 400, and the executor refuses to
create such a container (a spec admitted under an older config). See docs/security.md.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from flowcon.contract import SHARED_PRINCIPALS, USER_VOLUME_PREFIX
from flowcon.jobspec.keys import (
    DOCKER_SOCKETS,
    IdRanges,
    in_ranges,
    parse_id_ranges,
    parse_size,
    show_ranges,
    split_user,
)
from flowcon.jobspec.spec import JobSpec

# Docker's default capabilities: the only ones an operator may give back (``cap_add``);
# SYS_ADMIN, NET_ADMIN, SYS_PTRACE and the like are never granted to a job.
DEFAULT_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "NET_RAW",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
DEFAULT_PIDS_LIMIT = 4096  # processes and threads per container (torch loaders use many)
# The user a job runs as when its spec names none: nobody, not the image's (root in most
# images). The executor hands the job's fresh volumes to it (flowcon/executor/node_fs.py).
DEFAULT_USER = "65534:65534"
# The image the executor makes its probe containers from (never started): the operator's,
# not the job's, whose own links would steer the engine's path resolution. A 2 MB static
# busybox built locally by images/testbox/build.sh.
DEFAULT_PROBE_IMAGE = "flowcon/testbox:latest"


@dataclass(frozen=True)
class UserRule:
    """Which numeric uid:gid a job's container may run as: not 0 (unless ``allow_root``),
    and inside every one of ``uids`` (``gids``): the executor's range and the owner's own.
    The operator's ``default_user`` is outside the ranges' reach (it is the operator's)."""

    allow_root: bool = False
    uids: tuple[IdRanges, ...] = ()
    gids: tuple[IdRanges, ...] = ()
    default_user: str | None = DEFAULT_USER

    @property
    def passes_anything(self) -> bool:
        """Nothing to check: root allowed, no range (the engine runs the user as given)."""
        return self.allow_root and not self.uids and not self.gids

    def id_problem(self, uid: int | None, gid: int | None, exempt: bool = False) -> str | None:
        """Why ``uid``:``gid`` (None: not known yet) may not run; ``exempt``: the
        operator's ``default_user``, outside the ranges' reach."""
        for kind, number, ranges in (("uid", uid, self.uids), ("gid", gid, self.gids)):
            if number is None:
                continue
            if number == 0 and not self.allow_root:
                return (
                    f"{kind} 0 is refused (executor.allow_root is false); run as a non-root uid:gid"
                )
            for allowed in () if exempt else ranges:
                if not in_ranges(number, allowed):
                    return (
                        f"{kind} {number} is outside the allowed {kind}s ({show_ranges(allowed)})"
                    )
        return None

    def exempt(self, user: str) -> bool:
        """``user`` is the operator's numeric ``default_user``, outside the ranges' reach;
        a name is not (the job's image says which uid it is)."""
        uid, gid = split_user(user)
        numeric = isinstance(uid, int) and (gid is None or isinstance(gid, int))
        return numeric and user == self.default_user

    def spec_problem(self, user: str) -> str | None:
        """What can be told of ``user`` without the image: its numbers, and the name
        ``root`` (any other name's number is resolved in the image on the node)."""
        uid, gid = split_user(user)
        if not self.allow_root and "root" in (uid, gid):
            why = self.id_problem(0, None)
        else:
            why = self.id_problem(
                uid if isinstance(uid, int) else None,
                gid if isinstance(gid, int) else None,
                exempt=self.exempt(user),
            )
        return None if why is None else f"{user!r} is not allowed: {why}"


def capability_problem(name: str) -> str | None:
    """Why ``name`` cannot be in ``executor.cap_add`` (None: it can)."""
    bare = name.upper().removeprefix("CAP_")
    if bare not in DEFAULT_CAPABILITIES:
        allowed = ", ".join(sorted(DEFAULT_CAPABILITIES))
        return f"{name!r} is not one of Docker's default capabilities ({allowed})"
    return None


@dataclass(frozen=True)
class Reach:
    """The operator's limits on what a job's containers reach."""

    bind_roots: tuple[str, ...] = ()
    images: tuple[str, ...] = ("*",)
    cap_add: tuple[str, ...] = ()
    pids_limit: int = DEFAULT_PIDS_LIMIT
    shared_volumes: tuple[str, ...] = ()  # named volumes every user's jobs mount by name
    # a worker's CPU and memory per GPU when its spec gives neither: no job starves the
    # node (or the agent on it); None: no limit
    default_cpus_per_gpu: float | None = None
    default_memory_per_gpu: int | None = None  # bytes
    # the user a container runs as when its spec names none (None: the image's own)
    default_user: str | None = DEFAULT_USER
    allow_root: bool = False  # a spec may name uid 0 / root
    # the executor's bounds on any uid / gid a job runs as (None: any but 0)
    uid_range: IdRanges | None = None
    gid_range: IdRanges | None = None
    # a named user's own bounds: name -> (uids, gids), from allocator.users
    user_ids: Mapping[str, tuple[IdRanges | None, IdRanges | None]] = field(default_factory=dict)
    # roots whose mounts are read-only whatever the spec says
    read_only_roots: tuple[str, ...] = ()
    probe_image: str = DEFAULT_PROBE_IMAGE

    @classmethod
    def from_config(cls, section: Mapping[str, object] | None) -> Reach:
        """From an ``executor`` config section (already checked by its schema)."""
        cfg = dict(section or {})
        roots = cfg.get("bind_roots") or ()
        images = cfg.get("images")
        caps = cfg.get("cap_add") or ()
        pids = cfg.get("pids_limit")
        shared = cfg.get("shared_volumes") or ()
        cpus, memory = cfg.get("default_cpus_per_gpu"), cfg.get("default_memory_per_gpu")
        user = cfg.get("default_user", DEFAULT_USER)
        entries = [_root_entry(r) for r in (roots if isinstance(roots, list | tuple) else [roots])]
        return cls(
            bind_roots=tuple(path for path, _ in entries),
            read_only_roots=tuple(path for path, ro in entries if ro),
            uid_range=_ranges(cfg.get("uid_range"), "executor.uid_range"),
            gid_range=_ranges(cfg.get("gid_range"), "executor.gid_range"),
            user_ids=_user_ids(cfg.get(USER_IDS_KEY)),
            probe_image=str(cfg.get("probe_image") or DEFAULT_PROBE_IMAGE),
            images=tuple(_strings(images)) if images is not None else ("*",),
            cap_add=tuple(str(c).upper().removeprefix("CAP_") for c in _strings(caps)),
            pids_limit=int(pids) if isinstance(pids, int) else DEFAULT_PIDS_LIMIT,
            shared_volumes=tuple(_strings(shared)),
            default_cpus_per_gpu=float(cpus) if isinstance(cpus, int | float) else None,
            default_memory_per_gpu=(
                parse_size(memory, "executor.default_memory_per_gpu") if memory else None
            ),
            default_user=str(user) if user is not None else None,
            allow_root=cfg.get("allow_root") is True,
        )

    def volume_source(self, owner: str | None, name: str) -> str:
        """The engine's volume behind a spec's named volume ``name``: a named user's own
        (``flowcon-user-OWNER.NAME``: another user's job cannot name it), unless the
        operator shares ``name``; the name itself for the operator, the shared user token
        and records from before owners."""
        if owner is None or owner in SHARED_PRINCIPALS or name in self.shared_volumes:
            return name
        return f"{USER_VOLUME_PREFIX}{owner}.{name}"

    def user_rule(self, owner: str | None) -> UserRule:
        """The uid:gid rule of ``owner``'s containers (the executor's ranges and theirs)."""
        own_uids, own_gids = self.user_ids.get(owner or "", (None, None))
        return UserRule(
            allow_root=self.allow_root,
            uids=tuple(r for r in (self.uid_range, own_uids) if r is not None),
            gids=tuple(r for r in (self.gid_range, own_gids) if r is not None),
            default_user=self.default_user,
        )

    def read_only_source(self, source: str) -> bool:
        """A mount of host path ``source`` is read-only whatever the spec says: it is
        under (or holds) a root the operator made read-only."""
        norm = _norm(source)
        return any(_under(norm, r) or _under(r, norm) for r in self.read_only_roots)

    def problems(self, spec: JobSpec) -> list[tuple[str, str]]:
        """What ``spec`` asks beyond these limits: (field, message) each, in field order."""
        out: list[tuple[str, str]] = []
        why = self.image_problem(spec.image)
        if why:
            out.append(("image", why))
        if spec.user is not None:
            why = self.user_rule(spec.owner).spec_problem(spec.user)
            if why:
                out.append(("user", why))
        for i, vol in enumerate(spec.volumes):
            if vol.kind != "bind":
                continue
            why = self.source_problem(vol.source)
            if why:
                out.append((f"volumes[{i}].source", why))
        return out

    def image_problem(self, image: str) -> str | None:
        if any(fnmatchcase(image, p) for p in self.images):
            return None
        return (
            f"{image!r} is not allowed: images must match executor.images"
            f" ({', '.join(self.images) or 'none'})"
        )

    def source_problem(self, source: str) -> str | None:
        """Why the host path ``source`` may not be mounted (None: it may), as written; its
        real path is resolved on the worker's node before its container is made
        (flowcon/executor/node_fs.py)."""
        norm = _norm(source)
        if norm == "/" or ".." in source.split("/"):
            return f"{source!r} is not allowed: the whole host, or a path with '..'"
        if any(_under(sock, norm) for sock in DOCKER_SOCKETS):
            return f"{source!r} is not allowed: it is or holds the Docker socket (root on the host)"
        if not self.bind_roots:
            return (
                f"{source!r} is not allowed: host paths must be under an allowed root"
                " (executor.bind_roots is empty: named volumes only)"
            )
        if not any(_under(norm, root) for root in self.bind_roots):
            return (
                f"{source!r} is not allowed: host paths must be under an allowed root"
                f" (executor.bind_roots: {', '.join(self.bind_roots)})"
            )
        return None


def root_of(source: str, roots: Iterable[str]) -> str | None:
    """The allowed root ``source`` lies under (the deepest one), None when under none."""
    norm = _norm(source)
    under = [r for r in roots if _under(norm, _norm(r))]
    return max(under, key=len) if under else None


def is_root(user: str) -> bool:
    """``user`` (uid[:gid] or name[:group]) names uid 0 or gid 0, in any spelling of the
    number (``00``) or by the name ``root``."""
    return any(part in (0, "root") for part in split_user(user))


# The key of the executor section (as the allocator's config hands it over) that carries
# the named users' uid/gid ranges (allocator.users[].uids/gids): name -> {uids, gids}.
USER_IDS_KEY = "user_ids"


def _ranges(value: object, field_name: str) -> IdRanges | None:
    return None if value is None else parse_id_ranges(value, field_name)


def _user_ids(value: object) -> dict[str, tuple[IdRanges | None, IdRanges | None]]:
    if not isinstance(value, Mapping):
        return {}
    out = {}
    for name, ids in value.items():
        ids = ids if isinstance(ids, Mapping) else {}
        out[str(name)] = (
            _ranges(ids.get("uids"), f"allocator.users[{name}].uids"),
            _ranges(ids.get("gids"), f"allocator.users[{name}].gids"),
        )
    return out


def _root_entry(value: object) -> tuple[str, bool]:
    """(path, read only) of a ``bind_roots`` entry: a path, or ``{path, read_only}``."""
    if isinstance(value, Mapping):
        return _norm(str(value.get("path", ""))), value.get("read_only") is True
    return _norm(str(value)), False


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.strip("/")) if path.strip("/") else "/"


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (both normalised, absolute)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
