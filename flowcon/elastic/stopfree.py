"""Stop-free elastic training on torch.distributed: the job side (EDL section 4.2, Elan IV-V).

A plain DDP script becomes stop-free with ``elastic.main(train)`` and
``FLOWCON_SCALING=stopfree``; ``train`` receives a :class:`StopFree` (an ``Elastic`` with the
same ``wrap`` / ``steps`` / ``report``)::

    def train(run):
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler = ElasticSampler(len(data), seed=0)
        ddp = run.wrap(model)                          # DDP, rebuilt at each generation
        for step in run.steps(model, opt, iterations, sampler=sampler):
            idx = run.batch()                          # this rank's share of the global batch
            loss = loss_fn(ddp(x[idx]), y[idx])         # a mean over the local batch
            opt.zero_grad(); loss.backward(); opt.step()
            sampler.advance(run.global_batch_size)
            run.report(step=step, loss=loss.item())

What happens at each step boundary (``steps`` does it between two iterations):

- every rank contributes one :class:`~flowcon.elastic.rendezvous.Vote` to one ``all_gather``
  (leave/stop flags, its step time; rank 0 adds the joiners ready in the job's TCPStore), and
  all ranks take the same :func:`~flowcon.elastic.rendezvous.decide` decision;
- scale-out (EDL 4.2 "stop-free scaling"; Elan V.B): joiners imported torch and built the
  model while the job trained; once running + ready reach their target world, all switch:
  a fresh gloo group over a new store prefix (the old one is destroyed), then the state
  (``flowcon.elastic.state.capture``: model, optimizer, step, scheduler, scaler, RNG, data
  position) goes from the running ranks to the joiners by broadcast over the new group, no
  file (Elan IV's IO-free replication; ``sources`` > 1 spreads the tensors over several
  holders, Elan's concurrent replication);
- scale-in (EDL 4.2 "graceful exit"): a SIGUSR1'd rank, or a straggler (EDL 5.2), leaves at
  the boundary and its process exits ``EXIT_LEFT``; the others re-form, no state moves.
  Leave requests settle for ``FLOWCON_LEAVE_SETTLE_S`` (1 s) first, so that the leavers of
  one scale-in, signalled one after another, go at the same boundary;
- failure (EDL 4.2 "consistent recovery", in memory): a collective that fails (a peer killed)
  sends the survivors to the store, where they agree on the membership and on the newest step
  all of them hold an in-memory snapshot of; they restore it and re-form;
- SIGTERM: the whole job checkpoints and stops, as in restart mode.

The coordinator (the TCPStore the votes' joiners, the generations and the recoveries go
through) is no single point of failure: every container's launcher hosts a store
(``FLOWCON_STORE_ADDR``), the members of a generation know each other's, and the
coordinator is rank 0's container's. When that container leaves at a switch, the stayers
move to the first stayer's store (``rendezvous.hand_over``) and its launcher goes once it
sees ``moved``; when it dies, the survivors elect the first member store that answers
(``rendezvous.elect``) and recover there from their in-memory snapshots.

Gradients are averaged by a DDP communication hook weighted by each rank's share of the
global batch (local / global), so uneven shares give the global-batch mean exactly.

This module is the runtime (``StopFree``, one worker process: ``run_worker``) and
``main``; its pieces: ``flowcon.elastic.replication`` (the state to the joiners),
``flowcon.elastic.ddp`` (``ElasticDDP``, the weighted gradient hook, ``close_group``),
``flowcon.elastic.stopfree_env`` (settings from the environment),
``flowcon.elastic.launcher`` (the container's launcher process) and
``flowcon.elastic.rendezvous`` (votes, decisions, the store protocol).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import faulthandler
import inspect
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import torch
import torch.distributed as dist

import flowcon.elastic.rendezvous as rdv
import flowcon.elastic.state as _state
from flowcon import contract
from flowcon.elastic.ddp import ElasticDDP, _Comm, close_group
from flowcon.elastic.devices import apply_gpu_share, backend_for, identity
from flowcon.elastic.launcher import launch
from flowcon.elastic.redial import RedialingStore
from flowcon.elastic.replication import replicate
from flowcon.elastic.restart import Elastic, ElasticEnv
from flowcon.elastic.stopfree_env import (
    default_worker_id,
    leave_settle_from_env,
    settle_seconds,
    straggler_from_env,
)
from flowcon.report import report as _report

_PREFIX_STORE: Any = getattr(dist, "PrefixStore")  # noqa: B009 (not in torch's typed exports)
# Newer torch names the default group by ``_ranks`` (else by the process's count of groups
# so far); torch 1.13 (the training images') by ``group_name``. Either way the name must be
# the same on every rank: the count differs between a joiner and a worker that saw a failed
# switch, and the name is part of the group's store keys.
_INIT_PARAMS: Final = frozenset(inspect.signature(dist.init_process_group).parameters)


def _group_naming(gen: rdv.Generation) -> dict[str, Any]:
    if "_ranks" in _INIT_PARAMS:
        return {"_ranks": list(range(gen.world_size))}
    return {"group_name": f"flowcon-{gen.gen}"}


# ---------------------------------------------------------------- the runtime


def process_start_time() -> float:
    """Epoch seconds this process started (Linux /proc; now elsewhere)."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return time.time()


# A switch that has not finished after this plus 3 group timeouts dumps the stacks.
SWITCH_WATCHDOG_S: Final = 30.0
# Step times under this count as this: on a shared host, a 1 ms step that takes 1.3 ms ten
# times running is noise, not a straggler worth a scale-in.
STRAGGLER_FLOOR_S: Final = 0.01


def connect_store(host: str, port: int, timeout_s: float, secret: str | None = None) -> Any:
    """A client of a TCPStore of the job (one container's launcher hosts it). With the
    job's rendezvous ``secret`` (default: ``FLOWCON_RENDEZVOUS_SECRET``) the store must
    first prove it knows it (``rendezvous.RendezvousRefused`` if not), and every key goes
    under the secret's prefix."""
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's typed exports)
    raw = tcp_store(host, port, is_master=False, timeout=_dt.timedelta(seconds=timeout_s))
    if secret is None:
        secret = os.environ.get(contract.ENV_RENDEZVOUS_SECRET, "")
    if not secret:
        return raw
    rdv.check_proof(raw, secret, f"{host}:{port}")
    return _PREFIX_STORE(rdv.secret_prefix(secret), raw)


# How long the workers of the first generation wait for each other to start (a process
# group's rendezvous waits only ``timeout_s``); restart mode's group timeout.
START_WAIT_S: Final = 300.0

# How long an election waits for a member store to answer before trying the next one.
ELECT_CONNECT_S: Final = 5.0


def store_at(addr: str, timeout_s: float, probe_s: float | None = None) -> Any:
    """A client of the store at ``addr`` ("host:port"); ``probe_s``: first check within that
    many seconds that it answers (a connect to a dead container retries for the whole
    timeout)."""
    host, port = rdv.split_addr(addr)
    if probe_s is not None:
        connect_store(host, port, probe_s).add(f"{rdv.ROOT}ping", 0)
    return connect_store(host, port, timeout_s)


class StopFree(Elastic):
    """One worker of a stop-free job (see the module docstring).

    ``timeout_s`` is the gloo timeout of every generation's group: how long a collective
    waits for a silent peer before the survivors recover (a killed peer is seen at once).
    ``snapshot_every``: steps between in-memory snapshots (the most a failure loses).
    ``poll_s``: rank 0 reads the ready joiners from the store at most this often.
    ``sources``: holders that send replicated tensors concurrently (Elan IV; 2 holders sent
    128 MB to 2 joiners in 0.22-0.25 s against 0.25-0.28 s from one on a 2-core host, no
    difference at 16 MB). ``straggler``: a
    ``StragglerDetector`` keyed by worker id, None (off), or "env" (``FLOWCON_STRAGGLER``).
    ``leave_settle_s``: rank 0's window for leave requests (None: ``FLOWCON_LEAVE_SETTLE_S``,
    default 1 s; seconds >= 0, anything else is refused as the variable is); those of one
    scale-in leave together (``rendezvous.decide``).
    """

    def __init__(
        self,
        env: ElasticEnv | None = None,
        *,
        store: Any = None,
        join: bool | None = None,
        target_world: int | None = None,
        worker_id: str | None = None,
        timeout_s: float = 10.0,
        join_timeout_s: float = 3600.0,
        snapshot_every: int = 1,
        coordinate_every: int = 1,
        poll_s: float = 0.05,
        sources: int = 2,
        straggler: Any = "env",
        leave_settle_s: float | None = None,
        checkpoint_every: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        # the settings read from the environment (or given) are checked before anything is
        # set up: a bad value leaves no signal handler or store connection behind
        detector = straggler_from_env() if straggler == "env" else straggler
        settle = (
            leave_settle_from_env()
            if leave_settle_s is None
            else settle_seconds(leave_settle_s, f"leave_settle_s={leave_settle_s!r}")
        )
        env = env or ElasticEnv.from_env()
        super().__init__(
            env,
            checkpoint_every=checkpoint_every,
            install_signal_handlers=install_signal_handlers,
            timeout_s=timeout_s,
        )
        e = os.environ
        self.joiner = join if join is not None else e.get(contract.ENV_JOIN, "") not in ("", "0")
        tw = int(e.get(contract.ENV_TARGET_WORLD) or 0) if target_world is None else target_world
        self.target_world = tw or env.world_size
        self.worker_id = worker_id or e.get(contract.ENV_WORKER_ID) or default_worker_id()
        self._store_timeout_s = max(timeout_s, 30.0)
        if store is not None:
            self.store = store
        elif self.joiner:  # a dropped connection before admission: dial again (redial.py)
            self.store = self._joiner_store(f"{env.master_addr}:{env.master_port}")
        else:
            self.store = connect_store(env.master_addr, env.master_port, self._store_timeout_s)
        # where the coordinator is (the store the job's workers use), and this container's
        # own store (its launcher's; "": none, it cannot take over coordination)
        self.store_addr = f"{env.master_addr}:{env.master_port}"
        self.own_store = e.get(contract.ENV_STORE_ADDR, "")
        self.join_timeout_s = join_timeout_s
        self.snapshot_every = max(1, snapshot_every)
        self.coordinate_every = max(1, coordinate_every)
        self.sources = max(1, sources)
        self.straggler = detector
        self.leave_settle_s = settle
        self.leave_requested = False
        self._leave_at = 0.0  # time.monotonic() of the first leave request
        self._batch_request = 0
        self._admitting = 0  # joiner slots used up by the switch under way
        self.poll_s = poll_s
        self._joiners: tuple[tuple[int, int], float, list[rdv.Joiner], int] = (
            (-1, -1),
            0.0,
            [],
            0,
        )
        self._voted_joiners: list[rdv.Joiner] = []
        self.left = False
        self.gen = rdv.Generation(gen=0, world_size=env.world_size)
        self.comm = _Comm()
        self.backend = "gloo"  # of the generation's gradients and state (``_form``)
        self.events: list[dict[str, Any]] = []  # what this worker reported (tests read it)
        self._wrapped: ElasticDDP | None = None
        self._objs: dict[str, Any] = {}
        self._snaps: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=2)
        self._started = process_start_time()
        if install_signal_handlers:
            signal.signal(signal.SIGUSR1, self._on_leave)

    def _on_leave(self, signum: int, frame: Any) -> None:
        """SIGUSR1: leave at an agreed step boundary; a repeat (the launcher repeats the
        signal) keeps the first request's time, from which its settle window runs."""
        if not self.leave_requested:
            self._leave_at = time.monotonic()
            self.leave_requested = True

    # -- the script's API

    @property
    def global_batch_size(self) -> int:
        return self.env.global_batch_size

    @property
    def local_batch_size(self) -> int:
        sampler = self._objs.get("sampler")
        if sampler is not None:
            return int(sampler.local_size(self.env.global_batch_size, self.rank, self.world_size))
        return self.env.local_batch_size

    def set_global_batch(self, global_batch: int) -> None:
        """Ask for a new global batch from the next step boundary on (all ranks switch at the
        same step; rank 0's request counts). A joiner's FLOWCON_GLOBAL_BATCH_SIZE does the
        same at its scale event. ``steps(..., batch_scaling=HybridScaling)`` gets
        ``set_global_batch(new, first step)`` so its LR ramp starts there (Elan III)."""
        if global_batch < 1:
            raise ValueError(f"global batch must be positive, got {global_batch}")
        self._batch_request = global_batch

    def batch(self) -> list[int]:
        """This rank's sample ids of the coming step (needs ``steps(..., sampler=)``)."""
        sampler = self._objs.get("sampler")
        if sampler is None:
            raise RuntimeError("batch() needs steps(..., sampler=ElasticSampler(...))")
        return list(sampler.batch(self.env.global_batch_size, self.rank, self.world_size))

    def wrap(self, model: torch.nn.Module, **ddp_kwargs: Any) -> torch.nn.Module:
        """The module to call in the step loop: DDP over each generation's group
        (``ddp_kwargs`` go to every ``DistributedDataParallel`` built)."""
        model = model.to(self.device)
        self._wrapped = ElasticDDP(model, self.comm, **ddp_kwargs)
        return self._wrapped

    def report(self, **metrics: Any) -> None:
        """A metric line from rank 0 (see ``Elastic.report``), except for a step whose
        collective failed (a peer died): its gradients were not averaged and the loop redoes
        it after the recovery, so its line would count it twice while the ``recovered``
        event's ``lost_steps`` (completed steps rolled back) says 0. Found by the engine
        ``kill -9`` test: a kill during rank 0's all-reduce printed that step twice."""
        if self.comm.failed is not None and "event" not in metrics:
            return
        super().report(**metrics)

    def event(self, name: str, **fields: Any) -> None:
        """An ``event`` metric line from this worker, whatever its rank."""
        line = {"event": name, "worker": self.worker_id, **fields}
        self.events.append(line)
        _report(**line)

    # -- process groups

    def _form(self, gen: rdv.Generation, rank: int) -> None:
        """Become rank ``rank`` of generation ``gen`` (a fresh group over its store prefix)."""
        self.close()
        self.backend = "gloo"
        self.comm.group = None
        self.env = dataclasses.replace(self.env, rank=rank, world_size=gen.world_size)
        self.gen = gen
        if self.straggler is not None:
            # every member of a generation starts from the same (empty) streaks: a joiner's
            # detector is new, so a stayer's streaks from an earlier generation would make
            # its removals differ from the joiner's, and the ranks' decisions with them
            self.straggler.reset()
        if gen.world_size > 1:
            dist.init_process_group(
                backend="gloo",
                store=_PREFIX_STORE(gen.prefix, self.store),
                rank=rank,
                world_size=gen.world_size,
                timeout=_dt.timedelta(seconds=self._timeout_s),
                **_group_naming(gen),
            )
            self._pg = True
            ids: list[Any] = [None] * gen.world_size
            dist.all_gather_object(ids, (self.worker_id, identity(self.device), self.own_store))
            self.gen = dataclasses.replace(
                gen,
                workers=tuple(str(i[0]) for i in ids),
                stores=tuple(str(i[2]) for i in ids),
            )
            # every rank on its own GPU: gradients and state over NCCL, GPU to GPU; the
            # votes and objects stay on this gloo group (all ranks take the same choice)
            self.backend = backend_for([str(i[1]) for i in ids])
            if self.backend == "nccl":
                self.comm.group = dist.new_group(backend="nccl")
        else:
            self.gen = dataclasses.replace(gen, workers=(self.worker_id,), stores=(self.own_store,))

    def close(self) -> None:
        """Leave this generation's group (see :func:`close_group`)."""
        if self._pg:
            close_group(self._wrapped)
            self._pg = False

    def setup(self) -> None:  # the group is the generation's, formed by steps()
        return

    def _rebuild_ddp(self) -> None:
        self.comm.failed = None
        if self._wrapped is not None:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._wrapped.rebuild(self.world_size, ids, self.comm.group)

    # -- state

    def _capture(self, step: int, copy: bool) -> dict[str, Any]:
        o = self._objs
        return _state.capture(
            o["model"],
            o["optimizer"],
            step=step,
            scheduler=o.get("scheduler"),
            scaler=o.get("scaler"),
            sampler=o.get("sampler"),
            batch_scaling=o.get("batch_scaling"),
            extra={"global_batch": self.env.global_batch_size},
            copy=copy,
        )

    def _restore(self, state: Mapping[str, Any], copy: bool) -> int:
        o = self._objs
        step = _state.restore(
            state,
            o["model"],
            o["optimizer"],
            o.get("scheduler"),
            o.get("scaler"),
            o.get("sampler"),
            batch_scaling=o.get("batch_scaling"),
            copy=copy,
        )
        gbs = int(state.get("extra", {}).get("global_batch", 0) or 0)
        if gbs:
            self.env = dataclasses.replace(self.env, global_batch_size=gbs)
        self.step = step
        return step

    def _snapshot(self, step: int) -> None:
        if self._snaps and self._snaps[-1][0] == step:
            return
        self._snaps.append((step, self._capture(step, copy=True)))

    # -- the loop

    def steps(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        iterations: int | None = None,
        *,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: Any = None,
        batch_scaling: Any = None,
    ) -> Iterator[int]:
        """Yield 1-based step numbers; the job may change size between any two of them.

        The script advances the sampler after each step (``sampler.advance(
        run.global_batch_size)``, as in restart mode); then a snapshot is taken and the ranks
        vote. The loop ends when ``iterations`` are done (``finished``),
        on SIGTERM after a checkpoint (``preempted``), or when this worker left (``left``).
        """
        total = iterations if iterations is not None else self.env.iterations
        if total is None:
            raise ValueError("no iteration count: pass iterations= or set FLOWCON_ITERATIONS")
        self._objs = {
            "model": _state.unwrap(model),
            "optimizer": optimizer,
            "scheduler": scheduler,
            "sampler": sampler,
            "scaler": scaler,
            "batch_scaling": batch_scaling,
        }
        extra = {k: v for k, v in self._objs.items() if k not in ("model", "optimizer")}
        if self.joiner:
            if not self._join():
                return
            step = self.step
        else:
            if self.env.world_size > 1:  # all started before the group's own rendezvous
                rdv.arrive(self.store, 0, self.env.world_size, START_WAIT_S)
            self._form(rdv.Generation(gen=0, world_size=self.env.world_size), self.env.rank)
            step = self.resume(model, optimizer, **extra)
            self._rebuild_ddp()
        self._snapshot(step)
        # the ranks already voted at the boundary a joiner (or a recovery) comes in at
        skip_vote = self.joiner
        last = time.perf_counter()
        while step < total:
            if self.comm.failed is not None:
                step = self._recover()
                skip_vote = True
            coordinate = step % self.coordinate_every == 0  # the same steps on every rank
            if not skip_vote and coordinate:
                took = time.perf_counter() - last - self.comm.seconds
                outcome = self._boundary(step, took, model, optimizer, extra)
                if outcome == "stop":
                    return
                step = self.step
            skip_vote = False
            self._set_weight()
            self.comm.seconds = 0.0
            last = time.perf_counter()
            yield step + 1
            if self.comm.failed is not None:
                continue  # the step's gradients were not averaged: recover, redo it
            step += 1
            self.step = step
            if step % self.snapshot_every == 0:
                self._snapshot(step)
            if step % self.checkpoint_every == 0 and step < total:
                t0 = time.perf_counter()
                self._checkpoint(step, extra)
                # not the step's own work: the checkpoint's RNG gather waits for the slowest
                # rank, so counted in, every rank looked as slow as a straggler at each
                # checkpoint and its streak restarted (never removed with checkpoints
                # every <= 10 steps; found by the engine straggler test)
                self.comm.seconds += time.perf_counter() - t0
        self._checkpoint(total, extra)
        self.finished = True
        self._mark_done(total)

    def _set_weight(self) -> None:
        sampler = self._objs.get("sampler")
        gbs = self.env.global_batch_size
        if sampler is not None:
            n = sampler.batch_size(gbs)
            mine = sampler.local_size(gbs, self.rank, self.world_size)
        else:
            n, mine = gbs, self.env.local_batch_size
        # DDP is only there when world > 1; a lone rank's mean is already the global one
        self.comm.weight = mine / n if n else 0.0

    def _gather(self, vote: rdv.Vote) -> list[rdv.Vote]:
        if self.world_size == 1:
            return [vote]
        mine = torch.tensor(vote.row(), dtype=torch.float64)
        rows = [torch.zeros(rdv.VOTE_LEN, dtype=torch.float64) for _ in range(self.world_size)]
        dist.all_gather(rows, mine)
        return [rdv.Vote.from_row(r.tolist()) for r in rows]

    def _checkpoint(self, step: int, extra: dict[str, Any]) -> None:
        """The periodic / final / stop checkpoint (all ranks call it at the same step)."""
        o = self._objs
        try:
            self.checkpoint(o["model"], o["optimizer"], step, all_ranks=True, **extra)
        except Exception as exc:  # a peer died in the RNG gather: recover at the boundary
            if self.world_size == 1 or self.comm.failed is not None:
                raise
            self.comm.failed = exc

    def _boundary(
        self, step: int, took: float, model: Any, optimizer: Any, extra: dict[str, Any]
    ) -> str:
        """Vote, then act on the decision: 'go', 'stop' (the loop ends) or 'recovered'."""
        ready: list[rdv.Joiner] = []
        upto = 0
        if self.rank == 0:
            ready, upto = self._poll_joiners()
        self._voted_joiners = ready
        vote = rdv.Vote(
            leave=self.leave_requested,
            stop=self.stop_requested,
            step_time=took,
            ready=len(ready),
            target=max((j.target for j in ready), default=0),
            global_batch=next((j.global_batch for j in reversed(ready) if j.global_batch), 0),
            batch=self._batch_request if self.rank == 0 else 0,
            upto=upto,
            leave_age=time.monotonic() - self._leave_at if self.leave_requested else 0.0,
            settle=self.leave_settle_s if self.rank == 0 else 0.0,
        )
        try:
            votes = self._gather(vote)
        except Exception as exc:
            self.comm.failed = exc
            self._recover()
            return "recovered"
        removed = self._stragglers(votes, step)
        d = rdv.decide(votes, removed)
        self._batch_request = 0
        if not d.switch:
            self._set_global_batch(d.global_batch, step)
        if d.stop:
            self.preempted = True
            self._checkpoint(step, extra)
            self.report(step=step, event="preempted")
            return "stop"
        if not d.switch:
            return "go"
        # a switch is store round trips, the old group's teardown and bounded collectives:
        # one that takes far longer than the group timeout prints every thread's stack to
        # stderr (the container's log), so a hang there can be located
        faulthandler.dump_traceback_later(SWITCH_WATCHDOG_S + 3 * self._timeout_s)
        try:
            return self._switch(d, step, votes)
        except Exception as exc:
            if self.left:
                return "stop"
            self.comm.failed = exc
            self._recover()
            return "recovered"
        finally:
            faulthandler.cancel_dump_traceback_later()

    def _poll_joiners(self) -> tuple[list[rdv.Joiner], int]:
        """Rank 0: the ready joiners, read from the store at most every ``poll_s`` (a store
        round trip per step would cost short steps more than a joiner gains from it)."""
        now = time.monotonic()
        key = (self.gen.gen, self.gen.admitted)
        if self._joiners[0] != key or now - self._joiners[1] >= self.poll_s:
            ready, upto = rdv.ready_joiners(self.store, self.gen.admitted)
            self._joiners = (key, now, ready, upto)
        return self._joiners[2], self._joiners[3]

    def _stragglers(self, votes: list[rdv.Vote], step: int) -> list[int]:
        """Ranks the detector removes (EDL 5.2), keyed by worker id so that streaks survive
        renumbering; every rank feeds it the same gathered times, so all agree."""
        if self.straggler is None or len(votes) < 2:
            return []
        workers = self.gen.workers
        times = {workers[r]: max(v.step_time, STRAGGLER_FLOOR_S) for r, v in enumerate(votes)}
        slow = set(self.straggler.observe(times))
        ranks = [r for r, w in enumerate(workers) if w in slow]
        if not ranks or len(ranks) >= len(votes):
            return []
        if self.rank == 0:
            med = sorted(times.values())[len(times) // 2]
            for r in ranks:
                self.event(
                    "straggler_removed",
                    step=step,
                    removed=workers[r],
                    rank=r,
                    world_size=len(votes),
                    step_times=[round(t, 4) for t in self.straggler.recent(workers[r])],
                    median_s=round(med, 4),
                )
        return ranks

    def _switch(self, d: rdv.Decision, step: int, votes: list[rdv.Vote]) -> str:
        t0 = time.time()
        old = self.gen
        old_rank = self.rank
        stay = old.world_size - len(d.leavers)
        new_world = stay + d.admit
        me = rdv.new_rank(old_rank, d.leavers)
        # the coordinator's container leaves: coordination moves to the first stayer's store
        host = rdv.coordinator_rank(old.stores, self.store_addr)
        target = rdv.successor(old.stores, d.leavers) if host in d.leavers else None
        # joiner slots count on the store they registered at: a fresh store starts at 0
        self._admitting = 0 if target else (d.upto if d.admit else old.admitted)
        old_store = self.store
        if target is not None and me is not None:
            self.store = store_at(target, self._store_timeout_s)
            self.store_addr = target
        if (me == 0) if target is not None else (old_rank == 0):
            if target is not None:
                nxt = rdv.hand_over(old_store, self.store, target, old.gen)
            else:
                nxt = rdv.allocate_gen(self.store)
                rdv.publish_next(self.store, old.gen, nxt)
            joiners = (
                self._voted_joiners if old_rank == 0 else self._switch_joiners(d, old, old_store)
            )
            for i, joiner in enumerate(joiners[: d.admit]):
                rdv.assign(
                    old_store,  # where the joiner waits
                    joiner.slot,
                    rdv.Assignment(
                        gen=nxt,
                        rank=stay + i,
                        world_size=new_world,
                        holders=stay,
                        sources=self.sources,
                        admitted=self._admitting,
                        store=target or "",
                    ),
                )
            if target is not None:
                rdv.mark_moved(old_store, target)  # the old host's launcher may go now
        if me is None:
            self.close()
            self.left = True
            reason = "signal" if self.leave_requested else "straggler"
            self.event("left", step=step, rank=old_rank, world_size=new_world, reason=reason)
            return "stop"
        nxt = rdv.next_gen(self.store, old.gen, self._timeout_s)
        gen = rdv.Generation(gen=nxt, world_size=new_world, admitted=self._admitting)
        self._form(gen, me)
        replicate_s = 0.0
        self._set_global_batch(d.global_batch, step)
        if d.admit:
            t1 = time.perf_counter()
            replicate(
                self._capture(step, copy=False),
                holders=stay,
                sources=self.sources,
                device=self.device,
                group=self.comm.group,
            )
            replicate_s = time.perf_counter() - t1
        self._rebuild_ddp()
        if self.rank == 0:
            self.event(
                "scaled",
                step=step,
                gen=gen.gen,
                world_size=new_world,
                joined=d.admit,
                left=len(d.leavers),
                global_batch=self.env.global_batch_size,
                pause_s=round(time.time() - t0, 4),
                replicate_s=round(replicate_s, 4),
                backend=self.backend,
                coordinator=self.store_addr,
                coordinator_moved=target is not None,
            )
        return "go"

    @staticmethod
    def _switch_joiners(d: rdv.Decision, old: rdv.Generation, store: Any) -> list[rdv.Joiner]:
        """The joiners old rank 0 voted for, read again (from the old coordinator ``store``)
        by the rank that leads a hand-over: the same slots, up to ``d.upto``."""
        if not d.admit:
            return []
        ready, _ = rdv.ready_joiners(store, old.admitted)
        return [j for j in ready if j.slot <= d.upto]

    def _set_global_batch(self, global_batch: int, step: int) -> None:
        """Elan III: the new global batch from step ``step + 1`` on; the LR ramps towards it."""
        if not global_batch or global_batch == self.env.global_batch_size:
            return
        self.env = dataclasses.replace(self.env, global_batch_size=global_batch)
        scaling = self._objs.get("batch_scaling")
        if scaling is not None:
            scaling.set_global_batch(global_batch, step + 1)
        if self.rank == 0:
            self.event("global_batch", step=step, global_batch=global_batch)

    def _joiner_store(self, addr: str) -> RedialingStore:
        """A joiner's client of the coordinator at ``addr`` (dialled again on a drop)."""
        host, port = rdv.split_addr(addr)
        return RedialingStore(lambda: connect_store(host, port, self._store_timeout_s))

    def _join(self) -> bool:
        """A joiner: register as ready, wait for the switch, take the state (Elan V.B)."""
        ready_at = time.time()
        wanted = int(os.environ.get(contract.ENV_GLOBAL_BATCH_SIZE) or 0)
        # the coordinator's address as its members know it (the executor's MASTER_ADDR may
        # spell it otherwise): a later switch finds the coordinator's rank by it
        self.store_addr = rdv.coordinator_addr(self.store) or self.store_addr
        deadline = time.monotonic() + self.join_timeout_s
        while True:
            slot = rdv.register_joiner(
                self.store, rdv.Joiner(self.worker_id, self.target_world, wanted)
            )
            a = rdv.wait_assignment(
                self.store,
                slot,
                max(0.0, deadline - time.monotonic()),
                interrupted=lambda: (
                    self.stop_requested
                    or self.leave_requested
                    or rdv.job_done(self.store)
                    or rdv.moved_to(self.store) is not None
                ),
            )
            moved = rdv.moved_to(self.store) if a is None else None
            if moved is None or self.stop_requested or self.leave_requested:
                break
            # coordination moved while this joiner waited: an assignment written before the
            # move still counts, else it registers again at the new coordinator
            a = rdv.withdraw(self.store, slot)
            if a is not None:
                break
            self.store = self._joiner_store(moved)
            self.store_addr = moved
        if a is None and self.leave_requested and not self.stop_requested:
            a = rdv.withdraw(self.store, slot)  # None: withdrawn before any switch took it
            if a is None:
                self.left = True
                self.event("left", step=None, rank=None, world_size=None, reason="withdrawn")
                return False
        if a is None:  # stopped, the job ended, or never admitted: nothing to save
            if rdv.job_done(self.store):
                self.finished = True
                self.event("not_joined", reason="job done")
            else:
                self.preempted = True
                self.event("not_joined", reason="stopped" if self.stop_requested else "timeout")
            return False
        switched_at = time.time()
        if isinstance(self.store, RedialingStore):  # a member from here on: no redials
            self.store = self.store.client
        if a.store:  # the switch that admits this joiner also moves the coordinator
            self.store = store_at(a.store, self._store_timeout_s)
            self.store_addr = a.store
        gen = rdv.Generation(gen=a.gen, world_size=a.world_size, admitted=a.admitted)
        self._form(gen, a.rank)
        t1 = time.perf_counter()
        state = replicate(
            None, holders=a.holders, sources=a.sources, device=self.device, group=self.comm.group
        )
        replicate_s = time.perf_counter() - t1
        self._restore(state, copy=False)
        self._rebuild_ddp()
        self.event(
            "joined",
            step=self.step,
            rank=a.rank,
            world_size=a.world_size,
            prepare_s=round(ready_at - self._started, 3),
            wait_s=round(switched_at - ready_at, 3),
            replicate_s=round(replicate_s, 4),
            backend=self.backend,
            device=str(self.device),
        )
        return True

    def _recover(self) -> int:
        """Survivors of a failed collective re-form from the newest common snapshot."""
        t0 = time.time()
        old, old_rank = self.gen, self.rank
        failure = self.comm.failed
        self.close()
        me = rdv.Survivor(
            old_rank, self.worker_id, tuple(s for s, _ in self._snaps), self._admitting
        )
        wait_s = self._timeout_s + 5.0
        elected = False
        try:
            rec = rdv.recover(self.store, old.gen, me, old.world_size - 1, wait_s)
        except Exception as exc:
            if not self._store_dead():
                raise
            # the coordinator died with its container: the survivors elect the first member
            # store that answers and recover there (their joiner slots start again at 0)
            dead = self.store_addr
            self.store_addr, self.store = rdv.elect(
                old.stores, dead, lambda a: store_at(a, self._store_timeout_s, ELECT_CONNECT_S)
            )
            elected = True
            self._admitting = 0
            me = dataclasses.replace(me, admitted=0)
            old = dataclasses.replace(old, admitted=0)
            self.event(
                "coordinator_elected",
                gen=old.gen,
                dead=dead,
                coordinator=self.store_addr,
                error=str(exc)[:200],
            )
            rec = rdv.recover(self.store, old.gen, me, old.world_size - 1, wait_s, floor=old.gen)
        rank = rec.rank_of(old_rank)
        if rank is None:
            raise RuntimeError(f"worker {self.worker_id} missed the recovery of gen {old.gen}")
        lost = self.step - rec.step
        snap = next(s for step, s in self._snaps if step == rec.step)
        while self._snaps and self._snaps[-1][0] > rec.step:
            self._snaps.pop()
        self._restore(snap, copy=True)  # the snapshot stays intact for another recovery
        # joiners of a switch that failed are not admitted again (they gave up)
        admitted = max(old.admitted, rec.admitted)
        gen = rdv.Generation(gen=rec.gen, world_size=len(rec.survivors), admitted=admitted)
        self._form(gen, rank)
        self._rebuild_ddp()
        if self.rank == 0:
            self.event(
                "recovered",
                step=rec.step,
                gen=gen.gen,
                world_size=gen.world_size,
                lost_steps=lost,
                failed=old.world_size - len(rec.survivors),
                pause_s=round(time.time() - t0, 4),
                error=str(failure)[:200],
                coordinator=self.store_addr,
                coordinator_elected=elected,
            )
        return rec.step

    def _store_dead(self) -> bool:
        """Whether the coordinator's store no longer answers (its container is gone)."""
        try:
            self.store.add(f"{rdv.ROOT}ping", 0)
        except Exception:
            return True
        return False

    def _mark_done(self, total: int) -> None:
        super()._mark_done(total)
        if self.is_main:
            rdv.mark_done(self.store)  # joiners still waiting give up

    @property
    def exit_code(self) -> int:
        if self.left:
            return contract.EXIT_LEFT
        return super().exit_code


def run_worker(train: Callable[[StopFree], None], **kwargs: Any) -> None:
    """A stop-free worker process: build the runtime, train, exit with its code.

    SIGUSR2 dumps every thread's Python stack to stderr (where a stalled worker waits)."""
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    run = StopFree(**kwargs)
    try:
        train(run)
    finally:
        run.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(run.exit_code)


def main(train: Callable[[StopFree], None], checkpoint_every: int | None = None) -> None:
    """``elastic.main`` in stop-free mode: the launcher, or (LOCAL_RANK set) one worker."""
    env = ElasticEnv.from_env()
    apply_gpu_share()  # the agent's MPS share, before CUDA starts (workers inherit it)
    if not env.worker:
        code = launch(env)
        sys.stdout.flush()
        os._exit(code)
    run_worker(train, env=env, checkpoint_every=checkpoint_every)
