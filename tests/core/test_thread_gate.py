"""The thread gate: one active attempt per thread, FIFO, and no leftover bookkeeping."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import EndCause, LiveCommand, RunContext, RunHandle, RunState, Runtime
from tests.run_helpers import settle


def assert_idle(runtime: Runtime) -> None:
    stats = runtime.statistics()
    assert stats.active_attempts == 0, stats
    assert stats.queued_runs == 0, stats
    assert stats.busy_threads == 0, stats
    assert stats.awaiting_bodies == 0, stats


async def test_runs_on_one_thread_run_one_at_a_time_in_start_order(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []

    async def body(ctx: RunContext) -> str:
        log.append(("start", ctx.run_id))
        await trio.sleep(1)
        log.append(("end", ctx.run_id))
        return ctx.run_id

    handles = [await runtime.start(body, run_id=name, thread_id="t") for name in "abc"]
    assert await runtime.state("a") == RunState.Running(1)
    assert await runtime.state("b") == RunState.Queued()
    assert await runtime.state("c") == RunState.Queued()
    assert runtime.active_attempt_run_id("t") == "a"
    assert [h.thread_id for h in handles] == ["t", "t", "t"]

    for handle in handles:
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert log == [
        ("start", "a"),
        ("end", "a"),
        ("start", "b"),
        ("end", "b"),
        ("start", "c"),
        ("end", "c"),
    ]
    assert trio.current_time() == 3  # strictly one after another
    for name in "abc":
        assert (await runtime.record(name)).result == name
    assert runtime.active_attempt_run_id("t") is None
    assert_idle(runtime)


async def test_runs_on_different_threads_run_side_by_side(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await trio.sleep(1)

    handles = [await runtime.start(body, thread_id=f"t{i}") for i in range(3)]
    for handle in handles:
        assert await runtime.state(handle.run_id) == RunState.Running(1)
    for handle in handles:
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert trio.current_time() == 1
    assert_idle(runtime)


async def test_a_cancelled_queued_run_never_runs_and_the_next_one_still_does(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    started: list[str] = []

    async def body(ctx: RunContext) -> None:
        started.append(ctx.run_id)
        await gate.wait()

    first = await runtime.start(body, run_id="a", thread_id="t")
    second = await runtime.start(body, run_id="b", thread_id="t")
    third = await runtime.start(body, run_id="c", thread_id="t")
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state("b") == RunState.Queued()

    assert await runtime.cancel_run("b") == RunState.Ended(EndCause.Cancelled())
    assert await settle(second) == RunState.Ended(EndCause.Cancelled())
    assert await runtime.state("c") == RunState.Queued()  # still behind "a"
    gate.set()
    assert await settle(first) == RunState.Ended(EndCause.NaturalEnd())
    assert await settle(third) == RunState.Ended(EndCause.NaturalEnd())
    assert started == ["a", "c"]
    assert_idle(runtime)


async def test_a_queued_run_can_be_stopped_and_the_thread_still_frees(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    started: list[str] = []

    async def body(ctx: RunContext) -> None:
        started.append(ctx.run_id)
        await gate.wait()

    first = await runtime.start(body, run_id="a", thread_id="t")
    second = await runtime.start(body, run_id="b", thread_id="t")
    stopped = RunState.Ended(EndCause.Stopped("quota"))
    assert await runtime.stop_run("b", "quota") == stopped
    assert await settle(second) == stopped
    gate.set()
    assert await settle(first) == RunState.Ended(EndCause.NaturalEnd())
    assert started == ["a"]
    later = await runtime.start(body, run_id="d", thread_id="t")
    assert await settle(later) == RunState.Ended(EndCause.NaturalEnd())
    assert started == ["a", "d"]
    assert_idle(runtime)


async def test_resume_on_a_busy_thread_commits_queued_and_runs_after(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    log: list[tuple[str, str, int]] = []

    async def waiter(ctx: RunContext) -> str:
        log.append(("start", ctx.run_id, ctx.generation))
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        assert ctx.resume_value == "answer"
        return "resumed"

    async def occupant(ctx: RunContext) -> None:
        log.append(("start", ctx.run_id, ctx.generation))
        await gate.wait()
        log.append(("end", ctx.run_id, ctx.generation))

    first = await runtime.start(waiter, run_id="w", thread_id="t")
    assert isinstance(await settle(first), RunState.Awaiting)
    # Awaiting holds no thread: another run takes it.
    busy = await runtime.start(occupant, run_id="o", thread_id="t")
    assert await runtime.state("o") == RunState.Running(1)
    await trio.testing.wait_all_tasks_blocked()

    resumed = await runtime.resume("w", "answer")
    assert resumed.generation == 2
    assert await runtime.state("w") == RunState.Queued()
    assert runtime.active_attempt_run_id("t") == "o"
    await trio.testing.wait_all_tasks_blocked()
    assert log == [("start", "w", 1), ("start", "o", 1)]

    gate.set()
    assert await settle(busy) == RunState.Ended(EndCause.NaturalEnd())
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
    assert log == [("start", "w", 1), ("start", "o", 1), ("end", "o", 1), ("start", "w", 2)]
    record = await runtime.record("w")
    assert record.generation == 2
    assert record.result == "resumed"
    assert_idle(runtime)


async def test_statistics_return_to_zero_after_many_runs(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()

    async def body(ctx: RunContext) -> int:
        await gate.wait()
        await ctx.boundary({"step": 1})
        return 1

    handles: list[RunHandle] = [
        await runtime.start(body, thread_id=f"t{i % 10}") for i in range(1000)
    ]
    await trio.testing.wait_all_tasks_blocked()
    stats = runtime.statistics()
    assert stats.active_attempts == 10
    assert stats.queued_runs == 990
    assert stats.busy_threads == 10
    assert stats.awaiting_bodies == 0  # bodies are kept only for runs that await a resume

    gate.set()
    for handle in handles:
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert_idle(runtime)

    # A second wave leaves nothing behind either.
    for _ in range(200):
        assert await runtime.execute(body) == RunState.Ended(EndCause.NaturalEnd())
    assert_idle(runtime)


async def test_statistics_cover_paused_and_cancelled_runs(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.boundary(wait=True)

    handles = [await runtime.start(body, thread_id="shared") for _ in range(3)]
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause(handles[0].run_id))
    assert isinstance(await handles[0].wait(), RunState.Awaiting)
    await trio.testing.wait_all_tasks_blocked()
    # The paused run's body is kept for its resume; the next one holds the thread.
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (1, 1, 1)
    assert stats.awaiting_bodies == 1

    for handle in handles:
        assert await runtime.cancel_run(handle.run_id) == RunState.Ended(EndCause.Cancelled())
    assert_idle(runtime)
