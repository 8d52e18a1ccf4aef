"""No commit without an actor: once a parent's attempt has begun to end, none of its
children can be resumed or started, and nothing is committed for them."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    NotActive,
    NotAwaiting,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle, terminal_commits
from tests.wrapped_stores import HoldingStore

CANCELLED = RunState.Ended(EndCause.Cancelled())


async def waiter(ctx: RunContext) -> None:
    await ctx.await_input("user_input", correlation_id="q-1")


async def sleeper(ctx: RunContext) -> None:
    await trio.sleep_forever()


def terminal_of(events: list[RunEvent], run_id: str) -> RunEvent:
    [event] = [e for e in terminal_commits(events) if e.run_id == run_id]
    return event


async def answer_of(answers: list[str], what: str, runtime: Runtime, ctx: RunContext) -> None:
    """Try one forbidden call and note how it was answered."""
    try:
        if what == "resume":
            await runtime.resume("kid", "late answer")
        else:
            await ctx.start_child(sleeper, run_id="late-kid")
    except NotAwaiting:
        answers.append(f"{what}: NotAwaiting")
    except NotActive:
        answers.append(f"{what}: NotActive")
    else:
        answers.append(f"{what}: accepted")


async def check_the_window_left_nothing(runtime: Runtime) -> None:
    events = await history(runtime)
    kid = [e for e in events if e.run_id == "kid"]
    assert [type(e.state) for e in kid] == [
        RunState.Running,
        RunState.Awaiting,
        RunState.Ended,
    ]
    assert kid[-1].state == CANCELLED
    assert kid[-1].detail["source"] == "parent"
    assert terminal_of(events, "kid").seq < terminal_of(events, "dad").seq
    assert await runtime.state("dad") == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record("dad")).result == "done"
    with pytest.raises(UnknownRun):  # the refused child was never committed
        await runtime.state("late-kid")
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


@pytest.mark.parametrize(
    ("what", "answer"), [("resume", "NotAwaiting"), ("start_child", "NotActive")]
)
async def test_a_child_is_neither_resumed_nor_started_while_its_parent_ends_it(
    what: str, answer: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = HoldingStore(RunState.Ended)
    kept: list[RunContext] = []
    answers: list[str] = []

    async def parent(ctx: RunContext) -> str:
        kept.append(ctx)
        assert isinstance(await ctx.run_child(waiter, run_id="kid"), RunState.Awaiting)
        return "done"

    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            handle = await runtime.start(parent, run_id="dad")
            # The parent's body has returned and its attempt is committing the child's end.
            await reach(store.holding)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(answer_of, answers, what, runtime, kept[0])
                    await trio.testing.wait_all_tasks_blocked()
                    in_window = list(answers)
                    store.release.set()
            finally:
                store.release.set()
            # Refused at once, not after the parent's commits went through.
            assert in_window == [f"{what}: {answer}"]
            assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
            await check_the_window_left_nothing(runtime)


async def test_a_task_unwinding_with_its_parent_cannot_resume_or_start_its_siblings(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    kept: list[RunContext] = []
    answers: list[str] = []
    helping = trio.Event()
    runtimes: list[Runtime] = []

    async def helper(ctx: RunContext) -> None:
        try:
            helping.set()
            await trio.sleep_forever()
        finally:
            # Runs while the parent ends: its body has returned, the awaiting child is not
            # ended yet.
            with trio.CancelScope(shield=True):
                await answer_of(answers, "resume", runtimes[0], kept[0])
                await answer_of(answers, "start_child", runtimes[0], kept[0])

    async def parent(ctx: RunContext) -> str:
        kept.append(ctx)
        assert isinstance(await ctx.run_child(waiter, run_id="kid"), RunState.Awaiting)
        await ctx.start_child(helper, run_id="helper")
        await helping.wait()
        return "done"

    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            runtimes.append(runtime)
            handle = await runtime.start(parent, run_id="dad")
            assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
            assert answers == ["resume: NotAwaiting", "start_child: NotActive"]
            await check_the_window_left_nothing(runtime)
            assert await runtime.state("helper") == CANCELLED
            events = await history(runtime)
            assert terminal_of(events, "helper").detail["source"] == "parent"
            assert terminal_of(events, "helper").seq < terminal_of(events, "dad").seq
