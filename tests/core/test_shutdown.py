"""Leaving `open_runtime`: runs are stopped, errors come out unwrapped."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    RuntimeClosed,
    open_runtime,
)
from awaken_trio.store import MemoryStore

SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))


async def state_in(store: MemoryStore, run_id: str) -> RunState:
    record = await store.load(run_id)
    assert record is not None, run_id
    return record.state


async def sleeper(ctx: RunContext) -> None:
    await trio.sleep_forever()


async def long_sleeper(ctx: RunContext) -> None:
    # If shutdown waited for this instead of cancelling it, the clock would jump an hour.
    await trio.sleep(3600)


async def test_leaving_the_block_stops_running_queued_and_child_runs_promptly(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    cleanup: list[str] = []

    async def child(ctx: RunContext) -> None:
        try:
            await trio.sleep(3600)
        finally:
            cleanup.append(ctx.run_id)

    async def parent(ctx: RunContext) -> None:
        await ctx.start_child(child, run_id="child")
        await ctx.run_child(child, run_id="child-2")

    start = trio.current_time()
    async with open_runtime(store) as runtime:
        await runtime.start(long_sleeper, run_id="running", thread_id="t")
        await runtime.start(long_sleeper, run_id="queued", thread_id="t")
        await runtime.start(sleeper, run_id="other")
        await runtime.start(parent, run_id="parent")
        await trio.testing.wait_all_tasks_blocked()
        assert await runtime.state("queued") == RunState.Queued()
        assert await runtime.state("child") == RunState.Running(1)
        assert await runtime.state("child-2") == RunState.Running(1)
    assert trio.current_time() - start < 0.001

    for run_id in ("running", "queued", "other", "parent", "child", "child-2"):
        assert await state_in(store, run_id) == SHUTDOWN, run_id
    assert sorted(cleanup) == ["child", "child-2"]
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


async def test_children_commit_before_their_parent_at_shutdown(store: MemoryStore) -> None:
    async def parent(ctx: RunContext) -> None:
        await ctx.run_child(sleeper, run_id="child")

    async with open_runtime(store) as runtime:
        await runtime.start(parent, run_id="parent")
        await trio.testing.wait_all_tasks_blocked()
    events = [event async for event in runtime.events(follow=False)]
    ends = {
        e.run_id: e.seq
        for e in events
        if e.kind == "committed" and isinstance(e.state, RunState.Ended)
    }
    assert ends["child"] < ends["parent"]
    assert await state_in(store, "parent") == SHUTDOWN
    assert await state_in(store, "child") == SHUTDOWN


async def test_an_exception_from_the_block_comes_out_unwrapped(store: MemoryStore) -> None:
    async def block() -> None:
        async with open_runtime(store) as runtime:
            await runtime.start(sleeper, run_id="r")
            await trio.testing.wait_all_tasks_blocked()
            raise ValueError("caller broke")

    with pytest.raises(ValueError, match="caller broke") as info:
        await block()
    assert type(info.value) is ValueError
    assert await state_in(store, "r") == SHUTDOWN


async def test_a_keyboard_interrupt_from_the_block_comes_out_bare(store: MemoryStore) -> None:
    async def block() -> None:
        async with open_runtime(store) as runtime:
            await runtime.start(sleeper, run_id="r")
            await runtime.start(sleeper, run_id="q", thread_id="r")
            await trio.testing.wait_all_tasks_blocked()
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        await block()
    assert type(info.value) is KeyboardInterrupt
    assert await state_in(store, "r") == SHUTDOWN
    assert await state_in(store, "q") == SHUTDOWN


async def test_a_keyboard_interrupt_from_a_body_comes_out_bare_after_runs_stop(
    store: MemoryStore,
) -> None:
    go = trio.Event()

    async def interrupter(ctx: RunContext) -> None:
        await go.wait()
        raise KeyboardInterrupt

    kept: list[Runtime] = []

    async def block() -> None:
        async with open_runtime(store) as runtime:
            kept.append(runtime)
            await runtime.start(sleeper, run_id="bystander")
            await runtime.start(interrupter, run_id="interrupter")
            await trio.testing.wait_all_tasks_blocked()
            go.set()
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt) as info:
        await block()
    assert type(info.value) is KeyboardInterrupt
    assert await state_in(store, "bystander") == SHUTDOWN
    assert await state_in(store, "interrupter") == SHUTDOWN
    with pytest.raises(RuntimeClosed):
        await kept[0].start(sleeper)


async def test_start_after_shutdown_raises_runtime_closed(store: MemoryStore) -> None:
    async with open_runtime(store) as runtime:
        pass
    before = [event async for event in runtime.events(follow=False)]
    with pytest.raises(RuntimeClosed):
        await runtime.start(sleeper, run_id="late")
    with pytest.raises(RuntimeClosed):
        await runtime.execute(sleeper, run_id="late")
    assert await store.load("late") is None
    assert [event async for event in runtime.events(follow=False)] == before


async def test_awaiting_runs_stay_awaiting_after_shutdown(store: MemoryStore) -> None:
    async def waiter(ctx: RunContext) -> None:
        await ctx.await_input("user_input", correlation_id="q-1", payload={"ask": "name?"})

    async def pauser(ctx: RunContext) -> None:
        await ctx.boundary(wait=True)

    async with open_runtime(store) as runtime:
        waiting = await runtime.execute(waiter, run_id="w")
        assert isinstance(waiting, RunState.Awaiting)
        handle = await runtime.start(pauser, run_id="p")
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Pause("p"))
        paused = await handle.wait()
        assert isinstance(paused, RunState.Awaiting)
        await runtime.start(sleeper, run_id="s")
    assert await state_in(store, "w") == waiting
    assert await state_in(store, "p") == paused
    assert await state_in(store, "s") == SHUTDOWN
    with pytest.raises(RuntimeClosed):
        await runtime.resume("w", "Ada")
    assert await state_in(store, "w") == waiting
