"""Logging for the ``flowcon`` commands: FlowCon's own lines at the chosen level, the
libraries' (APScheduler's "Running job ...", urllib3, the Docker SDK) at WARNING unless
the level is DEBUG.

The level comes from ``FLOWCON_LOG_LEVEL`` (any case: ``debug``, ``Debug``, ``DEBUG``)
or else the command's ``-v`` count; a value that is not a level is refused with a message
naming the variable and the allowed values.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Final

ENV_LOG_LEVEL: Final = "FLOWCON_LOG_LEVEL"
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Their INFO lines are about their own machinery (APScheduler logs every job it runs).
LIBRARIES: Final = ("apscheduler", "urllib3", "docker", "requests")
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


class LogLevelError(ValueError):
    """FLOWCON_LOG_LEVEL holds something that is not a log level."""


def level_from_env(default: int, environ: dict[str, str] | None = None) -> int:
    """The level ``FLOWCON_LOG_LEVEL`` names, ``default`` when it is unset or empty."""
    raw = (os.environ if environ is None else environ).get(ENV_LOG_LEVEL, "")
    name = raw.strip().upper()
    if not name:
        return default
    if name not in LEVELS:
        allowed = ", ".join(level.lower() for level in LEVELS)
        raise LogLevelError(
            f"{ENV_LOG_LEVEL}={raw!r} is not a log level: use one of {allowed} (any case)"
        )
    return int(getattr(logging, name))


def setup_logging(default: int = logging.INFO) -> int:
    """Configure the root logger (once) and quiet the libraries; returns the level."""
    level = level_from_env(default)
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stderr)
    logging.getLogger().setLevel(level)
    libraries = logging.NOTSET if level <= logging.DEBUG else logging.WARNING
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(libraries)
    return level
