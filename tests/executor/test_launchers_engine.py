"""A plain torchrun DDP script (images/ddp-example/train_ddp.py: no FlowCon import, gloo on
CPU, snapshot on the checkpoint volume) under ``launcher: torchrun`` and ``launcher: none``
on the real engine.

* The executor alone: 1, 2 and 3 workers over 1 and 2 (logical) nodes; every rank trains
  every epoch at the right world size and every container exits 0.
* The allocator daemon with the real executor (declared 2 nodes x 1 GPU, host networking):
  the job starts on 1 GPU next to a deadline job, grows to 2 when that job is cancelled,
  shrinks to 1 when a new deadline job is admitted, and completes; each restart resumes
  from the script's own snapshot, so the epoch counter continues.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.allocator_daemon import daemon_env
from support.session import REPO, TEST_LABEL

from flowcon.client.http import AllocatorClient
from flowcon.contract import CHECKPOINT_MOUNT, LABEL_JOB
from flowcon.jobspec.spec import parse_jobspec
from flowcon.testing.ratejob import rate_job_spec

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.docker
pytest_plugins = ("support.swarm_fixtures",)  # the executor fixture

IMAGE = "flowcon/ddp-example:latest"
SNAPSHOT = f"{CHECKPOINT_MOUNT}/snapshot.pt"
EPOCH_RE = re.compile(r"\[RANK(\d+)\] Epoch (\d+) \| world (\d+)")
RESUME_RE = re.compile(r"Resuming training from snapshot at Epoch (\d+)")


def command(epochs: int, sleep: float) -> list[str]:
    """The script's own command line, as its tutorial runs it (torchrun adds itself)."""
    return ["python3", "/opt/train_ddp.py", str(epochs), "1", "--snapshot_path", SNAPSHOT,
            "--sleep", str(sleep)]  # fmt: skip


@pytest.fixture(scope="module")
def ddp_image(docker_client):
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        build = REPO / "images" / "ddp-example" / "build.sh"
        res = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            pytest.fail(f"{IMAGE} cannot be built: {res.stderr[-500:]}")
    return IMAGE


def out_of(c: Any) -> str:
    return bytes(c.logs(stdout=True, stderr=False)).decode(errors="replace")


def epochs_by_rank(text: str) -> dict[int, list[tuple[int, int]]]:
    """rank -> [(epoch, world size), ...] from the script's own lines."""
    out: dict[int, list[tuple[int, int]]] = {}
    for rank, epoch, world in EPOCH_RE.findall(text):
        out.setdefault(int(rank), []).append((int(epoch), int(world)))
    return out


# ------------------------------------------------------------------ the executor alone

PLACEMENTS = {
    1: {"node1": ["0"]},
    2: {"node1": ["0"], "node2": ["0"]},
    3: {"node1": ["0", "1"], "node2": ["0"]},
}


@pytest.mark.parametrize("launcher", ["torchrun", "none"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_plain_ddp_script_at_1_2_3_workers(executor, ddp_image, launcher, workers) -> None:
    name = f"ddp{launcher[0]}{workers}"
    spec = parse_jobspec(
        {
            "name": name,
            "image": ddp_image,
            "command": command(2, 0.0),
            "global_batch_size": 32,
            "iterations": 2,
            "best_effort": True,
            "profile": {1: 1.0},
            "launcher": launcher,
        }
    )
    placement = PLACEMENTS[workers]
    ws = executor.launch(spec, placement)
    containers = len(placement) if launcher == "torchrun" else workers
    assert len(ws) == containers

    def done():
        state = executor.job(name)
        assert state is not None
        assert state.status != "failed", [(w.name, w.state, w.exit_code) for w in state.workers]
        return state if state.status == "completed" else None

    wait_for(done, 150, every=1)
    client = executor.backend.client
    text = "".join(out_of(client.containers.get(w.id)) for w in ws)
    ranks = epochs_by_rank(text)
    assert sorted(ranks) == list(range(workers)), text[-2000:]
    assert all(seen == [(0, workers), (1, workers)] for seen in ranks.values()), ranks
    starts = re.findall(r"start rank (\d+) local_rank (\d+) world (\d+) local_world (\d+)", text)
    if launcher == "none":  # one process per container: torchrun's single-process view
        assert sorted(starts) == [(str(r), "0", str(workers), "1") for r in range(workers)]
    else:  # torchrun's own: local ranks within each node's container
        local = sorted((lr, lw) for _, lr, _, lw in starts)
        want = sorted((str(i), str(len(g))) for g in placement.values() for i in range(len(g)))
        assert local == want
    executor.remove(name)


@pytest.mark.parametrize("launcher", ["none", "torchrun"])
def test_minimal_script_resumes_at_another_world_size(executor, ddp_image, launcher) -> None:
    """docs/jobs.md's minimal script: 3 epochs on 2 workers, then 6 on 1 from the snapshot."""
    name = f"min{launcher[0]}"

    def run(epochs: int, placement: dict[str, list[str]]) -> str:
        cmd = ["python3", "/opt/train_min.py", "--snapshot", SNAPSHOT, "--epochs", str(epochs)]
        body = {"name": name, "image": ddp_image, "command": cmd, "global_batch_size": 64}
        body |= {"iterations": 1, "best_effort": True, "profile": {1: 1.0}, "launcher": launcher}
        ws = executor.launch(parse_jobspec(body), placement)

        client = executor.backend.client

        def done():
            state = executor.job(name)
            assert state is not None, state
            assert state.status != "failed", state
            return state.status == "completed"

        try:
            wait_for(done, 120, every=1)
        except BaseException:
            tails = [(w.name, w.state, out_of(client.containers.get(w.id))[-800:]) for w in ws]
            pytest.fail(f"{epochs} epochs on {placement} did not complete: {tails}")
        return "".join(out_of(client.containers.get(w.id)) for w in ws)

    first = run(3, {"node1": ["0"], "node2": ["0"]})
    assert sorted(re.findall(r"\[RANK(\d)\] Epoch (\d+)", first)) == [
        (r, str(e)) for r in "01" for e in range(3)
    ]
    again = run(6, {"node1": ["0"]})  # the same job, its volume kept: resumes at epoch 3
    assert re.findall(r"\[RANK(\d)\] Epoch (\d+)", again) == [("0", str(e)) for e in (3, 4, 5)]
    executor.remove(name)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_flowcon_runtime_at_1_2_3_workers(executor, workers) -> None:
    """``launcher: flowcon``: one container per node, flowcon.elastic's main spawning a
    worker per GPU; rank 0 reports every step at the job's world size."""
    name = f"ddpf{workers}"
    spec = parse_jobspec(
        {
            "name": name,
            "image": "flowcon/elastic-example:latest",
            "command": ["python3", "/opt/train.py"],
            "global_batch_size": 48,
            "iterations": 6,
            "best_effort": True,
            "profile": {1: 1.0},
            "launcher": "flowcon",
            "scaling": "restart",  # one container per node (stop-free: one per GPU)
        }
    )
    placement = PLACEMENTS[workers]
    ws = executor.launch(spec, placement)
    assert len(ws) == len(placement)  # one container per node

    def done():
        state = executor.job(name)
        assert state is not None
        assert state.status != "failed", [(w.name, w.state, w.exit_code) for w in state.workers]
        return state if state.status == "completed" else None

    wait_for(done, 150, every=1)
    client = executor.backend.client
    text = "".join(out_of(client.containers.get(w.id)) for w in ws)
    lines = [json.loads(ln) for ln in text.splitlines() if '"world_size":' in ln]
    reports = [r for r in lines if "loss" in r]  # the steps; then one "done" event
    assert [r["step"] for r in reports] == list(range(1, 7)), text[-2000:]
    assert {r["world_size"] for r in reports} == {workers}
    assert {r["local_batch"] for r in reports} == {48 // workers}
    executor.remove(name)


# ------------------------------------------------------------------ under the allocator


def config(ckpt: Path) -> str:
    return f"""\
allocator:
  listen: 127.0.0.1:0
  state_dir: state
  slot_seconds: 2
gpus:
  declared:
    nodes:
      - {{name: node1, gpus: 1}}
      - {{name: node2, gpus: 1}}
executor:
  backend: engine
  network: host
  grace_s: 10
  checkpoint_host_dir: {ckpt}
"""


class Logs:
    """Every container of a job, its creation time and its output (containers go when the
    job completes, so the test keeps what they printed: each container's output is
    followed from when it is first seen, so its last lines arrive even when the
    allocator removes it between two polls)."""

    def __init__(self, docker_client: Any, run_id: str, job: str) -> None:
        self.client, self.labels = docker_client, [f"{TEST_LABEL}={run_id}", f"{LABEL_JOB}={job}"]
        self.seen: dict[str, tuple[str, str, str]] = {}  # id -> (created, name, output)
        self.config: dict[str, str] = {}  # id -> command line and environment
        self._followed: dict[str, bytearray] = {}  # id -> its output so far

    def _follow(self, c: Any, out: bytearray) -> None:
        with contextlib.suppress(Exception):  # the stream ends when the container goes
            for chunk in c.logs(stdout=True, stderr=False, stream=True, follow=True):
                out.extend(chunk)

    def poll(self) -> None:
        try:  # the SDK inspects each listed container: one removed meanwhile is a 404
            found = self.client.containers.list(
                ignore_removed=True, all=True, filters={"label": self.labels}
            )
        except docker.errors.NotFound:
            found = []  # the next poll sees the job's containers as they are then
        for c in found:
            try:
                created = c.attrs["Created"]
                conf = c.attrs["Config"]
                self.config[c.id] = " ".join([*(conf["Cmd"] or []), *(conf["Env"] or [])])
                status = c.attrs["State"]["Status"]
            except Exception:
                continue  # removed meanwhile
            if status == "created":
                # not started yet: the engine ends a follow of a container that is not
                # running at once, so its output would never be read; the next poll
                continue
            if c.id not in self._followed:
                self._followed[c.id] = bytearray()
                threading.Thread(
                    target=self._follow, args=(c, self._followed[c.id]), daemon=True
                ).start()
            self.seen[c.id] = (created, c.name, "")
        for cid, (created, name, _) in self.seen.items():
            self.seen[cid] = (created, name, bytes(self._followed[cid]).decode(errors="replace"))

    def generations(self) -> list[dict[int, list[tuple[int, int]]]]:
        """Per start of the job (rank-0 containers in creation order): rank -> epochs."""
        rows = sorted(self.seen.values())
        gens: list[dict[int, list[tuple[int, int]]]] = []
        for _, _, text in rows:
            ranks = epochs_by_rank(text)
            if 0 in ranks or not gens:
                gens.append({})
            for r, eps in ranks.items():
                gens[-1].setdefault(r, []).extend(eps)
        return [g for g in gens if g]

    def resumed(self) -> list[int]:
        """The snapshot epochs the rank-0 containers resumed from, in order."""
        rows = sorted(self.seen.values())
        return [int(x) for _, _, t in rows if "[RANK0]" in t for x in RESUME_RE.findall(t)]


def wait_polling(logs: Logs, pred: Callable[[], Any], timeout: float) -> Any:
    def step() -> Any:
        logs.poll()
        return pred()

    return wait_for(step, timeout, every=0.3)


EPOCHS = 30


@pytest.fixture
def alloc_env(tmp_path, docker_client, labeled, test_run_id, ddp_image):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config(ckpt), ddp_image)


def snapshot_epochs(docker_client: Any, labels: dict[str, str], host_dir: Path) -> int:
    """EPOCHS_RUN of the snapshot the job left in its checkpoint directory."""
    code = "import torch; print(torch.load('/ck/snapshot.pt')['EPOCHS_RUN'])"
    out = docker_client.containers.run(
        IMAGE, ["python3", "-c", code], volumes={str(host_dir): {"bind": "/ck", "mode": "ro"}},
        labels=labels, remove=True,
    )  # fmt: skip
    return int(bytes(out).decode().strip())


@pytest.mark.parametrize("launcher", ["torchrun", "none"])
def test_rescaled_1_2_1_under_the_allocator_and_completes(
    alloc_env, docker_client, labeled, tmp_path, launcher
) -> None:
    _cfg, start, rid = alloc_env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    linear = {1: 10.0, 2: 20.0}
    first = f"fa{rid}"
    assert client.submit(rate_job_spec(first, 5000, 600, linear, max_gpus=1))["admitted"]
    job = f"ddp{launcher[0]}{rid}"
    out = client.submit(
        {
            "name": job,
            "image": IMAGE,
            "command": command(EPOCHS, 0.1),
            "global_batch_size": 32,
            # the script prints no metric lines: the planner predicts its progress from the
            # profile, so iterations are set far beyond what it does before it exits
            "iterations": 100000,
            "best_effort": True,
            "max_gpus": 2,
            "profile": linear,
            "launcher": launcher,
        }
    )
    assert out["admitted"] is True, out
    assert out["gpus"] == 1, out
    logs = Logs(docker_client, rid, job)

    def epochs_at(gen: int, world: int, n: int) -> bool:
        gens = logs.generations()
        if len(gens) <= gen:
            return False
        eps = [e for e, w in gens[gen].get(0, []) if w == world]
        assert client.job(job)["state"] in ("running", "admitted"), client.job(job)
        return len(eps) >= n

    def rescaled(old: int, new: int) -> Any:
        evs = alloc.store.events(job=job, kind="restarted_on_new_gpus")
        found = [e for e in evs if (e.data["old_gpus"], e.data["new_gpus"]) == (old, new)]
        if not found and time.monotonic() > t0[0] + 50:
            tail = [(e.kind, e.job, e.data) for e in alloc.store.events()][-8:]
            pytest.fail(f"no rescale {old}->{new}: {tail}, {alloc.last_round_error}")
        return found

    wait_polling(logs, lambda: epochs_at(0, 1, 2), 120)  # two snapshots saved
    client.cancel(first)  # a GPU frees up: 1 -> 2
    t0 = [time.monotonic()]
    wait_polling(logs, lambda: rescaled(1, 2), 60)
    wait_polling(logs, lambda: epochs_at(1, 2, 2), 120)
    second = f"fb{rid}"  # a deadline job takes one back: 2 -> 1
    assert client.submit(rate_job_spec(second, 5000, 600, linear, max_gpus=1))["admitted"]
    t0[0] = time.monotonic()
    wait_polling(logs, lambda: rescaled(2, 1), 60)

    def completed() -> Any:
        j = client.job(job)
        assert j["state"] in ("running", "admitted", "completed"), j
        return j if j["state"] == "completed" else None

    wait_polling(logs, completed, 180)
    kinds = [e.kind for e in alloc.store.events(job=job)]
    assert "failed" not in kinds, kinds
    assert "restarted" not in kinds, kinds

    gens = logs.generations()
    assert len(gens) == 3, [sorted(g) for g in gens]
    worlds = [{w for eps in g.values() for _, w in eps} for g in gens]
    assert worlds == [{1}, {2}, {1}]
    assert sorted(gens[1]) == [0, 1]  # both ranks of the 2-GPU start trained
    firsts = [g[0][0][0] for g in gens]
    lasts = [g[0][-1][0] for g in gens]
    resumed = logs.resumed()
    # each restart resumed from the snapshot: the epoch counter continues, never restarts
    assert firsts[0] == 0, (firsts, resumed)
    assert resumed == firsts[1:], (firsts, resumed)
    assert 2 <= firsts[1] <= lasts[0] + 1
    assert firsts[1] < firsts[2] <= lasts[1] + 1
    assert lasts[2] == EPOCHS - 1
    for g in gens:
        eps = [e for e, _ in g[0]]
        assert eps == list(range(eps[0], eps[0] + len(eps))), eps
    assert snapshot_epochs(docker_client, labeled(), tmp_path / "ckpt" / job) == EPOCHS
    # host networking: every start ran on the port the allocator keeps in the job's record
    port = alloc.store.get_job(job).spec.master_port
    assert isinstance(port, int)
    assert port != alloc.store.get_job(second).spec.master_port
    assert len(logs.config) >= 4
    flag = f"--master_port={port}" if launcher == "torchrun" else f"MASTER_PORT={port}"
    assert all(flag in conf.split() for conf in logs.config.values()), (flag, logs.config)
    client.cancel(second)  # the fixture removes the rest
