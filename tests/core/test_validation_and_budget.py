"""Arguments refused where they are written, accepted messages never lost, a step budget
that spans attempts, one waiter per attempt, and end decisions that say why."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    InvalidBody,
    InvalidPayload,
    LiveCommand,
    RunAlreadyEnded,
    RunContext,
    RunState,
    Runtime,
    StoreError,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle, start_parked, terminal_commits
from tests.wrapped_stores import FailingStore

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))
HUGE = 10**5000  # an int too long to survive a JSON round trip as text

Body = Callable[[RunContext], Awaitable[object]]


async def answer(ctx: RunContext) -> object:
    return {"answer": ctx.input}


def assert_nothing_left(runtime: Runtime) -> None:
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


async def assert_never_committed(runtime: Runtime, run_id: str) -> None:
    with pytest.raises(UnknownRun):
        await runtime.state(run_id)
    assert [e for e in await history(runtime) if e.run_id == run_id] == []


# --------------------------------------------------------------------------- messages


async def test_messages_accepted_before_a_failed_end_are_discarded_by_the_later_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()
    release = trio.Event()
    parked = trio.Event()

    async def body(ctx: RunContext) -> str:
        parked.set()
        await release.wait()
        return "done"

    sent: list[Any] = ["first", {"second": [2]}, 3]
    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            handle = await runtime.start(body, run_id="r")
            await reach(parked)
            for payload in sent:
                runtime.deliver(LiveCommand.Message("r", payload))
            store.failing_runs.add("r")
            release.set()
            with pytest.raises(StoreError):
                await handle.wait()
            assert await runtime.state("r") == RunState.Running(1)
            assert_nothing_left(runtime)

            store.failing_runs.clear()
            assert await runtime.cancel_run("r") == CANCELLED
            events = await history(runtime, "r")
            discarded = [e for e in events if e.kind == "messages_discarded"]
            assert [e.detail["messages"] for e in discarded] == [sent]
            [end] = terminal_commits(events)
            assert end.state == CANCELLED
            assert end.detail["source"] == "cancel_run"
            assert discarded[0].seq < end.seq


# --------------------------------------------------------------------------- validation


def test_a_cancel_reason_that_is_not_text_is_refused_when_the_command_is_built() -> None:
    with pytest.raises(InvalidArgument):
        LiveCommand.Cancel("r", reason=b"\x00")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        LiveCommand.Wake("r", reason=7)  # type: ignore[arg-type]
    assert LiveCommand.Cancel("r", reason="fine").reason == "fine"


def test_a_message_whose_payload_is_not_json_is_refused_when_built() -> None:
    with pytest.raises(InvalidPayload):
        LiveCommand.Message("r", HUGE)
    with pytest.raises(InvalidPayload):
        LiveCommand.Message("r", {"n": [HUGE]})
    assert LiveCommand.Message("r", 10**300).payload == 10**300


async def test_an_input_too_long_for_json_is_refused_and_nothing_is_committed(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidPayload):
        await runtime.start(answer, run_id="huge", input=HUGE)
    with pytest.raises(InvalidPayload):
        await runtime.start(answer, run_id="huge", input={"n": [HUGE]})
    await assert_never_committed(runtime, "huge")
    assert await runtime.execute(answer, run_id="huge", input=10**300) == NATURAL_END


class AsyncCallable:
    async def __call__(self, ctx: RunContext) -> str:
        return "called"


async def test_a_class_with_an_async_call_is_not_a_body_but_its_instance_is(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidBody):
        await runtime.start(AsyncCallable, run_id="class")  # type: ignore[arg-type]
    await assert_never_committed(runtime, "class")
    assert await runtime.execute(AsyncCallable(), run_id="instance") == NATURAL_END
    assert (await runtime.record("instance")).result == "called"


class FlakyClock:
    """A wall clock that fails once, on the call after ``fail_next`` is set."""

    def __init__(self) -> None:
        self.reading = 1_000.0
        self.fail_next = False

    def __call__(self) -> float:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the clock went away")
        self.reading += 1.0
        return self.reading


async def test_a_clock_failing_during_start_commits_nothing_and_frees_the_thread(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    clock = FlakyClock()
    async with open_runtime(store, clock=clock) as runtime:
        clock.fail_next = True
        with pytest.raises(RuntimeError, match="the clock went away"):
            await runtime.start(answer, run_id="first", thread_id="t")
        await assert_never_committed(runtime, "first")
        assert runtime.active_attempt_run_id("t") is None
        assert_nothing_left(runtime)

        handle = await runtime.start(answer, run_id="second", thread_id="t", input=2)
        assert await runtime.state("second") != RunState.Queued()
        with trio.fail_after(60):
            assert await settle(handle) == NATURAL_END
        assert (await runtime.record("second")).result == {"answer": 2}


BAD_IDS = ["a\x00b", "x" * 513]


@pytest.mark.parametrize("bad", BAD_IDS, ids=["nul", "too_long"])
@pytest.mark.parametrize("which", ["run_id", "thread_id"])
async def test_ids_with_nul_or_over_512_characters_are_refused(
    runtime: Runtime, which: str, bad: str, autojump_clock: trio.testing.MockClock
) -> None:
    run_id, thread_id = (bad, None) if which == "run_id" else ("r", bad)
    with pytest.raises(InvalidArgument):
        await runtime.start(answer, run_id=run_id, thread_id=thread_id)
    assert await history(runtime) == []
    with pytest.raises(InvalidArgument):
        LiveCommand.Cancel(bad)
    with pytest.raises(InvalidArgument):
        await runtime.cancel_run(bad)
    longest = "x" * 512
    assert await runtime.execute(answer, run_id=longest, thread_id=longest) == NATURAL_END


# --------------------------------------------------------------------------- decisions


async def pause_at_the_second_boundary(runtime: Runtime, body: Body) -> None:
    """Start ``body`` with max_steps=3; it parks in its second boundary, where a pause
    ends its first attempt."""
    handle = await runtime.start(body, run_id="r", max_steps=3)
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause("r"))
    assert isinstance(await settle(handle), RunState.Awaiting)
    assert (await runtime.record("r")).checkpoint == {"step": 2}


async def test_max_steps_is_a_budget_across_attempts(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    passed: list[int] = []  # the attempt's generation, after each boundary that passed

    async def body(ctx: RunContext) -> None:
        step = (ctx.checkpoint or {"step": 0})["step"]
        while True:
            step += 1
            await ctx.boundary({"step": step}, wait=ctx.generation == 1 and step == 2)
            passed.append(ctx.generation)

    await pause_at_the_second_boundary(runtime, body)
    assert passed == [1]  # the second boundary paused the run (and used a step)

    resumed = await runtime.resume("r")
    assert await settle(resumed) == RunState.Ended(EndCause.MaxSteps())
    assert passed == [1, 2]  # one boundary left of the budget, then the end
    record = await runtime.record("r")
    assert record.checkpoint == {"step": 3}
    assert record.steps == 3


async def test_ctx_steps_counts_the_boundaries_of_every_attempt(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[int, int]] = []  # (generation, ctx.steps)

    async def body(ctx: RunContext) -> None:
        seen.append((ctx.generation, ctx.steps))
        step = (ctx.checkpoint or {"step": 0})["step"]
        while True:
            step += 1
            await ctx.boundary({"step": step}, wait=ctx.generation == 1 and step == 2)
            seen.append((ctx.generation, ctx.steps))

    await pause_at_the_second_boundary(runtime, body)
    resumed = await runtime.resume("r")
    assert await settle(resumed) == RunState.Ended(EndCause.MaxSteps())
    assert seen == [(1, 0), (1, 1), (2, 2), (2, 3)]


async def test_a_second_waiter_in_boundary_is_refused_and_the_first_still_works(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    got: dict[str, Any] = {}
    first_waiting = trio.Event()
    second_answered = trio.Event()

    async def body(ctx: RunContext) -> object:
        async def first() -> None:
            first_waiting.set()
            got["first"] = await ctx.boundary(wait=True)

        async def second() -> None:
            await first_waiting.wait()
            await trio.testing.wait_all_tasks_blocked()  # first is parked in its boundary
            try:
                await ctx.boundary(wait=True)
            except trio.BusyResourceError:
                got["second"] = "BusyResourceError"
            else:
                got["second"] = "returned"
            second_answered.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)
        return got["first"]

    handle = await runtime.start(body, run_id="r")
    await reach(second_answered)
    assert got == {"second": "BusyResourceError"}
    runtime.deliver(LiveCommand.Message("r", "hello"))
    assert await settle(handle) == NATURAL_END
    assert got["first"] == ["hello"]
    assert (await runtime.record("r")).result == ["hello"]


async def test_awaiting_and_queued_children_of_a_run_ended_by_shutdown_are_stopped(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def waiter(ctx: RunContext) -> None:
        await ctx.await_input("user_input")

    async def parent(ctx: RunContext) -> None:
        assert isinstance(await ctx.run_child(waiter, run_id="awaiting-kid"), RunState.Awaiting)
        await ctx.start_child(answer, run_id="queued-kid", thread_id=ctx.thread_id)
        await trio.sleep_forever()

    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            await runtime.start(parent, run_id="dad")
            await trio.testing.wait_all_tasks_blocked()
            assert isinstance(await runtime.state("awaiting-kid"), RunState.Awaiting)
            assert await runtime.state("queued-kid") == RunState.Queued()

    events = await history(runtime)
    ends = {e.run_id: e for e in terminal_commits(events)}
    for run_id in ("awaiting-kid", "queued-kid", "dad"):
        assert ends[run_id].state == SHUTDOWN, run_id
        assert ends[run_id].detail["source"] == "shutdown", run_id
    assert ends["awaiting-kid"].seq < ends["dad"].seq
    assert ends["queued-kid"].seq < ends["dad"].seq
    assert_nothing_left(runtime)


async def test_a_store_error_of_unknown_outcome_never_claims_nothing_changed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()
    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            store.failing = True
            with pytest.raises(StoreError) as started:
                await runtime.start(answer, run_id="r")
            store.failing = False

            handle = await start_parked(runtime, run_id="p")
            store.failing = True
            runtime.deliver(LiveCommand.Cancel("p"))
            with pytest.raises(StoreError) as ended:
                await handle.wait()
            store.failing = False

    for error in (started.value, ended.value):
        assert "committed truth is unchanged" not in str(error)
        assert "unknown" in str(error)
        assert error.outcome_unknown is True


@pytest.mark.parametrize(
    ("how", "pending"),
    [
        ("deliver", {"source": "deliver", "reason": "user quit"}),
        ("cancel_run", {"source": "cancel_run", "reason": None}),
        ("stop_run", {"source": "stop_run", "reason": "budget"}),
    ],
)
async def test_a_body_error_that_wins_over_a_request_keeps_the_request_in_its_detail(
    runtime: Runtime,
    how: str,
    pending: dict[str, Any],
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body(ctx: RunContext) -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise ValueError("cleanup broke")

    failed = RunState.Ended(EndCause.Failed("value_error", "cleanup broke"))
    handle = await runtime.start(body, run_id="e")
    await trio.testing.wait_all_tasks_blocked()
    if how == "deliver":
        runtime.deliver(LiveCommand.Cancel("e", reason="user quit"))
    elif how == "cancel_run":
        with pytest.raises(RunAlreadyEnded) as info:
            await runtime.cancel_run("e")
        assert info.value.state == failed
    else:
        with pytest.raises(RunAlreadyEnded) as info:
            await runtime.stop_run("e", "budget")
        assert info.value.state == failed
    assert await settle(handle) == failed
    [end] = terminal_commits(await history(runtime, "e"))
    assert end.state == failed
    assert end.detail.get("pending") == pending
    assert "ValueError: cleanup broke" in end.detail["error"]
