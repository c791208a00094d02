"""The agent's config (flowcon/agent/config.py): every bad value of the reference is refused with
a message naming the field; FLOWCON_* environment overrides, FLOWCON_CONFIG, *_FILE and
the allocator token file / Swarm secret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flowcon.agent.config as config_mod
from flowcon.agent.config import ConfigError, load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_swarm_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(config_mod, "AGENT_SECRET", str(tmp_path / "no-such-secret"))


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> config_mod.Config:
    p = tmp_path / "flowcon.yaml"
    p.write_text(text)
    return load(p, env or {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha: 5", "alpha: 5 is not allowed: a fraction in (0, 1)"),
        ("control: quotas", 'control: "quotas" is not allowed: quota, weights, cpuset or hybrid'),
        ("control: 1", "control: 1 is not allowed: quota, weights, cpuset or hybrid"),
        ("control: null", "control: null is not allowed: quota, weights, cpuset or hybrid"),
        ("all_cl: equals", 'all_cl: "equals" is not allowed: free or equal'),
        ("alpha: true", "alpha: true is not allowed: a fraction in (0, 1)"),
        ("alpha: 0", "alpha: 0 is not allowed: a fraction in (0, 1)"),
        ("metrics_addr: 0", "metrics_addr: 0 is not allowed: an IP address or host name"),
        ('dry_run: "no"', 'dry_run: "no" is not allowed: true or false'),
        ("docker_host: 5", "docker_host: 5 is not allowed: an engine URL"),
        ("docker_host: /var/run/docker.sock", 'docker_host: "/var/run/docker.sock" is not'),
        ("beta: 0", "beta: 0 is not allowed: a number > 0"),
        ("itval: 0", "itval: 0 is not allowed: seconds > 0"),
        ("itval: .inf", "itval: Infinity is not allowed: seconds > 0"),
        ("itval: 30\nitval_max: 10", "itval_max: 10 is not allowed: seconds, at least itval"),
        ("metrics_port: 0", "metrics_port: 0 is not allowed: a TCP port 1..65535"),
        ("metrics_port: 65536", "metrics_port: 65536 is not allowed: a TCP port 1..65535"),
        ('metrics_port: "9464"', 'metrics_port: "9464" is not allowed: a TCP port'),
        ("min_cpu_share: 2", "min_cpu_share: 2 is not allowed: a share of the host in (0, 1]"),
        ("min_update_cpus: 1", "min_update_cpus: 1 is not allowed: CPUs in [0, 1)"),
        ("history: 0", "history: 0 is not allowed: an integer >= 1"),
        ("log_tail: 1.5", "log_tail: 1.5 is not allowed: an integer >= 0"),
        ("cpu_source: cgroup", 'cpu_source: "cgroup" is not allowed: auto or engine'),
        ("cgroup_root: sys/fs", 'cgroup_root: "sys/fs" is not allowed: an absolute path'),
        ("state_file: ../../etc/x", 'state_file: "../../etc/x" is not allowed: a path without'),
        ("io_stats_interval: -1", "io_stats_interval: -1 is not allowed: seconds >= 0"),
        ("match_labels: {'bad key': x}", "match_labels: "),
        ("allocator: {url: ftp://x}", 'allocator.url: "ftp://x" is not allowed: http(s)://'),
        ("allocator: {timeout: 0}", "allocator.timeout: 0 is not allowed: seconds > 0"),
        ("allocator: {tokn: x}", "allocator.tokn: unknown key (known: cacert, timeout, token"),
        ("alpah: 0.1", "alpah: unknown key (known: all_cl, allocator, alpha,"),
    ],
)
def test_bad_values_are_refused_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text + "\n")
    got = str(err.value)
    assert got.startswith(f"{tmp_path / 'flowcon.yaml'}: "), got
    assert message in got, got
    assert "Traceback" not in got
    assert "pydantic" not in got


def test_several_errors_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "alpha: 5\ndry_run: 'no'\nmetrics_addr: 0\n")
    lines = str(err.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == ["alpha", "metrics_addr", "dry_run"]


def test_the_shipped_file_is_the_defaults() -> None:
    assert load(REPO / "agent" / "flowcon.yaml", {}) == load(None, {})


def test_the_docs_table_gives_each_key_its_default() -> None:
    """docs/agent.md's configuration table lists every key with the default the code has
    (it once said `control` defaults to quota after the default became hybrid)."""
    rows: dict[str, str] = {}
    for line in (REPO / "docs" / "agent.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]  # the description may hold a "|"
        if len(cells) >= 5 and cells[0] == "" and re.fullmatch(r"`[a-z_.]+`", cells[1]):
            rows[cells[1].strip("`")] = cells[3]
    defaults = load(None, {})
    expected: dict[str, str] = {}
    for key, value in defaults.model_dump().items():
        if isinstance(value, dict) and key == "allocator":
            expected.update({f"allocator.{k}": str(v) for k, v in value.items()})
            continue
        expected[key] = str(value)
    for key, value in expected.items():
        assert key in rows, f"docs/agent.md's table lacks `{key}`"
        got = rows[key]
        shown = {"None": "null", "{}": "{}", "False": "false", "True": "true"}.get(value, value)
        numbers = all(re.fullmatch(r"-?[0-9]+(\.[0-9]*)?", v) for v in (got, value))
        same = float(got) == float(value) if numbers else got == shown
        assert same, f"`{key}`: docs/agent.md says {got}, the code {value}"


def test_an_empty_allocator_section_is_the_defaults(tmp_path: Path) -> None:
    assert _load(tmp_path, "allocator:\n").allocator == load(None, {}).allocator


def test_good_values(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        "alpha: 0.1\nitval: 2\nmetrics_port: 9464\nmetrics_addr: '::'\n"
        "docker_host: unix:///run/docker.sock\nmatch_labels: {flowcon.test: 1}\n",
    )
    assert (cfg.alpha, cfg.itval, cfg.metrics_port, cfg.metrics_addr) == (0.1, 2.0, 9464, "::")
    assert cfg.match_labels == {"flowcon.test": "1"}


def test_env_overrides_file_values_and_name_the_variable(tmp_path: Path) -> None:
    env = {
        "FLOWCON_ALPHA": "0.2",
        "FLOWCON_DRY_RUN": "true",
        "FLOWCON_METRICS_PORT": "9464",
        "FLOWCON_ALLOCATOR_URL": "http://manager:8470",
        "FLOWCON_ALLOCATOR_TIMEOUT": "2.5",
        "FLOWCON_LOG_LEVEL": "debug",  # another part's variable: not a crash
        "FLOWCON_PURE_LANE": "1",
    }
    cfg = _load(tmp_path, "alpha: 0.1\nitval: 5\n", env)
    assert (cfg.alpha, cfg.itval, cfg.dry_run, cfg.metrics_port) == (0.2, 5.0, True, 9464)
    assert (cfg.allocator.url, cfg.allocator.timeout) == ("http://manager:8470", 2.5)
    for var, value, field in [
        ("FLOWCON_ALPHA", "5", "alpha: 5 is not allowed"),
        ("FLOWCON_METRICS_ADDR", "", None),  # empty: unset
        ("FLOWCON_METRICS_PORT", "http", 'metrics_port: "http" is not allowed'),
        ("FLOWCON_DRY_RUN", "maybe", 'dry_run: "maybe" is not allowed'),
        ("FLOWCON_ALLOCATOR_URL", "manager", 'allocator.url: "manager" is not allowed'),
    ]:
        if field is None:
            assert load(None, {var: value}).metrics_addr == "0.0.0.0"
            continue
        with pytest.raises(ConfigError) as err:
            load(None, {var: value})
        assert str(err.value).startswith(f"{var}: {field}"), str(err.value)


def test_an_env_value_nested_too_deeply_is_refused_naming_the_variable() -> None:
    # yaml.safe_load raised RecursionError (a traceback) on this; now one line names it
    with pytest.raises(ConfigError) as err:
        load(None, {"FLOWCON_MATCH_LABELS": "[" * 5000})
    assert str(err.value).startswith("FLOWCON_MATCH_LABELS: "), str(err.value)
    assert "not a YAML scalar" in str(err.value)


def test_flowcon_log_level_lower_case_does_not_crash_the_loader() -> None:
    assert load(None, {"FLOWCON_LOG_LEVEL": "debug"}).alpha == 0.05


def test_flowcon_config_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("itval: 7\n")
    assert load(None, {"FLOWCON_CONFIG": str(p)}).itval == 7.0
    with pytest.raises(ConfigError, match="cannot read"):
        load(None, {"FLOWCON_CONFIG": str(tmp_path / "missing.yaml")})
    # an explicit path wins
    q = tmp_path / "d.yaml"
    q.write_text("itval: 9\n")
    assert load(q, {"FLOWCON_CONFIG": str(p)}).itval == 9.0


def test_token_file_env_file_variant_and_swarm_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "agent-token"
    secret.write_text("s3cret\n")
    cfg = _load(tmp_path, f"allocator: {{url: 'http://m:1', token_file: {secret}}}\n")
    assert cfg.allocator.token == "s3cret"
    cfg = load(None, {"FLOWCON_ALLOCATOR_TOKEN_FILE": str(secret)})
    assert cfg.allocator.token == "s3cret"
    # an inline token wins over the file
    cfg = _load(tmp_path, f"allocator: {{token: inline, token_file: {secret}}}\n")
    assert cfg.allocator.token == "inline"
    with pytest.raises(ConfigError, match=r"allocator.token_file: cannot read"):
        _load(tmp_path, f"allocator: {{token_file: {tmp_path / 'nope'}}}\n")
    # no token given: the Swarm secret, when it exists
    assert load(None, {}).allocator.token is None
    monkeypatch.setattr(config_mod, "AGENT_SECRET", str(secret))
    assert load(None, {}).allocator.token == "s3cret"


@pytest.mark.parametrize("text", ["docker_host: 5", "alpha: true", 'dry_run: "no"'])
def test_the_agent_command_prints_the_message_not_a_traceback(tmp_path: Path, text: str) -> None:
    from click.testing import CliRunner

    from flowcon.cli import main

    p = tmp_path / "flowcon.yaml"
    p.write_text(text + "\n")
    for args in (["agent", "--config", str(p), "--once"], ["status", "--config", str(p)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, res.output
        assert f"{p}: {text.split(':')[0]}:" in res.output
        assert "Traceback" not in res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)


def test_control_mode_default_file_and_environment(tmp_path: Path) -> None:
    from flowcon.core.control import DEFAULT_CONTROL

    assert _load(tmp_path, "alpha: 0.05").control == DEFAULT_CONTROL == "hybrid"
    assert _load(tmp_path, "control: cpuset").control == "cpuset"
    assert _load(tmp_path, "control: cpuset", {"FLOWCON_CONTROL": "hybrid"}).control == "hybrid"
    with pytest.raises(ConfigError, match="FLOWCON_CONTROL"):
        _load(tmp_path, "", {"FLOWCON_CONTROL": "shares"})
    assert load(None, {}).all_cl == "equal"  # the measured default; "free" is the paper's
    assert _load(tmp_path, "", {"FLOWCON_ALL_CL": "free"}).all_cl == "free"
    with pytest.raises(ConfigError, match="FLOWCON_ALL_CL"):
        _load(tmp_path, "", {"FLOWCON_ALL_CL": "none"})
