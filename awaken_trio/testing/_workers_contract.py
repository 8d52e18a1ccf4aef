"""The worker rows (DESIGN §3.11) as checks every `WorkerStore` runs, in
`DurableStoreContract`: registration, seen with renewals, ``lost`` decided by the store's
clock at read time, drain, stop, and forgetting ended workers."""

from __future__ import annotations

import pytest

from ..store import Claim, DurableStore, WorkerInfo, WorkerStore
from ._checks import Elapse, _accepted
from ._commits import create

LEASE = 0.4
"""The workers' lease here: lost after three of them (1.2 s) unseen."""


def _info(worker_id: str, *, host: str = "host-a", pid: int = 7) -> WorkerInfo:
    return WorkerInfo(worker_id, host, pid, {"job": None, "other": "v2"}, 4, LEASE)


def _workers(store: DurableStore) -> WorkerStore:
    if not isinstance(store, WorkerStore):
        pytest.skip("the store keeps no worker rows")
    return store


class WorkerChecks:
    """`WorkerStore`: what `Runtime.list_workers` and `drain_worker` read and write."""

    async def test_a_registered_worker_is_listed_serving(self, store: DurableStore) -> None:
        workers = _workers(store)
        assert await workers.list_workers() == []
        await workers.register_worker(_info("w1"))
        (found,) = await workers.list_workers()
        assert (found.worker_id, found.host, found.pid) == ("w1", "host-a", 7)
        assert (found.state, found.concurrency, found.active) == ("serving", 4, 0)
        assert found.bodies == {"job": None, "other": "v2"}
        assert found.started_at == found.last_seen
        assert await workers.worker_state("w1") == "serving"
        assert await workers.worker_state("nobody") is None

    async def test_the_same_pid_on_two_hosts_is_two_workers(self, store: DurableStore) -> None:
        workers = _workers(store)
        await workers.register_worker(_info("w1", host="host-a", pid=7))
        await workers.register_worker(_info("w2", host="host-b", pid=7))
        listed = await workers.list_workers()
        assert [(w.worker_id, w.host) for w in listed] == [("w2", "host-b"), ("w1", "host-a")]

    async def test_lost_is_decided_by_the_stores_clock_when_read(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        workers = _workers(store)
        await workers.register_worker(_info("w1"))
        await elapse(LEASE * 2)
        assert await workers.worker_seen("w1", 2) == "serving"  # seen: the clock restarts
        await elapse(LEASE * 2)
        (found,) = await workers.list_workers()
        assert (found.state, found.active) == ("serving", 2)
        await elapse(LEASE * 2)  # 4 leases unseen
        (found,) = await workers.list_workers()
        assert found.state == "lost"
        assert await workers.worker_state("w1") == "serving"  # lost is never stored

    async def test_a_renewal_marks_its_owners_row_seen(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        workers = _workers(store)
        await workers.register_worker(_info("w1"))
        before = (await workers.list_workers())[0].last_seen
        await _accepted(store, create("r1", claim=Claim("w1", 30.0)))
        await _accepted(store, create("r2", claim=Claim("w1", 30.0)))
        await elapse(LEASE * 2)
        assert await store.renew("w1", {"r1": 1, "r2": 1, "gone": 1}, 30.0) == ["gone"]
        (found,) = await workers.list_workers()
        assert found.last_seen > before
        assert found.active == 2  # the claims it still holds
        # A runtime that does not serve has no row: its renewals write none.
        assert await store.renew("client", {}, 30.0) == []
        assert [w.worker_id for w in await workers.list_workers(ended=True)] == ["w1"]

    async def test_drain_then_stop(self, store: DurableStore) -> None:
        workers = _workers(store)
        await workers.register_worker(_info("w1"))
        drained = await workers.drain_worker("w1")
        assert drained is not None
        assert drained.state == "draining"
        assert await workers.worker_seen("w1", 0) == "draining"
        again = await workers.drain_worker("w1")
        assert again is not None
        assert again.state == "draining"
        await workers.end_worker("w1")
        assert await workers.list_workers() == []  # stopped ones only with ended=True
        (stopped,) = await workers.list_workers(ended=True)
        assert (stopped.state, stopped.active) == ("stopped", 0)
        after = await workers.drain_worker("w1")
        assert after is not None
        assert after.state == "stopped"  # a stopped worker is left stopped
        assert await workers.drain_worker("nobody") is None
        assert await workers.worker_seen("nobody", 0) is None

    async def test_ended_workers_are_forgotten_after_their_age(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        workers = _workers(store)
        await workers.register_worker(_info("old"))
        await workers.end_worker("old")
        await workers.register_worker(_info("crashed"))
        await elapse(LEASE * 4)
        await workers.register_worker(_info("live"))
        assert await workers.forget_workers(LEASE * 2) == 2
        assert [w.worker_id for w in await workers.list_workers(ended=True)] == ["live"]
        assert await workers.forget_workers(LEASE * 2) == 0
