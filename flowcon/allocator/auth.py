"""Who may call what on the allocator's API: roles, their tokens, and the route table.

Roles:

* ``read``  -- every GET under /api (list, status, one job, its logs, history);
* ``user``  -- submit (and its dry run) and cancel jobs; a user token may also read;
* ``agent`` -- POST measurement reports, nothing else;
* ``operator`` -- the legacy single ``token``: valid for every role.

Principals: each token also names who calls (``Principal``): the operator, a named user
(``allocator.users``, each with a token of their own), ``user`` for the shared legacy
``user_token`` (one principal for everyone who holds it: not multi-tenant), ``reader`` and
``agent``. A job belongs to the principal that submitted it; cancel, logs, the detail and
a dry run of an existing name act only on the caller's own jobs unless the caller is the
operator (docs/security.md).

Public, no token: /healthz, /metrics, /ui and everything under /ui/ and /static/.
A call without a known token is 401; a known token without the role is 403. Tokens are
compared with ``hmac.compare_digest`` against every configured token (no early exit on
the first match, so the time taken does not tell which one matched).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Literal

from flowcon.contract import SHARED_PRINCIPALS

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


# the principal each role token names (a named user's token names that user)
PRINCIPAL_OF_KIND = {"operator": "operator", "user": "user", "read": "reader", "agent": "agent"}
RESERVED_NAMES = frozenset(SHARED_PRINCIPALS)


@dataclass(frozen=True)
class Principal:
    """Who calls: a name (a job's ``owner``) and the kinds of token presented."""

    name: str
    kinds: frozenset[str]

    @property
    def operator(self) -> bool:
        return "operator" in self.kinds

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(r for k in self.kinds for r in GRANTS[k])


@dataclass(frozen=True)
class Credentials:
    """The configured tokens; None: that role has no token of its own. ``users``: the
    named users' (name, token) pairs."""

    operator: str | None = None
    user: str | None = None
    read: str | None = None
    agent: str | None = None
    users: tuple[tuple[str, str], ...] = ()

    @property
    def multi_tenant(self) -> bool:
        """Named users are configured: readers see no job's detail or logs."""
        return bool(self.users)

    def _presented(self, header: str | None) -> bytes | None:
        got = (header or "").strip()
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        return value.strip().encode()

    def kinds(self, header: str | None) -> set[str]:
        """The kinds of token (operator, user, read, agent) an Authorization header holds
        (a named user's token is of kind user)."""
        who = self.principal(header)
        return set(who.kinds) if who is not None else set()

    def principal(self, header: str | None) -> Principal | None:
        """Who an Authorization header names; None: no known token."""
        presented = self._presented(header)
        if presented is None:
            return None
        found: set[str] = set()
        named: str | None = None
        for kind in ("operator", "user", "read", "agent"):
            expected = getattr(self, kind)
            # compare even for unset roles (against a dummy) so timing is uniform
            want = expected.encode() if expected else b"\x00unset\x00"
            if hmac.compare_digest(presented, want) and expected:
                found.add(kind)
        for name, token in self.users:  # every one compared: no early exit
            if hmac.compare_digest(presented, token.encode()) and token:
                found.add("user")
                named = named or name
        if not found:
            return None
        if "operator" in found:
            name = "operator"
        elif named is not None:
            name = named
        else:
            name = next(PRINCIPAL_OF_KIND[k] for k in ("user", "read", "agent") if k in found)
        return Principal(name, frozenset(found))

    def check(self, header: str | None, role: Role) -> int:
        """200 when allowed, 401 when no known token was given, 403 when the token lacks
        the role."""
        return self.allows(self.principal(header), role)

    @staticmethod
    def allows(who: Principal | None, role: Role) -> int:
        """``check`` for a caller already named (``principal``)."""
        if role == "public":
            return 200
        if who is None:
            return 401
        return 200 if role in who.roles else 403
