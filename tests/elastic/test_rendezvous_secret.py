"""The job's rendezvous secret (flowcon/elastic/rendezvous.py): keys under a prefix derived
from it, and a store that proves it knows it; a client without it neither joins nor is
fooled by a store that squats the job's port."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import flowcon.elastic.rendezvous as rdv

SECRET = "9f" * 32


def test_prefix_and_proof_are_derived_from_the_secret_and_show_nothing_of_it() -> None:
    other = "a1" * 32
    for derive in (rdv.secret_prefix, rdv.proof_key, rdv.proof_value):
        assert derive(SECRET) == derive(SECRET)  # every container of the job agrees
        assert derive(SECRET) != derive(other)
        assert SECRET not in derive(SECRET)
        assert SECRET[:16] not in derive(SECRET)
    assert len({rdv.secret_prefix(SECRET), rdv.proof_key(SECRET), rdv.proof_value(SECRET)}) == 3
    assert not rdv.proof_key(SECRET).startswith(rdv.secret_prefix(SECRET))
    with pytest.raises(ValueError, match="empty"):
        rdv.secret_prefix("")


class _Dict:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value if isinstance(value, bytes) else value.encode()

    def get(self, key: str) -> bytes:
        if key not in self.data:
            raise TimeoutError("wait timeout")
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        raise NotImplementedError

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        raise NotImplementedError


def test_a_store_without_the_proof_or_with_a_wrong_one_is_refused() -> None:
    store = _Dict()
    with pytest.raises(rdv.RendezvousRefused, match=r"10\.0\.0\.1:2\d+ did not prove"):
        rdv.check_proof(store, SECRET, "10.0.0.1:24000")
    store.set(rdv.proof_key(SECRET), "guessed")
    with pytest.raises(rdv.RendezvousRefused, match="wrong proof"):
        rdv.check_proof(store, SECRET, "10.0.0.1:24000")
    rdv.publish_proof(store, SECRET)
    rdv.check_proof(store, SECRET, "10.0.0.1:24000")


# ---------------------------------------------------------------- a real TCPStore

torch_dist = pytest.importorskip("torch.distributed")


def _plain_server() -> Any:
    return torch_dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=5)
    )


def test_a_client_without_the_secret_cannot_join_and_with_it_joins() -> None:
    from flowcon.elastic.launcher import host_store
    from flowcon.elastic.stopfree import connect_store

    served = host_store("127.0.0.1", 0, secret=SECRET)
    rdv.mark_coordinator(served, f"127.0.0.1:{served.port}")
    # with the secret: the store proves itself and the job's keys are shared
    member = connect_store("127.0.0.1", served.port, 5.0, secret=SECRET)
    assert rdv.is_coordinator(member)
    slot = rdv.register_joiner(member, rdv.Joiner("w1", 1))
    ready, _ = rdv.ready_joiners(served, 0)
    assert [j.worker for j in ready] == ["w1"]
    assert slot == 1
    # with another secret: refused before anything is sent, with the reason
    with pytest.raises(rdv.RendezvousRefused, match="did not prove the job's rendezvous"):
        connect_store("127.0.0.1", served.port, 1.0, secret="b2" * 32)
    # with no secret at all: a plain client names only unprefixed keys, which the job
    # never reads; its registration is not seen by the job
    intruder = connect_store("127.0.0.1", served.port, 1.0, secret="")
    assert not rdv.is_coordinator(intruder)
    rdv.register_joiner(intruder, rdv.Joiner("evil", 1))
    rdv.mark_done(intruder)
    ready, _ = rdv.ready_joiners(served, 0)
    assert [j.worker for j in ready] == ["w1"]
    assert not rdv.job_done(member)


def test_a_store_squatting_the_port_without_the_secret_is_refused() -> None:
    from flowcon.elastic.stopfree import connect_store

    squatter = _plain_server()
    squatter.set(rdv.proof_key("c3" * 32), rdv.proof_value("c3" * 32))  # another job's proof
    with pytest.raises(rdv.RendezvousRefused, match=r"127\.0\.0\.1:\d+ did not prove"):
        connect_store("127.0.0.1", squatter.port, 1.0, secret=SECRET)
