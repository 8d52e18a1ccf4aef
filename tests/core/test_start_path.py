"""The common start (a top-level run with no time limits, retry policy or busy-thread
policy), admitted in one step on a store that needs no I/O: what it leaves behind when the
store, the clock or the id refuses it, and what it carries like any other start."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    InvalidBody,
    RunContext,
    RunExists,
    RunState,
    RuntimeClosed,
    StoreError,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, settle, start_parked
from tests.wrapped_stores import InlineFailingStore

DONE = RunState.Ended(EndCause.NaturalEnd())


async def _done(ctx: RunContext) -> str:
    return ctx.run_id


async def test_a_store_failing_the_start_raises_and_leaves_its_thread_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InlineFailingStore()
    async with open_runtime(store) as rt:
        store.failing = True
        with pytest.raises(StoreError, match="disk full"):
            await rt.start(_done, run_id="r", thread_id="t")
        assert store.batches == [["r"]]  # it was tried inline, once
        stats = rt.statistics()
        assert (stats.active_attempts, stats.busy_threads) == (0, 0)
        store.failing = False
        handle = await rt.start(_done, run_id="r", thread_id="t")
        assert await settle(handle) == DONE
        assert (await rt.record("r")).result == "r"


async def test_a_failing_clock_refuses_the_start_and_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    readings: list[object] = [1.0]

    def clock() -> float:
        return readings[-1]  # type: ignore[return-value]

    async with open_runtime(MemoryStore(), clock=clock) as rt:
        readings.append(float("nan"))
        with pytest.raises(InvalidArgument, match="clock"):
            await rt.start(_done, run_id="r", thread_id="t")
        assert rt.statistics().busy_threads == 0
        assert await history(rt) == []
        readings.append(2.0)
        assert await settle(await rt.start(_done, run_id="r", thread_id="t")) == DONE


async def test_a_taken_run_id_is_refused_and_its_thread_is_not_held(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(MemoryStore()) as rt:
        assert await settle(await rt.start(_done, run_id="r", thread_id="a")) == DONE
        before = await history(rt)
        # Its own thread is free, so the start is decided in one step, and refused there.
        with pytest.raises(RunExists):
            await rt.start(_done, run_id="r", thread_id="b")
        assert await history(rt) == before
        assert rt.statistics().busy_threads == 0
        assert await settle(await rt.start(_done, run_id="s", thread_id="b")) == DONE


async def test_a_bad_argument_is_refused_before_anything_is_taken(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(MemoryStore()) as rt:
        with pytest.raises(InvalidBody):
            await rt.start(lambda ctx: None)  # type: ignore[arg-type,return-value]
        with pytest.raises(InvalidArgument, match="thread_id"):
            await rt.start(_done, thread_id="")
        with pytest.raises(InvalidArgument, match="max_steps"):
            await rt.start(_done, max_steps=-1)
        assert (rt.statistics().busy_threads, await history(rt)) == (0, [])


async def test_a_busy_thread_queues_the_start_behind_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(MemoryStore()) as rt:
        first = await start_parked(rt, run_id="first", thread_id="t")
        second = await rt.start(_done, run_id="second", thread_id="t")
        assert (await rt.record("second")).state == RunState.Queued()
        await rt.cancel_run(first.run_id)
        assert await settle(second) == DONE


async def test_a_start_while_shutting_down_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    refused: list[BaseException] = []
    async with open_runtime(MemoryStore()) as rt:

        async def late(ctx: RunContext) -> None:
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    try:
                        await rt.start(_done, run_id="late")
                    except RuntimeClosed as exc:
                        refused.append(exc)

        await rt.start(late, run_id="parked")
        await trio.testing.wait_all_tasks_blocked()
    assert len(refused) == 1


async def test_a_registered_body_started_by_itself_carries_its_name_and_version(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime(MemoryStore()) as rt:
        rt.register("greet", _done, version="v2")
        assert await settle(await rt.start(_done, run_id="r")) == DONE
        record = await rt.record("r")
        assert (record.name, record.body_version) == ("greet", "v2")


async def test_the_common_start_is_one_commit_in_the_callers_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InlineFailingStore()
    async with open_runtime(store) as rt:
        handle = await rt.start(_done, run_id="r")
        # Returned Running and registered: a live command reaches it at once.
        assert store.batches == [["r"]]
        assert rt.statistics().active_attempts == 1
        assert await settle(handle) == DONE
        assert store.batches == [["r"], ["r"]]


async def test_execute_takes_the_common_start_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InlineFailingStore()
    async with open_runtime(store) as rt:
        assert await rt.execute(_done, run_id="r") == DONE
        assert store.batches == [["r"], ["r"]]
        store.failing = True
        with pytest.raises(StoreError, match="disk full"):
            await rt.execute(_done, run_id="s", thread_id="t")
        assert rt.statistics().busy_threads == 0
        store.failing = False
        with pytest.raises(RunExists):
            await rt.execute(_done, run_id="r")
        assert await rt.execute(_done, run_id="s", thread_id="t") == DONE
