"""Master ports are drawn at random among the free ones (a job's public name tells nothing
of its port), and every container of a job gets the job's rendezvous secret, which the
API never shows (flowcon/executor/workers.py, flowcon/allocator/records.py)."""

from __future__ import annotations

import random
from dataclasses import replace

from flowcon.allocator.records import spec_from_dict, spec_json, spec_to_dict
from flowcon.contract import ENV_RENDEZVOUS_SECRET
from flowcon.executor.workers import (
    PORT_RANGE,
    allocate_master_port,
    job_secret,
    new_job_secret,
    plan_workers,
    worker_env,
)
from flowcon.jobspec.spec import parse_jobspec


def _spec(name: str = "j"):
    return parse_jobspec(
        {
            "name": name,
            "image": "flowcon/testbox",
            "command": ["true"],
            "iterations": 10,
            "global_batch_size": 8,
            "best_effort": True,
        }
    )


def test_the_port_does_not_follow_from_the_job_name() -> None:
    drawn = {allocate_master_port("same-name", ()) for _ in range(50)}
    assert len(drawn) > 40  # not a function of the name
    assert all(PORT_RANGE[0] <= p < PORT_RANGE[1] for p in drawn)


def test_a_draw_avoids_every_port_live_jobs_hold() -> None:
    lo, hi = PORT_RANGE
    busy = set(range(lo, hi)) - {lo + 7, hi - 3}
    rng = random.Random(1)
    assert {allocate_master_port("j", busy, rng) for _ in range(20)} == {lo + 7, hi - 3}


def test_every_container_of_a_job_gets_its_secret_and_the_api_shows_none() -> None:
    secret = new_job_secret()
    assert len(secret) == 64
    assert secret != new_job_secret()
    spec = replace(_spec(), rendezvous_secret=secret, env={"TOKEN": "x"})
    slots = plan_workers({"n1": ["0"], "n2": ["0"]})
    envs = [worker_env(spec, s, slots, "10.0.0.1", 24000) for s in slots]
    assert {e[ENV_RENDEZVOUS_SECRET] for e in envs} == {secret}
    assert secret not in repr(spec)  # nor in a log line of the spec
    shown = spec_json(spec, redact=True)
    assert "rendezvous_secret" not in shown
    assert secret not in str(shown)
    assert spec_from_dict(spec_to_dict(spec)).rendezvous_secret == secret  # the record keeps it


def test_an_executor_derives_one_secret_per_job_from_its_own_key() -> None:
    key, other = b"k" * 32, b"o" * 32
    assert job_secret(key, "a") == job_secret(key, "a")
    assert len({job_secret(key, "a"), job_secret(key, "b"), job_secret(other, "a")}) == 3
