"""Which Docker Engine API version to speak: negotiated, never pinned.

The engine says what it speaks at ``GET /version`` (an unversioned path every engine
answers): ``ApiVersion`` (its newest) and ``MinAPIVersion`` (its oldest; Engine 25+
refuses anything below 1.24, Engine 29 anything below 1.44). FlowCon speaks every version
from ``MIN_API`` (Docker 20.10, the oldest engine it is tested on) to ``MAX_API`` (the
newest it is tested on, Debian trixie's Docker 26.1). The version used is the newest
both sides speak; an engine whose range does not meet ours is refused with a message
that says both ranges.

Pure: no I/O. ``DockerEngine`` asks ``/version`` and calls ``negotiate``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

MIN_API: Final = "1.41"
MAX_API: Final = "1.45"

# The engine's refusal of a version it no longer (or does not yet) speak, e.g.
#   client version 1.41 is too old. Minimum supported API version is 1.44, ...
#   client version 1.45 is too new. Maximum supported API version is 1.41
_WRONG_VERSION = re.compile(r"client version \S+ is too (old|new)", re.IGNORECASE)


class UnsupportedEngine(ValueError):
    """The engine's API range and ours do not meet (or it did not say its range)."""


def parse(version: str) -> tuple[int, int]:
    """``"1.45"`` -> ``(1, 45)``; ValueError for anything else."""
    major, _, minor = version.strip().partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"not an API version: {version!r}")
    return int(major), int(minor)


@dataclass(frozen=True)
class EngineVersion:
    """What ``/version`` said, and the API version negotiated from it."""

    api: str  # the version FlowCon speaks to this engine
    engine_api: str  # the engine's newest
    engine_min_api: str | None  # the engine's oldest (None: an engine too old to say)
    version: str  # the engine's release, e.g. 26.1.5+dfsg1

    def describe(self) -> str:
        return f"Docker {self.version}, API {self.api}"


def negotiate(answer: Any, where: str) -> EngineVersion:
    """The version to speak, from the engine's ``/version`` answer; ``UnsupportedEngine``
    when its range and ``MIN_API``..``MAX_API`` do not meet. ``where`` names the engine."""
    if not isinstance(answer, dict) or not answer.get("ApiVersion"):
        raise UnsupportedEngine(f"the Docker engine at {where} did not say its API version")
    engine_api = str(answer["ApiVersion"])
    engine_min = str(answer["MinAPIVersion"]) if answer.get("MinAPIVersion") else None
    release = str(answer.get("Version") or "?")
    try:
        newest = parse(engine_api)
        oldest = parse(engine_min) if engine_min else None
    except ValueError as exc:
        raise UnsupportedEngine(f"the Docker engine at {where}: {exc}") from None
    ours = f"FlowCon speaks API {MIN_API} to {MAX_API}"
    if newest < parse(MIN_API):
        raise UnsupportedEngine(
            f"the Docker engine at {where} (Docker {release}) speaks API up to {engine_api}; "
            f"{ours} (Docker 20.10 or newer)"
        )
    if oldest is not None and oldest > parse(MAX_API):
        raise UnsupportedEngine(
            f"the Docker engine at {where} (Docker {release}) speaks API {engine_min} or "
            f"newer only; {ours}"
        )
    api = engine_api if newest < parse(MAX_API) else MAX_API
    return EngineVersion(api, engine_api, engine_min, release)


def is_wrong_version(message: str) -> bool:
    """The engine refused the version we spoke ("client version X is too old/new")."""
    return _WRONG_VERSION.search(message) is not None
