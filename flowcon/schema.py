"""One schema library for every config FlowCon reads: pydantic v2 models, strict.

``Strict`` is the base of the agent config, the allocator config (with its executor
section) and the job spec: unknown keys are refused (a typo must not silently drop a
setting) and types are strict (``alpha: true``, ``dry_run: "no"``, ``metrics_addr: 0`` and
``docker_host: 5`` are refused, not coerced). Each field says what is allowed in its
``description``; ``explain`` turns pydantic's ``ValidationError`` into one line per error:

    flowcon.yaml: alpha: 5 is not allowed: a fraction in (0, 1)

``env_overrides`` reads ``FLOWCON_<KEY>`` / ``FLOWCON_<SECTION>_<KEY>`` (and ``*_FILE``
variants for secrets) for container deployments; a bad value names its variable.
"""

from __future__ import annotations

import json
import os
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from flowcon.textfile import safe_load_yaml

ENV_PREFIX = "FLOWCON_"

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base of every config model: no unknown keys, no type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=False)


@dataclass(frozen=True)
class Problem:
    """One validation error: where it came from, the dotted field, the value, what is allowed."""

    source: str
    field: str
    value: Any
    allowed: str
    given: bool = True  # False: the key is missing

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        if not self.given:
            return f"{where}{self.field}: {self.allowed}"
        return f"{where}{self.field}: {show(self.value)} is not allowed: {self.allowed}"


class SchemaError(ValueError):
    """Validation failed; ``problems`` holds each error, ``str()`` one line per error."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def show(value: Any) -> str:
    """A value as the user wrote it (YAML/JSON-like: "no" quoted, true, 5), kept short."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ------------------------------------------------------------------ error messages


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``annotation`` (``Sub``, ``Sub | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


_TYPE_TAGS = re.compile(
    r"^(str|int|float|bool|none|list\[.*\]|dict\[.*\]|function-.*|constrained-.*|"
    r"literal\[.*\]|json-or-python\[.*\]|tagged-union\[.*\]|is-instance\[.*\])$"
)


def _is_type_tag(part: str) -> bool:
    return bool(_TYPE_TAGS.match(part))


def _dotted(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, str]:
    """(dotted field path, description of the innermost named field)."""
    names: list[str] = []
    allowed = ""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            names.append(f"[{part}]")
            continue
        if current is not None and part in current.model_fields:
            info = current.model_fields[part]
            names.append(part)
            allowed = info.description or ""
            current = _model_of(info.annotation)
            continue
        if _is_type_tag(part):
            continue
        names.append(part)
        current = None
    return ".".join(names).replace(".[", "["), allowed


def _allowed_text(error: Mapping[str, Any], described: str, known: Iterable[str]) -> str:
    """What is allowed, from the field's description, else from pydantic's message."""
    kind = str(error.get("type", ""))
    if kind == "extra_forbidden":
        return f"unknown key (known: {', '.join(sorted(known))})"
    if kind == "missing":
        return "required"
    msg = str(error.get("msg", ""))
    if kind in ("value_error", "assertion_error"):
        # our own validators: their message says what is allowed
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return described or msg[:1].lower() + msg[1:]


def _known_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the (sub)model at ``loc[:-1]`` knows."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None or not isinstance(part, str) or part not in current.model_fields:
            break
        current = _model_of(current.model_fields[part].annotation)
    return list(current.model_fields) if current is not None else []


def explain(
    exc: ValidationError,
    model: type[BaseModel],
    source: str = "",
    sources: Mapping[str, str] | None = None,
) -> SchemaError:
    """``exc`` as a SchemaError: one Problem per field (the first error of a field wins).

    ``source`` names the file (or "job spec"); ``sources`` maps a dotted field to where its
    value came from when that is not the file (an environment variable)."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        dotted, described = _dotted(model, loc)
        if dotted in seen:
            continue
        seen.add(dotted)
        allowed = _allowed_text(error, described, _known_keys(model, loc))
        origin = (sources or {}).get(dotted.split("[")[0], source)
        given = error.get("type") not in ("missing", "extra_forbidden")
        problems.append(
            Problem(origin, dotted or "(top level)", error.get("input"), allowed, given)
        )
    return SchemaError(problems)


def validate(
    model: type[M],
    data: Mapping[str, Any],
    source: str = "",
    sources: Mapping[str, str] | None = None,
) -> M:
    """``model`` from ``data``, or SchemaError naming each bad field."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise explain(exc, model, source, sources) from None


# ------------------------------------------------------------------ environment


def _is_string_field(annotation: Any) -> bool:
    """``str`` or ``str | None``: an environment value is taken as it is, not as YAML."""
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and args[0] is str
    return False


def env_name(*parts: str, prefix: str = ENV_PREFIX) -> str:
    """``FLOWCON_ALLOCATOR_URL`` for ("allocator", "url")."""
    return prefix + "_".join(p.upper() for p in parts)


def _scalar(text: str, as_string: bool, var: str) -> Any:
    """An environment value: a string field takes it as it is, others parse it as YAML
    (``5``, ``0.1``, ``true``, ``null``, ``{a: b}``)."""
    if as_string:
        return text
    try:
        return safe_load_yaml(text)  # a value nested too deeply is a YAMLError there too
    except yaml.YAMLError:
        raise SchemaError(
            [Problem(var, var, text, "not a YAML scalar (e.g. 5, 0.1, true, null)")]
        ) from None


def _read_secret(var: str, path: str) -> str:
    """The content of a ``*_FILE`` variable's file, without its trailing newline."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SchemaError(
            [Problem(var, var, path, f"cannot read the file: {exc.strerror or exc}")]
        ) from None


def _one_var(environ: Mapping[str, str], var: str, as_string: bool) -> tuple[bool, Any, str]:
    """(set?, value, variable name) for ``var`` or its ``var_FILE`` variant."""
    raw = environ.get(var)
    if raw:
        return True, _scalar(raw, as_string, var), var
    path = environ.get(var + "_FILE")
    if path:
        return True, _read_secret(var + "_FILE", path), var + "_FILE"
    return False, None, var


def env_overrides(
    model: type[BaseModel],
    environ: Mapping[str, str] | None = None,
    prefix: str = ENV_PREFIX,
    sections: Iterable[str] = (),
) -> tuple[dict[str, Any], dict[str, str]]:
    """(overrides as a nested mapping, dotted field -> variable name) from the environment.

    Top-level fields are ``<prefix><KEY>``; fields of a nested model (or of a section named
    in ``sections``, for files whose top level is sections) are ``<prefix><SECTION>_<KEY>``.
    Each also has a ``_FILE`` variant whose file content is the value (for secrets). Empty
    variables count as unset. Values are validated later by the same model."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    where: dict[str, str] = {}
    top = set(sections)
    for name, info in model.model_fields.items():
        sub = _model_of(info.annotation)
        if sub is not None and (name in top or not top):
            for key, sub_info in sub.model_fields.items():
                var = env_name(name, key, prefix=prefix)
                found, value, used = _one_var(env, var, _is_string_field(sub_info.annotation))
                if found:
                    data.setdefault(name, {})[key] = value
                    where[f"{name}.{key}"] = used
            continue
        if top:
            continue
        found, value, used = _one_var(
            env, env_name(name, prefix=prefix), _is_string_field(info.annotation)
        )
        if found:
            data[name] = value
            where[name] = used
    return data, where


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, one level of sections deep."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------ shared checks

UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f;&|`$<>\\\"'*?!{}()\[\]#~]")


def path_problem(value: str, absolute: bool = False) -> str | None:
    """Why ``value`` is not acceptable as a path, or None: no NUL or control characters,
    no shell metacharacters, no ``..`` component (and absolute when asked)."""
    if not value:
        return "an empty path"
    if UNSAFE_CHARS.search(value.replace(" ", "")) or "\x00" in value:
        return "a path without control or shell characters (; & | ` $ < > quotes * ? ...)"
    if ".." in Path(value).parts or ".." in value.split("/"):
        return "a path without '..' components"
    if absolute and not value.startswith("/"):
        return "an absolute path (/...)"
    return None


LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$")


def label_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` is not a sane container label, or None."""
    if not LABEL_KEY_RE.match(key):
        return "a label key of letters, digits, '.', '-', '_' and '/' (at most 128 chars)"
    if len(value) > 1024 or re.search(r"[\x00-\x1f\x7f]", value):
        return "a label value without control characters (at most 1024 chars)"
    return None
