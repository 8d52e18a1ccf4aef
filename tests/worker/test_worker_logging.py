"""Logging (DESIGN §3.6): a recovery (INFO), a lost claim and a fenced commit (WARNING), each
under an ``awaken_trio`` logger with the run id in the record's ``extra``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from awaken_trio import RunContext, RunState, Runtime, StoreError
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    LEASE,
    NATURAL,
    POLL,
    Body,
    Stall,
    past_lease,
    reach,
    serving,
    settle,
    shared_runtime,
)
from tests.wrapped_stores import FailingEnds, ParkingStore


def logged(
    caplog: pytest.LogCaptureFixture, name: str, level: int, words: str
) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == name and record.levelno == level and words in record.getMessage()
    ]


@asynccontextmanager
async def owner_and_recoverer(
    store: MemoryStore, in_a: Body
) -> AsyncIterator[tuple[Runtime, Runtime, trio.Event]]:
    """Runtime ``a`` runs ``in_a`` as run ``r``; runtime ``b`` has a body that returns once
    the event handed back is set, for when it recovers the run."""
    finish = trio.Event()

    async def in_b(ctx: RunContext) -> object:
        await finish.wait()
        return "b"

    async with (
        shared_runtime(store, bodies={"w": in_a}) as a,
        shared_runtime(store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        yield a, b, finish


async def test_a_recovery_is_logged_at_info_with_its_run_id(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awaken_trio")

    async def in_a(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async with owner_and_recoverer(shared_store, in_a) as (a, b, finish):
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("r") == RunState.Running(2)
                finish.set()
    (record,) = logged(caplog, "awaken_trio.worker", logging.INFO, "recovering run 'r'")
    assert record.__dict__["run_id"] == "r"


async def test_a_lost_claim_is_logged_as_a_warning_with_its_run_id(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awaken_trio")
    stopped = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    async with owner_and_recoverer(shared_store, in_a) as (a, b, finish), serving(b):
        with Stall(a):
            await past_lease()
        assert logged(caplog, "awaken_trio.worker", logging.WARNING, "claim") == []
        await trio.sleep(LEASE / 3 + 10 * POLL)  # a's next renewal finds it lost
        await reach(stopped)
        finish.set()
    (record,) = logged(caplog, "awaken_trio.worker", logging.WARNING, "claim on run 'r'")
    assert record.__dict__["run_id"] == "r"


class RenewalsSeen(ParkingStore):
    """Keeps what every renewal was answered."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[list[str]] = []

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        lost = await super().renew(owner, held, lease)
        self.answered.append(lost)
        return lost


async def test_a_claim_its_own_end_dropped_during_a_renewal_is_not_called_lost(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # The renewal took the claims held, then the run ended (its end commit drops its
    # claim), then the renewal reached the store: the store finds no claim for the run.
    caplog.set_level(logging.DEBUG, logger="awaken_trio")
    store = RenewalsSeen()
    finish = trio.Event()

    async def body(ctx: RunContext) -> object:
        await finish.wait()
        return "done"

    async with shared_runtime(store) as runtime:
        handle = await runtime.start(body, run_id="r")
        renewal = store.park("renew")
        await reach(renewal.arrived)
        finish.set()
        assert await handle.wait() == NATURAL
        renewal.release.set()
        await trio.sleep(LEASE / 3)
    assert ["r"] in store.answered  # the store did answer the renewal "lost"
    assert logged(caplog, "awaken_trio.worker", logging.WARNING, "claim") == []
    assert logged(caplog, "awaken_trio.worker", logging.DEBUG, "run 'r' ended during a renewal")


async def test_a_fenced_commit_is_logged_as_a_warning_with_its_run_id(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="awaken_trio")
    late = trio.Event()
    a_done = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        try:
            await ctx.boundary({"step": 1})
            await late.wait()
            await ctx.boundary({"step": "late"})  # fenced: another runtime's claim now
            return "a"
        finally:
            a_done.set()

    async with owner_and_recoverer(shared_store, in_a) as (a, b, finish):
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("r") == RunState.Running(2)
                late.set()
                await reach(a_done)
                finish.set()
    records = logged(caplog, "awaken_trio", logging.WARNING, "fenced off")
    assert [record.__dict__["run_id"] for record in records] == ["r"]
    assert "attempt 1" in records[0].getMessage()


async def test_a_store_error_ending_a_run_is_logged_as_an_error_with_its_run_id(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="awaken_trio")
    failing = FailingEnds(MemoryStore(shared=True), "r")

    async def body(ctx: RunContext) -> object:
        return 1

    async with shared_runtime(failing, bodies={"w": body}) as a:
        handle = await a.start(body, run_id="r")
        with pytest.raises(StoreError, match="disk full"):
            await settle(handle)
    records = logged(caplog, "awaken_trio", logging.ERROR, "disk full")
    assert [record.__dict__["run_id"] for record in records] == ["r"]
    assert "could not be committed" in records[0].getMessage()


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
async def test_a_served_run_s_claim_and_end_are_logged_at_info_only(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    level: int,
) -> None:
    """One line as a serving runtime claims a run and one as its end commits, each with the
    run id and the worker in its ``extra``; below INFO neither is made."""
    caplog.set_level(level, logger="awaken_trio")

    async def body(ctx: RunContext) -> object:
        return "done"

    async with shared_runtime(shared_store, bodies={"w": body}) as b:
        handle = await b.submit("w", run_id="q")
        async with serving(b):
            assert await settle(handle) == NATURAL
    worker = "awaken_trio.worker"
    claimed = logged(caplog, worker, logging.INFO, "serving: claimed run 'q'")
    ended = logged(caplog, worker, logging.INFO, "run 'q' ended: natural_end")
    if level > logging.INFO:
        assert claimed == ended == []
        return
    for (record,) in (claimed, ended):
        assert record.__dict__["run_id"] == "q"
        assert record.__dict__["worker_id"] == b.worker_id
    assert [r.__dict__["event"] for r in (*claimed, *ended)] == ["claim", "end"]
