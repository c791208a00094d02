"""Whether this node's NVIDIA container toolkit lets an unprivileged container pick its GPUs.

The toolkit exposes the GPUs a container's ``NVIDIA_VISIBLE_DEVICES`` names. With its
default ``accept-nvidia-visible-devices-envvar-when-unprivileged = true`` (in
``/etc/nvidia-container-runtime/config.toml``) any container may name them, which is why
the executor sets the variable on every job container (flowcon/executor/visibility.py);
set to ``false``, with ``accept-nvidia-visible-devices-as-volume-mounts = true``, the
toolkit reads the GPUs only from the device request the engine turns into volume mounts,
and a container's environment can name none (docs/security.md). The agent reads the file
once at start and sends what it says with each report; ``flowcon nodes`` shows it.

``parse_toolkit`` is pure (the file's text, or None when it is absent); ``read_toolkit``
reads the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from flowcon.contract import TOOLKIT_STATES

CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"

# What a node reports (``MeasurementReport.toolkit``; flowcon.contract.TOOLKIT_STATES):
# any container's NVIDIA_VISIBLE_DEVICES is honoured; only device requests (volume mounts)
# pick GPUs; no config file (no NVIDIA container toolkit on this node); the file is there
# but says nothing usable (unreadable, bad TOML)
ACCEPTS, REFUSES, NO_TOOLKIT, UNKNOWN = TOOLKIT_STATES
STATES = TOOLKIT_STATES


@dataclass(frozen=True)
class Toolkit:
    state: str  # one of STATES
    detail: str = ""  # why, for UNKNOWN; the volume-mount setting otherwise


def parse_toolkit(text: str | None, where: str = CONFIG_PATH) -> Toolkit:
    """What the toolkit's config ``text`` says (None: the file is absent). The envvar key
    defaults to true when absent, as the toolkit reads it."""
    if text is None:
        return Toolkit(NO_TOOLKIT, f"no {where}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Toolkit(UNKNOWN, f"{where}: not TOML: {exc}")
    envvar = data.get(ENVVAR_KEY, True)
    mounts = data.get(MOUNTS_KEY, False)
    if not isinstance(envvar, bool):
        return Toolkit(UNKNOWN, f"{where}: {ENVVAR_KEY} = {envvar!r} is not true or false")
    if not isinstance(mounts, bool):
        return Toolkit(UNKNOWN, f"{where}: {MOUNTS_KEY} = {mounts!r} is not true or false")
    detail = f"{MOUNTS_KEY} = {str(mounts).lower()}"
    return Toolkit(ACCEPTS if envvar else REFUSES, detail)


def read_toolkit(path: str = CONFIG_PATH) -> Toolkit:
    """``parse_toolkit`` of the file at ``path``; never raises."""
    try:
        with open(path, encoding="utf-8") as f:
            text: str | None = f.read(1 << 20)
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        return Toolkit(UNKNOWN, f"{path}: {exc}")
    return parse_toolkit(text, path)
