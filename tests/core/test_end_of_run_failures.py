"""What goes wrong at the end of a run stays with that run: an error that cannot be
printed, a store or clock failing at the finish boundary, a context used where it does not
belong. The run still ends, and the runtime and every other run keep working."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    AwakenError,
    EndCause,
    LiveCommand,
    NotActive,
    NotAwaiting,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle, snapshot, start_parked, terminal_commits
from tests.wrapped_stores import FailingStore

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


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


async def answer(ctx: RunContext) -> object:
    return {"answer": ctx.input}


async def waiter(ctx: RunContext) -> None:
    await ctx.await_input("user_input", correlation_id="q-1")


def terminal_of(events: list[RunEvent], run_id: str) -> RunEvent:
    [event] = [e for e in terminal_commits(events) if e.run_id == run_id]
    return event


def assert_nothing_left(runtime: Runtime) -> None:
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


async def test_an_error_whose_str_raises_ends_its_run_failed_and_nothing_else(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        raise Unprintable

    bystander = await start_parked(runtime, run_id="bystander")
    with trio.fail_after(60):
        state = await runtime.execute(body, run_id="unprintable")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "unprintable"
    assert "__str__ raised" in state.cause.message
    assert await runtime.state("unprintable") == state

    assert await runtime.state("bystander") == RunState.Running(1)
    with trio.fail_after(60):
        assert await runtime.execute(answer, run_id="later", input=7) == NATURAL_END
    assert (await runtime.record("later")).result == {"answer": 7}
    runtime.deliver(LiveCommand.Cancel("bystander"))
    assert await settle(bystander) == CANCELLED
    assert_nothing_left(runtime)


async def test_a_store_failure_ending_an_awaiting_child_still_ends_the_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()

    async def parent(ctx: RunContext) -> str:
        assert isinstance(await ctx.run_child(waiter, run_id="kid"), RunState.Awaiting)
        store.failing_runs.add("kid")
        return "done"

    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            handle = await runtime.start(parent, run_id="dad")
            assert await settle(handle) == NATURAL_END
            assert (await runtime.record("dad")).result == "done"
            assert store.failed_batches == 1
            assert isinstance(await runtime.state("kid"), RunState.Awaiting)
            assert_nothing_left(runtime)

            store.failing_runs.clear()
            before = await snapshot(runtime, "kid")
            # A child never outlives its parent's attempt, even when its end did not land.
            with pytest.raises(NotAwaiting):
                await runtime.resume("kid", "late answer")
            assert await snapshot(runtime, "kid") == before
            assert_nothing_left(runtime)

            assert await runtime.cancel_run("kid") == CANCELLED
            assert await runtime.state("kid") == CANCELLED


@pytest.mark.parametrize("how", ["returns", "returns_scalar", "cancelled"])
async def test_a_clock_failing_at_the_finish_boundary_still_ends_the_run(
    store: MemoryStore, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    clock = FlakyClock()
    parked = trio.Event()

    async def body(ctx: RunContext) -> object:
        if how != "cancelled":
            clock.fail_next = True
            # (a scalar is the common end, committed in the attempt's step)
            return {"done": True} if how == "returns" else "done"
        try:
            parked.set()
            await trio.sleep_forever()
        finally:
            clock.fail_next = True

    with trio.fail_after(60):
        async with open_runtime(store, clock=clock) as runtime:
            handle = await runtime.start(body, run_id="r")
            if how == "cancelled":
                await reach(parked)
                runtime.deliver(LiveCommand.Cancel("r", reason="enough"))
            state = await settle(handle)
            assert not clock.fail_next  # the finish boundary did read the clock
            events = await history(runtime, "r")
            end = terminal_of(events, "r")
            assert "RuntimeError" in end.detail["clock_error"]
            assert end.at == events[-2].at  # the last good reading
            if how != "cancelled":
                assert state == NATURAL_END
                result = (await runtime.record("r")).result
                assert result == ({"done": True} if how == "returns" else "done")
            else:
                assert state == CANCELLED
                assert (end.detail["source"], end.detail["reason"]) == ("deliver", "enough")
            assert_nothing_left(runtime)

            assert await runtime.execute(answer, run_id="later", input=1) == NATURAL_END
            later = await history(runtime, "later")
            assert all("clock_error" not in e.detail for e in later)
            assert later[-1].at > end.at


@pytest.mark.parametrize("caught", [True, False])
@pytest.mark.parametrize("call", ["await_input", "boundary"])
async def test_a_child_using_its_parents_context_is_refused_and_the_parent_goes_on(
    runtime: Runtime, call: str, caught: bool, autojump_clock: trio.testing.MockClock
) -> None:
    refused: list[str] = []

    async def parent(ctx: RunContext) -> object:
        async def child(child_ctx: RunContext) -> str:
            try:
                if call == "await_input":
                    await ctx.await_input("user_input", correlation_id="stolen")
                else:
                    await ctx.boundary({"written_by": "child"})
            except AwakenError as exc:
                refused.append(type(exc).__name__)
                if not caught:
                    raise
                return "caught"
            return "not refused"

        state = await ctx.run_child(child, run_id="kid")
        await ctx.boundary({"written_by": "parent"})
        return {"child_ended": isinstance(state, RunState.Ended)}

    with trio.fail_after(60):
        state = await runtime.execute(parent, run_id="dad")
    assert refused == ["ContextMisuse"]
    kid = await runtime.state("kid")
    if caught:
        assert kid == NATURAL_END
        assert (await runtime.record("kid")).result == "caught"
    else:
        assert isinstance(kid, RunState.Ended)
        assert isinstance(kid.cause, EndCause.Failed)
        assert kid.cause.code == "context_misuse"
    assert state == NATURAL_END
    record = await runtime.record("dad")
    assert record.generation == 1
    assert record.checkpoint == {"written_by": "parent"}
    assert record.result == {"child_ended": True}
    dad_states = [e.state for e in await history(runtime, "dad")]
    assert not any(isinstance(s, RunState.Awaiting) for s in dad_states)
    assert_nothing_left(runtime)


async def test_a_context_kept_outside_its_run_is_refused_then_dead(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    kept: list[RunContext] = []
    release = trio.Event()

    async def body(ctx: RunContext) -> str:
        kept.append(ctx)
        await release.wait()
        return "done"

    handle = await runtime.start(body, run_id="r")
    await trio.testing.wait_all_tasks_blocked()
    before = await snapshot(runtime, "r")
    with pytest.raises(AwakenError) as info:
        await kept[0].boundary({"written_by": "outsider"})
    assert type(info.value).__name__ == "ContextMisuse"
    assert isinstance(info.value, RuntimeError)
    assert "outside any run" in str(info.value)
    assert await snapshot(runtime, "r") == before

    release.set()
    assert await settle(handle) == NATURAL_END
    after = await snapshot(runtime, "r")
    with pytest.raises(NotActive):
        await kept[0].boundary({"written_by": "outsider"})
    with pytest.raises(NotActive):
        await kept[0].start_child(answer)
    assert await snapshot(runtime, "r") == after
    assert (await runtime.record("r")).checkpoint is None
