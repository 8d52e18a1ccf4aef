"""Leaving `open_runtime` on a durable store releases the runtime's claims."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import RunContext, RunHandle, RunState
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    LEASE,
    NATURAL,
    POLL,
    SHUTDOWN,
    history,
    is_ended,
    is_running,
    serving,
    settle,
    shared_runtime,
    terminal,
    until,
    until_state,
)

RELEASED = {"source": "shutdown", "reason": "released for another runtime"}


def tagged(tag: str, seen: list[tuple[str, str, int, Any]]) -> Any:
    """A body that records where it ran, steps once, then parks (generation 1) or returns
    its checkpoint (later generations)."""

    async def body(ctx: RunContext) -> object:
        seen.append((tag, ctx.run_id, ctx.generation, ctx.checkpoint))
        if ctx.generation == 1:
            await ctx.boundary({"step": 1})
            await trio.sleep_forever()
        return {"from": ctx.checkpoint}

    return body


async def test_shutdown_puts_a_named_root_run_back_to_queued_with_its_checkpoint(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, str, int, Any]] = []
    body_a, body_b = tagged("a", seen), tagged("b", seen)
    async with shared_runtime(shared_store, bodies={"w": body_b}) as b:
        async with shared_runtime(shared_store, bodies={"w": body_a}) as a:
            await a.start(body_a, run_id="r")
            await trio.testing.wait_all_tasks_blocked()
        record = await b.record("r")
        assert record.state == RunState.Queued()
        assert record.generation == 1
        assert record.checkpoint == {"step": 1}
        release = committed_last(await history(b, "r"))
        assert dict(release.detail) == RELEASED
        async with serving(b):
            await until_state(b, "r", is_ended)
        record = await b.record("r")
        assert (record.state, record.generation) == (NATURAL, 2)
        assert record.result == {"from": {"step": 1}}
    assert seen == [("a", "r", 1, None), ("b", "r", 2, {"step": 1})]


def committed_last(events: list[Any]) -> Any:
    return [e for e in events if e.kind == "committed"][-1]


async def test_shutdown_hands_the_children_of_a_released_run_back_with_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # Rule 22: a running child goes back to Queued (before its parent's release), a queued
    # or awaiting one stays as it is; none of them ends.
    kids = ("kid-running", "kid-awaiting", "kid-queued")

    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def asking(ctx: RunContext) -> object:
        await ctx.await_input("user_input")

    async def parent(ctx: RunContext) -> object:
        await ctx.start_child(parked, run_id="kid-running", thread_id="kt")
        await ctx.run_child(asking, run_id="kid-awaiting")
        await ctx.start_child(parked, run_id="kid-queued", thread_id="kt")
        await trio.sleep_forever()

    async with shared_runtime(shared_store) as observer:
        async with shared_runtime(shared_store, bodies={"p": parent}) as a:
            await a.start(parent, run_id="p")
            await trio.testing.wait_all_tasks_blocked()
            awaiting = await a.state("kid-awaiting")
        assert await observer.state("p") == RunState.Queued()
        assert await observer.state("kid-running") == RunState.Queued()
        assert await observer.state("kid-awaiting") == awaiting
        assert await observer.state("kid-queued") == RunState.Queued()
        events = await history(observer)
        release = next(e for e in events if e.run_id == "p" and dict(e.detail) == RELEASED)
        for kid in kids:
            assert terminal([e for e in events if e.run_id == kid]) == []
        [handed] = [e for e in events if e.run_id == "kid-running" and e.state == RunState.Queued()]
        assert dict(handed.detail) == {
            "source": "shutdown",
            "reason": "handed back with its parent",
        }
        assert handed.seq < release.seq


async def test_shutdown_ends_a_run_with_no_name_stopped(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def unregistered(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async with shared_runtime(shared_store) as observer:
        async with shared_runtime(shared_store) as a:
            handle = await a.start(unregistered, run_id="running", thread_id="T")
            queued = await a.start(unregistered, run_id="queued", thread_id="T")
            await trio.testing.wait_all_tasks_blocked()
        assert await observer.state("running") == SHUTDOWN
        assert await observer.state("queued") == SHUTDOWN
        assert await settle(handle) == SHUTDOWN
        assert await settle(queued) == SHUTDOWN


async def test_shutdown_releases_a_named_run_queued_behind_its_thread(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, str, int, Any]] = []
    body_a, body_b = tagged("a", seen), tagged("b", seen)
    async with shared_runtime(shared_store, bodies={"w": body_b}) as b:
        async with shared_runtime(shared_store, bodies={"w": body_a}) as a:
            await a.start(body_a, run_id="first", thread_id="T")
            await a.start(body_a, run_id="second", thread_id="T")
            await trio.testing.wait_all_tasks_blocked()
            assert await a.state("second") == RunState.Queued()
        assert await b.state("first") == RunState.Queued()
        assert await b.state("second") == RunState.Queued()
        async with serving(b):

            async def one_left_the_queue() -> bool:
                states = (await b.state("first"), await b.state("second"))
                return states != (RunState.Queued(), RunState.Queued())

            await until(one_left_the_queue, seconds=60)
            await trio.testing.wait_all_tasks_blocked()
            # The thread's order holds: the run that had it resumes before the one that
            # was queued behind it (which had never run: its first attempt comes next).
            assert seen[1][:3] == ("b", "first", 2), seen
            await until_state(b, "first", is_ended)
            await until_state(b, "second", lambda s: s == RunState.Running(1))
    assert seen == [
        ("a", "first", 1, None),
        ("b", "first", 2, {"step": 1}),
        ("b", "second", 1, None),
    ]


async def test_shutdown_leaves_awaiting_runs_awaiting(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def asking(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("user_input", payload={"q": "name?"})
        return ctx.resume_value

    async with shared_runtime(shared_store, bodies={"asking": asking}) as b:
        async with shared_runtime(shared_store, bodies={"asking": asking}) as a:
            handle = await a.start(asking, run_id="named")
            unnamed = await a.start(asking, run_id="unnamed", name=None)
            state = await settle(handle)
            assert isinstance(state, RunState.Awaiting)
            assert isinstance(await settle(unnamed), RunState.Awaiting)
            log = await history(a)
        assert await b.state("named") == state
        assert isinstance(await b.state("unnamed"), RunState.Awaiting)
        assert await history(b) == log  # nothing committed by the shutdown
        resumed = await b.resume("named", "bob")
        assert await settle(resumed) == NATURAL
        assert (await b.record("named")).result == "bob"


async def test_a_serving_runtime_picks_released_runs_up(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, str, int, Any]] = []
    body_a, body_b = tagged("a", seen), tagged("b", seen)
    async with shared_runtime(shared_store, bodies={"w": body_b}) as b, serving(b):
        async with shared_runtime(shared_store, bodies={"w": body_a}) as a:
            for index in range(3):
                await a.start(body_a, run_id=f"r{index}")
            await trio.testing.wait_all_tasks_blocked()
        closed = trio.current_time()
        for index in range(3):
            await until_state(b, f"r{index}", is_ended)
        assert trio.current_time() - closed <= 10 * POLL  # not a lease later
    assert sorted(s for s in seen if s[0] == "b") == [
        ("b", f"r{index}", 2, {"step": 1}) for index in range(3)
    ]


async def test_the_handle_of_a_released_run_waits_for_its_end_elsewhere(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A release is not an end: the handle from the closed runtime keeps waiting and
    returns the end the run commits in another runtime."""
    seen: list[tuple[str, str, int, Any]] = []
    body_a, body_b = tagged("a", seen), tagged("b", seen)
    ends: list[RunState] = []
    async with shared_runtime(shared_store, bodies={"w": body_b}) as b:
        handle: RunHandle | None = None
        async with trio.open_nursery() as nursery:
            async with shared_runtime(shared_store, bodies={"w": body_a}) as a:
                handle = await a.start(body_a, run_id="r")

                async def wait_for_it() -> None:
                    assert handle is not None
                    ends.append(await settle(handle))

                nursery.start_soon(wait_for_it)
                await trio.testing.wait_all_tasks_blocked()
            await trio.testing.wait_all_tasks_blocked()
            assert await b.state("r") == RunState.Queued()
            assert ends == []
            async with serving(b):
                await until_state(b, "r", is_ended)
        assert ends == [NATURAL]


@pytest.mark.parametrize("leaving", ["returns", "enclosing_cancel"])
async def test_renewals_keep_running_while_the_runtime_drains(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, leaving: str
) -> None:
    """A body whose shielded cleanup outlasts the lease keeps its claim: nobody recovers
    the run meanwhile, and its release lands; also when the block is left because an
    enclosing scope was cancelled."""
    seen: list[tuple[str, int, float]] = []
    cleaned = trio.Event()

    async def slow(ctx: RunContext) -> object:
        seen.append(("a", ctx.generation, trio.current_time()))
        try:
            await ctx.boundary({"step": 1})
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(3 * LEASE)
                cleaned.set()

    async def in_b(ctx: RunContext) -> object:
        seen.append(("b", ctx.generation, trio.current_time()))
        return ctx.checkpoint

    async with shared_runtime(shared_store, bodies={"w": in_b}) as b, serving(b):
        with trio.CancelScope() as enclosing:
            async with shared_runtime(shared_store, bodies={"w": slow}) as a:
                await a.start(slow, run_id="r")
                await trio.testing.wait_all_tasks_blocked()
                if leaving == "enclosing_cancel":
                    enclosing.cancel()
                    await trio.sleep_forever()
        assert enclosing.cancelled_caught == (leaving == "enclosing_cancel")
        closed = trio.current_time()
        assert cleaned.is_set()
        await until_state(b, "r", is_ended)
        assert await b.state("r") == NATURAL
        sources = [dict(e.detail).get("source") for e in await history(b, "r")]
        assert "recovery" not in sources
        assert [e for e in await history(b, "r") if dict(e.detail) == RELEASED]
    assert [(tag, generation) for tag, generation, _ in seen] == [("a", 1), ("b", 2)]
    assert seen[1][2] >= closed


async def test_a_run_released_at_shutdown_is_not_a_loss(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Releases do not count toward max_recoveries: a run released more times than that
    still runs, each attempt one generation on."""
    generations: list[int] = []

    async def parks(ctx: RunContext) -> object:
        generations.append(ctx.generation)
        await ctx.boundary({"generation": ctx.generation})
        await trio.sleep_forever()

    for index in range(3):
        async with shared_runtime(shared_store, bodies={"w": parks}, max_recoveries=0) as rt:
            if index == 0:
                await rt.start(parks, run_id="r")
            else:
                async with serving(rt):
                    await until_state(rt, "r", is_running)
            await trio.testing.wait_all_tasks_blocked()
        record = await shared_store.load("r")
        assert record is not None
        assert (record.state, record.checkpoint) == (RunState.Queued(), {"generation": index + 1})

    async def finisher(ctx: RunContext) -> object:
        return ctx.generation

    async with (
        shared_runtime(shared_store, bodies={"w": finisher}, max_recoveries=0) as last,
        serving(last),
    ):
        await until_state(last, "r", is_ended)
        assert await last.state("r") == NATURAL
        assert (await last.record("r")).result == 4
    assert generations == [1, 2, 3]
