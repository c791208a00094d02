"""flowcon.schema: strict models, one message per error (file, field, value, what is
allowed), environment overrides with *_FILE secrets, and the shared path/label checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from flowcon.schema import (
    SchemaError,
    Strict,
    env_overrides,
    label_problem,
    merge,
    path_problem,
    show,
    validate,
)


class Inner(Strict):
    url: str | None = Field(None, description="a URL or null")
    retries: int = Field(3, ge=0, description="an integer >= 0")


class Outer(Strict):
    alpha: float = Field(0.05, gt=0, lt=1, description="a fraction in (0, 1)")
    dry_run: bool = Field(False, description="true or false")
    name: str = Field("x", description="a name")
    port: int | None = Field(None, ge=1, le=65535, description="a TCP port 1..65535, or null")
    inner: Inner = Field(default_factory=Inner, description="a mapping")


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"alpha": 5}, "f.yaml: alpha: 5 is not allowed: a fraction in (0, 1)"),
        ({"alpha": True}, "f.yaml: alpha: true is not allowed: a fraction in (0, 1)"),
        ({"alpha": "0.1"}, 'f.yaml: alpha: "0.1" is not allowed: a fraction in (0, 1)'),
        ({"dry_run": "no"}, 'f.yaml: dry_run: "no" is not allowed: true or false'),
        ({"name": 0}, "f.yaml: name: 0 is not allowed: a name"),
        ({"port": 0}, "f.yaml: port: 0 is not allowed: a TCP port 1..65535, or null"),
        ({"port": 65536}, "f.yaml: port: 65536 is not allowed: a TCP port 1..65535, or null"),
        ({"port": 80.0}, "f.yaml: port: 80.0 is not allowed: a TCP port 1..65535, or null"),
        ({"inner": {"retries": -1}}, "f.yaml: inner.retries: -1 is not allowed: an integer >= 0"),
        ({"inner": []}, "f.yaml: inner: [] is not allowed: a mapping"),
    ],
)
def test_each_error_names_file_field_value_and_rule(data: dict[str, Any], line: str) -> None:
    with pytest.raises(SchemaError) as err:
        validate(Outer, data, "f.yaml")
    assert str(err.value) == line
    assert len(err.value.problems) == 1


def test_unknown_keys_list_the_known_ones_and_every_error_is_reported() -> None:
    with pytest.raises(SchemaError) as err:
        validate(Outer, {"alpah": 0.1, "inner": {"retry": 1}, "alpha": 2}, "f.yaml")
    lines = str(err.value).splitlines()
    assert "f.yaml: alpha: 2 is not allowed: a fraction in (0, 1)" in lines
    assert "f.yaml: alpah: unknown key (known: alpha, dry_run, inner, name, port)" in lines
    assert "f.yaml: inner.retry: unknown key (known: retries, url)" in lines
    assert [p.field for p in err.value.problems] == ["alpha", "inner.retry", "alpah"]


def test_good_values_pass_ints_count_as_floats() -> None:
    got = validate(Outer, {"alpha": 0.5, "port": 9464, "inner": {"url": "u"}})
    assert (got.alpha, got.port, got.inner.url, got.inner.retries) == (0.5, 9464, "u", 3)
    assert validate(Outer, {"alpha": 1e-3}).alpha == 0.001
    with pytest.raises(SchemaError):
        validate(Outer, {"alpha": 0})  # the open interval


def test_env_overrides_parse_yaml_scalars_and_name_the_variable(tmp_path: Path) -> None:
    env = {
        "FLOWCON_ALPHA": "0.2",
        "FLOWCON_DRY_RUN": "true",
        "FLOWCON_NAME": "123",  # a string field takes the text as it is
        "FLOWCON_INNER_RETRIES": "7",
        "FLOWCON_LOG_LEVEL": "debug",  # not a key of this model: ignored
        "FLOWCON_PORT": "",  # empty: unset
        "OTHER_ALPHA": "0.9",
    }
    over, where = env_overrides(Outer, env)
    assert over == {"alpha": 0.2, "dry_run": True, "name": "123", "inner": {"retries": 7}}
    assert where == {
        "alpha": "FLOWCON_ALPHA",
        "dry_run": "FLOWCON_DRY_RUN",
        "name": "FLOWCON_NAME",
        "inner.retries": "FLOWCON_INNER_RETRIES",
    }
    got = validate(Outer, merge({"alpha": 0.1, "inner": {"url": "file"}}, over), "f", where)
    assert (got.alpha, got.dry_run, got.name, got.inner.url, got.inner.retries) == (
        0.2,
        True,
        "123",
        "file",
        7,
    )
    over, where = env_overrides(Outer, {"FLOWCON_ALPHA": "5"})
    with pytest.raises(SchemaError) as err:
        validate(Outer, over, "f.yaml", where)
    assert str(err.value) == "FLOWCON_ALPHA: alpha: 5 is not allowed: a fraction in (0, 1)"


def test_file_variants_read_secrets(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("0123 not yaml: [\n")
    over, where = env_overrides(Outer, {"FLOWCON_INNER_URL_FILE": str(secret)})
    assert over == {"inner": {"url": "0123 not yaml: ["}}
    assert where == {"inner.url": "FLOWCON_INNER_URL_FILE"}
    # the plain variable wins over its _FILE variant
    over, _ = env_overrides(
        Outer, {"FLOWCON_INNER_URL": "direct", "FLOWCON_INNER_URL_FILE": str(secret)}
    )
    assert over == {"inner": {"url": "direct"}}
    with pytest.raises(SchemaError, match=r"FLOWCON_INNER_URL_FILE.*cannot read the file"):
        env_overrides(Outer, {"FLOWCON_INNER_URL_FILE": str(tmp_path / "missing")})


def test_sections_mode_reads_only_the_named_sections() -> None:
    over, where = env_overrides(
        Outer, {"FLOWCON_ALPHA": "0.3", "FLOWCON_INNER_RETRIES": "1"}, sections=("inner",)
    )
    assert over == {"inner": {"retries": 1}}
    assert where == {"inner.retries": "FLOWCON_INNER_RETRIES"}


def test_bad_yaml_in_a_variable_names_it() -> None:
    with pytest.raises(SchemaError, match="FLOWCON_ALPHA"):
        env_overrides(Outer, {"FLOWCON_ALPHA": "[1"})


@pytest.mark.parametrize(
    ("value", "absolute", "ok"),
    [
        ("/var/lib/flowcon/state.json", False, True),
        ("state/agent.json", False, True),
        ("state/agent.json", True, False),
        ("../etc/passwd", False, False),
        ("/srv/../etc", True, False),
        ("/srv/a..b", True, True),
        ("/srv/x;rm -rf /", True, False),
        ("/srv/$(id)", True, False),
        ("/srv/a`b`", True, False),
        ("/srv/a\x00b", True, False),
        ("/srv/a\nb", True, False),
        ("", False, False),
    ],
)
def test_path_problem(value: str, absolute: bool, ok: bool) -> None:
    assert (path_problem(value, absolute=absolute) is None) is ok


def test_label_problem() -> None:
    assert label_problem("flowcon.test", "1") is None
    assert label_problem("com.example/role", "a b") is None
    assert label_problem("bad key", "x") is not None
    assert label_problem("-lead", "x") is not None
    assert label_problem("k", "line\nbreak") is not None
    assert label_problem("k", "x" * 2000) is not None


def test_show_keeps_values_short_and_typed() -> None:
    assert show("no") == '"no"'
    assert show(True) == "true"
    assert show(None) == "null"
    assert len(show("x" * 500)) == 80
