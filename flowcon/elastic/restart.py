"""Elastic training helper: the job side of scaling by checkpoint-restart (paper section 5).

(``flowcon.elastic`` re-exports this module's names; its ``main`` picks this mode or the
stop-free one, ``flowcon.elastic.stopfree``.)

The executor stops a job with SIGTERM and restarts it on a new GPU set with a new
environment. A training script written as single-device code becomes elastic with::

    from flowcon import elastic

    def train(run: elastic.Elastic) -> None:
        model = run.wrap(Net())                     # DDP when WORLD_SIZE > 1
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in run.steps(model, opt):          # resumes after the last checkpoint
            x, y = next_batch(run.local_batch_size)
            ...
            run.report(step=step, loss=loss.item())

    if __name__ == "__main__":
        elastic.main(train)

``main`` spawns LOCAL_WORLD_SIZE worker processes when the container holds several GPUs
(like torchrun), each worker joins the process group (NCCL when each has a GPU of its own,
gloo on CPUs or when workers share a GPU: ``flowcon.elastic.devices``), and the
step loop checkpoints model, optimizer and step every K steps and on SIGTERM, atomically, so
a restart with a different world size continues the step counter. The global batch size stays
fixed; each rank's share is ``local_batch_size``.

Pass ``scheduler=``, ``scaler=`` (GradScaler), ``sampler=`` (``ElasticSampler``) and
``batch_scaling=`` (``HybridScaling``) to ``steps`` and the checkpoint holds everything a
restart needs to go on exactly as if it had not stopped (``flowcon.elastic.state``): also the
random generators of every rank (each rank gets its own back when it exists after the restart).

Exit codes: 0 when all iterations are done, 143 when stopped by a signal after a checkpoint.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import flowcon.elastic.rendezvous as rdv
import flowcon.elastic.safe_load as safe_load
from flowcon import contract
from flowcon.contract import EVENT_DONE, EXIT_PREEMPTED
from flowcon.elastic.data import ElasticSampler as ElasticSampler
from flowcon.elastic.devices import apply_gpu_share, restart_backend
from flowcon.elastic.lr import HybridScaling as HybridScaling
from flowcon.elastic.state import Stateful, capture, restore, rng_state, set_rng_state
from flowcon.elastic.straggler import StragglerDetector as StragglerDetector
from flowcon.report import report as _report

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
DONE_FILE = "DONE"


@dataclass(frozen=True)
class ElasticEnv:
    """What the executor tells a worker (torchrun's variables plus FLOWCON_*)."""

    job: str = "local"
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    global_batch_size: int = 1
    iterations: int | None = None
    checkpoint_dir: Path = Path("checkpoints")
    checkpoint_every: int = 100
    gpus: tuple[str, ...] = field(default_factory=tuple)
    worker: bool = False  # LOCAL_RANK was set: this process is one worker, not the launcher

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ElasticEnv:
        e = os.environ if env is None else env

        def num(key: str, default: int) -> int:
            raw = e.get(key, "")
            try:
                return int(raw) if raw.strip() else default
            except ValueError:
                raise ValueError(f"environment {key}={raw!r} is not an integer") from None

        world = num(contract.ENV_WORLD_SIZE, 1)
        rank = num(contract.ENV_RANK, 0)
        local_world = num(contract.ENV_LOCAL_WORLD_SIZE, 1)
        if world < 1 or not 0 <= rank < world or local_world < 1:
            raise ValueError(
                f"inconsistent WORLD_SIZE={world} RANK={rank} LOCAL_WORLD_SIZE={local_world}"
            )
        gbs = num(contract.ENV_GLOBAL_BATCH_SIZE, 0)
        gbs = gbs or num(contract.ENV_LOCAL_BATCH_SIZE, 1) * world
        iters = num(contract.ENV_ITERATIONS, 0) or None
        gpus = tuple(g for g in e.get(contract.ENV_GPUS, "").split(",") if g)
        return ElasticEnv(
            job=e.get(contract.ENV_JOB, "local"),
            world_size=world,
            rank=rank,
            local_rank=num(contract.ENV_LOCAL_RANK, 0),
            local_world_size=local_world,
            node_rank=num(contract.ENV_GROUP_RANK, num(contract.ENV_NODE_RANK, 0)),
            master_addr=e.get(contract.ENV_MASTER_ADDR, "127.0.0.1") or "127.0.0.1",
            master_port=num(contract.ENV_MASTER_PORT, 29500),
            global_batch_size=gbs,
            iterations=iters,
            checkpoint_dir=Path(e.get(contract.ENV_CHECKPOINT_DIR, "checkpoints")),
            checkpoint_every=max(1, num(contract.ENV_CHECKPOINT_EVERY, 100)),
            gpus=gpus,
            worker=contract.ENV_LOCAL_RANK in e,
        )

    @property
    def local_batch_size(self) -> int:
        """This rank's share of the global batch; the shares add up to the global batch."""
        base, extra = divmod(self.global_batch_size, self.world_size)
        return base + (1 if self.rank < extra else 0)


def shard(items: Sequence[Any], rank: int, world_size: int) -> Sequence[Any]:
    """Rank ``rank``'s disjoint slice of ``items`` (strided, so shards differ by at most one)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    return items[rank::world_size]


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(directory: Path, state: Mapping[str, Any]) -> Path:
    """Write ``state`` atomically: a reader sees the old file or the new one, never half."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / CHECKPOINT_FILE
    tmp = directory / f".{CHECKPOINT_FILE}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        torch.save(dict(state), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    with contextlib.suppress(OSError):  # make the rename durable too
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return final


def load_checkpoint(directory: Path) -> dict[str, Any] | None:
    """The checkpoint in ``directory`` (None: none yet), loaded through
    ``flowcon.elastic.safe_load``: tensors and plain Python values only (numbers, strings,
    None, lists, tuples, dicts, state dicts), never code. A file holding
    anything else (a pickle that would run code when loaded, an object of the user's own
    class) is refused with ``RuntimeError``, logged, and nothing of it runs."""
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        state = safe_load.safe_torch_load(path)
    except safe_load.RefusedGlobal as exc:
        log.error(
            "checkpoint %s refused: it holds more than tensors and plain Python values: %s",
            path,
            exc,
        )
        raise RuntimeError(
            f"checkpoint {path} refused: it holds more than tensors and plain Python values: {exc}"
        ) from None
    except Exception as exc:  # a torn file cannot happen with save_checkpoint, but be loud
        raise RuntimeError(f"checkpoint {path} is unreadable: {exc}") from exc
    if not isinstance(state, dict) or "step" not in state:
        raise RuntimeError(f"checkpoint {path} has no step")
    return state


# ---------------------------------------------------------------- the run


class Elastic:
    """One worker's view of an elastic job: process group, sharding, checkpoints, stop flag."""

    def __init__(
        self,
        env: ElasticEnv | None = None,
        checkpoint_every: int | None = None,
        install_signal_handlers: bool = True,
        timeout_s: float = 300.0,
    ) -> None:
        self.env = env or ElasticEnv.from_env()
        self.checkpoint_every = checkpoint_every or self.env.checkpoint_every
        self.stop_requested = False
        self.preempted = False
        self.finished = False
        self.step = 0
        self._timeout_s = timeout_s
        self._pg = False
        if torch.cuda.is_available() and self.env.gpus:
            self.device = torch.device("cuda", self.env.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    # -- setup

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def local_batch_size(self) -> int:
        return self.env.local_batch_size

    @property
    def is_main(self) -> bool:
        return self.env.rank == 0

    def setup(self) -> None:
        """Join the process group when there is more than one worker (idempotent)."""
        if self._pg or self.env.world_size == 1:
            return
        visible = torch.cuda.device_count() if self.device.type == "cuda" else 0
        backend = restart_backend(self.device, self.env.local_world_size, visible)
        timeout = _dt.timedelta(seconds=self._timeout_s)
        secret = os.environ.get(contract.ENV_RENDEZVOUS_SECRET, "")
        if not secret:  # a job started without one (by hand): torch's own rendezvous
            dist.init_process_group(
                backend=backend,
                init_method=f"tcp://{self.env.master_addr}:{self.env.master_port}",
                world_size=self.env.world_size,
                rank=self.env.rank,
                timeout=timeout,
            )
        else:
            dist.init_process_group(
                backend=backend,
                store=self._secret_store(secret, timeout),
                world_size=self.env.world_size,
                rank=self.env.rank,
                timeout=timeout,
            )
        self._pg = True

    def _secret_store(self, secret: str, timeout: _dt.timedelta) -> Any:
        """The group's store under the job's rendezvous secret: rank 0 serves it and
        publishes the secret's proof; the others check the proof before anything else, so
        a process on the job's port without the secret can neither join nor pose as the
        store (flowcon/elastic/rendezvous.py)."""
        host, port = self.env.master_addr, self.env.master_port
        tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's typed exports)
        main = self.env.rank == 0
        raw = tcp_store(host, port, is_master=main, wait_for_workers=False, timeout=timeout)
        if main:
            rdv.publish_proof(raw, secret)
        else:
            rdv.check_proof(raw, secret, f"{host}:{port}")
        self._raw_store = raw  # the server lives while this object does
        return getattr(dist, "PrefixStore")(rdv.secret_prefix(secret), raw)  # noqa: B009

    def close(self) -> None:
        if self._pg:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
            self._pg = False

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move to this worker's device; DistributedDataParallel when WORLD_SIZE > 1."""
        model = model.to(self.device)
        if self.env.world_size == 1:
            return model
        self.setup()
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def sampler(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> Any:
        """A DistributedSampler over ``dataset`` for this rank (call ``set_epoch`` per epoch)."""
        from torch.utils.data.distributed import DistributedSampler

        return DistributedSampler(
            dataset,
            num_replicas=self.env.world_size,
            rank=self.env.rank,
            shuffle=shuffle,
            seed=seed,
        )

    def shard(self, items: Sequence[Any]) -> Sequence[Any]:
        return shard(items, self.env.rank, self.env.world_size)

    # -- checkpoints

    def resume(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        *,
        scheduler: Stateful | None = None,
        scaler: Stateful | None = None,
        sampler: Stateful | None = None,
        batch_scaling: Stateful | None = None,
    ) -> int:
        """Load the last checkpoint (read by rank 0, broadcast to the others); returns its step.

        Only rank 0 needs to see the checkpoint directory, so the other ranks may run on
        nodes without the shared volume. Objects passed are restored from the checkpoint
        (``flowcon.elastic.state.restore``); rank r gets rank r's random generator states
        back when the checkpoint has them (rank 0's for a checkpoint of one rank).
        """
        state = load_checkpoint(self.env.checkpoint_dir) if self.is_main else None
        if self.env.world_size > 1:
            self.setup()
            box = [state]
            dist.broadcast_object_list(box, src=0)
            state = box[0]
        if state is None:
            self.step = 0
            return 0
        self.step = restore(
            state,
            model,
            optimizer,
            scheduler,
            scaler,
            sampler,
            batch_scaling=batch_scaling,
            rng=False,
            copy=False,  # read from the file for this restore only
        )
        if batch_scaling is not None:
            follow_batch(batch_scaling, self.env.global_batch_size, self.step + 1)
        per_rank = state.get("rng_ranks")
        if per_rank is not None:
            if self.rank < len(per_rank):
                set_rng_state(per_rank[self.rank])
        elif self.is_main and state.get("rng") is not None:
            set_rng_state(state["rng"])
        return self.step

    def checkpoint(
        self,
        model: torch.nn.Module,
        optimizer: Any,
        step: int,
        *,
        scheduler: Stateful | None = None,
        scaler: Stateful | None = None,
        sampler: Stateful | None = None,
        batch_scaling: Stateful | None = None,
        all_ranks: bool = False,
    ) -> None:
        """Rank 0 writes the training state (``flowcon.elastic.state.capture``: model,
        optimizer, step, the objects passed, its random generators); the model is identical
        on every rank.

        ``all_ranks=True`` means every rank calls this at the same step (``steps`` does):
        the ranks' random generator states are gathered into the checkpoint (a collective).
        """
        rng_ranks: list[Any] | None = None
        if all_ranks and self.env.world_size > 1 and self._pg:
            rng_ranks = [None] * self.env.world_size
            dist.all_gather_object(rng_ranks, rng_state())
        if not self.is_main:
            return
        state = capture(
            model,
            optimizer,
            step=step,
            scheduler=scheduler,
            scaler=scaler,
            sampler=sampler,
            batch_scaling=batch_scaling,
            copy=False,  # serialised right away
        )
        state.update(
            world_size=self.env.world_size,
            global_batch_size=self.env.global_batch_size,
            time=time.time(),
        )
        if rng_ranks is not None:
            state["rng_ranks"] = rng_ranks
        save_checkpoint(self.env.checkpoint_dir, state)

    # -- the loop

    def _agreed_stop(self) -> bool:
        """Every rank stops at the same step: a signal seen by any rank stops all."""
        if self.env.world_size == 1 or not self._pg:
            return self.stop_requested
        flag = torch.tensor([1.0 if self.stop_requested else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def steps(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        iterations: int | None = None,
        *,
        scheduler: Stateful | None = None,
        scaler: Stateful | None = None,
        sampler: Stateful | None = None,
        batch_scaling: Stateful | None = None,
    ) -> Iterator[int]:
        """Yield 1-based step numbers after the checkpointed one, up to ``iterations``.

        After each step: checkpoint every K steps; on SIGTERM checkpoint and stop (the loop
        ends and ``preempted`` is set); after the last step checkpoint and mark the job done.
        ``scheduler``, ``scaler``, ``sampler`` and ``batch_scaling`` are resumed and
        checkpointed with the model (the caller steps them in the loop body as usual).
        """
        total = iterations if iterations is not None else self.env.iterations
        if total is None:
            raise ValueError("no iteration count: pass iterations= or set FLOWCON_ITERATIONS")
        extra: dict[str, Any] = {
            "scheduler": scheduler,
            "scaler": scaler,
            "sampler": sampler,
            "batch_scaling": batch_scaling,
        }
        start = self.resume(model, optimizer, **extra)
        if start >= total:
            self.finished = True
            self._mark_done(total)
            return
        step = start
        while step < total:
            if self._agreed_stop():
                self.preempted = True
                if step > start:
                    self.checkpoint(model, optimizer, step, all_ranks=True, **extra)
                self.report(step=step, event="preempted")
                return
            yield step + 1
            step += 1
            self.step = step
            if step % self.checkpoint_every == 0 and step < total:
                self.checkpoint(model, optimizer, step, all_ranks=True, **extra)
        self.checkpoint(model, optimizer, total, all_ranks=True, **extra)
        self.finished = True
        self._mark_done(total)

    def _mark_done(self, total: int) -> None:
        if self.is_main:
            (self.env.checkpoint_dir / DONE_FILE).write_text(f"{total}\n")
            self.report(step=total, event=EVENT_DONE)  # the completion marker

    def report(self, **metrics: Any) -> None:
        """A metric line (flowcon.report) from rank 0 only, so each step is counted once."""
        if self.is_main:
            metrics.setdefault("world_size", self.env.world_size)
            _report(**metrics)

    @property
    def exit_code(self) -> int:
        return EXIT_PREEMPTED if self.preempted and not self.finished else 0


def follow_batch(batch_scaling: Any, global_batch: int, step: int) -> None:
    """A restart with another global batch than the checkpoint's (the executor starts the
    new containers with the batch picked for their GPU count): ``batch_scaling`` (a
    ``HybridScaling``), restored at the checkpoint's batch, moves to ``global_batch`` from
    ``step``, the first step after the resume, so the learning rate ramps as at a stop-free
    switch (Elan III). The data position needs nothing: it counts samples."""
    current = getattr(batch_scaling, "global_batch", None)
    change = getattr(batch_scaling, "set_global_batch", None)
    if (
        isinstance(current, int)
        and callable(change)
        and global_batch >= 1
        and current != global_batch
    ):
        change(global_batch, step)


# ---------------------------------------------------------------- launching


def main(train: Callable[[Elastic], None], checkpoint_every: int | None = None) -> None:
    """Restart mode's entry point (``flowcon.elastic.main`` picks it): spawn the container's
    workers if it has several GPUs, else train here."""
    env = ElasticEnv.from_env()
    apply_gpu_share()  # the agent's MPS share, before CUDA starts (workers inherit it)
    if env.local_world_size > 1 and not env.worker:
        code = launch_workers(env)
        sys.stdout.flush()
        os._exit(code)
    run = Elastic(env, checkpoint_every=checkpoint_every)
    try:
        train(run)
    finally:
        run.close()
    # The checkpoint is fsynced: skip torch's slow interpreter teardown, which would count
    # against the rescale's stop time (and the grace period).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(run.exit_code)


def launch_workers(env: ElasticEnv, argv: Sequence[str] | None = None) -> int:
    """Re-run this program once per local GPU with RANK/LOCAL_RANK set (torchrun's job).

    SIGTERM/SIGINT are forwarded so every worker checkpoints; if one worker fails the
    others are stopped. Returns the exit code for the container.
    """
    if argv is not None:
        cmd = list(argv)
    else:  # the interpreter's own options and -m survive in orig_argv
        cmd = [sys.executable, *getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:]]
    children: list[subprocess.Popen[bytes]] = []
    for local in range(env.local_world_size):
        child_env = dict(os.environ)
        child_env.update(
            {
                contract.ENV_RANK: str(env.rank + local),
                contract.ENV_LOCAL_RANK: str(local),
                contract.ENV_GROUP_RANK: str(env.node_rank),
            }
        )
        children.append(subprocess.Popen(cmd, env=child_env))

    def forward(signum: int, frame: Any) -> None:
        for c in children:
            if c.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes: dict[int, int] = {}
    while len(codes) < len(children):
        for i, c in enumerate(children):
            if i in codes:
                continue
            rc = c.poll()
            if rc is None:
                continue
            codes[i] = rc
            if rc not in (0, EXIT_PREEMPTED):  # a crash: stop the rest (they would hang)
                forward(signal.SIGTERM, None)
        time.sleep(0.05)
    bad = [rc for rc in codes.values() if rc not in (0, EXIT_PREEMPTED)]
    if bad:
        return bad[0] if bad[0] > 0 else 128 - bad[0]
    return EXIT_PREEMPTED if EXIT_PREEMPTED in codes.values() else 0
