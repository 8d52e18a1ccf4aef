"""Committed control: cancel_run and stop_run wherever the run is, late resumes, the event
log, and reading committed state."""

from __future__ import annotations

import itertools
from typing import Any, cast

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    LiveCommand,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunContext,
    RunEvent,
    RunHandle,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, snapshot, start_parked, terminal_commits
from tests.wrapped_stores import HoldingStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
STOPPED = RunState.Ended(EndCause.Stopped("budget"))

# How each committed end is requested, what it commits, and the source it records.
ENDINGS: dict[str, tuple[RunState, dict[str, object]]] = {
    "cancel_run": (CANCELLED, {"source": "cancel_run", "reason": None}),
    "cancel_run_with_reason": (CANCELLED, {"source": "cancel_run", "reason": "operator"}),
    "stop_run": (STOPPED, {"source": "stop_run", "reason": "budget"}),
}


async def end_run(
    runtime: Runtime, how: str, run_id: str, thread_id: str | None = None
) -> RunState:
    if how == "cancel_run":
        return await runtime.cancel_run(run_id, thread_id=thread_id)
    if how == "cancel_run_with_reason":
        return await runtime.cancel_run(run_id, thread_id=thread_id, reason="operator")
    return await runtime.stop_run(run_id, "budget", thread_id=thread_id)


async def start_awaiting(runtime: Runtime, run_id: str = "asking") -> RunHandle:
    """A run whose first attempt commits ``Awaiting`` on a user-input ticket."""

    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.boundary({"step": 1})
            await ctx.await_input("user_input", payload={"question": "go?"})
        return {"answer": ctx.resume_value}

    handle = await runtime.start(body, run_id=run_id, thread_id="th-" + run_id)
    state = await handle.wait()
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.reason == "user_input"
    return handle


# ---------------------------------------------------------------------- running


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_running_run(runtime: Runtime, how: str) -> None:
    expected, detail = ENDINGS[how]
    entered = trio.Event()
    saw_cancel: list[bool] = []

    async def body(ctx: RunContext) -> object:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            saw_cancel.append(ctx.cancel_scope.cancel_called)
            saw_cancel.append(ctx.is_cancelled)

    handle = await runtime.start(body, thread_id="t")
    await entered.wait()

    assert await end_run(runtime, how, handle.run_id) == expected
    assert handle.done
    assert await handle.wait() == expected
    assert saw_cancel == [True, True]
    assert await runtime.state(handle.run_id) == expected
    assert runtime.active_attempt_run_id("t") is None
    terminal = terminal_commits(await history(runtime, handle.run_id))
    assert [e.detail for e in terminal] == [detail]
    assert [e.state for e in terminal] == [expected]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_running_run_with_its_thread_id(runtime: Runtime, how: str) -> None:
    expected, _ = ENDINGS[how]

    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body, thread_id="t")
    await trio.testing.wait_all_tasks_blocked()
    assert await end_run(runtime, how, handle.run_id, thread_id="t") == expected
    assert await handle.wait() == expected


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_running_run_on_the_wrong_thread_is_unknown(runtime: Runtime, how: str) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body, thread_id="t")
    await trio.testing.wait_all_tasks_blocked()
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(UnknownRun):
        await end_run(runtime, how, handle.run_id, thread_id="other")

    await trio.testing.wait_all_tasks_blocked()
    assert await snapshot(runtime, handle.run_id) == before
    assert not handle.done
    assert runtime.active_attempt_run_id("t") == handle.run_id
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == CANCELLED


# ---------------------------------------------------------------------- queued


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_queued_run_means_it_never_runs(runtime: Runtime, how: str) -> None:
    expected, detail = ENDINGS[how]
    release = trio.Event()
    queued_ran = False

    async def blocker(ctx: RunContext) -> object:
        await release.wait()
        return "first"

    async def queued_body(ctx: RunContext) -> object:
        nonlocal queued_ran
        queued_ran = True
        return "second"

    first = await runtime.start(blocker, thread_id="t")
    second = await runtime.start(queued_body, thread_id="t")
    assert await runtime.state(second.run_id) == RunState.Queued()

    assert await end_run(runtime, how, second.run_id) == expected
    assert await second.wait() == expected
    assert await runtime.state(second.run_id) == expected
    with pytest.raises(NotActive):
        runtime.deliver(LiveCommand.Cancel(second.run_id))

    release.set()
    assert await first.wait() == NATURAL
    await trio.testing.wait_all_tasks_blocked()
    assert not queued_ran
    assert (await runtime.record(second.run_id)).result is None
    terminal = terminal_commits(await history(runtime, second.run_id))
    assert [e.detail for e in terminal] == [detail]

    # The thread is free again: a new run on it starts right away.
    third = await runtime.start(queued_body, thread_id="t")
    assert await third.wait() == NATURAL
    assert queued_ran


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_queued_run_on_the_wrong_thread_is_unknown(runtime: Runtime, how: str) -> None:
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return ctx.run_id

    first = await runtime.start(body, thread_id="t")
    second = await runtime.start(body, thread_id="t")
    before = await snapshot(runtime, second.run_id)
    with pytest.raises(UnknownRun):
        await end_run(runtime, how, second.run_id, thread_id="elsewhere")
    assert await snapshot(runtime, second.run_id) == before
    release.set()
    assert await first.wait() == NATURAL
    assert await second.wait() == NATURAL


# ---------------------------------------------------------------------- awaiting


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_an_awaiting_run_deletes_its_ticket(runtime: Runtime, how: str) -> None:
    expected, detail = ENDINGS[how]
    handle = await start_awaiting(runtime)
    events_before = len(await history(runtime))

    assert await end_run(runtime, how, handle.run_id) == expected

    record = await runtime.record(handle.run_id)
    assert record.state == expected
    assert record.checkpoint == {"step": 1}
    assert record.result is None
    events = await history(runtime)
    # One commit, one event: the terminal state replaced the ticket.
    assert len(events) == events_before + 1
    assert events[-1].kind == "committed"
    assert events[-1].state == expected
    assert events[-1].detail == detail

    with pytest.raises(NotAwaiting) as info:
        await runtime.resume(handle.run_id, "yes")
    assert info.value.state == expected
    with pytest.raises(NotAwaiting):
        await runtime.resume(handle.run_id, "yes", correlation_id=f"{handle.run_id}/input/1")
    assert await snapshot(runtime, handle.run_id) == (expected, events_before + 1)


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_paused_run(runtime: Runtime, how: str) -> None:
    expected, _ = ENDINGS[how]

    async def body(ctx: RunContext) -> object:
        await ctx.boundary(wait=True)
        return "unreachable"

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    paused = await handle.wait()
    assert isinstance(paused, RunState.Awaiting)
    assert paused.ticket.reason == "manual_pause"

    assert await end_run(runtime, how, handle.run_id) == expected
    before = await snapshot(runtime, handle.run_id)
    with pytest.raises(NotAwaiting):
        await runtime.resume(handle.run_id)
    assert await snapshot(runtime, handle.run_id) == before


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_an_awaiting_run_on_the_wrong_thread_is_unknown(
    runtime: Runtime, how: str
) -> None:
    handle = await start_awaiting(runtime)
    before = await snapshot(runtime, handle.run_id)
    with pytest.raises(UnknownRun):
        await end_run(runtime, how, handle.run_id, thread_id="not-its-thread")
    assert await snapshot(runtime, handle.run_id) == before
    # The ticket is still live.
    resumed = await runtime.resume(handle.run_id, "yes")
    assert await resumed.wait() == NATURAL
    assert (await runtime.record(handle.run_id)).result == {"answer": "yes"}


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_an_awaiting_run_with_its_thread_id(runtime: Runtime, how: str) -> None:
    expected, _ = ENDINGS[how]
    handle = await start_awaiting(runtime)
    assert await end_run(runtime, how, handle.run_id, thread_id=handle.thread_id) == expected


# ---------------------------------------------------------------------- ended and unknown


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_an_ended_run_raises_with_its_committed_state(runtime: Runtime, how: str) -> None:
    async def body(ctx: RunContext) -> object:
        return [1, 2, 3]

    handle = await runtime.start(body)
    assert await handle.wait() == NATURAL
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(RunAlreadyEnded) as info:
        await end_run(runtime, how, handle.run_id)

    assert info.value.state == NATURAL
    assert info.value.run_id == handle.run_id
    assert await snapshot(runtime, handle.run_id) == before
    assert (await runtime.record(handle.run_id)).result == [1, 2, 3]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_failed_run_raises_with_its_failure(runtime: Runtime, how: str) -> None:
    async def body(ctx: RunContext) -> object:
        raise ValueError("bad input")

    handle = await runtime.start(body)
    failed = RunState.Ended(EndCause.Failed("value_error", "bad input"))
    assert await handle.wait() == failed
    with pytest.raises(RunAlreadyEnded) as info:
        await end_run(runtime, how, handle.run_id)
    assert info.value.state == failed


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_an_unknown_run(runtime: Runtime, how: str) -> None:
    with pytest.raises(UnknownRun) as info:
        await end_run(runtime, how, "ghost")
    assert info.value.run_id == "ghost"
    assert await history(runtime) == []


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_run_with_an_empty_run_id(runtime: Runtime, how: str) -> None:
    with pytest.raises(InvalidArgument):
        await end_run(runtime, how, "")


async def test_cancel_run_after_stop_run_carries_stopped(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.stop_run(handle.run_id, "budget") == STOPPED
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(RunAlreadyEnded) as info:
        await runtime.cancel_run(handle.run_id)

    assert info.value.state == STOPPED
    assert await snapshot(runtime, handle.run_id) == before


async def test_cancel_run_while_a_stop_is_pending_carries_stopped(runtime: Runtime) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):
            entered.set()
            await release.wait()
        return "late"

    handle = await runtime.start(body)
    await entered.wait()
    results: dict[str, object] = {}

    async def stop() -> None:
        results["stop"] = await runtime.stop_run(handle.run_id, "budget")

    async def cancel() -> None:
        try:
            await runtime.cancel_run(handle.run_id)
        except RunAlreadyEnded as exc:
            results["cancel"] = exc.state
        else:
            results["cancel"] = "returned"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(cancel)
        await trio.testing.wait_all_tasks_blocked()
        assert not handle.done
        release.set()

    assert results == {"stop": STOPPED, "cancel": STOPPED}
    events = await history(runtime, handle.run_id)
    assert len(terminal_commits(events)) == 1
    assert [e.kind for e in events][-2:] == ["late_result_discarded", "committed"]
    assert (await runtime.record(handle.run_id)).result is None


async def test_stop_run_after_a_delivered_cancel_carries_cancelled(runtime: Runtime) -> None:
    handle = await start_parked(runtime)
    runtime.deliver(LiveCommand.Cancel(handle.run_id, reason="user"))
    with pytest.raises(RunAlreadyEnded) as info:
        await runtime.stop_run(handle.run_id, "budget")
    assert info.value.state == CANCELLED
    terminal = terminal_commits(await history(runtime, handle.run_id))
    assert [e.detail for e in terminal] == [{"source": "deliver", "reason": "user"}]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_run_whose_body_fails_while_unwinding(runtime: Runtime, how: str) -> None:
    """An error raised while handling the cancel wins: the run ended Failed, not as asked."""
    entered = trio.Event()

    async def body(ctx: RunContext) -> object:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("cleanup broke")

    handle = await runtime.start(body)
    await entered.wait()
    failed = RunState.Ended(EndCause.Failed("runtime_error", "cleanup broke"))
    with pytest.raises(RunAlreadyEnded) as info:
        await end_run(runtime, how, handle.run_id)
    assert info.value.state == failed
    assert await handle.wait() == failed
    assert len(terminal_commits(await history(runtime, handle.run_id))) == 1


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_resume_queued_behind_a_busy_thread(runtime: Runtime, how: str) -> None:
    expected, detail = ENDINGS[how]
    generations: list[int] = []
    release = trio.Event()

    async def paused_body(ctx: RunContext) -> object:
        generations.append(ctx.generation)
        await ctx.boundary(wait=True)
        return "resumed"

    async def blocker(ctx: RunContext) -> object:
        await release.wait()
        return "blocker"

    paused = await runtime.start(paused_body, run_id="p", thread_id="t")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause("p"))
    assert isinstance(await paused.wait(), RunState.Awaiting)

    busy = await runtime.start(blocker, thread_id="t")
    resumed = await runtime.resume("p")
    assert await runtime.state("p") == RunState.Queued()

    assert await end_run(runtime, how, "p") == expected
    assert await resumed.wait() == expected
    release.set()
    assert await busy.wait() == NATURAL
    await trio.testing.wait_all_tasks_blocked()
    assert generations == [1]
    assert runtime.active_attempt_run_id("t") is None
    before = await snapshot(runtime, "p")
    with pytest.raises(NotAwaiting):
        await runtime.resume("p")
    assert await snapshot(runtime, "p") == before
    terminal = terminal_commits(await history(runtime, "p"))
    assert [e.detail for e in terminal] == [detail]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_run_whose_natural_end_is_committing(how: str) -> None:
    store = HoldingStore(RunState.Ended)
    async with open_runtime(store) as runtime:

        async def body(ctx: RunContext) -> object:
            return {"value": 1}

        handle = await runtime.start(body)
        raised: list[RunAlreadyEnded] = []

        async def end() -> None:
            with pytest.raises(RunAlreadyEnded) as info:
                await end_run(runtime, how, handle.run_id)
            raised.append(info.value)

        try:
            await store.holding.wait()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(end)
                await trio.testing.wait_all_tasks_blocked()
                assert not raised
                store.release.set()
        finally:
            store.release.set()

        assert [e.state for e in raised] == [NATURAL]
        assert await handle.wait() == NATURAL
        assert (await runtime.record(handle.run_id)).result == {"value": 1}
        assert len(terminal_commits(await history(runtime, handle.run_id))) == 1


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_end_a_run_whose_pause_is_committing(how: str) -> None:
    expected, detail = ENDINGS[how]
    store = HoldingStore(RunState.Awaiting)
    async with open_runtime(store) as runtime:

        async def body(ctx: RunContext) -> object:
            await ctx.boundary(wait=True)
            return "unreachable"

        handle = await runtime.start(body)
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Pause(handle.run_id))
        results: list[RunState] = []

        async def end() -> None:
            results.append(await end_run(runtime, how, handle.run_id))

        try:
            await store.holding.wait()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(end)
                await trio.testing.wait_all_tasks_blocked()
                assert not results
                store.release.set()
        finally:
            store.release.set()

        assert results == [expected]
        assert isinstance(await handle.wait(), RunState.Awaiting)
        assert await runtime.state(handle.run_id) == expected
        events = await history(runtime, handle.run_id)
        assert [type(e.state).__name__ for e in events] == ["Running", "Awaiting", "Ended"]
        assert events[-1].detail == detail
        with pytest.raises(NotAwaiting):
            await runtime.resume(handle.run_id)


async def test_stop_run_needs_a_str_reason(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    before = await snapshot(runtime, handle.run_id)
    for reason in (None, 42, b"budget", ["budget"]):
        with pytest.raises(InvalidArgument):
            await runtime.stop_run(handle.run_id, cast("Any", reason))
    assert await snapshot(runtime, handle.run_id) == before
    assert not handle.done


async def test_cancel_run_refuses_a_reason_that_is_not_a_str(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    before = await snapshot(runtime, handle.run_id)
    for reason in (42, b"operator", ["operator"]):
        with pytest.raises(InvalidArgument, match="reason"):
            await runtime.cancel_run(handle.run_id, reason=cast("Any", reason))
    assert await snapshot(runtime, handle.run_id) == before
    assert not handle.done
    assert await runtime.cancel_run(handle.run_id, reason="") == CANCELLED
    assert terminal_commits(await history(runtime, handle.run_id))[0].detail == {
        "source": "cancel_run",
        "reason": "",
    }


# ---------------------------------------------------------------------- late resume


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_late_resume_after_ending_the_resumed_attempt(runtime: Runtime, how: str) -> None:
    """Resumed, then ended while the new attempt ran: a second resume finds no ticket."""
    expected, detail = ENDINGS[how]
    second_started = trio.Event()

    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("tool_permission", correlation_id="perm-1")
        second_started.set()
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="perm")
    assert isinstance(await handle.wait(), RunState.Awaiting)
    resumed = await runtime.resume("perm", "allowed", correlation_id="perm-1")
    assert resumed.generation == 2
    await second_started.wait()

    assert await end_run(runtime, how, "perm") == expected
    assert await resumed.wait() == expected
    before = await snapshot(runtime, "perm")
    assert before[0] == expected

    with pytest.raises(NotAwaiting):
        await runtime.resume("perm", "allowed again")
    with pytest.raises(NotAwaiting):
        await runtime.resume("perm", "allowed again", correlation_id="perm-1")
    assert await snapshot(runtime, "perm") == before
    terminal = terminal_commits(await history(runtime, "perm"))
    assert [(e.generation, e.detail) for e in terminal] == [(2, detail)]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_late_resumes_after_committed_end_change_nothing(runtime: Runtime, how: str) -> None:
    expected, _ = ENDINGS[how]
    handle = await start_awaiting(runtime)
    assert await end_run(runtime, how, handle.run_id) == expected
    events_after_end = len(await history(runtime))
    for value in (None, "late", {"k": 1}):
        with pytest.raises(NotAwaiting):
            await runtime.resume(handle.run_id, value)
    assert await snapshot(runtime, handle.run_id) == (expected, events_after_end)


async def test_resume_after_natural_end_is_not_awaiting(runtime: Runtime) -> None:
    handle = await start_awaiting(runtime)
    resumed = await runtime.resume(handle.run_id, "first answer")
    assert await resumed.wait() == NATURAL
    before = await snapshot(runtime, handle.run_id)
    with pytest.raises(NotAwaiting):
        await runtime.resume(handle.run_id, "second answer")
    assert await snapshot(runtime, handle.run_id) == before
    assert (await runtime.record(handle.run_id)).result == {"answer": "first answer"}


# ---------------------------------------------------------------------- events


async def test_history_has_one_committed_event_per_commit(runtime: Runtime) -> None:
    async def stepper(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        await ctx.boundary({"step": 2})
        return "done"

    async def quick(ctx: RunContext) -> object:
        return 7

    a = await runtime.start(stepper, run_id="a")
    assert await a.wait() == NATURAL
    b = await runtime.start(quick, run_id="b")
    assert await b.wait() == NATURAL

    events = await history(runtime)
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert all(e.kind == "committed" for e in events)
    assert [(e.run_id, e.state) for e in events] == [
        ("a", RunState.Running(1)),
        ("a", RunState.Running(1)),
        ("a", RunState.Running(1)),
        ("a", NATURAL),
        ("b", RunState.Running(1)),
        ("b", NATURAL),
    ]
    assert [e.detail.get("source") for e in events[:3]] == ["start", "boundary", "boundary"]
    assert all(e.thread_id == e.run_id and e.generation == 1 for e in events)

    only_a = await history(runtime, "a")
    assert only_a == events[:4]
    assert await history(runtime, "b") == events[4:]


async def test_history_seq_is_strictly_increasing_across_concurrent_runs(
    runtime: Runtime,
) -> None:
    async def stepper(ctx: RunContext) -> object:
        for step in range(3):
            await ctx.boundary({"step": step})
        return ctx.run_id

    async def run_one(run_id: str) -> None:
        assert await runtime.execute(stepper, run_id=run_id) == NATURAL

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(run_one, f"run-{i}")

    events = await history(runtime)
    seqs = [e.seq for e in events]
    assert all(a < b for a, b in itertools.pairwise(seqs))
    assert len(events) == 8 * 5
    for i in range(8):
        mine = await history(runtime, f"run-{i}")
        assert len(mine) == 5
        assert mine[-1].state == NATURAL
        assert [e.seq for e in mine] == [e.seq for e in events if e.run_id == f"run-{i}"]


async def test_history_of_a_paused_and_resumed_run(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.boundary(wait=True)
        return ctx.generation

    handle = await runtime.start(body, run_id="p")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause("p"))
    assert isinstance(await handle.wait(), RunState.Awaiting)
    resumed = await runtime.resume("p")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Wake("p"))
    assert await resumed.wait() == NATURAL

    events = await history(runtime, "p")
    assert [type(e.state).__name__ for e in events] == ["Running", "Awaiting", "Running", "Ended"]
    assert [e.generation for e in events] == [1, 1, 2, 2]
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert events[2].detail["source"] == "resume"


async def test_following_one_run_stops_after_its_terminal_event(runtime: Runtime) -> None:
    go = [trio.Event() for _ in range(3)]

    async def body(ctx: RunContext) -> object:
        await go[0].wait()
        await ctx.boundary({"step": 1})
        await go[1].wait()
        await ctx.boundary({"step": 2})
        await go[2].wait()
        return {"done": True}

    async def other(ctx: RunContext) -> object:
        return "noise"

    handle = await runtime.start(body, run_id="followed")
    seen: list[RunEvent] = []
    follower_done = trio.Event()

    async def follow() -> None:
        async for event in runtime.events("followed"):
            seen.append(event)  # noqa: PERF401  (read while the stream is still open)
        follower_done.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            assert [e.state for e in seen] == [RunState.Running(1)]

            go[0].set()
            await trio.testing.wait_all_tasks_blocked()
            assert [e.detail.get("source") for e in seen] == ["start", "boundary"]

            assert await runtime.execute(other, run_id="noise") == NATURAL
            go[1].set()
            await trio.testing.wait_all_tasks_blocked()
            assert len(seen) == 3
            assert not follower_done.is_set()

            go[2].set()
            assert await handle.wait() == NATURAL
        # The nursery closed by itself: the follower ended after the terminal event.
        assert follower_done.is_set()

    assert all(e.run_id == "followed" for e in seen)
    assert seen == await history(runtime, "followed")
    assert seen[-1].state == NATURAL
    assert [e.seq for e in seen] == sorted({e.seq for e in seen})


async def test_following_a_cancelled_run_sees_late_result_then_terminal(
    runtime: Runtime,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):
            entered.set()
            await release.wait()
        return "late"

    handle = await runtime.start(body, run_id="c")
    await entered.wait()
    seen: list[RunEvent] = []

    async def follow() -> None:
        seen.extend([event async for event in runtime.events("c")])

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(runtime.cancel_run, "c")
            await trio.testing.wait_all_tasks_blocked()
            release.set()

    assert await handle.wait() == CANCELLED
    assert [e.kind for e in seen] == ["committed", "late_result_discarded", "committed"]
    assert seen[1].detail["result"] == "late"
    assert seen[1].detail["source"] == "cancel_run"
    assert seen[2].state == CANCELLED


async def test_events_of_an_unknown_run_raise_on_first_step(runtime: Runtime) -> None:
    for follow in (False, True):
        stream = runtime.events("ghost", follow=follow)
        with pytest.raises(UnknownRun):
            await stream.__anext__()


async def test_events_of_an_ended_run_when_following_end_with_its_history(
    runtime: Runtime,
) -> None:
    async def body(ctx: RunContext) -> object:
        return None

    assert await runtime.execute(body, run_id="done") == NATURAL
    with trio.fail_after(5):
        followed = [e async for e in runtime.events("done", follow=True)]
    assert followed == await history(runtime, "done")
    assert len(followed) == 2


async def test_event_time_comes_from_the_runtime_clock(store: MemoryStore) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        return "ok"

    async with open_runtime(store, clock=lambda: 1234.5) as runtime:
        assert await runtime.execute(body, run_id="timed") == NATURAL
        events = await history(runtime)

    assert len(events) == 3
    assert [e.at for e in events] == [1234.5, 1234.5, 1234.5]


async def test_follow_all_runs_ends_when_the_runtime_closes(store: MemoryStore) -> None:
    seen: list[RunEvent] = []

    async def body(ctx: RunContext) -> object:
        return ctx.run_id

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery, open_runtime(store) as runtime:

            async def follow() -> None:
                async for event in runtime.events():
                    seen.append(event)  # noqa: PERF401  (read while open)

            nursery.start_soon(follow)
            await trio.testing.wait_all_tasks_blocked()
            assert await runtime.execute(body, run_id="x") == NATURAL
            assert await runtime.execute(body, run_id="y") == NATURAL
            await trio.testing.wait_all_tasks_blocked()
            assert [e.run_id for e in seen] == ["x", "x", "y", "y"]

    assert [e.run_id for e in seen] == ["x", "x", "y", "y"]


# ---------------------------------------------------------------------- reading


async def test_state_and_record_of_an_unknown_run(runtime: Runtime) -> None:
    with pytest.raises(UnknownRun) as info:
        await runtime.state("ghost")
    assert info.value.run_id == "ghost"
    with pytest.raises(UnknownRun):
        await runtime.record("ghost")


async def test_state_and_record_with_an_empty_run_id(runtime: Runtime) -> None:
    with pytest.raises(InvalidArgument):
        await runtime.state("")
    with pytest.raises(InvalidArgument):
        await runtime.record("")


async def test_record_of_a_finished_run(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        return {"out": ctx.input}

    assert (
        await runtime.execute(body, run_id="r", thread_id="th", name="job", input={"q": 1})
        == NATURAL
    )
    record = await runtime.record("r")
    assert (record.run_id, record.thread_id, record.parent_run_id, record.name) == (
        "r",
        "th",
        None,
        "job",
    )
    assert record.state == NATURAL == await runtime.state("r")
    assert record.generation == 1
    assert record.result == {"out": {"q": 1}}
    assert record.checkpoint == {"step": 1}
