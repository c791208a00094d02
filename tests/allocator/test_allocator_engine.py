"""The allocator daemon with the REAL executor on the real Docker engine.

Declared inventory 2 nodes x 4 GPUs (fake UUIDs, no GPU needed). Jobs are the testbox
rate job (flowcon.testing.ratejob): it runs at its profile's speed for the GPU count the
allocator gave it, prints metric lines and checkpoints, so admission, rescaling,
adoption, restart and completion are all real container operations.
"""

from __future__ import annotations

import time

import pytest
from support.allocator_daemon import PROFILE, containers, daemon_env, env_of, wait_for

from flowcon.alloc.admission import admit
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.client.http import AllocatorClient
from flowcon.contract import LABEL_JOB
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id)


def test_scenario_admission_env_adoption_completion(env, docker_client):
    cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    now = time.time()
    trace = [  # name, iterations, deadline (s from now)
        (f"a{rid}", 100, 60),
        (f"b{rid}", 200, 45),
        (f"c{rid}", 10000, 30),  # unsatisfiable even alone
        (f"d{rid}", 300, 40),  # needs most of the cluster next to a and b
    ]
    admitted: list[Job] = []
    for name, its, dl in trace:
        core = Job(name, now, float(its), now + dl, ThroughputCurve(PROFILE))
        expected = admit(core, admitted, now, 8, cfg.slot_seconds).admitted
        out = client.submit(rate_job_spec(name, its, dl, PROFILE))
        assert out["admitted"] is expected, out
        if expected:
            admitted.append(core)
    names = [j.job_id for j in admitted]
    assert names == [f"a{rid}", f"b{rid}"], "the scenario's expected decisions changed"

    # every admitted job runs with its allocation in its environment
    def running():
        jobs = {j["name"]: j for j in client.jobs()}
        ok = all(
            jobs[n]["state"] == "running"
            and len(containers(docker_client, rid, n)) == len({p[0] for p in jobs[n]["placement"]})
            and all(c.status == "running" for c in containers(docker_client, rid, n))
            for n in names
        )
        return jobs if ok else None

    jobs = wait_for(running, 30)
    assert sum(jobs[n]["gpus"] for n in names) <= 8
    for n in names:
        cs = containers(docker_client, rid, n)
        envs = [env_of(c) for c in cs]
        assert {e["WORLD_SIZE"] for e in envs} == {str(jobs[n]["gpus"])}
        assert sum(int(e["LOCAL_WORLD_SIZE"]) for e in envs) == jobs[n]["gpus"]
        assert sorted(int(e["RANK"]) for e in envs)[0] == 0
        assert all(e["FLOWCON_JOB"] == n for e in envs)
        gpus = [g for e in envs for g in e["FLOWCON_GPUS"].split(",")]
        assert len(gpus) == jobs[n]["gpus"]
        assert all(g.startswith("FAKE-node") for g in gpus)
        assert all(
            e["FLOWCON_ITERATIONS"] == str(dict((t[0], t[1]) for t in trace)[n]) for e in envs
        )
    assert not containers(docker_client, rid, f"c{rid}")
    assert not containers(docker_client, rid, f"d{rid}")

    # restart the allocator: the running containers are adopted, none duplicated
    before = {c.id: c.labels[LABEL_JOB] for c in containers(docker_client, rid)}
    alloc.stop()
    assert {c.id for c in containers(docker_client, rid)} == set(before)  # jobs kept running
    alloc2 = start()
    client = AllocatorClient(alloc2.url, alloc2.token)
    time.sleep(2 * cfg.slot_seconds + 1)
    adopted = {e.job for e in alloc2.store.events(kind="adopted")}
    assert adopted == set(names)
    after = containers(docker_client, rid)
    per_job = {n: [c for c in after if c.labels[LABEL_JOB] == n] for n in names}
    for n, cs in per_job.items():
        rec = alloc2.store.get_job(n)
        assert rec is not None
        if rec.state == "running":
            # one container per placed node: never a second copy
            assert len(cs) == len({p[0] for p in rec.placement}), n
    rescaled_after_restart = {
        e.job
        for e in alloc2.store.events(kind="restarted_on_new_gpus")
        if e.ts > alloc2.store.events(kind="allocator_started")[-1].ts
    }
    for cid, job in before.items():
        if job not in rescaled_after_restart and alloc2.store.get_job(job).state == "running":
            assert cid in {c.id for c in after}, f"{job} was restarted instead of adopted"

    # both admitted jobs finish by their deadline; their containers go away
    def finished():
        js = {j["name"]: j for j in client.jobs()}
        return js if all(js[n]["state"] == "completed" for n in names) else None

    js = wait_for(finished, 75, every=1)
    for n in names:
        assert js[n]["deadline_met"] is True, js[n]
        assert js[n]["progress"] == 1.0
    wait_for(lambda: not containers(docker_client, rid), 30)
    kinds = [e.kind for e in alloc2.store.events()]
    assert kinds.count("completed") == 2
    alloc2.stop()
    from flowcon.allocator.store import Store

    st = Store(cfg.db_path)  # the daemon stopped cleanly and said so in its log
    assert [e.kind for e in st.events()][-1] == "allocator_stopped"
    st.close()


def test_dead_container_is_restarted_from_its_checkpoint(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"k{rid}"
    out = client.submit(rate_job_spec(name, 100000, None, {1: 20.0}, max_gpus=1))
    assert out["admitted"] is True

    def step():
        rec = alloc.store.get_job(name)
        return rec.done_iterations if rec and rec.observed_ts else 0

    wait_for(lambda: step() > 40, 30)
    (c,) = containers(docker_client, rid, name)
    c.kill()
    wait_for(lambda: alloc.store.events(job=name, kind="restarted"), 30)
    c.reload()
    wait_for(lambda: (c.reload(), c.status == "running")[1], 30)
    logs = c.logs().decode()
    starts = [ln for ln in logs.splitlines() if ln.startswith("start ")]
    assert len(starts) >= 2
    resumed_from = int(starts[-1].rsplit("from=", 1)[1])
    assert resumed_from > 0  # continued from the checkpoint, not from scratch
    assert alloc.store.get_job(name).state == "running"
    client.cancel(name)
    wait_for(lambda: not containers(docker_client, rid, name), 30)
    assert alloc.store.get_job(name).state == "cancelled"


def test_a_removal_cut_short_is_finished_at_restart(env, docker_client):
    """Regression (the interrupted-commands fault scenario left a job network behind): an
    allocator killed while removing a cancelled job, after its containers and before its
    network and checkpoint volume, left those two for good. The next allocator removes
    the network and volume of a job its store says ended; it never touches an active
    job's, nor those of a job it does not know."""
    from dataclasses import replace

    from flowcon.allocator.store import Store
    from flowcon.executor.backends.engine import network_name
    from flowcon.executor.lifecycle import Executor

    cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"o{rid}"
    client.submit(rate_job_spec(name, 10**6, None, PROFILE))
    wait_for(lambda: [c for c in containers(docker_client, rid, name) if c.status == "running"])
    docker_client.networks.get(network_name(name))
    docker_client.volumes.get(Executor.volume_name(name))
    alloc.stop()
    # what a kill -9 mid-removal leaves: the store says cancelled, the containers are gone
    st = Store(cfg.db_path)
    rec = st.get_job(name)
    assert rec is not None
    st.put_job(replace(rec, state="cancelled", gpus=0))
    st.close()
    for c in containers(docker_client, rid, name):
        c.remove(force=True)
    start()

    def gone() -> bool:
        nets = docker_client.networks.list(names=[network_name(name)])
        vols = docker_client.volumes.list(filters={"name": Executor.volume_name(name)})
        return not [n for n in nets if n.name == network_name(name)] and not [
            v for v in vols if v.name == Executor.volume_name(name)
        ]

    wait_for(gone, 20)
