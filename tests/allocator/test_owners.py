"""Named users and job owners: each user has a token of their own; cancel, logs, the detail
and a dry run of an existing name act only on the caller's own jobs unless the caller is
the operator; the shared legacy user token is one principal named ``user``."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.api_specs import api_job as job

from flowcon.allocator.config import AllocatorConfig, ConfigError, load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.quota import Quota
from flowcon.client.http import AllocatorClient, ClientError

TOKENS = {
    "operator": "op-t0ken-0000",
    "user": "shared-us3r-t0ken",
    "read": "re4d-t0ken-0000",
    "alice": "alice-t0ken-0000",
    "bob": "bob-t0ken-00000",
}


NAMED = (("alice", TOKENS["alice"]), ("bob", TOKENS["bob"]))


@contextlib.contextmanager
def allocator(tmp_path: Path, **cfg: Any) -> Iterator[Allocator]:
    """A plan-only allocator on 8 GPUs with the operator's token and ``cfg``."""
    config = AllocatorConfig(
        state_dir=tmp_path / "state",
        slot_seconds=1.0,
        listen="127.0.0.1:0",
        token=TOKENS["operator"],
        **cfg,
    )
    alloc = Allocator(config, target=None, total_gpus=8)
    alloc.start(port=0)
    try:
        yield alloc
    finally:
        alloc.stop()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Allocator]:
    with allocator(
        tmp_path, user_token=TOKENS["user"], read_token=TOKENS["read"], users=NAMED
    ) as alloc:
        yield alloc


def as_(daemon: Allocator, who: str) -> AllocatorClient:
    return AllocatorClient(daemon.url, TOKENS[who], timeout=10)


def refused(call: Any, *args: Any) -> ClientError:
    with pytest.raises(ClientError) as exc:
        call(*args)
    return exc.value


def test_a_user_acts_only_on_their_own_jobs(daemon: Allocator) -> None:
    alice, bob, op = as_(daemon, "alice"), as_(daemon, "bob"), as_(daemon, "operator")
    alice.submit(job("ja"))
    bob.submit(job("jb"))
    assert alice.whoami() == {"name": "alice", "roles": ["read", "user"]}
    listed = {j["name"]: j for j in alice.jobs()}
    assert (listed["ja"]["owner"], listed["jb"]["owner"]) == ("alice", "bob")
    assert listed["jb"]["spec"] == {}  # another user's spec is not shown
    assert listed["ja"]["spec"]["image"] == "flowcon/testbox:latest"
    for call, args in (
        (alice.job, ("jb",)),
        (alice.logs, ("jb",)),
        (alice.cancel, ("jb",)),
        (alice.dry_run, (job("jb"),)),
        (alice.submit, (job("jb"),)),
    ):
        err = refused(call, *args)
        assert err.status == 403, (call, err)
        assert "belongs to bob: only its owner or the operator may" in str(err)
    assert daemon.store.get_job("jb").active  # type: ignore[union-attr]
    assert alice.job("ja")["owner"] == "alice"
    # the operator may do all of it
    assert op.job("jb")["owner"] == "bob"
    assert op.cancel("jb")["state"] == "cancelled"
    events = {e.kind: e.data for e in daemon.store.events(job="jb")}
    assert events["admitted"]["submitted_by"] == "bob"
    assert events["cancelled"]["reason"] == "cancelled by operator"
    assert alice.cancel("ja")["reason"] == "cancelled by alice"


def test_readers_list_but_see_no_detail_when_users_are_named(daemon: Allocator) -> None:
    as_(daemon, "alice").submit(job("ja"))
    reader = as_(daemon, "read")
    assert [(j["name"], j["owner"], j["spec"]) for j in reader.jobs()] == [("ja", "alice", {})]
    assert refused(reader.job, "ja").status == 403
    assert refused(reader.logs, "ja").status == 403


def test_the_shared_user_token_is_one_principal_named_user(daemon: Allocator) -> None:
    shared = as_(daemon, "user")
    shared.submit(job("js"))
    assert shared.whoami()["name"] == "user"  # type: ignore[index]
    assert shared.job("js")["owner"] == "user"
    assert refused(as_(daemon, "alice").cancel, "js").status == 403
    assert shared.cancel("js")["state"] == "cancelled"


def test_without_named_users_nothing_changes(tmp_path: Path) -> None:
    """A single-token set-up: the shared user token and the reader see every job."""
    with allocator(tmp_path, user_token=TOKENS["user"], read_token=TOKENS["read"]) as alloc:
        as_(alloc, "operator").submit(job("jo"))
        assert as_(alloc, "read").job("jo")["owner"] == "operator"
        assert as_(alloc, "read").logs("jo")["job"] == "jo"
        assert as_(alloc, "user").job("jo")["owner"] == "operator"


def test_flowcon_jobs_shows_the_owner_and_a_users_own_by_default(daemon: Allocator) -> None:
    from flowcon.cli import main

    as_(daemon, "alice").submit(job("ja"))
    as_(daemon, "bob").submit(job("jb"))
    runner = CliRunner()
    base = ["jobs", "--url", daemon.url, "-o", "wide"]
    own = runner.invoke(main, [*base, "--token", TOKENS["alice"]])
    assert own.exit_code == 0, own.output
    assert "owner" in own.output
    assert "ja" in own.output
    assert "jb" not in own.output
    every = runner.invoke(main, [*base, "--token", TOKENS["alice"], "-A"])
    assert "jb" in every.output
    assert "bob" in every.output
    op = runner.invoke(main, [*base, "--token", TOKENS["operator"]])
    assert "ja" in op.output
    assert "jb" in op.output
    denied = runner.invoke(main, ["cancel", "jb", "--url", daemon.url, "--token", TOKENS["alice"]])
    assert denied.exit_code == 1
    assert "Error: job 'jb' belongs to bob: only its owner or the operator may" in denied.output


def test_users_in_the_config(tmp_path: Path) -> None:
    (tmp_path / "bob.token").write_text("bob-from-a-file\n")
    good = tmp_path / "good.yaml"
    good.write_text(
        "allocator:\n  users:\n    - {name: alice, token: a-t0ken, max_gpus: 8, max_jobs: 20}\n"
        f"    - {{name: bob, token_file: {tmp_path / 'bob.token'}}}\n"
    )
    cfg = load_config(good, {}, tmp_path / "no-secrets")
    assert cfg.users == (("alice", "a-t0ken"), ("bob", "bob-from-a-file"))
    assert cfg.quotas == {"alice": Quota(8, 20), "bob": Quota()}
    for body, says in (
        ("[{name: alice}]", "allocator.users[0]: alice: a token or a token_file is needed"),
        ("[{name: operator, token: x}]", 'allocator.users[0].name: "operator" is not allowed'),
        ("[{name: Alice, token: x}]", 'allocator.users[0].name: "Alice" is not allowed'),
        ("[{name: a, token: x}, {name: a, token: y}]", "allocator.users[1].name: 'a' is listed"),
        ("[{name: a, token: x}, {name: b, token: x}]", "b's token is another user's"),
        ("[{name: a, token: x, max_gpus: 0}]", "allocator.users[0].max_gpus: 0 is not allowed"),
    ):
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"allocator:\n  users: {body}\n")
        with pytest.raises(ConfigError) as exc:
            load_config(bad, {}, tmp_path / "no-secrets")
        assert says in str(exc.value), (body, str(exc.value))


@pytest.fixture
def quota_daemon(tmp_path: Path) -> Iterator[Allocator]:
    with allocator(tmp_path, users=NAMED, quotas={"alice": Quota(max_gpus=2, max_jobs=3)}) as alloc:
        yield alloc


def test_a_submit_over_a_users_quota_is_refused_naming_it(quota_daemon: Allocator) -> None:
    """max_gpus counts the GPUs admission guaranteed (each deadline job's minimum
    satisfactory share), not the spare GPUs the planner gives out on top."""
    from flowcon.cli import main

    alice = as_(quota_daemon, "alice")
    alice.submit(job("q1", max_gpus=2))
    held = quota_daemon.store.get_job("q1").gpus  # type: ignore[union-attr]
    share = quota_daemon.planner.guaranteed_shares(quota_daemon.clock())["q1"]
    assert (held, share) == (2, 1)  # one GPU guaranteed, one spare
    for call in (alice.submit, alice.dry_run):
        err = refused(call, job("q2", min_gpus=2, max_gpus=2))
        assert err.status == 403
        assert err.body["field"] == "quota"
        assert str(err) == (
            "quota: alice holds 1 of 2 GPUs in deadline jobs (max_gpus); this job needs at least 2"
        )
    # the spare GPU q1 holds counts against no quota: a job needing one more fits
    alice.submit(job("q2", max_gpus=2))
    err = refused(alice.submit, job("q3"))
    assert str(err) == (
        "quota: alice holds 2 of 2 GPUs in deadline jobs (max_gpus); this job needs at least 1"
    )
    # best-effort work uses spare GPUs: no GPU quota, but it is an active job
    best = job("q3", best_effort=True)
    del best["deadline"]
    alice.submit(best)
    err = refused(alice.submit, job("q4"))
    assert str(err) == "quota: alice has 3 of 3 active jobs (max_jobs)"
    # the CLI says it and exits non-zero; another user has no quota of alice's
    spec = quota_daemon.store.get_job("q1").spec  # type: ignore[union-attr]
    assert spec.owner == "alice"
    out = CliRunner().invoke(
        main,
        ["submit", "--dry-run", "-", "--url", quota_daemon.url, "--token", TOKENS["alice"]],
        input=json.dumps(job("q5")),
    )
    assert out.exit_code == 1
    assert "Error: quota: alice has 3 of 3 active jobs (max_jobs)" in out.output
    as_(quota_daemon, "bob").submit(job("b1"))
    alice.cancel("q3")
    alice.submit(best | {"name": "q6"})  # a job ended: room again


def test_every_change_and_refusal_is_one_audit_line(
    daemon: Allocator, caplog: pytest.LogCaptureFixture
) -> None:
    alice, bob = as_(daemon, "alice"), as_(daemon, "bob")
    with caplog.at_level(logging.INFO, logger="flowcon.allocator.audit"):
        alice.submit(job("ja"))
        refused(bob.cancel, "ja")
        refused(AllocatorClient(daemon.url, "wrong-token").cancel, "ja")
        refused(alice.submit, job("Bad Name"))
        alice.jobs()  # an allowed read: not audited
        alice.cancel("ja")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("audit")]
    assert [(x["principal"], x["method"], x["job"], x["status"], x["reason"]) for x in lines] == [
        ("alice", "POST", "ja", 201, None),
        ("bob", "DELETE", "ja", 403, "not_owner"),
        (None, "DELETE", "ja", 401, "unauthenticated"),
        ("alice", "POST", "Bad Name", 400, "invalid"),
        ("alice", "DELETE", "ja", 200, None),
    ]
    first = lines[0]
    assert first["role"] == "user"
    assert first["source"] == "127.0.0.1"
    assert first["path"] == "/api/v1/jobs"
    assert first["outcome"] == "allowed"
    assert lines[1]["outcome"] == "refused"
    metrics = daemon.metrics_text().decode()
    for reason in ("not_owner", "unauthenticated", "invalid"):
        assert f'flowcon_allocator_refused_calls_total{{reason="{reason}"}} 1.0' in metrics
