"""Per-user quotas (flowcon/alloc/quota.py): a deadline job counts its guarantee (its
minimum satisfactory share now), never the spare GPUs it holds on top; best-effort work
counts against max_jobs only. The simulator applies the same rule at each arrival."""

from __future__ import annotations

import pytest

from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.quota import Holding, Quota, quota_problem
from flowcon.policy_registry import make_policy
from flowcon.sim.engine import Simulator
from flowcon.sim.outputs import summarize
from flowcon.sim.tenants import assign_owners

LINEAR = ThroughputCurve({1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0})


def test_a_deadline_job_counts_its_guarantee_not_its_spare_gpus() -> None:
    spare = Holding("a", deadline=True, gpus=8, guaranteed=2)
    assert spare.counted == 2
    assert Holding("b", deadline=True, gpus=3).counted == 3  # no reservation known: held
    assert Holding("c", deadline=False, gpus=8, guaranteed=None).counted == 0
    assert Holding("d", deadline=True, gpus=0, guaranteed=4).counted == 4  # reserved now


def test_over_quota_names_the_quota_and_the_usage() -> None:
    held = [Holding("a", True, 8, 2), Holding("b", True, 1, 1), Holding("c", False, 4)]
    quota = Quota(max_gpus=4, max_jobs=4)
    assert quota_problem("alice", quota, held, best_effort=False, needs=1) is None
    assert quota_problem("alice", quota, held, best_effort=False, needs=2) == (
        "quota: alice holds 3 of 4 GPUs in deadline jobs (max_gpus); this job needs at least 2"
    )
    # best-effort work is never refused for GPUs, but is an active job
    assert quota_problem("alice", quota, held, best_effort=True, needs=64) is None
    four = [*held, Holding("d", False)]
    assert quota_problem("alice", quota, four, best_effort=True, needs=1) == (
        "quota: alice has 4 of 4 active jobs (max_jobs)"
    )
    assert quota_problem("alice", Quota(), four, best_effort=False, needs=99) is None


def _job(jid: str, owner: str, submit: float, iters: float = 6000.0) -> Job:
    return Job(
        job_id=jid, submit_time=submit, iterations=iters, deadline=submit + 3600.0,
        curve=LINEAR, max_gpus=8, owner=owner,
    )  # fmt: skip


def test_the_simulator_refuses_a_submit_over_its_owners_quota() -> None:
    """8 GPUs; alice's first job is guaranteed 2 GPUs (and takes all 8, spare); her
    second fits her quota of 4 (spare GPUs count against none), her third does not; bob,
    without a quota, is admitted. The refusal is counted in the deadline ratio."""
    jobs = [_job("a1", "alice", 0), _job("a2", "alice", 60), _job("a3", "alice", 120)]
    jobs += [_job("b1", "bob", 180)]
    res = Simulator(
        jobs, Topology(1, 8), make_policy("elasticflow"), quotas={"alice": Quota(max_gpus=4)}
    ).run()
    by = {r.job.job_id: r for r in res.results}
    assert [by[j].admitted for j in ("a1", "a2", "a3", "b1")] == [True, True, False, True]
    assert by["a3"].quota_refused
    assert by["a3"].reason == (
        "quota: alice holds 4 of 4 GPUs in deadline jobs (max_gpus); this job needs at least 1"
    )
    assert summarize(res)["deadline_satisfactory_ratio"] == pytest.approx(0.75)
    unlimited = Simulator(jobs, Topology(1, 8), make_policy("elasticflow")).run()
    assert all(r.admitted for r in unlimited.results)


def test_owners_are_drawn_from_job_ids_the_same_on_every_run() -> None:
    jobs = [_job(f"j{i}", "", float(i)) for i in range(400)]
    assign_owners(jobs, 4, seed=1)
    first = [j.owner for j in jobs]
    assign_owners(jobs, 4, seed=1)
    assert [j.owner for j in jobs] == first
    assert set(first) == {"user00", "user01", "user02", "user03"}
    assign_owners(jobs, 4, seed=1, skew=2.0)
    heavy = sum(j.owner == "user00" for j in jobs)
    assert heavy > 400 * 0.5  # weights 1, 1/4, 1/9, 1/16: user00 about 70 %
    with pytest.raises(ValueError, match="users must be >= 1"):
        assign_owners(jobs, 0)
