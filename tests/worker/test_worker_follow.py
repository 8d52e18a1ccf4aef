"""Reading committed truth across runtimes: `RunHandle.wait()` and ``events(follow=True)``."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import EventKind, LiveCommand, RunContext, RunState
from awaken_trio.store import MemoryStore

from .worker_helpers import (
    NATURAL,
    POLL,
    POLL_BOUND,
    Follower,
    history,
    is_running,
    reach,
    serving,
    settle,
    shared_runtime,
    until_state,
)


async def test_a_handle_waits_for_the_end_another_runtime_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return "from b"

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        handle = await a.submit("job", run_id="r")
        ends: list[tuple[float, RunState]] = []
        async with trio.open_nursery() as nursery:

            async def wait_for_it() -> None:
                state = await settle(handle)
                ends.append((trio.current_time(), state))

            nursery.start_soon(wait_for_it)
            await until_state(a, "r", is_running)
            await trio.sleep(100 * POLL)
            assert ends == []
            release.set()
            released = trio.current_time()
        assert [state for _, state in ends] == [NATURAL]
        assert ends[0][0] - released <= POLL_BOUND
        # The end stays the answer.
        assert await settle(handle) == NATURAL


async def test_a_handle_returns_the_first_awaiting_another_runtime_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        while True:
            await ctx.boundary(wait=True)

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        handle = await a.submit("job", run_id="r")
        await until_state(a, "r", is_running)
        await a.send(LiveCommand.Pause("r"))
        state = await settle(handle)
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        await a.resume("r")
        await until_state(a, "r", is_running)
        assert await settle(handle) == state


async def test_events_followed_in_one_runtime_include_another_runtimes_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    stepped = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        stepped.set()
        await release.wait()
        await ctx.emit("test.almost", {"n": 2})
        return "done"

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        await a.submit("job", run_id="r")
        follower = Follower(a.events("r", follow=True))
        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                await reach(stepped)
                at = trio.current_time()
                await trio.sleep(POLL_BOUND)
                # The step B committed reached the follower in A without waiting for
                # anything A commits.
                sources = [dict(e.detail).get("source") for e in follower.events]
                assert "boundary" in sources, follower.events
                assert max(follower.arrived) - at <= POLL_BOUND
                release.set()
        events = follower.events
        assert events == await history(b, "r")
        assert events[-1].state == NATURAL
        assert events[-1].kind == EventKind.COMMITTED
        assert [e.kind for e in events].count("test.almost") == 1


async def test_events_of_all_runs_followed_in_one_runtime_include_another_runtimes(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        return ctx.input

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store) as b,
        trio.open_nursery() as nursery,
    ):
        follower = Follower(a.events(follow=True))
        nursery.start_soon(follower.run)
        await trio.testing.wait_all_tasks_blocked()
        await settle(await b.start(body, run_id="in-b", input=1))
        await trio.sleep(POLL_BOUND)
        assert [(e.run_id, e.state) for e in follower.events] == [
            ("in-b", RunState.Running(1)),
            ("in-b", NATURAL),
        ]
        nursery.cancel_scope.cancel()


async def test_a_follower_in_a_closed_runtime_reads_the_history_from_the_shared_store(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        return "done"

    async with shared_runtime(shared_store, bodies={"job": body}) as b:
        async with shared_runtime(shared_store) as a:
            handle = await a.submit("job", run_id="r")
        async with serving(b):
            await until_state(b, "r", lambda s: s == NATURAL)
        assert await settle(handle) == NATURAL
        events = [e async for e in a.events("r", follow=True)]
        assert events == await history(b, "r")
