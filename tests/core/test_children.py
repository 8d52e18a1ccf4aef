"""Child runs: results as values, cancellation down the tree, never up."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    open_runtime,
)
from tests.run_helpers import history, reach, settle


def terminal_event(events: list[RunEvent], run_id: str) -> RunEvent:
    [event] = [
        e
        for e in events
        if e.run_id == run_id and e.kind == "committed" and isinstance(e.state, RunState.Ended)
    ]
    return event


def last_commit(events: list[RunEvent], run_id: str) -> RunEvent:
    return [e for e in events if e.run_id == run_id and e.kind == "committed"][-1]


async def test_run_child_returns_a_failed_child_as_a_value(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    got: list[RunState] = []

    async def child(ctx: RunContext) -> None:
        raise ValueError("child broke")

    async def parent(ctx: RunContext) -> str:
        got.append(await ctx.run_child(child, run_id="kid"))
        return "parent done"

    handle = await runtime.start(parent, run_id="dad")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert got == [RunState.Ended(EndCause.Failed("value_error", "child broke"))]
    assert (await runtime.record("dad")).result == "parent done"
    assert await runtime.state("kid") == got[0]


@pytest.mark.parametrize("how", ["deliver", "cancel_run", "stop_run"])
async def test_cancelling_a_child_reaches_the_parent_only_as_a_value(
    runtime: Runtime, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()
    got: list[RunState] = []
    parent_cancelled: list[bool] = []
    child_cleanup: list[bool] = []

    async def child(ctx: RunContext) -> None:
        try:
            started.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
                child_cleanup.append(ctx.is_cancelled)

    async def parent(ctx: RunContext) -> str:
        got.append(await ctx.run_child(child, run_id="kid"))
        parent_cancelled.append(ctx.is_cancelled)
        await ctx.boundary({"after_child": True})
        return "parent done"

    handle = await runtime.start(parent, run_id="dad")
    await reach(started)
    if how == "deliver":
        runtime.deliver(LiveCommand.Cancel("kid"))
        expected = RunState.Ended(EndCause.Cancelled())
    elif how == "cancel_run":
        expected = RunState.Ended(EndCause.Cancelled())
        assert await runtime.cancel_run("kid") == expected
    else:
        expected = RunState.Ended(EndCause.Stopped("child budget"))
        assert await runtime.stop_run("kid", "child budget") == expected

    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert got == [expected]
    assert parent_cancelled == [False]
    assert child_cleanup == [True]
    record = await runtime.record("dad")
    assert record.result == "parent done"
    assert record.checkpoint == {"after_child": True}


async def test_child_knows_its_parent_and_runs_on_its_own_thread(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str | None, str, str]] = []

    async def child(ctx: RunContext) -> str:
        seen.append((ctx.parent_run_id, ctx.run_id, ctx.thread_id))
        return "child result"

    async def parent(ctx: RunContext) -> JsonValue:
        seen.append((ctx.parent_run_id, ctx.run_id, ctx.thread_id))
        with trio.fail_after(5):  # a child queued behind its parent would never run
            state = await ctx.run_child(child, run_id="kid", input={"x": 1})
        return repr(state)

    with trio.fail_after(10):
        state = await runtime.execute(parent, run_id="dad", thread_id="shared-thread")
    assert state == RunState.Ended(EndCause.NaturalEnd())
    assert seen == [(None, "dad", "shared-thread"), ("dad", "kid", "kid")]
    kid = await runtime.record("kid")
    assert kid.parent_run_id == "dad"
    assert kid.thread_id == "kid"
    assert kid.input == {"x": 1}
    assert kid.result == "child result"
    assert (await runtime.record("dad")).parent_run_id is None
    assert (await runtime.record("dad")).result == repr(RunState.Ended(EndCause.NaturalEnd()))


@pytest.mark.parametrize("how", ["deliver_cancel", "stop_run", "parent_raises"])
async def test_parent_end_cancels_every_descendant_three_levels_deep_first(
    runtime: Runtime, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    ready = trio.Event()
    cleanup: dict[str, bool] = {}

    async def grandchild(ctx: RunContext) -> None:
        try:
            ready.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
                cleanup[ctx.run_id] = ctx.is_cancelled

    async def child(ctx: RunContext) -> None:
        try:
            await ctx.run_child(grandchild, run_id="g")
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.checkpoint()
                cleanup[ctx.run_id] = ctx.is_cancelled

    async def parent(ctx: RunContext) -> None:
        await ctx.start_child(child, run_id="c")
        await ready.wait()
        if how == "parent_raises":
            raise ValueError("parent broke")
        await trio.sleep_forever()

    handle = await runtime.start(parent, run_id="p")
    await reach(ready)
    await trio.testing.wait_all_tasks_blocked()
    if how == "deliver_cancel":
        runtime.deliver(LiveCommand.Cancel("p", reason="user"))
        expected = RunState.Ended(EndCause.Cancelled())
    elif how == "stop_run":
        expected = RunState.Ended(EndCause.Stopped("budget"))
        assert await runtime.stop_run("p", "budget") == expected
    else:
        expected = RunState.Ended(EndCause.Failed("value_error", "parent broke"))
    assert await settle(handle) == expected

    events = await history(runtime)
    p_end = terminal_event(events, "p")
    c_end = terminal_event(events, "c")
    g_end = terminal_event(events, "g")
    assert p_end.state == expected
    for end in (c_end, g_end):
        assert end.state == RunState.Ended(EndCause.Cancelled()), end
        assert end.detail["source"] == "parent", end
    assert g_end.seq < c_end.seq < p_end.seq
    assert cleanup == {"g": True, "c": True}
    assert (await runtime.record("c")).parent_run_id == "p"
    assert (await runtime.record("g")).parent_run_id == "c"


@pytest.mark.parametrize("how", ["return", "error", "pause", "await_input", "cancel", "stop"])
async def test_parent_attempt_end_ends_running_queued_and_awaiting_children_first(
    runtime: Runtime, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    ready = trio.Event()
    trigger = trio.Event()
    bodies_run: list[str] = []

    async def sleeper(ctx: RunContext) -> None:
        bodies_run.append(ctx.run_id)
        await trio.sleep_forever()

    async def awaiter(ctx: RunContext) -> None:
        bodies_run.append(ctx.run_id)
        await ctx.await_input("user_input", correlation_id="child-q")

    async def parent(ctx: RunContext) -> str:
        await ctx.start_child(sleeper, run_id="c-running")
        await ctx.start_child(sleeper, run_id="c-queued", thread_id="busy")
        await ctx.start_child(awaiter, run_id="c-awaiting")
        ready.set()
        await trigger.wait()
        if how == "error":
            raise ValueError("parent broke")
        if how == "pause":
            await ctx.boundary()
        if how == "await_input":
            await ctx.await_input("user_input")
        if how in ("cancel", "stop"):
            await trio.sleep_forever()
        return "parent done"

    blocker = await runtime.start(sleeper, run_id="blocker", thread_id="busy")
    handle = await runtime.start(parent, run_id="p")
    await reach(ready)
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state("c-running") == RunState.Running(1)
    assert await runtime.state("c-queued") == RunState.Queued()
    assert isinstance(await runtime.state("c-awaiting"), RunState.Awaiting)

    if how == "pause":
        runtime.deliver(LiveCommand.Pause("p"))
    if how == "cancel":
        runtime.deliver(LiveCommand.Cancel("p"))
    elif how == "stop":
        assert await runtime.stop_run("p", "policy") == RunState.Ended(EndCause.Stopped("policy"))
    trigger.set()
    parent_state = await settle(handle)

    match how:
        case "return":
            assert parent_state == RunState.Ended(EndCause.NaturalEnd())
        case "error":
            assert parent_state == RunState.Ended(EndCause.Failed("value_error", "parent broke"))
        case "pause" | "await_input":
            assert isinstance(parent_state, RunState.Awaiting)
            reason = "manual_pause" if how == "pause" else "user_input"
            assert parent_state.ticket.reason == reason
        case "cancel":
            assert parent_state == RunState.Ended(EndCause.Cancelled())
        case "stop":
            assert parent_state == RunState.Ended(EndCause.Stopped("policy"))

    events = await history(runtime)
    parent_commit = last_commit(events, "p")
    assert parent_commit.state == parent_state
    for child_id in ("c-running", "c-queued", "c-awaiting"):
        end = terminal_event(events, child_id)
        assert end.state == RunState.Ended(EndCause.Cancelled()), child_id
        assert end.detail["source"] == "parent", (child_id, end)
        assert end.seq < parent_commit.seq, child_id
        assert (await runtime.record(child_id)).parent_run_id == "p"
    assert "c-queued" not in bodies_run  # a queued child never runs
    # The unrelated run holding the busy thread is untouched.
    assert not blocker.done
    assert await runtime.state("blocker") == RunState.Running(1)
    runtime.deliver(LiveCommand.Cancel("blocker"))
    assert await settle(blocker) == RunState.Ended(EndCause.Cancelled())


async def test_a_resumed_child_is_ended_when_its_parent_ends(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    child_waiting = trio.Event()
    trigger = trio.Event()

    async def child(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        child_waiting.set()
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> str:
        await ctx.start_child(child, run_id="kid")
        await trigger.wait()
        return "parent done"

    handle = await runtime.start(parent, run_id="dad")
    await trio.testing.wait_all_tasks_blocked()
    assert isinstance(await runtime.state("kid"), RunState.Awaiting)
    resumed = await runtime.resume("kid", "go")
    await reach(child_waiting)
    assert await runtime.state("kid") == RunState.Running(2)
    trigger.set()
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert resumed.done
    assert await settle(resumed) == RunState.Ended(EndCause.Cancelled())
    events = await history(runtime)
    assert terminal_event(events, "kid").seq < terminal_event(events, "dad").seq


async def test_children_of_children_finish_normally_and_report_values(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def leaf(ctx: RunContext) -> JsonValue:
        return {"leaf": ctx.input}

    async def middle(ctx: RunContext) -> JsonValue:
        state = await ctx.run_child(leaf, run_id=f"leaf-{ctx.input}", input=ctx.input)
        return {"middle": repr(state)}

    async def root(ctx: RunContext) -> JsonValue:
        states = [await ctx.run_child(middle, run_id=f"mid-{i}", input=i) for i in range(3)]
        return [repr(s) for s in states]

    assert await settle(await runtime.start(root, run_id="root")) == RunState.Ended(
        EndCause.NaturalEnd()
    )
    for i in range(3):
        assert (await runtime.record(f"leaf-{i}")).result == {"leaf": i}
        assert (await runtime.record(f"leaf-{i}")).parent_run_id == f"mid-{i}"
        assert (await runtime.record(f"mid-{i}")).parent_run_id == "root"
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


async def named_child(ctx: RunContext) -> object:
    return "done"


async def unnamed_child(ctx: RunContext) -> object:
    return "done"


async def names_its_children(ctx: RunContext) -> object:
    await ctx.run_child(named_child, run_id="c-named")
    await ctx.run_child(unnamed_child, run_id="c-unnamed")
    await ctx.run_child(named_child, run_id="c-own", name="own")
    return "done"


async def test_a_child_of_a_registered_body_carries_that_bodys_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As a root run does: what the runs table and the run's page show for it. A name
    given stays, and a body registered under no name leaves the child unnamed."""
    bodies = {"parent": names_its_children, "child": named_child}
    async with open_runtime(bodies=bodies) as runtime:
        state = await runtime.execute(names_its_children, run_id="p")
        assert state == RunState.Ended(EndCause.NaturalEnd())
        assert (await runtime.record("p")).name == "parent"
        assert (await runtime.record("c-named")).name == "child"
        assert (await runtime.record("c-unnamed")).name is None
        assert (await runtime.record("c-own")).name == "own"
