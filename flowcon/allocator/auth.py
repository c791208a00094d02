"""Who may call what on the allocator's API: roles, their tokens, and the route table.

Roles:

* ``read``  -- every GET under /api (list, status, one job, its logs, history);
* ``user``  -- submit (and its dry run) and cancel jobs; a user token may also read;
* ``agent`` -- POST measurement reports, nothing else;
* ``operator`` -- the legacy single ``token``: valid for every role.

Public, no token: /healthz, /metrics, /ui and everything under /ui/ and /static/.
A call without a known token is 401; a known token without the role is 403. Tokens are
compared with ``hmac.compare_digest`` against every configured token (no early exit on
the first match, so the time taken does not tell which one matched).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Literal

Role = Literal["public", "read", "user", "agent"]

# what each kind of token may do
GRANTS: dict[str, frozenset[str]] = {
    "operator": frozenset({"read", "user", "agent"}),
    "user": frozenset({"read", "user"}),
    "read": frozenset({"read"}),
    "agent": frozenset({"agent"}),
}

PUBLIC_PATHS = frozenset({"/healthz", "/metrics", "/ui"})
PUBLIC_PREFIXES = ("/ui/", "/static/")


def required_role(method: str, path: str) -> Role:
    """The role a request needs. ``path`` is the URL path without query, trailing '/'
    removed. Unknown routes outside /api are public (they answer 404)."""
    method = method.upper()
    if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
        return "public"
    if not (path == "/api" or path.startswith("/api/")):
        return "public"
    if method in ("GET", "HEAD"):
        return "read"
    if path == "/api/v1/measurements":
        return "agent"
    return "user"  # submit, its dry run (?dry_run=true), cancel, and any other change


@dataclass(frozen=True)
class Credentials:
    """The configured tokens; None: that role has no token of its own."""

    operator: str | None = None
    user: str | None = None
    read: str | None = None
    agent: str | None = None

    def kinds(self, header: str | None) -> set[str]:
        """The kinds of token (operator, user, read, agent) an Authorization header holds."""
        got = (header or "").strip()
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return set()
        presented = value.strip().encode()
        found: set[str] = set()
        for kind in ("operator", "user", "read", "agent"):
            expected = getattr(self, kind)
            # compare even for unset roles (against a dummy) so timing is uniform
            want = expected.encode() if expected else b"\x00unset\x00"
            if hmac.compare_digest(presented, want) and expected:
                found.add(kind)
        return found

    def check(self, header: str | None, role: Role) -> int:
        """200 when allowed, 401 when no known token was given, 403 when the token lacks
        the role."""
        if role == "public":
            return 200
        kinds = self.kinds(header)
        if not kinds:
            return 401
        if any(role in GRANTS[k] for k in kinds):
            return 200
        return 403
