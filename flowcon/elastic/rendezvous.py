"""Membership of a stop-free job: generations, the per-step vote, and the store protocol.

EDL (shared/papers/edl.txt, section 4.2) and Elan (shared/papers/elan.txt, section V.B)
change a job's workers without stopping it: new workers prepare while the others train,
register, and all ranks switch at a step boundary they agree on; leaving workers stop at
such a boundary. Here the agreement is one small ``all_gather`` per step (a :class:`Vote` per
rank), so every rank computes the same :class:`Decision` from the same gathered votes, and
nothing else has to be broadcast. A *generation* is one membership: a process group over a
fresh key prefix of the job's TCPStore (hosted by the launcher of the job's first container).

This module is pure logic plus the few store operations (any object with torch's ``Store``
methods ``set``, ``get``, ``add``, ``compare_set``); no torch import, no sockets. Whether a
key exists is read from a counter next to it (``<key>#``, see :func:`put`), not with
``Store.check``, which the torch 1.13 of the training images does not have.

Store keys (all under :data:`ROOT`):

``gen``                          counter: generation ids are allocated from it (unique).
``gen/<g>/next``                 the id of the generation that follows ``g`` at a switch.
``joiners``                      counter: a joiner's slot is the value its ``add`` returned.
``joiner/<slot>``                JSON :class:`Joiner` (written right after the slot is taken).
``joiner/<slot>/assign``         JSON :class:`Assignment`: where a joiner goes at the switch.
``rec/<g>/n`` ``rec/<g>/<i>``    failure recovery of generation ``g``: survivors' records.
``rec/<g>/closed``               JSON :class:`Recovery`, the first closer's, by compare_set.
``done``                         set when the job finished its iterations.
``coordinator``                  set on the store that coordinates the job now (its host's
                                 launcher keeps serving it after its own workers left).
``moved``                        the address coordination moved to (set on the old store at
                                 a hand-over; waiting joiners re-register there).

Every container's launcher hosts a store (``FLOWCON_STORE_ADDR``); one of them coordinates
(the *coordinator*, initially the first container's). When its container leaves, the
stayers move to the first stayer's store at the switch (:func:`hand_over`); when it dies,
the survivors elect the first member store that answers (:func:`elect`) and recover there.

Authentication: the executor gives every container of a job its secret
(``FLOWCON_RENDEZVOUS_SECRET``). Every key above lives under a prefix derived from it
(:func:`secret_prefix`, an HMAC: a process without the secret cannot name the job's keys),
and a store's host publishes a proof (:func:`proof_key`, :func:`proof_value`) that every
client checks before it sends anything else (:func:`check_proof`): a process squatting the
job's port without the secret cannot pass itself off as the job's store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Protocol

ROOT: Final = "flowcon/"

# The vote: one row of floats per rank, gathered every step (EDL's "check at the end of
# each mini-batch"). Rank 0 also reports the joiners that are ready in the store.
VOTE_FIELDS: Final = (
    "leave",  # 1: this rank asked to leave (SIGUSR1, or removed as a straggler)
    "stop",  # 1: SIGTERM: checkpoint and stop the whole job
    "step_time",  # seconds this rank computed in the last step (collective waits excluded)
    "ready",  # rank 0: joiners ready in the store beyond those admitted
    "target",  # rank 0: the largest FLOWCON_TARGET_WORLD among those joiners
    "global_batch",  # rank 0: the global batch those joiners ask for (0: unchanged)
    "batch",  # rank 0: a global batch the script asked for (set_global_batch; 0: none)
    "upto",  # rank 0: the last joiner slot those joiners cover (withdrawn ones included)
    "leave_age",  # seconds since this rank's leave request (0: none)
    "settle",  # rank 0: leave requests wait until the oldest is this old (FLOWCON_LEAVE_SETTLE_S)
)
VOTE_LEN: Final = len(VOTE_FIELDS)


class Store(Protocol):
    """The subset of ``torch.distributed.Store`` used here (TCPStore, PrefixStore, fakes)."""

    def set(self, key: str, value: str | bytes, /) -> None: ...

    def get(self, key: str, /) -> bytes: ...

    def add(self, key: str, amount: int, /) -> int: ...

    def compare_set(self, key: str, expected: str, desired: str, /) -> bytes: ...


@dataclass(frozen=True)
class Vote:
    leave: bool = False
    stop: bool = False
    step_time: float = 0.0
    ready: int = 0
    target: int = 0
    global_batch: int = 0
    batch: int = 0
    upto: int = 0
    leave_age: float = 0.0
    settle: float = 0.0

    def row(self) -> list[float]:
        return [
            float(self.leave),
            float(self.stop),
            float(self.step_time),
            float(self.ready),
            float(self.target),
            float(self.global_batch),
            float(self.batch),
            float(self.upto),
            float(self.leave_age),
            float(self.settle),
        ]

    @staticmethod
    def from_row(row: Sequence[float]) -> Vote:
        if len(row) != VOTE_LEN:
            raise ValueError(f"a vote has {VOTE_LEN} fields, got {len(row)}")
        return Vote(
            leave=row[0] > 0.5,
            stop=row[1] > 0.5,
            step_time=float(row[2]),
            ready=round(row[3]),
            target=round(row[4]),
            global_batch=round(row[5]),
            batch=round(row[6]),
            upto=round(row[7]),
            leave_age=float(row[8]),
            settle=float(row[9]),
        )


@dataclass(frozen=True)
class Decision:
    """What every rank does at this boundary (the same on every rank)."""

    stop: bool = False
    leavers: tuple[int, ...] = ()  # old ranks that leave now
    admit: int = 0  # joiners admitted now (rank 0's ready ones, in slot order)
    global_batch: int = 0  # the global batch from this boundary on (0: unchanged)
    upto: int = 0  # with ``admit``: joiner slots used up to here

    @property
    def switch(self) -> bool:
        """The group re-forms (a batch change alone does not re-form it)."""
        return bool(self.leavers or self.admit)


def decide(
    votes: Sequence[Vote],
    removed: Sequence[int] = (),
) -> Decision:
    """The decision at a step boundary from all ranks' votes (rank order).

    ``removed``: ranks the straggler detector removes (computed by every rank from the same
    gathered step times, each rank's detector reset at every generation so that all agree).
    A removal that would leave nobody is dropped (the ranks that asked to leave still go):
    a stayer removed in the vote where the last other rank leaves would end the job while
    its store host keeps waiting for joiners nobody admits. Joiners are admitted only when
    the running ranks plus the ready joiners reach the joiners' target world (Elan V.B: the
    adjustment happens iff all new workers have reported). At least one running rank stays
    when joiners come in (it holds the state to replicate): leaves that would empty the job
    while joiners are admitted wait.

    Leave requests settle (rank 0's ``settle`` seconds): they are granted once the oldest
    of them is that old, all together. One scale-in signals its leavers one after another
    (on Swarm through each node's engine), so they reach their ranks a few steps apart; without
    the window a 4 -> 2 decision would run at 3 in between, with one more switch and an
    uneven batch split the allocator never chose. A request stays pending, never lost: its
    age only grows, so it is granted within ``settle`` seconds and the next boundary.
    """
    world = len(votes)
    if world == 0:
        raise ValueError("no votes")
    if any(v.stop for v in votes):
        return Decision(stop=True)
    pending = {r for r, v in enumerate(votes) if v.leave}
    asked = pending
    if pending and max(votes[r].leave_age for r in pending) < votes[0].settle:
        # settling: the others of the same scale-in may still be on the way; a straggler
        # that asked to leave goes with them, not alone before them
        asked = set()
        removed = [r for r in removed if r not in pending]
    if len(pending | set(removed)) >= world > len(pending):
        # a straggler removal never ends the job: only leave requests may (pending ones
        # count: the stayer removed while the last other rank's request settles would leave
        # the job to that rank, which then goes too, the store host waiting for nobody)
        removed = ()
    leavers = sorted(asked | set(removed))
    lead = votes[0]
    admit = lead.ready if lead.ready > 0 and world + lead.ready >= lead.target else 0
    if admit and len(leavers) >= world:
        leavers = leavers[1:]  # the lowest leaver stays one more generation to hand over
    if len(leavers) >= world:  # everyone leaves: the job ends with them
        return Decision(leavers=tuple(leavers))
    # the admitted joiners' batch (Elan III: set with the scale event), else the script's
    batch = lead.global_batch if admit and lead.global_batch else lead.batch
    return Decision(
        leavers=tuple(leavers), admit=admit, global_batch=batch, upto=lead.upto if admit else 0
    )


def new_rank(old_rank: int, leavers: Sequence[int]) -> int | None:
    """This rank's rank in the next generation (None: it leaves). Stayers keep their order."""
    if old_rank in leavers:
        return None
    return old_rank - sum(1 for r in leavers if r < old_rank)


# ---------------------------------------------------------------- joiners


@dataclass(frozen=True)
class Joiner:
    worker: str
    target: int
    global_batch: int = 0
    slot: int = 0  # set by ready_joiners (not stored)


@dataclass(frozen=True)
class Assignment:
    gen: int
    rank: int
    world_size: int
    holders: int  # ranks 0..holders-1 hold the state and send it (Elan IV)
    sources: int = 1  # how many of them send concurrently
    admitted: int = 0  # joiner slots consumed with this switch
    store: str = ""  # the coordinator from the switch on ("": the store it registered at)


@dataclass(frozen=True)
class Generation:
    """One membership of the job: the process group's key prefix, size and worker ids."""

    gen: int
    world_size: int
    admitted: int = 0  # joiner slots consumed up to and including this generation
    workers: tuple[str, ...] = field(default_factory=tuple)
    # each rank's own store ("host:port" its launcher hosts; "": none), in rank order
    stores: tuple[str, ...] = field(default_factory=tuple)

    @property
    def prefix(self) -> str:
        return f"{ROOT}pg/{self.gen}/"


def _load(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw.decode())
    if not isinstance(value, dict):
        raise ValueError(f"store value is not an object: {raw[:80]!r}")
    return value


WITHDRAWN: Final = "withdrawn"


def put(store: Store, key: str, value: str) -> None:
    """Set ``key``, then mark it as there (``<key>#`` counts up): :func:`there` is then true."""
    store.set(key, value)
    store.add(key + "#", 1)


def there(store: Store, key: str) -> bool:
    """Whether ``key`` was written with :func:`put` (or :func:`put_once`); one round trip."""
    return store.add(key + "#", 0) > 0


def put_once(store: Store, key: str, value: str) -> str:
    """``compare_set`` from nothing to ``value``, marked like :func:`put`; returns the value
    that won (ours, or the one that was there first)."""
    won = store.compare_set(key, "", value).decode()
    store.add(key + "#", 1)
    return won


def register_joiner(store: Store, joiner: Joiner) -> int:
    """A ready joiner takes a slot and describes itself; returns the slot (1-based)."""
    slot = store.add(f"{ROOT}joiners", 1)
    body = {k: v for k, v in asdict(joiner).items() if k != "slot"}
    put(store, f"{ROOT}joiner/{slot}", json.dumps(body))
    return slot


def ready_joiners(store: Store, admitted: int) -> tuple[list[Joiner], int]:
    """The joiners past slot ``admitted`` that are fully registered, in slot order, and the
    last slot they cover (withdrawn slots are skipped but covered). Rank 0 asks at
    coordinations: one ``add`` when nobody waits."""
    total = store.add(f"{ROOT}joiners", 0)
    out: list[Joiner] = []
    upto = admitted
    for slot in range(admitted + 1, total + 1):
        key = f"{ROOT}joiner/{slot}"
        if not there(store, key):
            break  # took its slot, description not written yet: next boundary
        upto = slot
        if there(store, key + "/assign") and store.get(key + "/assign") == WITHDRAWN.encode():
            continue
        out.append(Joiner(**_load(store.get(key)), slot=slot))
    return out, upto


def assign(store: Store, slot: int, assignment: Assignment) -> None:
    """Rank 0 tells joiner ``slot`` where to go; raises if it withdrew meanwhile (the switch
    then fails and the workers recover without it)."""
    body = json.dumps(asdict(assignment))
    got = put_once(store, f"{ROOT}joiner/{slot}/assign", body)
    if got != body:
        raise RuntimeError(f"joiner slot {slot} withdrew before its switch")


def withdraw(store: Store, slot: int) -> Assignment | None:
    """A joiner asked to leave before it was admitted: None when it withdrew in time, else
    the assignment that came first (it joins, then leaves at the next boundary)."""
    got = put_once(store, f"{ROOT}joiner/{slot}/assign", WITHDRAWN)
    return None if got == WITHDRAWN else Assignment(**json.loads(got))


def wait_key(
    store: Store,
    key: str,
    timeout_s: float,
    poll_s: float = 0.02,
    interrupted: Callable[[], bool] = lambda: False,
) -> bytes | None:
    """Poll ``key`` until it exists (None on timeout or when ``interrupted()``): polling keeps
    the caller's signal handlers running, which a blocking ``get`` would not."""
    deadline = time.monotonic() + timeout_s
    while True:
        if there(store, key):
            return store.get(key)
        if interrupted() or time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def wait_assignment(
    store: Store,
    slot: int,
    timeout_s: float,
    interrupted: Callable[[], bool] = lambda: False,
) -> Assignment | None:
    raw = wait_key(store, f"{ROOT}joiner/{slot}/assign", timeout_s, interrupted=interrupted)
    return None if raw is None else Assignment(**_load(raw))


def mark_done(store: Store) -> None:
    """The job finished all its iterations (joiners still waiting exit, nothing to join)."""
    put(store, f"{ROOT}done", "1")


def job_done(store: Store) -> bool:
    return there(store, f"{ROOT}done")


def allocate_gen(store: Store, floor: int = 0) -> int:
    """A new generation id, unique on ``store`` and above ``floor`` (the ids of another
    store the job used before: a hand-over or an election starts on a fresh counter).
    Concurrent callers still get distinct ids: every ``add`` returns a distinct value."""
    got = store.add(f"{ROOT}gen", 1)
    if got <= floor:
        got = store.add(f"{ROOT}gen", floor + 1 - got)
    return got


def publish_next(store: Store, gen: int, nxt: int) -> None:
    put(store, f"{ROOT}gen/{gen}/next", str(nxt))


def arrive(store: Store, gen: int, world_size: int, timeout_s: float, poll_s: float = 0.02) -> None:
    """Count this rank in to generation ``gen`` and wait until all ``world_size`` ranks are.

    The first generation's workers start apart (a container, or a worker importing torch on a
    busy host, may come up many seconds after the others), and a process group's own
    rendezvous waits only the group's timeout, the seconds a collective gives a silent peer:
    the first rank there failed with a store timeout when the last came later than that.
    Past ``timeout_s`` it raises ``TimeoutError`` saying how many came. Polling keeps the
    caller's signal handlers running."""
    key = f"{ROOT}gen/{gen}/arrived"
    store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    while (came := store.add(key, 0)) < world_size:
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"{came} of {world_size} workers of generation {gen} came within {timeout_s} s"
            )
        time.sleep(poll_s)


def next_gen(store: Store, gen: int, timeout_s: float) -> int:
    raw = wait_key(store, f"{ROOT}gen/{gen}/next", timeout_s)
    if raw is None:
        raise TimeoutError(f"no successor of generation {gen} within {timeout_s} s")
    return int(raw.decode())


# ---------------------------------------------------------------- failure recovery


@dataclass(frozen=True)
class Survivor:
    old_rank: int
    worker: str
    snapshots: tuple[int, ...]  # steps of the in-memory snapshots this rank holds
    admitted: int = 0  # joiner slots used up (a failed switch's joiners are not retried)

    @staticmethod
    def load(d: dict[str, Any]) -> Survivor:
        return Survivor(
            old_rank=int(d["old_rank"]),
            worker=str(d["worker"]),
            snapshots=tuple(int(x) for x in d["snapshots"]),
            admitted=int(d.get("admitted", 0)),
        )


@dataclass(frozen=True)
class Recovery:
    """The membership after a failure: survivors in old-rank order and the agreed step."""

    gen: int
    survivors: tuple[Survivor, ...]
    step: int

    @property
    def admitted(self) -> int:
        return max((s.admitted for s in self.survivors), default=0)

    def rank_of(self, old_rank: int) -> int | None:
        for i, s in enumerate(self.survivors):
            if s.old_rank == old_rank:
                return i
        return None


def agreed_step(survivors: Sequence[Survivor]) -> int:
    """The newest step every survivor holds a snapshot of (EDL's consistent recovery).

    A rank that entered the vote of step s had finished step s, so the survivors' newest
    snapshots differ by at most one step and each also holds the previous one.
    """
    common = set(survivors[0].snapshots)
    for s in survivors[1:]:
        common &= set(s.snapshots)
    if not common:
        raise RuntimeError(
            f"no snapshot common to all survivors: {[s.snapshots for s in survivors]}"
        )
    return max(common)


def _recovery_from(raw: bytes) -> Recovery:
    d = _load(raw)
    survivors = tuple(Survivor.load(s) for s in d["survivors"])
    return Recovery(gen=int(d["gen"]), survivors=survivors, step=int(d["step"]))


def recover(
    store: Store,
    gen: int,
    me: Survivor,
    expected: int,
    wait_s: float,
    poll_s: float = 0.02,
    floor: int = 0,
) -> Recovery:
    """Survivors of generation ``gen`` agree on the next membership through the store.

    Each registers; the first that sees ``expected`` records (or waits ``wait_s``) closes the
    set with compare_set, so all survivors adopt the same closed membership. A survivor that
    registered too late is not in it (the caller exits; the executor replaces it).
    """
    base = f"{ROOT}rec/{gen}/"
    closed_key = base + "closed"
    i = store.add(base + "n", 1)
    put(store, base + str(i), json.dumps(asdict(me)))
    deadline = time.monotonic() + wait_s
    while True:
        if there(store, closed_key):
            return _recovery_from(store.get(closed_key))
        n = store.add(base + "n", 0)
        if n >= expected or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    records: list[Survivor] = []
    for j in range(1, n + 1):
        # a survivor counts itself in (add) before it writes its record (put): a slot that
        # is counted but not yet written is waited for, not skipped (skipping it closed a
        # recovery without a survivor that had registered; it then had to exit)
        raw = wait_key(store, base + str(j), max(2.0, deadline - time.monotonic()), poll_s)
        if raw is not None:
            records.append(Survivor.load(_load(raw)))
    records.sort(key=lambda s: s.old_rank)
    proposal = Recovery(gen=allocate_gen(store, floor), survivors=tuple(records), step=0)
    proposal = Recovery(proposal.gen, proposal.survivors, agreed_step(records))
    body = json.dumps(
        {
            "gen": proposal.gen,
            "step": proposal.step,
            "survivors": [asdict(s) for s in proposal.survivors],
        }
    )
    return _recovery_from(put_once(store, closed_key, body).encode())


# ---------------------------------------------------------------- authentication


class RendezvousRefused(RuntimeError):
    """A store did not prove it knows the job's rendezvous secret."""


def _mac(secret: str, what: str) -> str:
    if not secret:
        raise ValueError("the rendezvous secret is empty")
    msg = b"flowcon-rendezvous/" + what.encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def secret_prefix(secret: str) -> str:
    """The prefix of every key of the job's store (a PrefixStore's): unguessable without
    the secret, and telling nothing about it."""
    return f"fc-{_mac(secret, 'prefix')[:40]}"


def proof_key(secret: str) -> str:
    """The key, outside the prefix, where a store's host publishes :func:`proof_value`."""
    return f"fc-proof-{_mac(secret, 'proof-key')[:40]}"


def proof_value(secret: str) -> str:
    return _mac(secret, "proof-value")


def publish_proof(raw: Store, secret: str) -> None:
    """The host of a store: publish the proof (on the store itself, before any client)."""
    raw.set(proof_key(secret), proof_value(secret))


def check_proof(raw: Store, secret: str, addr: str) -> None:
    """A client: the store at ``addr`` holds the job's proof, else RendezvousRefused (the
    read waits as long as the client's timeout for a store without it)."""
    try:
        got = raw.get(proof_key(secret))
    except Exception as exc:  # a store timeout (DistStoreError) or a dropped connection
        raise RendezvousRefused(
            f"the store at {addr} did not prove the job's rendezvous secret"
            f" (FLOWCON_RENDEZVOUS_SECRET): {type(exc).__name__}: {exc}"
        ) from exc
    if not hmac.compare_digest(bytes(got), proof_value(secret).encode()):
        raise RendezvousRefused(
            f"the store at {addr} holds a wrong proof of the job's rendezvous secret"
            " (FLOWCON_RENDEZVOUS_SECRET): not the job's store"
        )


# ---------------------------------------------------------------- the coordinator


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` as (host, port); ValueError when it is not one."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port store address: {addr!r}")
    return host, int(port)


def coordinator_rank(stores: Sequence[str], coordinator: str) -> int | None:
    """The rank whose container hosts the coordinator (None: no member's store)."""
    for r, addr in enumerate(stores):
        if addr and addr == coordinator:
            return r
    return None


def successor(stores: Sequence[str], leavers: Sequence[int]) -> str | None:
    """The store coordination moves to when the coordinator's rank leaves: the first
    stayer's (the next generation's rank 0); None when it has none (old launchers)."""
    for r, addr in enumerate(stores):
        if r not in leavers:
            return addr or None
    return None


def candidates(stores: Sequence[str], dead: str) -> list[str]:
    """The stores an election tries, in rank order: the members' own, the dead one's out."""
    out: list[str] = []
    for addr in stores:
        if addr and addr != dead and addr not in out:
            out.append(addr)
    return out


def elect(stores: Sequence[str], dead: str, connect: Callable[[str], Store]) -> tuple[str, Store]:
    """The survivors of a dead coordinator agree on its successor without it: each tries
    the members' stores in rank order and takes the first that answers. Every survivor
    sees the same dead containers, so they take the same one (the lowest surviving rank's
    container; its launcher has served its store since it started). RuntimeError when none
    answers."""
    errors = []
    for addr in candidates(stores, dead):
        try:
            store = connect(addr)
            store.add(f"{ROOT}ping", 1)
        except Exception as exc:  # that member's container is gone too: the next one
            errors.append(f"{addr}: {exc}")
            continue
        put(store, f"{ROOT}coordinator", addr)
        return addr, store
    raise RuntimeError(f"no member store answers: {'; '.join(errors) or 'none known'}")


def hand_over(old: Store, new: Store, new_addr: str, gen: int) -> int:
    """The coordinator's container leaves: the next generation's id, allocated on ``new``
    above every id ``old`` gave, with ``new`` marked as the coordinator. The caller assigns
    the switch's joiners (on ``old``, where they wait) and then calls :func:`moved`."""
    floor = old.add(f"{ROOT}gen", 0)
    put(new, f"{ROOT}coordinator", new_addr)
    nxt = allocate_gen(new, floor)
    publish_next(new, gen, nxt)
    return nxt


def mark_moved(old: Store, new_addr: str) -> None:
    """Coordination left ``old`` for ``new_addr``: its launcher may go, joiners move."""
    put(old, f"{ROOT}moved", new_addr)


def moved_to(store: Store) -> str | None:
    """Where coordination moved from ``store`` (None: it has not)."""
    key = f"{ROOT}moved"
    return store.get(key).decode() if there(store, key) else None


def mark_coordinator(store: Store, addr: str) -> None:
    put(store, f"{ROOT}coordinator", addr)


def coordinator_addr(store: Store) -> str | None:
    """The address the coordinator ``store`` announced for itself (None: not announced)."""
    key = f"{ROOT}coordinator"
    return store.get(key).decode() if there(store, key) else None


def was_coordinator(store: Store) -> bool:
    """Whether ``store`` coordinated the job at some point (it may have moved since)."""
    return there(store, f"{ROOT}coordinator")


def is_coordinator(store: Store) -> bool:
    """Whether ``store`` coordinates the job now (it did and it has not moved)."""
    return there(store, f"{ROOT}coordinator") and not there(store, f"{ROOT}moved")
