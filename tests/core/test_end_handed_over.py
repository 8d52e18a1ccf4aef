"""A root attempt's end on a store with I/O is handed to the mailbox with no task waiting
for it: the run's actor is done once the end is handed over, and the end's answer is
taken in the commit's step, as the actor would have taken it."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from awaken_trio import EndCause, RunContext, RunState, open_runtime
from tests.run_helpers import history, reach, settle, terminal_commits
from tests.wrapped_stores import HoldingStore

DONE = RunState.Ended(EndCause.NaturalEnd())


async def test_the_actor_is_done_while_its_end_is_on_its_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HoldingStore(RunState.Ended)
    actors: list[trio.lowlevel.Task] = []
    answered: list[RunState] = []

    async def body(ctx: RunContext) -> str:
        actors.append(trio.lowlevel.current_task())
        return "done"

    async def wait(handle: Any) -> None:
        answered.append(await handle.wait())

    async with open_runtime(store) as rt, trio.open_nursery() as nursery:
        handle = await rt.start(body, run_id="r", thread_id="t")
        nursery.start_soon(wait, handle)
        await reach(store.holding)
        await trio.testing.wait_all_tasks_blocked()
        try:
            # The end is in the store's hands: the actor's coroutine has returned, while
            # the attempt is still registered and its thread held until the answer comes.
            [actor] = actors
            assert actor.coro.cr_frame is None
            assert answered == []
            stats = rt.statistics()
            assert (stats.active_attempts, stats.busy_threads) == (1, 1)
            assert await rt.state("r") == RunState.Running(1)
        finally:
            store.release.set()  # (else a failure here would wait for ever to close)
        assert await settle(handle) == DONE
        await trio.testing.wait_all_tasks_blocked()
        assert answered == [DONE]
        stats = rt.statistics()
        assert (stats.active_attempts, stats.busy_threads) == (0, 0)
        assert len(terminal_commits(await history(rt, "r"))) == 1
        assert (await rt.record("r")).result == "done"


async def test_a_child_s_actor_waits_for_its_own_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A parent's end comes after its children's: a child's actor stays until its end is
    # answered, and the parent's end goes to the store after it.
    store = HoldingStore(RunState.Ended)
    children: list[trio.lowlevel.Task] = []

    async def child(ctx: RunContext) -> str:
        children.append(trio.lowlevel.current_task())
        return "child"

    async def parent(ctx: RunContext) -> str:
        handle = await ctx.start_child(child, run_id="kid")
        await handle.wait()
        return "parent"

    async with open_runtime(store) as rt:
        handle = await rt.start(parent, run_id="p")
        await reach(store.holding)
        await trio.testing.wait_all_tasks_blocked()
        try:
            [actor] = children
            assert actor.coro.cr_frame is not None
        finally:
            store.release.set()
        assert await settle(handle) == DONE
        ends = terminal_commits(await history(rt))
        assert [e.run_id for e in ends] == ["kid", "p"]


async def test_closing_waits_for_an_end_on_its_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HoldingStore(RunState.Ended)
    closed = trio.Event()

    async def body(ctx: RunContext) -> str:
        return "done"

    async def use() -> None:
        async with open_runtime(store) as rt:
            await rt.start(body, run_id="r")
            await reach(store.holding)
        closed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(use)
        await reach(store.holding)
        await trio.sleep(60)
        try:
            assert not closed.is_set()
        finally:
            store.release.set()
        await reach(closed)
    record = await store.load("r")
    assert record is not None
    assert (record.state, record.result) == (DONE, "done")
