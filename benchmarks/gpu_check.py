"""The GPU side, proven on one GPU host in a few minutes (no Docker needed).

    python3 benchmarks/gpu_check.py            # on a GPU host (NVML, CUDA)
    python3 benchmarks/gpu_check.py --cpu      # the same steps on CPU, against fakes (CI)

Sections, each one object of the last line's JSON (``{"ok": ..., "mode": ..., ...}``):

``inventory``  NVML's GPUs and topology as the allocator reads them
               (``flowcon.engine.gpus.discover``: UUIDs, links, placement tree, topology).
``restart``    a short training job through ``flowcon.elastic`` (restart mode) on the GPU:
               a reference run to the end; a second run killed with SIGKILL after its
               checkpoint and resumed from it. ``bit_identical``: the resumed run's final
               model and optimizer equal the reference's bit for bit (so model, optimizer,
               data position and the CUDA RNG came back exactly); ``first_step_s``: process
               start to its first step, fresh and resumed.
``stopfree``   a stop-free job of one worker, a second worker process joining it on the
               same GPU (gloo with CUDA tensors; NCCL when the host has two GPUs and the
               joiner gets the second) and leaving again; ``join_gap_s`` / ``leave_gap_s``:
               the longest time without a step line around each event.
``measure``    the agent's GPU measurement (``GpuSampler`` + ``flowcon.core.gpu_usage``) of
               those worker processes, each taken as a container of one PID, against
               ``nvidia-smi --query-compute-apps`` (processes and memory).
``mps``        whether the CUDA MPS control daemon can be started here; if so two clients
               under ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` 50/50 and then 80/20, measured in
               their step rates (``ratio`` of the first's rate to the second's).
``isolation``  on a host with a Docker engine and the NVIDIA runtime: two job containers
               created by the executor's engine backend from an image built here with
               ``ENV NVIDIA_VISIBLE_DEVICES=all`` (and a spec env saying ``all`` too): the
               first holds GPU 0 by a device request, the second GPU 1 (or no GPU on a
               one-GPU host) by the environment alone, as a declared inventory's worker;
               each must list only its own GPUs (``nvidia-smi -L`` inside). Skipped, with
               the reason, without GPUs, an engine, the NVIDIA runtime or the image; reports
               the node's toolkit setting (``flowcon.agent.toolkit``) as well.

With ``--cpu`` the same code runs on the CPU: NVML is ``flowcon.testing.fake_nvml`` (its
processes are the real worker PIDs), ``nvidia-smi`` is read from that fake, the training
runs on the CPU device with gloo, and MPS is reported absent. That proves the script and
the plumbing, not the hardware: ``mode`` says which it was.

Exit code 0 when every section that could run passed; the last line is the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()
FEATURES = 32
BATCH = 64
ITERATIONS = 40
CHECKPOINT_EVERY = 10
KILL_AFTER = 25  # steps: after the checkpoint at 20, before the end


# ---------------------------------------------------------------- the workers (subprocesses)


def _model(torch: Any) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),  # draws from the device's generator every step
        torch.nn.Linear(64, 1),
    )


def _digest(torch: Any, model: Any, opt: Any) -> str:
    """SHA-256 over the model's and optimizer's tensors, in a fixed order."""
    h = hashlib.sha256()
    for _k, v in sorted(model.state_dict().items()):
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    for _i, st in sorted(opt.state_dict()["state"].items()):
        for _k, v in sorted(st.items()):
            if isinstance(v, torch.Tensor):
                h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _step(torch: Any, model: Any, opt: Any, dev: Any, ddp: Any = None) -> float:
    x = torch.randn(BATCH, FEATURES, device=dev)  # the data: from the restored generator
    y = x[:, :1] * 0.5 + 0.1
    loss = torch.nn.functional.mse_loss((ddp or model)(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def _first_step(started: float, rank: int) -> None:
    from flowcon.elastic.stopfree import process_start_time

    line = {"event": "first_step", "since_start_s": round(time.time() - started, 3)}
    line["since_process_start_s"] = round(time.time() - process_start_time(), 3)
    line["rank"] = rank
    print(json.dumps(line), flush=True)


def worker_restart() -> None:
    """A restart-mode job: Adam on a small MLP, data drawn on the device each step."""
    import torch

    from flowcon import elastic

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    started = time.time()
    step_s = float(os.environ.get("GC_STEP_S") or 0)

    def train(run: elastic.Elastic) -> None:
        model = run.wrap(_model(torch))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        first = True
        for step in run.steps(model, opt):
            loss = _step(torch, model, opt, run.device)
            if first:
                _first_step(started, run.rank)
                first = False
            run.report(step=step, loss=loss, device=str(run.device))
            time.sleep(step_s)
        if run.finished:
            out = {"event": "final", "sha": _digest(torch, model, opt), "device": str(run.device)}
            print(json.dumps(out), flush=True)

    elastic.main(train)


def worker_stopfree() -> None:
    """A stop-free worker: the same model, DDP over each generation's group."""
    import torch

    from flowcon.elastic.stopfree import StopFree, run_worker

    torch.set_num_threads(1)
    started = time.time()
    step_s = float(os.environ.get("GC_STEP_S") or 0)

    def train(run: StopFree) -> None:
        model = _model(torch)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        ddp = run.wrap(model)
        first = True
        for step in run.steps(model, opt):
            loss = _step(torch, model, opt, run.device, ddp)
            if first:
                _first_step(started, run.rank)
                first = False
            run.report(step=step, loss=loss, world_size=run.world_size)
            time.sleep(step_s)

    run_worker(train, timeout_s=30.0, straggler=None, leave_settle_s=0.0)


def worker_mps() -> None:
    """An MPS client: matrix products for GC_SECONDS, then its steps per second."""
    import torch

    dev = torch.device("cuda", 0)
    a = torch.randn(2048, 2048, device=dev)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < float(os.environ.get("GC_SECONDS") or 5):
        a = torch.tanh(a @ a * 1e-3)
        n += 1
        if n % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(json.dumps({"event": "rate", "steps_per_s": n / (time.perf_counter() - t0)}))


# ---------------------------------------------------------------- the check (this process)


class Proc:
    """A worker process whose JSON stdout lines are collected with their arrival time."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.log = log
        self.p = subprocess.Popen(
            [sys.executable, str(SELF), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(log, "wb"),  # noqa: SIM115 (the child writes it)
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for raw in self.p.stdout:
            text = raw.decode(errors="replace").strip()
            if text.startswith("{"):
                try:
                    self.lines.append((time.time(), json.loads(text)))
                except ValueError:
                    continue

    def events(self, name: str) -> list[dict[str, Any]]:
        return [d for _t, d in list(self.lines) if d.get("event") == name]

    def steps(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, d) for t, d in list(self.lines) if "step" in d and "event" not in d]

    def last_step(self) -> int:
        s = self.steps()
        return int(s[-1][1]["step"]) if s else 0

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.p.poll() is not None and not cond():
                raise RuntimeError(
                    f"worker exited {self.p.returncode} before {what}: {self.tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.tail()}")
            time.sleep(0.02)

    def finish(self, timeout: float) -> int:
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self._t.join(5)
        return rc

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def base_env(mode: str, tmp: Path, gpu: str = "", **extra: str) -> dict[str, str]:
    """A worker's environment; ``gpu``: the UUID of the one GPU it sees (as in a container
    given that GPU: its ``cuda:0``), also its ``FLOWCON_GPUS``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "GC_MODE": mode,
        "OMP_NUM_THREADS": "1",
        "FLOWCON_ADAPT_THREADS": "0",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # deterministic cuBLAS (bit-identical resume)
        **extra,
    }
    if mode == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # no CUDA even where the host has some
    elif gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["FLOWCON_GPUS"] = gpu
    return env


def check_inventory(nvml: Any) -> dict[str, Any]:
    from flowcon.engine.gpus import discover

    inv = discover({}, nvml=nvml)
    nodes = inv.gpu_nodes()
    out: dict[str, Any] = {"source": inv.source, "gpus": inv.total_gpus, "tree": inv.tree()}
    if nodes:
        node = nodes[0]
        out["node"] = node.name
        out["devices"] = [
            {"index": g.index, "uuid": g.uuid, "name": g.name, "memory_bytes": g.memory_bytes}
            for g in node.gpus
        ]
        out["links"] = {
            f"{a}-{b}": node.link(a, b).name
            for a in range(node.count)
            for b in range(a + 1, node.count)
        }
        topo = inv.to_topology()
        out["topology"] = {"nodes": topo.nodes_per_switch, "gpus_per_node": topo.gpus_per_node}
    out["ok"] = inv.total_gpus > 0 and inv.source.startswith("nvml")
    return out


def check_restart(mode: str, tmp: Path, gpu_uuid: str) -> dict[str, Any]:
    env = base_env(
        mode,
        tmp,
        gpu_uuid,
        FLOWCON_ITERATIONS=str(ITERATIONS),
        FLOWCON_CHECKPOINT_EVERY=str(CHECKPOINT_EVERY),
        GC_STEP_S="0.03",  # 15 steps (0.45 s) between the kill's step and the end
    )
    ref = Proc(
        ["--worker", "restart"],
        {**env, "FLOWCON_CHECKPOINT_DIR": str(tmp / "ref")},
        tmp / "ref.log",
    )
    rc_ref = ref.finish(120)
    ck = {**env, "FLOWCON_CHECKPOINT_DIR": str(tmp / "ck")}
    first = Proc(["--worker", "restart"], ck, tmp / "first.log")
    first.wait_for(f"step {KILL_AFTER}", lambda: first.last_step() >= KILL_AFTER, 120)
    first.p.send_signal(signal.SIGKILL)  # no checkpoint on the way out: resume from step 20
    first.finish(30)
    killed_at = first.last_step()
    again = Proc(["--worker", "restart"], ck, tmp / "resumed.log")
    rc_again = again.finish(120)
    rc_ref = ref.finish(120)
    resumed_from = min((int(d["step"]) for _t, d in again.steps()), default=0) - 1
    sha_ref = [e["sha"] for e in ref.events("final")]
    sha_again = [e["sha"] for e in again.events("final")]
    fresh = first.events("first_step")
    resumed = again.events("first_step")
    return {
        "ok": rc_ref == 0 and rc_again == 0 and bool(sha_ref) and sha_ref == sha_again,
        "bit_identical": bool(sha_ref) and sha_ref == sha_again,
        "device": (ref.events("final") or [{}])[0].get("device"),
        "killed_at_step": killed_at,
        "resumed_from_step": resumed_from,
        "first_step_s": {
            "fresh": fresh[0]["since_process_start_s"] if fresh else None,
            "resumed": resumed[0]["since_process_start_s"] if resumed else None,
        },
        "exit_codes": {"reference": rc_ref, "resumed": rc_again},
    }


def _gap(steps: list[tuple[float, dict[str, Any]]], lo: float, hi: float) -> float | None:
    """The longest time between two consecutive step lines that arrived in [lo, hi]."""
    ts = [t for t, _d in steps if lo <= t <= hi]
    if len(ts) < 2:
        return None
    return round(max(b - a for a, b in itertools.pairwise(ts)), 4)


def check_stopfree(
    mode: str, tmp: Path, uuids: list[str], measure: Callable[[dict[str, int]], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=60)
    )
    env = base_env(
        mode,
        tmp,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(store.port),
        FLOWCON_GLOBAL_BATCH_SIZE=str(BATCH),
        FLOWCON_ITERATIONS="100000",
        FLOWCON_CHECKPOINT_DIR=str(tmp / "sf"),
        FLOWCON_CHECKPOINT_EVERY="100000",
        GC_STEP_S="0.02",
        LOCAL_RANK="0",
    )
    own_gpu = len(uuids) > 1  # the joiner gets the second GPU: each rank has its own
    gpu_a, gpu_b = uuids[0], (uuids[1] if own_gpu else uuids[0])
    a = Proc(
        ["--worker", "stopfree"],
        {**env, **_gpu_env(mode, gpu_a), "FLOWCON_WORKER_ID": "a"},
        tmp / "sf-a.log",
    )
    b = Proc(  # it prepares (imports torch, builds the model) while the job trains
        ["--worker", "stopfree"],
        {
            **env,
            **_gpu_env(mode, gpu_b),
            "FLOWCON_WORKER_ID": "b",
            "FLOWCON_JOIN": "1",
            "FLOWCON_TARGET_WORLD": "2",
        },
        tmp / "sf-b.log",
    )
    a.wait_for("the join", lambda: bool(_scaled(a, 2)), 120)
    joined_at = _scaled(a, 2)[0]
    a.wait_for("steps at world 2", lambda: a.last_step() >= _step_at(a, joined_at) + 20, 60)
    measured = measure({"a": a.p.pid, "b": b.p.pid})
    b.p.send_signal(signal.SIGUSR1)
    rc_b = b.finish(60)
    a.wait_for("the leave", lambda: bool(_scaled(a, 1)), 60)
    left_at = _scaled(a, 1)[0]
    a.wait_for("steps after the leave", lambda: a.last_step() >= _step_at(a, left_at) + 10, 60)
    a.p.send_signal(signal.SIGTERM)
    rc_a = a.finish(60)
    steps = a.steps()
    joined = b.events("joined")
    scaled = [e for e in a.events("scaled")]
    from flowcon.contract import EXIT_LEFT, EXIT_PREEMPTED

    out = {
        "ok": rc_b == EXIT_LEFT and rc_a == EXIT_PREEMPTED and bool(joined),
        "own_gpus": own_gpu,
        "backend": (joined[0].get("backend") if joined else None),
        "join_gap_s": _gap(steps, joined_at - 2.0, joined_at + 2.0),
        "leave_gap_s": _gap(steps, left_at - 2.0, left_at + 2.0),
        "joiner_prepare_s": joined[0].get("prepare_s") if joined else None,
        "replicate_s": joined[0].get("replicate_s") if joined else None,
        "events": scaled,
        "exit_codes": {"a": rc_a, "b": rc_b},
    }
    return out, measured


def _scaled(p: Proc, world: int) -> list[float]:
    """Arrival times of the ``scaled`` events that made the job ``world`` workers."""
    return [
        t for t, d in list(p.lines) if d.get("event") == "scaled" and d.get("world_size") == world
    ]


def _gpu_env(mode: str, gpu: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": gpu, "FLOWCON_GPUS": gpu} if mode == "gpu" and gpu else {}


def _step_at(p: Proc, t: float) -> int:
    before = [int(d["step"]) for ts, d in p.steps() if ts <= t]
    return before[-1] if before else 0


def nvidia_smi_apps() -> list[dict[str, int]] | None:
    """``nvidia-smi --query-compute-apps`` (pid, used MiB), or None where it is missing."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    out = subprocess.run(
        [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            rows.append({"pid": int(parts[0]), "mem_mib": int(parts[1])})
    return rows


def measure_with(nvml: Any, fake: bool) -> Callable[[dict[str, int]], dict[str, Any]]:
    """The agent's measurement of the named PIDs (one container each) against nvidia-smi
    (the fake's own figures in the dry run, where its processes are the real PIDs)."""
    from flowcon.core.gpu_usage import attribute, gpu_share
    from flowcon.engine.gpus import GpuSampler

    def measure(pids: dict[str, int]) -> dict[str, Any]:
        if fake:
            for k, (_name, pid) in enumerate(sorted(pids.items())):
                nvml.run(pid=pid, gpu=0, mem_bytes=(200 + 50 * k) << 20, sm_util=0.3 + 0.1 * k)
        sampler = GpuSampler(nvml)
        sample = sampler.sample()
        time.sleep(1.0)  # a second sample: per-process utilisation needs samples since
        sample = sampler.sample() or sample
        sampler.close()
        if sample is None:
            return {"ok": False, "error": sampler.reason or "no NVML sample"}
        ours: dict[str, dict[str, Any]] = {}
        for name, pid in pids.items():
            used = attribute(sample, {pid})
            ours[name] = {
                "pid": pid,
                "gpus": [u.gpu for u in used],
                "mem_mib": round(sum(u.mem_bytes for u in used) / 2**20),
                "util": [u.util for u in used],
                "gpu_share": gpu_share(used, len(sample.devices)),
            }
        if fake:
            smi: list[dict[str, int]] | None = [
                {"pid": p.pid, "mem_mib": round((p.mem_bytes or 0) / 2**20)} for p in nvml.procs
            ]
        else:
            smi = nvidia_smi_apps()
        match = None
        if smi is not None:
            by_pid: dict[int, int] = {}
            for row in smi:
                by_pid[row["pid"]] = by_pid.get(row["pid"], 0) + row["mem_mib"]
            match = all(
                o["pid"] in by_pid and abs(by_pid[o["pid"]] - o["mem_mib"]) <= 2
                for o in ours.values()
            )
        return {
            "ok": bool(match),
            "agent": ours,
            "nvidia_smi": smi,
            "nvidia_smi_source": "fake NVML" if fake else "nvidia-smi",
            "matches": match,
        }

    return measure


def check_mps(mode: str, tmp: Path) -> dict[str, Any]:
    if mode == "cpu":
        return {"ok": True, "available": False, "reason": "CPU dry run: no GPU"}
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        return {"ok": True, "available": False, "reason": "nvidia-cuda-mps-control not found"}
    pipe, logs = tmp / "mps-pipe", tmp / "mps-log"
    pipe.mkdir()
    logs.mkdir()
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    start = subprocess.run(
        [exe, "-d"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if start.returncode != 0:
        return {
            "ok": True,
            "available": False,
            "reason": f"nvidia-cuda-mps-control -d exited {start.returncode}: "
            f"{start.stderr.strip()[:200]}",
        }
    try:
        rates = {}
        for shares in ((50, 50), (80, 20)):
            procs = [
                Proc(
                    ["--worker", "mps"],
                    {
                        **base_env("gpu", tmp),
                        **env,
                        "GC_SECONDS": "6",
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(s),
                    },
                    tmp / f"mps-{shares[0]}-{i}.log",
                )
                for i, s in enumerate(shares)
            ]
            got = []
            for p in procs:
                p.finish(90)
                r = p.events("rate")
                got.append(r[0]["steps_per_s"] if r else None)
            rates[f"{shares[0]}/{shares[1]}"] = got
        ratio = {k: (v[0] / v[1] if v[0] and v[1] else None) for k, v in rates.items()}
        moved = (
            ratio["80/20"] is not None
            and ratio["50/50"] is not None
            and ratio["80/20"] > ratio["50/50"] * 1.2
        )
        return {"ok": moved, "available": True, "rates": rates, "ratio": ratio}
    finally:
        subprocess.run([exe], input="quit\n", env=env, text=True, timeout=30, check=False)


ISOLATION_BASE = "flowcon/base:bookworm"  # glibc, for the nvidia-smi the toolkit mounts
ISOLATION_IMAGE = "flowcon/gpu-check-all:latest"
ISOLATION_LABEL = "flowcon.gpu-check"


def skipped(reason: str) -> dict[str, Any]:
    return {"ok": True, "skipped": True, "reason": reason}


def listed_uuids(text: str) -> list[str]:
    """The UUIDs ``nvidia-smi -L`` lists (``GPU 0: NAME (UUID: GPU-...)``; MIG lines too)."""
    out = []
    for line in text.splitlines():
        if "(UUID: " in line:
            out.append(line.split("(UUID: ", 1)[1].split(")", 1)[0].strip())
    return out


def _engine_client() -> Any:
    import docker

    return docker.from_env(timeout=60)


def check_isolation(
    mode: str, uuids: list[str], tmp: Path, connect: Callable[[], Any] = _engine_client
) -> dict[str, Any]:
    """Two job containers through the engine backend, each seeing only its GPUs."""
    if mode == "cpu":
        return skipped("CPU dry run: no GPU")
    if not uuids:
        return skipped("no GPU: NVML lists none")
    try:
        client = connect()
        info = client.info()
    except Exception as exc:
        return skipped(f"no engine: {type(exc).__name__}: {exc}")
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "nvidia" not in runtimes:
        return skipped(f"no nvidia runtime on the engine (runtimes: {', '.join(runtimes)})")
    from flowcon.agent.toolkit import read_toolkit

    toolkit = read_toolkit()
    out: dict[str, Any] = {
        "default_runtime": info.get("DefaultRuntime"),
        "toolkit": toolkit.state,
        "toolkit_detail": toolkit.detail,
    }
    try:
        client.images.get(ISOLATION_BASE)
    except Exception as exc:
        return {**skipped(f"no image {ISOLATION_BASE}: {exc}"), **out}
    import io

    dockerfile = f"FROM {ISOLATION_BASE}\nENV NVIDIA_VISIBLE_DEVICES=all\n"
    client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()),
        tag=ISOLATION_IMAGE,
        labels={ISOLATION_LABEL: "1"},
        rm=True,
    )
    jobs = {"a": uuids[:1], "b": uuids[1:2]}
    try:
        out["containers"] = {
            name: _isolated_run(client, name, gpus, real=name == "a", tmp=tmp)
            for name, gpus in jobs.items()
        }
    finally:
        for c in client.containers.list(
            all=True, ignore_removed=True, filters={"label": ISOLATION_LABEL}
        ):
            c.remove(force=True)
        client.images.remove(ISOLATION_IMAGE, force=True)
    out["ok"] = isolated(out["containers"])
    # b's GPU reached it by the environment alone only where the NVIDIA runtime is the
    # default runtime (docs/swarm.md); elsewhere it sees none, which is still isolation
    out["env_route"] = out["containers"]["b"]["listed"] == out["containers"]["b"]["own"]
    return out


def isolated(containers: dict[str, dict[str, Any]]) -> bool:
    """Each container lists only its own GPUs and was never told ``all``; the one with a
    device request lists exactly its own."""
    return all(
        set(c["listed"]) <= set(c["own"])
        and "all" not in c["visible"].split(",")
        and (not c["device_request"] or c["listed"] == c["own"])
        for c in containers.values()
    )


def _isolated_run(client: Any, name: str, gpus: list[str], real: bool, tmp: Path) -> dict[str, Any]:
    """One job container made by the engine backend; what it lists and what it was told."""
    from flowcon.executor.backend import WorkerRequest
    from flowcon.executor.backends.engine import EngineBackend
    from flowcon.executor.container_spec import ContainerSettings

    ckpt = tmp / f"isolation-{name}"
    ckpt.mkdir(exist_ok=True)
    script = "echo NVD=$NVIDIA_VISIBLE_DEVICES; nvidia-smi -L 2>&1 || true"
    worker = EngineBackend(client).create(
        WorkerRequest(
            name=f"flowcon-gpu-check-{name}",
            job=f"gpu-check-{name}",
            node="local",
            image=ISOLATION_IMAGE,
            command=("sh", "-c", script),
            env={"NVIDIA_VISIBLE_DEVICES": "all"},  # what a spec or an image would say
            labels={ISOLATION_LABEL: "1"},
            gpus=tuple(gpus),
            real_gpus=real,  # b: the environment alone, as a declared inventory's worker
            checkpoint_volume="",
            checkpoint_host_dir=str(ckpt),
            grace_s=1.0,
            network=None,
            settings=ContainerSettings(user="65534:65534"),  # nobody: jobs never run as root
        )
    )
    container = client.containers.get(worker.id)
    container.wait(timeout=120)
    text = container.logs().decode(errors="replace")
    visible = next((ln[4:] for ln in text.splitlines() if ln.startswith("NVD=")), "")
    return {
        "own": list(gpus),
        "listed": listed_uuids(text),
        "visible": visible,
        "device_request": real,
        "output": text[-400:],
    }


def run_check(mode: str, out_dir: Path | None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="flowcon-gpu-check-", dir=out_dir))
    result: dict[str, Any] = {"mode": mode, "tmp": str(tmp)}
    t0 = time.monotonic()
    if mode == "cpu":
        from flowcon.testing.fake_nvml import FakeNvml

        nvml: Any = FakeNvml(gpus=1, name="fake (CPU dry run)")
    else:
        import pynvml

        nvml = pynvml
    inv = _run("inventory", lambda: check_inventory(nvml))
    result["inventory"] = inv
    uuids = [d["uuid"] for d in inv.get("devices", [])] or ["cpu"]
    gpu_uuid = uuids[0] if mode == "gpu" else ""
    measure = measure_with(nvml, fake=mode == "cpu")
    box: dict[str, Any] = {}

    def stopfree() -> dict[str, Any]:
        sf, measured = check_stopfree(mode, tmp, uuids if mode == "gpu" else [""], measure)
        box["measure"] = measured
        return sf

    def restart() -> None:
        box["restart"] = _run("restart", lambda: check_restart(mode, tmp, gpu_uuid))

    # The dry run runs the two jobs side by side (it proves the steps, not the timings,
    # and stays under a minute); on a GPU one after the other, for clean figures.
    side = threading.Thread(target=restart) if mode == "cpu" else None
    if side is not None:
        side.start()
    else:
        restart()
    result["stopfree"] = _run("stopfree", stopfree)
    if side is not None:
        side.join()
    result["restart"] = box["restart"]
    result["measure"] = box.get("measure", {"ok": False, "error": "the stop-free job did not run"})
    result["mps"] = _run("mps", lambda: check_mps(mode, tmp))
    real = [str(d["uuid"]) for d in inv.get("devices", [])] if mode == "gpu" else []
    result["isolation"] = _run("isolation", lambda: check_isolation(mode, real, tmp))
    result["seconds"] = round(time.monotonic() - t0, 1)
    names = ("inventory", "restart", "stopfree", "measure", "mps", "isolation")
    result["ok"] = all(bool(result[k].get("ok")) for k in names)
    return result


def _run(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as exc:  # one section failing must not hide the others
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = round(time.monotonic() - t0, 2)
    print(
        f"{name}: {'ok' if out.get('ok') else 'FAILED'} {json.dumps(out, default=str)[:300]}",
        file=sys.stderr,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU against fakes")
    ap.add_argument("--out", type=Path, default=None, help="folder for the run's files")
    ap.add_argument("--worker", choices=("restart", "stopfree", "mps"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "restart":
        worker_restart()
    elif args.worker == "stopfree":
        worker_stopfree()
    elif args.worker == "mps":
        worker_mps()
        return 0
    result = run_check("cpu" if args.cpu else "gpu", args.out)
    print(json.dumps(result, default=str), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
