"""The allocator's config (flowcon/allocator/config.py): every section on the strict schema
(an executor typo is refused), FLOWCON_<SECTION>_<KEY> overrides, per-role tokens from
the file, token files and Swarm secrets, and the clients' token lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcon.allocator.config import ConfigError, client_settings, load_config

REPO = Path(__file__).resolve().parents[2]


def _load(
    tmp_path: Path, text: str, env: dict[str, str] | None = None, secrets: Path | None = None
):
    p = tmp_path / "allocator.yaml"
    p.write_text(text)
    return load_config(p, env or {}, secrets or tmp_path / "no-secrets")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor: {backend: engine, grace: 5}", "executor.grace: unknown key (known: allow_root"),
        ("executor: {backnd: swarm}", "executor.backnd: unknown key"),
        ("executor: {backend: kubernetes}", 'executor.backend: "kubernetes" is not allowed'),
        ("executor: {grace_s: -1}", "executor.grace_s: -1 is not allowed: seconds >= 0"),
        ("executor: {max_restarts: 1.5}", "executor.max_restarts: 1.5 is not allowed"),
        ("executor: {checkpoint_every: 0}", "executor.checkpoint_every: 0 is not allowed"),
        (
            "executor: {checkpoint_host_dir: /srv/../etc}",
            'executor.checkpoint_host_dir: "/srv/../etc" is not allowed: a path without',
        ),
        (
            "executor: {checkpoint_host_dir: ckpt}",
            'executor.checkpoint_host_dir: "ckpt" is not allowed: an absolute path',
        ),
        ("executor: {network: 'a;b'}", 'executor.network: "a;b" is not allowed'),
        ("executor: [1]", "executor: [1] is not allowed: a mapping"),
        ("executor: {labels: {team: 5}}", "executor.labels.team: 5 is not allowed"),
        ("executor: {labels: {flowcon.job: x}}", "flowcon.job: set by the executor itself"),
        ("gpus: {nodes: []}", "gpus.nodes: unknown key (known: declared, node_name)"),
        ("allocator: {listen: 8470}", "allocator.listen: 8470 is not allowed: HOST:PORT"),
        ("allocator: {listen: 'h:70000'}", 'allocator.listen: "h:70000" is not allowed'),
        ("allocator: {slot_seconds: 0}", "allocator.slot_seconds: 0 is not allowed: seconds > 0"),
        ("allocator: {ewma_alpha: 5}", "allocator.ewma_alpha: 5 is not allowed: a fraction in"),
        ("allocator: {ewma_alpha: true}", "allocator.ewma_alpha: true is not allowed"),
        ("allocator: {min_measurements: 0}", "allocator.min_measurements: 0 is not allowed"),
        ("allocator: {profile_min_lines: 1}", "allocator.profile_min_lines: 1 is not allowed"),
        ("allocator: {url: 5}", "allocator.url: 5 is not allowed"),
        ("allocator: {token: 5}", "allocator.token: 5 is not allowed: the operator"),
        ("allocator: {state_dir: ../up}", 'allocator.state_dir: "../up" is not allowed'),
        ("allocator: {read_token_file: 'a|b'}", "allocator.read_token_file:"),
        ("allocator: {policy: fifo}", 'allocator.policy: "fifo" is not allowed: one of'),
        ("extra: 1", "extra: unknown key (known: allocator, executor, gpus)"),
    ],
)
def test_bad_values_are_refused_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text + "\n")
    got = str(err.value)
    assert got.startswith(f"{tmp_path / 'allocator.yaml'}: "), got
    assert message in got, got


def test_the_example_file_loads_and_sections_are_the_validated_ones(tmp_path: Path) -> None:
    cfg = load_config(REPO / "scenarios" / "allocator" / "allocator.yaml", {}, tmp_path)
    assert cfg.section("executor") == {"backend": "engine", "grace_s": 30.0, "max_restarts": 3}
    assert cfg.section("gpus")["declared"]["nodes"][0] == {"name": "node1", "gpus": 4}
    cfg = _load(tmp_path, "executor:\ngpus:\n")  # empty sections are fine
    assert cfg.section("executor") == {}
    assert cfg.section("gpus") == {}


def test_executor_labels_reach_every_container_and_the_selector(tmp_path: Path) -> None:
    from flowcon.executor.factory import make_executor

    cfg = _load(tmp_path, "executor: {labels: {team: vision, flowcon.test: run1}}\n")
    assert cfg.section("executor")["labels"] == {"team": "vision", "flowcon.test": "run1"}
    ex = make_executor(cfg.section("executor"), None, object(), {"extra": "x"})
    assert dict(ex.options.extra_labels) == {"team": "vision", "flowcon.test": "run1", "extra": "x"}


def test_env_overrides_every_section_and_name_the_variable(tmp_path: Path) -> None:
    env = {
        "FLOWCON_ALLOCATOR_LISTEN": "0.0.0.0:9000",
        "FLOWCON_ALLOCATOR_SLOT_SECONDS": "5",
        "FLOWCON_ALLOCATOR_STATE_DIR": str(tmp_path / "st"),
        "FLOWCON_EXECUTOR_BACKEND": "swarm",
        "FLOWCON_EXECUTOR_GRACE_S": "12",
        "FLOWCON_GPUS_NODE_NAME": "n1",
        "FLOWCON_ALLOCATOR_CONFIG": "ignored-here.yaml",  # the clients' variable, not a key
        "FLOWCON_LOG_LEVEL": "debug",
    }
    cfg = _load(tmp_path, "allocator: {listen: '127.0.0.1:1', slot_seconds: 60}\n", env)
    assert (cfg.listen, cfg.port, cfg.slot_seconds) == ("0.0.0.0:9000", 9000, 5.0)
    assert cfg.state_dir == tmp_path / "st"
    assert cfg.section("executor") == {"backend": "swarm", "grace_s": 12}
    assert cfg.section("gpus") == {"node_name": "n1"}
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "", {"FLOWCON_EXECUTOR_GRACE_S": "soon"})
    assert str(err.value) == (
        'FLOWCON_EXECUTOR_GRACE_S: executor.grace_s: "soon" is not allowed: seconds >= 0'
    )


def test_role_tokens_inline_from_files_env_and_swarm_secrets(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    for name, value in [("user", "u-file"), ("read", "r-file")]:
        (files / name).write_text(value + "\n")
    cfg = _load(
        tmp_path,
        f"allocator:\n  token: op\n  agent_token: ag\n  user_token_file: {files / 'user'}\n",
        {"FLOWCON_ALLOCATOR_READ_TOKEN_FILE": str(files / "read")},
    )
    assert (cfg.token, cfg.agent_token, cfg.user_token, cfg.read_token) == (
        "op",
        "ag",
        "u-file",
        "r-file",
    )
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    for role in ("agent", "user", "read"):
        (secrets / f"flowcon_{role}_token").write_text(f"{role}-secret\n")
    (secrets / "flowcon_token").write_text("op-secret\n")
    cfg = _load(tmp_path, "allocator: {user_token: inline}\n", {}, secrets)
    assert (cfg.token, cfg.agent_token, cfg.user_token, cfg.read_token) == (
        "op-secret",
        "agent-secret",
        "inline",  # given: the secret is not looked at
        "read-secret",
    )
    with pytest.raises(ConfigError, match=r"allocator\.agent_token_file: cannot read"):
        _load(tmp_path, f"allocator: {{agent_token_file: {tmp_path / 'none'}}}\n")


def test_clients_take_flag_env_then_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FLOWCON_ALLOCATOR_URL", "FLOWCON_ALLOCATOR_TOKEN", "FLOWCON_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("FLOWCON_ALLOCATOR_CONFIG", raising=False)
    p = tmp_path / "a.yaml"
    p.write_text("allocator: {url: 'http://h:1', token: op, user_token: usr}\n")
    assert client_settings(str(p), None, None) == ("http://h:1", "usr")
    assert client_settings(str(p), None, "flag") == ("http://h:1", "flag")
    monkeypatch.setenv("FLOWCON_TOKEN", "short-env")
    assert client_settings(str(p), None, None) == ("http://h:1", "short-env")
    monkeypatch.setenv("FLOWCON_ALLOCATOR_TOKEN", "long-env")
    assert client_settings(str(p), None, None) == ("http://h:1", "long-env")
    monkeypatch.delenv("FLOWCON_ALLOCATOR_TOKEN")
    monkeypatch.delenv("FLOWCON_TOKEN")
    secret = tmp_path / "tok"
    secret.write_text("from-file\n")
    p.write_text(f"allocator: {{url: 'http://h:1', token_file: {secret}}}\n")
    assert client_settings(str(p), None, None) == ("http://h:1", "from-file")


def test_the_allocator_command_prints_one_line_per_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from flowcon.cli import main

    p = tmp_path / "allocator.yaml"
    p.write_text("allocator: {ewma_alpha: 5}\nexecutor: {grace: 5}\n")
    res = CliRunner().invoke(main, ["allocator", "--config", str(p)])
    assert res.exit_code == 1
    assert "Traceback" not in res.output
    assert "allocator.ewma_alpha: 5 is not allowed: a fraction in (0, 1]" in res.output
    assert "executor.grace: unknown key" in res.output
    p.write_text("allocator: {listen: '127.0.0.1:0'}\n")
    res = CliRunner().invoke(main, ["allocator", "--config", str(p), "--listen", "nope"])
    assert res.exit_code == 1
    assert '--listen: listen: "nope" is not allowed: HOST:PORT' in res.output
