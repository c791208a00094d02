"""Which hardening a Swarm node's engine can apply to a job, pure.

Swarm services take ``no-new-privileges`` (``ContainerSpec.Privileges.NoNewPrivileges``)
only from Engine API 1.46: on an older engine a setuid binary of a pulled image reaches
uid 0 even under the default user. Every capability is dropped there too, but uid 0 still
owns whatever root owns. A node running its engine with user namespaces (``docker info``
SecurityOptions ``name=userns``) maps that uid 0 to an unprivileged host uid, which
contains it. So jobs go to a node lacking the option only when it runs with user
namespaces or the operator allows it (``executor.allow_weak_hardening``); the gap is
reported per node either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_NEW_PRIVILEGES_API = (1, 46)
# Engine releases and the API version each speaks (docs.docker.com, "API version matrix").
_ENGINE_API = {
    (19, 3): (1, 40),
    (20, 10): (1, 41),
    (23, 0): (1, 42),
    (24, 0): (1, 43),
    (25, 0): (1, 44),
    (26, 0): (1, 45),
    (26, 1): (1, 45),
    (27, 0): (1, 46),
}


def parse_api(version: str | None) -> tuple[int, int] | None:
    """``"1.41"`` as (1, 41); None when absent or not a version."""
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def api_of_engine(engine_version: str | None) -> tuple[int, int] | None:
    """The API version of an engine release (``"20.10.24+dfsg1"``: (1, 41)) from a swarm
    node's description; a release after the table's last speaks at least its API."""
    m = re.match(r"^\s*(\d+)\.(\d+)", engine_version or "")
    if not m:
        return None
    release = (int(m.group(1)), int(m.group(2)))
    known = [api for rel, api in sorted(_ENGINE_API.items()) if rel <= release]
    return known[-1] if known else None


@dataclass(frozen=True)
class NodeHardening:
    """What a node's engine applies to a job, and whether jobs may go there."""

    node: str
    api: tuple[int, int] | None  # None: unknown (treated as too old)
    userns: bool
    missing: tuple[str, ...]  # hardening the node cannot apply
    allowed: bool

    @property
    def no_new_privileges(self) -> bool:
        return "no-new-privileges" not in self.missing

    @property
    def state(self) -> str:
        """The node view's word: ``full``, ``userns`` (a gap contained by user
        namespaces), ``weak-allowed`` (the operator allows the gap) or ``weak-refused``
        (no job is placed there)."""
        if not self.missing:
            return "full"
        if self.userns:
            return "userns"
        return "weak-allowed" if self.allowed else "weak-refused"

    def describe(self) -> str:
        """One line for the node view, the log and a refusal."""
        api = "unknown" if self.api is None else f"{self.api[0]}.{self.api[1]}"
        if not self.missing:
            return f"node {self.node}: Engine API {api}: every hardening applies"
        why = (
            "allowed (executor.allow_weak_hardening)"
            if self.allowed and not self.userns
            else "contained by user namespaces"
            if self.userns
            else "jobs are not placed there (set executor.allow_weak_hardening: true, or run"
            " the node's engine with user namespaces)"
        )
        return (
            f"node {self.node}: Engine API {api} cannot apply {', '.join(self.missing)}"
            f" (needs {NO_NEW_PRIVILEGES_API[0]}.{NO_NEW_PRIVILEGES_API[1]}): {why}"
        )


def assess(node: str, api: tuple[int, int] | None, userns: bool, allow_weak: bool) -> NodeHardening:
    """The rule: a node below API 1.46 lacks no-new-privileges; jobs go there only with
    user namespaces on it or the operator's allowance."""
    missing = () if api is not None and api >= NO_NEW_PRIVILEGES_API else ("no-new-privileges",)
    return NodeHardening(node, api, userns, missing, not missing or userns or allow_weak)


def userns_of(security_options: object) -> bool:
    """Whether ``docker info``'s SecurityOptions list ``name=userns``."""
    if not isinstance(security_options, list):
        return False
    return any("name=userns" in str(opt).split(",") for opt in security_options)
