"""Workers (DESIGN §3.11) through the runtime, on a shared memory store and Trio's virtual
clock: a serving runtime's row, its runs' ``worker_id``, heartbeats that ride on claim
renewal, drain, lost, a row deleted by hand, and ended workers forgotten after a day."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    InvalidArgument,
    RunContext,
    RunState,
    Runtime,
    UnknownWorker,
    VersionedBody,
    WorkerRecord,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import LEASE, NATURAL, serving, settle, shared_runtime, until


async def short(ctx: RunContext) -> object:
    await trio.sleep(1)
    return "done"


async def long(ctx: RunContext) -> object:
    await trio.sleep(LEASE * 5)
    return "done"


BODIES: Mapping[str, Any] = {"short": short, "long": long}


async def test_a_serving_runtime_is_a_worker_and_its_runs_name_it(
    autojump_clock: trio.testing.MockClock,
    shared_store: MemoryStore,
) -> None:
    async with (
        shared_runtime(shared_store, bodies=BODIES) as worker,
        shared_runtime(shared_store) as client,
    ):
        assert await client.list_workers() == []
        async with serving(worker, concurrency=3):
            (found,) = await client.list_workers()
            assert isinstance(found, WorkerRecord)
            assert found.worker_id == worker.worker_id
            assert (found.state, found.concurrency, found.active) == ("serving", 3, 0)
            assert found.bodies == {"long": None, "short": None}
            handle = await client.submit("short", run_id="r1")
            assert await settle(handle) == NATURAL
            assert (await client.record("r1")).worker_id == worker.worker_id
        (stopped,) = await client.list_workers(ended=True)
        assert stopped.state == "stopped"
        assert await client.list_workers() == []
        assert client.worker_id != worker.worker_id


async def test_a_workers_row_names_the_version_of_each_body_it_serves(
    autojump_clock: trio.testing.MockClock,
    shared_store: MemoryStore,
) -> None:
    bodies: Mapping[str, Any] = {
        "short": VersionedBody(short, version="2", compatible=("1",)),
        "long": long,
    }
    async with (
        shared_runtime(shared_store, bodies=bodies) as worker,
        shared_runtime(shared_store) as client,
        serving(worker),
    ):
        (found,) = await client.list_workers()
        assert found.bodies == {"long": None, "short": "2"}
        assert worker.body_versions() == {"long": None, "short": "2"}


async def test_drain_lets_active_runs_finish_claims_nothing_new_then_stops(
    autojump_clock: trio.testing.MockClock,
    shared_store: MemoryStore,
) -> None:
    async with (
        shared_runtime(shared_store, bodies=BODIES) as worker,
        shared_runtime(shared_store) as client,
        trio.open_nursery() as nursery,
    ):
        served = trio.Event()

        async def serve() -> None:
            await worker.serve(concurrency=4)
            served.set()

        await nursery.start(partial(_started, serve))
        running = await client.submit("long", run_id="running")
        await until(lambda: _is_running(client, "running"))
        worker_id = worker.worker_id
        assert worker_id is not None
        drained = await client.drain_worker(worker_id)
        assert drained.state == "draining"
        await trio.sleep(1)  # a few poll intervals
        await client.submit("short", run_id="later")
        await trio.sleep(LEASE)
        assert isinstance(await client.state("later"), RunState.Queued)
        assert not served.is_set()
        assert await settle(running) == NATURAL  # the active run finished
        with trio.fail_after(LEASE):
            await served.wait()  # serve() returned: drained
        (found,) = await client.list_workers(ended=True)
        assert found.state == "stopped"
        again = await client.drain_worker(worker_id)
        assert again.state == "stopped"


async def _started(serve: Any, *, task_status: trio.TaskStatus[None]) -> None:
    task_status.started()
    await serve()


async def _is_running(client: Runtime, run_id: str) -> bool:
    return isinstance(await client.state(run_id), RunState.Running)


async def test_an_unknown_worker_is_refused_naming_it(
    autojump_clock: trio.testing.MockClock, shared_store: MemoryStore
) -> None:
    async with shared_runtime(shared_store) as client:
        with pytest.raises(UnknownWorker, match="nobody") as caught:
            await client.drain_worker("nobody")
        assert caught.value.worker_id == "nobody"
        with pytest.raises(InvalidArgument):
            await client.drain_worker("")


async def test_a_worker_that_left_reads_stopped_and_its_run_goes_on_elsewhere(
    autojump_clock: trio.testing.MockClock,
    shared_store: MemoryStore,
) -> None:
    async with shared_runtime(shared_store) as client:
        async with (
            shared_runtime(shared_store, bodies=BODIES) as worker,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(partial(worker.serve, concurrency=2))
            handle = await client.submit("long", run_id="r1")
            await until(lambda: _is_running(client, "r1"))
            nursery.cancel_scope.cancel()
        # Leaving the runtime released r1 and marked the row stopped.
        (found,) = await client.list_workers(ended=True)
        assert found.state == "stopped"
        assert (await client.record("r1")).worker_id == found.worker_id
        async with shared_runtime(shared_store, bodies=BODIES) as other, serving(other):
            assert await settle(handle) == NATURAL
            assert (await client.record("r1")).worker_id == other.worker_id


async def test_a_row_deleted_by_hand_is_registered_again(
    autojump_clock: trio.testing.MockClock, shared_store: MemoryStore
) -> None:
    async with (
        shared_runtime(shared_store, bodies=BODIES) as worker,
        shared_runtime(shared_store) as client,
        serving(worker),
    ):
        assert len(await client.list_workers()) == 1
        assert await shared_store.forget_workers(-1.0) == 1  # every row, as by hand
        assert await client.list_workers() == []
        await trio.sleep(LEASE)  # a beat or two
        (found,) = await client.list_workers()
        assert (found.worker_id, found.state) == (worker.worker_id, "serving")
        handle = await client.submit("short")
        assert await settle(handle) == NATURAL


class CountingStore:
    """A shared memory store that counts the writes that mark a worker seen: renewals
    and lone heartbeats (everything else is the store's own)."""

    def __init__(self) -> None:
        self.inner = MemoryStore(shared=True)
        self.renewals = 0
        self.beats = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        self.renewals += 1
        return await self.inner.renew(owner, held, lease)

    async def worker_seen(self, worker_id: str, active: int) -> Any:
        self.beats += 1
        return await self.inner.worker_seen(worker_id, active)


async def test_heartbeats_ride_on_renewals_or_one_write_per_third_of_a_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = CountingStore()
    async with (
        shared_runtime(store, bodies=BODIES) as worker,
        shared_runtime(store) as client,
        serving(worker),
    ):
        store.renewals = store.beats = 0
        await trio.sleep(LEASE * 3 + 0.01)  # idle: no claim held
        # One beat per third of a lease (9 or 8 in 3 leases, by phase), nothing else.
        assert store.renewals == 0
        assert store.beats in (8, 9)
        await client.submit("long", run_id="busy")
        await until(lambda: _is_running(client, "busy"))
        store.renewals = store.beats = 0
        await trio.sleep(LEASE * 3 + 0.01)  # holding a claim: its renewal is the beat
        assert store.renewals in (8, 9)
        assert store.beats == 0
        (found,) = await client.list_workers()
        assert found.active == 1
        assert found.state == "serving"


async def test_a_worker_whose_clock_is_off_is_judged_by_the_stores(
    autojump_clock: trio.testing.MockClock, shared_store: MemoryStore
) -> None:
    """Its ``clock=`` a day behind: its row's times and whether it is lost are the store's
    (Trio's clock here), so it reads serving for as long as it beats."""
    async with (
        open_runtime(
            shared_store, clock=lambda: trio.current_time() - 86400, bodies=BODIES, lease=LEASE
        ) as worker,
        shared_runtime(shared_store) as client,
        serving(worker),
    ):
        await trio.sleep(LEASE * 10)
        (found,) = await client.list_workers()
        assert found.state == "serving"
        assert trio.current_time() - found.last_seen <= LEASE
        handle = await client.submit("short")
        assert await settle(handle) == NATURAL
