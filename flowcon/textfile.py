"""Reading the text files FlowCon is given (configs, job specs, scenarios, CSV tables), so a
malformed one is refused with a message naming the file and line, never a traceback.

``read_text``: UTF-8 text, or ``NotText`` naming the line of the first bad byte (a
``UnicodeDecodeError`` would name only a byte offset). ``safe_load_yaml``: ``yaml.safe_load``
whose ``RecursionError`` on a document nested past the parser's recursion limit (a few
hundred ``[``) becomes a ``yaml.YAMLError``, which every loader already reports.
``read_secret``: a token file's text, or ``SecretError`` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class NotText(ValueError):
    """The file is not UTF-8 text; the message names the line."""


def read_text(path: str | Path) -> str:
    """The file's UTF-8 text; OSError as ``Path.read_bytes`` raises it."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise NotText(f"line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None


class SecretError(ValueError):
    """A secret file (a token file, a Swarm secret) cannot be read; the message names it."""


def read_secret(path: str | Path) -> str | None:
    """A secret file's text without surrounding whitespace; None when it is empty."""
    try:
        return read_text(path).strip() or None
    except NotText as exc:
        raise SecretError(f"{path}, {exc}") from None
    except OSError as exc:
        raise SecretError(f"cannot read {path}: {exc.strerror or exc}") from None


def safe_load_yaml(text: str) -> Any:
    """``yaml.safe_load``; a document nested too deeply is a ``yaml.YAMLError``."""
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply (hundreds of levels of [ or {)") from None
