"""Busy threads (DESIGN §3.8): ``if_busy="queue" | "reject" | "supersede"`` on start,
execute and children, on the memory store (both commit paths)."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    ThreadBusy,
    UnknownRun,
    open_runtime,
)
from tests.run_helpers import history, reach, settle, start_parked
from tests.wrapped_stores import FailingStore

SUPERSEDED = RunState.Ended(EndCause.Stopped("superseded"))
DONE = RunState.Ended(EndCause.NaturalEnd())


async def _done(ctx: RunContext) -> str:
    return ctx.run_id


async def _asks(ctx: RunContext) -> None:
    await ctx.await_input("user_input")


async def test_reject_raises_thread_busy_naming_the_running_run_and_commits_nothing(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    await start_parked(runtime, run_id="r1", thread_id="t")
    await runtime.start(_done, run_id="q1", thread_id="t")
    before = await history(runtime)
    with pytest.raises(ThreadBusy) as caught:
        await runtime.start(_done, run_id="new", thread_id="t", if_busy="reject")
    error = caught.value
    assert (error.thread_id, error.run_id, error.state) == ("t", "r1", RunState.Running(1))
    assert "'t'" in str(error)
    assert "r1" in str(error)
    assert "nothing was committed" in str(error)
    with pytest.raises(UnknownRun):
        await runtime.record("new")
    assert await history(runtime) == before
    # The thread gate kept no trace of the refusal.
    assert runtime.statistics().queued_runs == 1
    with pytest.raises(ThreadBusy):
        await runtime.execute(_done, run_id="new", thread_id="t", if_busy="reject")


async def test_reject_passes_a_thread_whose_run_awaits(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    awaiting = await runtime.execute(_asks, run_id="a1", thread_id="t")
    assert isinstance(awaiting, RunState.Awaiting)
    handle = await runtime.start(_done, run_id="new", thread_id="t", if_busy="reject")
    assert await settle(handle) == DONE
    assert await runtime.state("a1") == awaiting


async def test_supersede_ends_the_threads_runs_and_starts_once_the_old_attempt_stopped(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    stopped = trio.Event()
    entered = trio.Event()
    seen: list[bool] = []

    async def slow_to_stop(ctx: RunContext) -> None:
        try:
            entered.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)  # cleanup that takes a while
            stopped.set()

    async def new(ctx: RunContext) -> str:
        seen.append(stopped.is_set())
        return "answered"

    await runtime.execute(_asks, run_id="a1", thread_id="t")
    old = await runtime.start(slow_to_stop, run_id="r1", thread_id="t")
    await reach(entered)
    queued = await runtime.start(_done, run_id="q1", thread_id="t")
    other = await start_parked(runtime, run_id="elsewhere", thread_id="u")

    handle = await runtime.start(new, run_id="new", thread_id="t", if_busy="supersede")
    assert await runtime.state("new") == RunState.Queued()
    for run_id in ("r1", "q1", "a1"):
        assert await runtime.state(run_id) == SUPERSEDED
    assert await settle(queued) == SUPERSEDED
    assert await settle(old) == SUPERSEDED
    assert await settle(handle) == DONE
    assert seen == [True]  # one attempt per thread: the old one had stopped
    assert await runtime.state("elsewhere") == RunState.Running(1)
    events = await history(runtime)
    ends = [e for e in events if e.state == SUPERSEDED and e.kind == "committed"]
    # Oldest run first, all before the new run's first commit.
    assert [e.run_id for e in ends] == ["a1", "r1", "q1"]
    assert all(e.detail == {"superseded_by": "new"} for e in ends)
    first_of_new = next(e for e in events if e.run_id == "new")
    assert ends[-1].seq < first_of_new.seq
    # Nothing the superseded attempt did afterwards was committed.
    assert [e for e in events if e.run_id == "r1"][-1] == ends[1]
    runtime.deliver(LiveCommand.Cancel(other.run_id))


async def test_supersede_of_a_free_thread_starts_at_once(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    handle = await runtime.start(_done, run_id="new", thread_id="t", if_busy="supersede")
    assert runtime.active_attempt_run_id("t") == "new"  # started by the call itself
    assert await settle(handle) == DONE
    assert [e.state for e in await history(runtime)] == [RunState.Running(1), DONE]


async def test_a_superseded_runs_children_end_before_it(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def parent(ctx: RunContext) -> None:
        await ctx.start_child(_asks, run_id="waiting-child")
        await ctx.start_child(_parks, run_id="running-child")
        entered.set()
        await trio.sleep_forever()

    async def _parks(ctx: RunContext) -> None:
        await trio.sleep_forever()

    old = await runtime.start(parent, run_id="p", thread_id="t")
    await reach(entered)
    new = await runtime.start(_done, run_id="new", thread_id="t", if_busy="supersede")
    assert await settle(old) == SUPERSEDED
    assert await settle(new) == DONE
    cancelled = RunState.Ended(EndCause.Cancelled())
    assert await runtime.state("running-child") == cancelled
    assert await runtime.state("waiting-child") == cancelled
    ends = [e.run_id for e in await history(runtime) if e.state.is_ended and e.kind == "committed"]
    assert ends.index("running-child") < ends.index("p")
    assert ends.index("waiting-child") < ends.index("p")


async def test_children_take_the_policies_and_never_supersede_their_parent(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    answers: dict[str, object] = {}

    async def parent(ctx: RunContext) -> None:
        for policy in ("reject", "supersede"):
            try:
                await ctx.run_child(_done, run_id=f"c-{policy}", thread_id="t", if_busy=policy)
            except ThreadBusy as exc:
                answers[policy] = (exc.run_id, exc.state)
        # On a thread of its own a child runs as ever, and a sibling can supersede one.
        first = await ctx.start_child(_asks, run_id="c1", thread_id="shared")
        assert isinstance(await first.wait(), RunState.Awaiting)
        answers["c2"] = await ctx.run_child(
            _done, run_id="c2", thread_id="shared", if_busy="supersede"
        )
        answers["c1"] = (await first.record()).state

    assert await runtime.execute(parent, run_id="p", thread_id="t") == DONE
    assert answers == {
        "reject": ("p", RunState.Running(1)),
        "supersede": ("p", RunState.Running(1)),
        "c2": DONE,
        "c1": SUPERSEDED,
    }


@pytest.mark.parametrize("bad", ["drop", "", "QUEUE", None, 3, ("queue",)])
async def test_an_unknown_if_busy_is_refused_naming_the_option_and_its_values(
    runtime: Runtime, bad: object
) -> None:
    calls: list[Awaitable[object]] = [
        runtime.start(_done, run_id="x", if_busy=bad),  # type: ignore[arg-type]
        runtime.execute(_done, run_id="x", if_busy=bad),  # type: ignore[arg-type]
        runtime.submit("job", run_id="x", if_busy=bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidArgument) as caught:
            await call
        message = str(caught.value)
        assert "if_busy" in message
        assert "'queue', 'reject', 'supersede'" in message
    with pytest.raises(UnknownRun):
        await runtime.record("x")

    refused: list[str] = []

    async def parent(ctx: RunContext) -> None:
        try:
            await ctx.start_child(_done, run_id="c", if_busy=bad)  # type: ignore[arg-type]
        except InvalidArgument as exc:
            refused.append(str(exc))

    assert await runtime.execute(parent, run_id="p") == DONE
    assert len(refused) == 1
    assert "if_busy" in refused[0]
    with pytest.raises(UnknownRun):
        await runtime.record("c")


async def test_a_failed_supersede_commit_leaves_every_run_as_it_was(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        old = await start_parked(runtime, run_id="r1", thread_id="t")
        await runtime.start(_done, run_id="q1", thread_id="t")
        store.failing_runs.add("new")
        with pytest.raises(Exception, match="disk full"):
            await runtime.start(_done, run_id="new", thread_id="t", if_busy="supersede")
        store.failing_runs.clear()
        assert await runtime.state("r1") == RunState.Running(1)
        assert await runtime.state("q1") == RunState.Queued()
        with pytest.raises(UnknownRun):
            await runtime.record("new")
        assert runtime.active_attempt_run_id("t") == "r1"
        # The runtime goes on: a later supersede does it all.
        new = await runtime.start(_done, run_id="new", thread_id="t", if_busy="supersede")
        assert await settle(old) == SUPERSEDED
        assert await settle(new) == DONE


async def test_a_cancel_racing_a_supersede_at_one_checkpoint_commits_one_end(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    old = await start_parked(runtime, run_id="r1", thread_id="t")
    results: dict[str, object] = {}

    async def cancel() -> None:
        try:
            results["cancel"] = await runtime.cancel_run("r1")
        except Exception as exc:
            results["cancel"] = type(exc).__name__

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel)
        new = await runtime.start(_done, run_id="new", thread_id="t", if_busy="supersede")
    end = await settle(old)
    assert end in (SUPERSEDED, RunState.Ended(EndCause.Cancelled()))
    terminal = [e for e in await history(runtime, "r1") if e.state.is_ended]
    assert len(terminal) == 1
    assert terminal[0].state == end
    if end == SUPERSEDED:
        assert results["cancel"] == "RunAlreadyEnded"
    else:
        assert results["cancel"] == end
    assert await settle(new) == DONE
