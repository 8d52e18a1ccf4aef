"""One active attempt per thread across every runtime sharing a store."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import RunContext, RunState
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    POLL,
    POLL_BOUND,
    is_running,
    reach,
    serving,
    settle,
    shared_runtime,
    until_state,
)


class Thread:
    """Records which bodies run on one thread, and any overlap between them."""

    def __init__(self) -> None:
        self.occupant: str | None = None
        self.overlaps: list[tuple[str, str]] = []
        self.entered: list[tuple[str, float]] = []
        self.left: dict[str, float] = {}
        self.gates: dict[str, trio.Event] = {}

    def gate(self, run_id: str) -> trio.Event:
        return self.gates.setdefault(run_id, trio.Event())

    async def body(self, ctx: RunContext) -> object:
        if self.occupant is not None:
            self.overlaps.append((self.occupant, ctx.run_id))
        self.occupant = ctx.run_id
        self.entered.append((ctx.run_id, trio.current_time()))
        try:
            await self.gate(ctx.run_id).wait()
        finally:
            self.left[ctx.run_id] = trio.current_time()
            if self.occupant == ctx.run_id:
                self.occupant = None
        return ctx.run_id


async def test_a_start_on_a_thread_busy_in_another_runtime_is_queued_until_it_frees(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        first = await a.start(thread.body, run_id="first", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        second = await b.start(thread.body, run_id="second", thread_id="T")
        assert await b.state("second") == RunState.Queued()
        await trio.sleep(100 * POLL)  # it retries every poll: still busy
        assert await b.state("second") == RunState.Queued()
        assert [run_id for run_id, _ in thread.entered] == ["first"]
        assert b.active_attempt_run_id("T") is None
        thread.gate("first").set()
        assert await settle(first) == NATURAL
        await until_state(b, "second", is_running)
        await trio.testing.wait_all_tasks_blocked()  # its body has begun
        assert b.active_attempt_run_id("T") == "second"
        assert thread.entered[1][0] == "second"
        assert thread.entered[1][1] - thread.left["first"] <= POLL_BOUND
        thread.gate("second").set()
        assert await settle(second) == NATURAL
    assert thread.overlaps == []


async def test_runs_of_three_runtimes_on_one_thread_never_overlap(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store) as c,
    ):
        handles = []
        for index in range(9):
            runtime = (a, b, c)[index % 3]
            handles.append(await runtime.start(thread.body, run_id=f"r{index}", thread_id="T"))
        for _ in range(9):
            await trio.sleep(20 * POLL)
            assert thread.occupant is not None
            thread.gate(thread.occupant).set()
        for handle in handles:
            assert await settle(handle) == NATURAL
    assert thread.overlaps == []
    assert sorted(run_id for run_id, _ in thread.entered) == [f"r{i}" for i in range(9)]
    # Each runtime keeps its own starts in order on the thread.
    order = [run_id for run_id, _ in thread.entered]
    for offset in range(3):
        mine = [f"r{i}" for i in range(offset, 9, 3)]
        assert [r for r in order if r in mine] == mine


async def test_a_queued_run_on_a_busy_thread_waits_for_a_serving_runtime(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"t": thread.body}) as b,
        serving(b),
    ):
        first = await a.start(thread.body, run_id="first", thread_id="T")
        submitted = await a.submit("t", run_id="second", thread_id="T")
        await trio.sleep(100 * POLL)
        assert await a.state("second") == RunState.Queued()
        assert [run_id for run_id, _ in thread.entered] == ["first"]
        thread.gate("first").set()
        await settle(first)
        await until_state(a, "second", is_running)
        await trio.testing.wait_all_tasks_blocked()  # its body has begun
        assert thread.entered[1][1] - thread.left["first"] <= POLL_BOUND
        thread.gate("second").set()
        assert await settle(submitted) == NATURAL
    assert thread.overlaps == []


async def test_a_resume_on_a_thread_busy_in_another_runtime_is_queued(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    resumed_with: list[object] = []

    async def asking(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        resumed_with.append(ctx.resume_value)
        return await thread.body(ctx)

    async with (
        shared_runtime(shared_store, bodies={"asking": asking}) as a,
        shared_runtime(shared_store, bodies={"asking": asking}) as b,
    ):
        first = await a.start(asking, run_id="asker", thread_id="T")
        assert isinstance(await settle(first), RunState.Awaiting)
        holder = await a.start(thread.body, run_id="holder", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        resumed = await b.resume("asker", "yes")
        assert await b.state("asker") == RunState.Queued()
        await trio.sleep(100 * POLL)
        assert resumed_with == []
        thread.gate("holder").set()
        await settle(holder)
        await until_state(b, "asker", is_running)
        await trio.testing.wait_all_tasks_blocked()  # its body has begun
        assert resumed_with == ["yes"]
        thread.gate("asker").set()
        assert await settle(resumed) == NATURAL
    assert thread.overlaps == []


async def test_a_child_on_a_thread_busy_in_another_runtime_waits_queued(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    child_started = trio.Event()

    async def parent(ctx: RunContext) -> object:
        handle = await ctx.start_child(thread.body, run_id="kid", thread_id="T")
        child_started.set()
        return await handle.wait() == NATURAL

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        holder = await a.start(thread.body, run_id="holder", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        parent_handle = await b.start(parent, run_id="p")
        await reach(child_started)
        await trio.sleep(100 * POLL)
        assert await b.state("kid") == RunState.Queued()
        thread.gate("holder").set()
        await settle(holder)
        await until_state(b, "kid", is_running)
        await trio.testing.wait_all_tasks_blocked()  # its body has begun
        thread.gate("kid").set()
        assert await settle(parent_handle) == NATURAL
        assert (await b.record("p")).result is True
    assert thread.overlaps == []


async def test_a_run_ended_while_queued_behind_another_runtime_never_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    thread = Thread()
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        holder = await a.start(thread.body, run_id="holder", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        waiting = await b.start(thread.body, run_id="waiting", thread_id="T")
        assert await a.cancel_run("waiting") == CANCELLED
        assert await settle(waiting) == CANCELLED
        thread.gate("holder").set()
        await settle(holder)
        await trio.sleep(100 * POLL)
    assert [run_id for run_id, _ in thread.entered] == ["holder"]
