"""The batch dimension live: the allocator (``policy: elasticflow-batch``) with the real
executor on the real engine (declared 2 nodes x 4 GPUs, fake UUIDs, no GPU needed).

A job with a batch range is pre-run (``profile: auto``: its GPU counts, then other batches
at each count), admitted, and run at the batch its plan assumes; a deadline job that
arrives takes half the cluster, the ranged job is rescaled to 4 GPUs and then back to 8,
and its batch changes with each rescale. After the last one, the planner's predicted
finish matches when the job really ends within 10 %. The job is
``flowcon.testing.batchjob``: its speed depends on its batch and its GPU count.
"""

from __future__ import annotations

import time

import pytest
from support.allocator_daemon import containers, daemon_env, engine_config, wait_for

from flowcon.client.http import AllocatorClient
from flowcon.testing.batchjob import batch_job_spec, samples_per_second
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

CONFIG = engine_config(policy="elasticflow-batch", profile_seconds=20, profile_min_lines=4)


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config=CONFIG)


def _batches(store, name):
    """(event kind, GPUs, global batch) of the job's starts and rescales, in order."""
    out = []
    for e in store.events(job=name):
        if e.kind not in ("started", "restarted_on_new_gpus", "rescaled_stop_free"):
            continue
        if e.data.get("global_batch") is not None:
            gpus = e.data.get("new_gpus")
            if gpus is None:
                gpus = sum(len(g) for g in e.data.get("placement", {}).values())
            out.append((e.kind, int(gpus), int(e.data["global_batch"])))
    return out


def test_the_batch_changes_at_a_rescale_and_the_finish_is_predicted(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name, other = f"r{rid}", f"f{rid}"
    out = client.submit(batch_job_spec(name, 10000))
    assert out["decision"] == "profiling", out
    job = wait_for(lambda: (j := client.job(name))["state"] == "running" and j, 240, every=1)
    # the pre-run measured other batches, reported in the job's record
    spec = job["spec"]
    assert spec["batch_profile"], spec
    assert spec["max_local_batch"] == 128  # no memory limit: the whole range fits one worker
    assert job["gpus"] == 8
    wait_for(lambda: _batches(alloc.store, name), 30)
    assert _batches(alloc.store, name)[0][1:] == (8, 40)  # the best samples/s at 8 GPUs

    # a deadline job that needs 4 GPUs (it does not scale beyond them)
    now = time.time()
    out = client.submit(rate_job_spec(other, 96, now + 30, {1: 2.0, 2: 3.6, 4: 6.4}))
    assert out["admitted"], out
    wait_for(lambda: any(b[1] == 4 for b in _batches(alloc.store, name)), 40)
    wait_for(lambda: client.job(other)["state"] == "completed", 60, every=1)
    wait_for(lambda: sum(b[1] == 8 for b in _batches(alloc.store, name)) >= 2, 30)
    seen = _batches(alloc.store, name)
    assert [(g, b) for _k, g, b in seen] == [(8, 40), (4, 44), (8, 40)], seen
    policy = alloc.planner.policy
    assert getattr(policy, "batch_of", {}).get(name) == 40  # what the plan assumes now

    # the prediction, once the restarted job reports progress again
    resumed = [e.ts for e in alloc.store.events(job=name) if e.kind == "restarted_on_new_gpus"]
    t_back = resumed[-1]
    rec = wait_for(
        lambda: (
            (r := alloc.store.get_job(name)).observed_ts is not None
            and r.observed_ts > t_back + 3
            and r
        ),
        30,
    )
    t_snap, predicted = time.time(), rec.predicted_finish
    assert predicted is not None
    speed = alloc.planner.speed(rec)
    assert speed == pytest.approx(samples_per_second(8, 40) / 16, rel=0.05)
    done = wait_for(lambda: (j := client.job(name))["state"] == "completed" and j, 120, every=1)
    rec = alloc.store.get_job(name)
    actual = rec.finish_time
    assert actual is not None
    error = abs(actual - predicted) / (actual - t_snap)
    print(
        f"predicted finish {predicted - t_snap:.1f} s after the snapshot, measured "
        f"{actual - t_snap:.1f} s: error {100 * error:.1f} %"
    )
    assert error <= 0.10, (predicted, actual, t_snap)
    assert done["progress"] == 1.0
    wait_for(lambda: not containers(docker_client, rid), 30)
    alloc.stop()


def test_the_pre_run_backs_off_from_oom_kills(env, docker_client):
    """Under a 40 MB limit per GPU the job (half a MB per local sample, held in a shell
    variable) is OOM-killed at the range's top, 128: the pre-run bisects to the largest
    local batch that runs and measures no batch above it."""
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"m{rid}"
    body = batch_job_spec(name, 3000, max_gpus=2, memory_per_gpu="40m")
    body["env"] = {"KB_PER_SAMPLE": "512"}
    out = client.submit(body)
    assert out["decision"] == "profiling", out
    job = wait_for(
        lambda: (j := client.job(name))["state"] in ("running", "completed", "dropped") and j,
        240,
        every=1,
    )
    assert job["state"] != "dropped", job
    largest = job["spec"]["max_local_batch"]
    print(f"largest local batch under 40 MB: {largest}")
    assert largest is not None
    assert 16 <= largest < 64, largest
    rows = job["spec"]["batch_profile"]
    for batch, row in rows.items():
        for gpus in row:
            assert int(batch) <= largest * int(gpus), rows
    # the job runs within it: not killed again
    wait_for(lambda: client.job(name)["state"] == "completed", 120, every=1)
    assert not [e for e in alloc.store.events(job=name) if e.kind == "failed"]
    wait_for(lambda: not containers(docker_client, rid), 30)
    alloc.stop()
