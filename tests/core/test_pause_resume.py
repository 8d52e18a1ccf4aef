"""Pause, resume, messages, wake, await_input tickets and the step ceiling."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from awaken_trio import (
    AwakenError,
    EndCause,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    LiveCommand,
    NotActive,
    NotAwaiting,
    ResumeTicket,
    RunContext,
    RunState,
    Runtime,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle


class FakeClock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def step_of(checkpoint: JsonValue) -> int:
    if checkpoint is None:
        return 0
    assert isinstance(checkpoint, dict)
    step = checkpoint["step"]
    assert isinstance(step, int)
    return step


def ticket_of(state: RunState) -> ResumeTicket:
    assert isinstance(state, RunState.Awaiting), state
    return state.ticket


# --------------------------------------------------------------------------- pause


async def test_pause_is_honoured_at_the_next_boundary_and_resume_continues_from_checkpoint(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()
    seen: list[tuple[int, JsonValue, JsonValue]] = []
    steps: list[tuple[int, int]] = []

    async def body(ctx: RunContext) -> JsonValue:
        seen.append((ctx.generation, ctx.checkpoint, ctx.resume_value))
        step = step_of(ctx.checkpoint)
        while step < 5:
            if step == 2 and ctx.generation == 1:
                at_gate.set()
                await gate.wait()
            step += 1
            steps.append((ctx.generation, step))
            await ctx.boundary({"step": step})
        return {"done": step}

    handle = await runtime.start(body, run_id="p1", thread_id="th-p")
    await reach(at_gate)
    # Delivered twice before the boundary: one pause, no error.
    runtime.deliver(LiveCommand.Pause("p1"))
    runtime.deliver(LiveCommand.Pause("p1"))
    await trio.testing.wait_all_tasks_blocked()
    assert not handle.done  # a pause waits for the boundary; it does not interrupt
    assert await runtime.state("p1") == RunState.Running(1)
    gate.set()

    paused = await settle(handle)
    ticket = ticket_of(paused)
    assert ticket.reason == "manual_pause"
    assert ticket.run_id == "p1"
    assert ticket.thread_id == "th-p"
    assert await runtime.state("p1") == paused
    record = await runtime.record("p1")
    assert record.checkpoint == {"step": 3}
    assert record.generation == 1
    assert steps == [(1, 1), (1, 2), (1, 3)]

    resumed = await runtime.resume("p1", {"answer": 42})
    assert resumed.generation == 2
    assert resumed.run_id == "p1"
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())

    assert seen == [(1, None, None), (2, {"step": 3}, {"answer": 42})]
    assert steps == [(1, 1), (1, 2), (1, 3), (2, 4), (2, 5)]
    record = await runtime.record("p1")
    assert record.state == RunState.Ended(EndCause.NaturalEnd())
    assert record.result == {"done": 5}
    assert record.generation == 2
    assert record.checkpoint == {"step": 5}


async def test_pause_is_not_cancellation(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()
    cleanup: list[bool] = []

    async def body(ctx: RunContext) -> JsonValue:
        try:
            at_gate.set()
            await gate.wait()
            await ctx.boundary()
            return "not reached"
        finally:
            cleanup.append(ctx.is_cancelled)

    handle = await runtime.start(body, run_id="p2")
    await reach(at_gate)
    runtime.deliver(LiveCommand.Pause("p2"))
    gate.set()
    state = await settle(handle)
    assert ticket_of(state).reason == "manual_pause"
    assert not state.is_ended
    assert cleanup == [False]
    assert await runtime.state("p2") == state
    events = await history(runtime, "p2")
    assert not any(isinstance(event.state, RunState.Ended) for event in events)
    # Nothing is active any more: the live path refuses, the committed path ends it.
    with pytest.raises(NotActive):
        runtime.deliver(LiveCommand.Cancel("p2"))
    assert await runtime.cancel_run("p2") == RunState.Ended(EndCause.Cancelled())
    with pytest.raises(NotAwaiting):
        await runtime.resume("p2")


# --------------------------------------------------------------------------- messages


async def test_messages_reach_successive_boundaries_in_send_order(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate_a = trio.Event()
    gate_b = trio.Event()
    batches: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        await gate_a.wait()
        batches.append(await ctx.boundary())
        await gate_b.wait()
        batches.append(await ctx.boundary())
        batches.append(await ctx.boundary())

    handle = await runtime.start(body, run_id="m1")
    for payload in [1, "two", {"three": [3]}, None, 5.5]:
        runtime.deliver(LiveCommand.Message("m1", payload))
    gate_a.set()
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Message("m1", "six"))
    runtime.deliver(LiveCommand.Message("m1", ["seven"]))
    gate_b.set()
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert batches == [[1, "two", {"three": [3]}, None, 5.5], ["six", ["seven"]], []]


async def test_messages_pending_at_pause_come_first_from_the_resumed_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate1 = trio.Event()
    gate2 = trio.Event()
    batches: list[tuple[int, list[JsonValue]]] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await gate1.wait()
            await ctx.boundary()  # the pause is honoured here; nothing is returned
            raise AssertionError("the pausing boundary must not return")
        await gate2.wait()
        batches.append((ctx.generation, await ctx.boundary()))
        batches.append((ctx.generation, await ctx.boundary()))

    handle = await runtime.start(body, run_id="m2")
    runtime.deliver(LiveCommand.Message("m2", "a"))
    runtime.deliver(LiveCommand.Message("m2", {"b": 2}))
    runtime.deliver(LiveCommand.Pause("m2"))
    gate1.set()
    assert ticket_of(await settle(handle)).reason == "manual_pause"

    resumed = await runtime.resume("m2")
    runtime.deliver(LiveCommand.Message("m2", "c"))
    gate2.set()
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
    assert batches == [(2, ["a", {"b": 2}, "c"]), (2, [])]
    kinds = [event.kind for event in await history(runtime, "m2")]
    assert "messages_discarded" not in kinds


async def test_messages_pending_at_await_input_are_carried_to_the_next_attempt(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    batches: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await gate.wait()
            await ctx.await_input("user_input")
        batches.append(await ctx.boundary())

    handle = await runtime.start(body, run_id="m3")
    runtime.deliver(LiveCommand.Message("m3", "x"))
    runtime.deliver(LiveCommand.Message("m3", "y"))
    gate.set()
    assert ticket_of(await settle(handle)).reason == "user_input"
    resumed = await runtime.resume("m3", "answer")
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
    assert batches == [["x", "y"]]


@pytest.mark.parametrize("end", ["deliver_cancel", "body_returns", "cancel_run_while_paused"])
async def test_messages_never_returned_are_recorded_as_discarded_before_the_terminal_event(
    runtime: Runtime, end: str, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()

    async def body(ctx: RunContext) -> str:
        await gate.wait()
        if end == "cancel_run_while_paused":
            await ctx.boundary()
        return "returned"

    handle = await runtime.start(body, run_id="m4")
    runtime.deliver(LiveCommand.Message("m4", "x"))
    runtime.deliver(LiveCommand.Message("m4", {"y": [1, 2]}))
    if end == "deliver_cancel":
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Cancel("m4"))
        expected = RunState.Ended(EndCause.Cancelled())
        assert await settle(handle) == expected
    elif end == "body_returns":
        gate.set()
        expected = RunState.Ended(EndCause.NaturalEnd())
        assert await settle(handle) == expected
    else:
        runtime.deliver(LiveCommand.Pause("m4"))
        gate.set()
        assert ticket_of(await settle(handle)).reason == "manual_pause"
        expected = RunState.Ended(EndCause.Cancelled())
        assert await runtime.cancel_run("m4") == expected

    events = await history(runtime, "m4")
    discarded = [event for event in events if event.kind == "messages_discarded"]
    assert len(discarded) == 1
    assert discarded[0].detail["messages"] == ["x", {"y": [1, 2]}]
    terminal = events[-1]
    assert terminal.kind == "committed"
    assert terminal.state == expected
    assert events[-2] is discarded[0]
    assert discarded[0].seq < terminal.seq


# --------------------------------------------------------------------------- wake


async def test_wake_releases_a_waiting_boundary_with_no_messages_and_the_body_goes_on(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    released = trio.Event()
    finish = trio.Event()
    results: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> str:
        results.append(await ctx.boundary(wait=True))
        released.set()
        await finish.wait()
        return "after wake"

    handle = await runtime.start(body, run_id="w1")
    await trio.testing.wait_all_tasks_blocked()
    assert results == []  # still waiting: nothing arrived yet
    runtime.deliver(LiveCommand.Wake("w1", reason="look again"))
    await reach(released)
    assert results == [[]]
    assert not handle.done
    assert await runtime.state("w1") == RunState.Running(1)
    finish.set()
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record("w1")).result == "after wake"


async def test_wake_sent_while_not_waiting_is_remembered_until_the_next_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    results: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        await gate.wait()
        results.append(await ctx.boundary(wait=True))

    handle = await runtime.start(body, run_id="w2")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Wake("w2"))
    start = trio.current_time()
    gate.set()
    with trio.fail_after(10):
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert trio.current_time() == start  # it never blocked
    assert results == [[]]


async def test_a_wake_is_consumed_by_the_boundary_that_sees_it(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    results: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        await gate.wait()
        results.append(await ctx.boundary(wait=True))  # the remembered wake
        results.append(await ctx.boundary(wait=True))  # waits for a new arrival

    handle = await runtime.start(body, run_id="w3")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Wake("w3"))
    gate.set()
    await trio.sleep(5)
    assert results == [[]]
    assert not handle.done
    runtime.deliver(LiveCommand.Message("w3", "second"))
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert results == [[], ["second"]]


async def test_a_message_releases_a_waiting_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    results: list[list[JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        results.append(await ctx.boundary(wait=True))

    handle = await runtime.start(body, run_id="w4")
    await trio.testing.wait_all_tasks_blocked()
    assert not handle.done
    runtime.deliver(LiveCommand.Message("w4", {"k": "v"}))
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert results == [[{"k": "v"}]]


async def test_a_pause_ends_a_waiting_boundary_with_awaiting(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    after: list[str] = []

    async def body(ctx: RunContext) -> None:
        await ctx.boundary(wait=True)
        after.append("returned")

    handle = await runtime.start(body, run_id="w5", thread_id="th-w5")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause("w5"))
    state = await settle(handle)
    ticket = ticket_of(state)
    assert (ticket.reason, ticket.run_id, ticket.thread_id) == ("manual_pause", "w5", "th-w5")
    assert after == []


async def test_cancel_while_waiting_at_boundary_ends_cancelled(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    after: list[str] = []

    async def body(ctx: RunContext) -> None:
        await ctx.boundary(wait=True)
        after.append("returned")

    handle = await runtime.start(body, run_id="w6")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Cancel("w6"))
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    assert after == []


@pytest.mark.parametrize("where", ["waiting_boundary", "shielded_work"])
@pytest.mark.parametrize("order", ["pause_first", "cancel_first"])
async def test_cancel_wins_over_a_pending_pause_in_either_order_and_place(
    runtime: Runtime, where: str, order: str, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()

    async def body(ctx: RunContext) -> str:
        if where == "waiting_boundary":
            await ctx.boundary(wait=True)
        else:
            with trio.CancelScope(shield=True):
                await gate.wait()
            await ctx.boundary()
        return "late"

    handle = await runtime.start(body, run_id="cp")
    await trio.testing.wait_all_tasks_blocked()
    commands = [LiveCommand.Pause("cp"), LiveCommand.Cancel("cp")]
    if order == "cancel_first":
        commands.reverse()
    for command in commands:
        runtime.deliver(command)
    gate.set()
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())
    assert await runtime.state("cp") == RunState.Ended(EndCause.Cancelled())


# --------------------------------------------------------------------------- await_input


async def test_await_input_commits_awaiting_with_exactly_the_given_ticket(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    after: list[str] = []

    async def body(ctx: RunContext) -> None:
        await ctx.await_input(
            "tool_permission",
            correlation_id="corr-1",
            payload={"tool": "rm", "args": ["-r", "/tmp/x"], "n": 2},
            deadline=4_000_000_000.0,
        )
        after.append("returned")  # pragma: no cover - await_input never returns

    handle = await runtime.start(body, run_id="a1", thread_id="th-a1")
    state = await settle(handle)
    assert state == RunState.Awaiting(
        ResumeTicket(
            correlation_id="corr-1",
            run_id="a1",
            thread_id="th-a1",
            reason="tool_permission",
            payload={"tool": "rm", "args": ["-r", "/tmp/x"], "n": 2},
            deadline=4_000_000_000.0,
        )
    )
    assert await runtime.state("a1") == state
    assert after == []


async def test_resume_with_a_wrong_correlation_id_is_refused_and_commits_nothing(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[JsonValue] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("user_input", correlation_id="right")
        seen.append(ctx.resume_value)

    handle = await runtime.start(body, run_id="a2")
    awaiting = await settle(handle)
    before_events = await history(runtime)
    before_record = await runtime.record("a2")

    with pytest.raises(TicketMismatch) as info:
        await runtime.resume("a2", "v", correlation_id="wrong")
    assert info.value.expected == "right"
    assert info.value.given == "wrong"
    assert await history(runtime) == before_events
    assert await runtime.record("a2") == before_record
    assert await runtime.state("a2") == awaiting

    resumed = await runtime.resume("a2", "v", correlation_id="right")
    assert resumed.generation == 2
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
    assert seen == ["v"]


async def test_resume_without_correlation_id_answers_the_live_ticket(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[int, JsonValue]] = []

    async def body(ctx: RunContext) -> str:
        seen.append((ctx.generation, ctx.resume_value))
        if ctx.generation < 3:
            await ctx.await_input("user_input", correlation_id=f"q{ctx.generation}")
        return "done"

    handle = await runtime.start(body, run_id="a3")
    assert ticket_of(await settle(handle)).correlation_id == "q1"
    second = await runtime.resume("a3", {"n": 1})
    assert ticket_of(await settle(second)).correlation_id == "q2"
    third = await runtime.resume("a3", [2])
    assert third.generation == 3
    assert await settle(third) == RunState.Ended(EndCause.NaturalEnd())
    assert seen == [(1, None), (2, {"n": 1}), (3, [2])]


async def test_resume_after_the_deadline_is_refused_and_the_run_stays_awaiting(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    clock = FakeClock(1_000.0)
    seen: list[JsonValue] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("user_input", correlation_id="c", deadline=1_500.0)
        seen.append(ctx.resume_value)

    async with open_runtime(store, clock=clock) as runtime:
        handle = await runtime.start(body, run_id="a4")
        awaiting = await settle(handle)
        assert ticket_of(awaiting).deadline == 1_500.0
        before_events = await history(runtime)

        clock.now = 1_500.5
        with pytest.raises(TicketExpired) as info:
            await runtime.resume("a4", "late")
        assert info.value.deadline == 1_500.0
        with pytest.raises(TicketExpired):
            await runtime.resume("a4", "late", correlation_id="c")
        assert await history(runtime) == before_events
        assert await runtime.state("a4") == awaiting
        assert seen == []

        clock.now = 1_200.0  # the same ticket answered in time still works
        resumed = await runtime.resume("a4", "in time", correlation_id="c")
        assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
        assert seen == ["in time"]


async def test_second_resume_of_an_answered_ticket_is_not_awaiting(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    runs: list[int] = []

    async def body(ctx: RunContext) -> None:
        runs.append(ctx.generation)
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        await gate.wait()

    handle = await runtime.start(body, run_id="a5")
    await settle(handle)
    resumed = await runtime.resume("a5", 1)
    with pytest.raises(NotAwaiting) as info:
        await runtime.resume("a5", 2)
    assert info.value.state == RunState.Running(2)
    gate.set()
    assert await settle(resumed) == RunState.Ended(EndCause.NaturalEnd())
    with pytest.raises(NotAwaiting) as info:
        await runtime.resume("a5", 3)
    assert info.value.state == RunState.Ended(EndCause.NaturalEnd())
    assert runs == [1, 2]
    assert (await runtime.record("a5")).generation == 2


async def test_resume_of_an_unknown_run_raises_unknown_run(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(UnknownRun):
        await runtime.resume("no-such-run", "v")
    assert await history(runtime) == []


async def test_resume_of_a_running_run_is_not_awaiting(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="a6")
    before_events = await history(runtime)
    with pytest.raises(NotAwaiting) as info:
        await runtime.resume("a6", "v")
    assert info.value.state == RunState.Running(1)
    assert await history(runtime) == before_events
    assert not handle.done
    runtime.deliver(LiveCommand.Cancel("a6"))
    assert await settle(handle) == RunState.Ended(EndCause.Cancelled())


AwaitCall = Callable[[RunContext], Awaitable[object]]


@pytest.mark.parametrize(
    ("call", "error", "code"),
    [
        pytest.param(
            lambda ctx: ctx.await_input(""), InvalidArgument, "invalid_argument", id="empty_reason"
        ),
        pytest.param(
            lambda ctx: ctx.await_input("user_input", deadline=math.inf),
            InvalidArgument,
            "invalid_argument",
            id="infinite_deadline",
        ),
        pytest.param(
            lambda ctx: ctx.await_input("user_input", deadline=math.nan),
            InvalidArgument,
            "invalid_argument",
            id="nan_deadline",
        ),
        pytest.param(
            lambda ctx: ctx.await_input("user_input", payload=(1, 2)),
            InvalidPayload,
            "invalid_payload",
            id="tuple_payload",
        ),
        pytest.param(
            lambda ctx: ctx.await_input("user_input", payload={1: "x"}),
            InvalidPayload,
            "invalid_payload",
            id="int_key_payload",
        ),
        pytest.param(
            lambda ctx: ctx.await_input("user_input", payload=[math.inf]),
            InvalidPayload,
            "invalid_payload",
            id="infinite_payload",
        ),
    ],
)
async def test_invalid_await_input_arguments_raise_in_the_body(
    runtime: Runtime,
    call: AwaitCall,
    error: type[AwakenError],
    code: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    raised: list[AwakenError] = []

    async def body(ctx: RunContext) -> None:
        try:
            await call(ctx)
        except AwakenError as exc:
            raised.append(exc)
            raise

    handle = await runtime.start(body, run_id="bad-await")
    state = await settle(handle)
    assert len(raised) == 1
    assert type(raised[0]) is error
    assert state == RunState.Ended(EndCause.Failed(code, str(raised[0])))


# --------------------------------------------------------------------------- max_steps


@pytest.mark.parametrize("max_steps", [1, 3])
async def test_max_steps_ends_the_run_at_the_boundary_that_would_exceed_it(
    runtime: Runtime, max_steps: int, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[int] = []
    returned: list[int] = []

    async def body(ctx: RunContext) -> None:
        while True:
            entered.append(len(entered) + 1)
            await ctx.boundary({"step": len(entered)})
            returned.append(len(returned) + 1)

    state = await runtime.execute(body, run_id="ms", max_steps=max_steps)
    assert state == RunState.Ended(EndCause.MaxSteps())
    # max_steps boundaries pass; the next one would exceed the budget and ends the run
    # without committing its progress.
    assert entered == list(range(1, max_steps + 2))
    assert returned == list(range(1, max_steps + 1))
    record = await runtime.record("ms")
    assert record.state == RunState.Ended(EndCause.MaxSteps())
    assert record.checkpoint == {"step": max_steps}
    assert record.steps == max_steps


async def test_a_pause_pending_when_an_await_ends_the_attempt_is_honoured_after_the_resume(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    boundaries: list[int] = []

    async def body(ctx: RunContext) -> object:
        if ctx.resume_value is None:
            await gate.wait()
            await ctx.await_input("user_input")  # ends the attempt: no boundary here
        boundaries.append(ctx.generation)
        await ctx.boundary()  # the carried pause takes effect at the first boundary
        return "done"

    handle = await runtime.start(body, run_id="p")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause("p"))
    gate.set()
    awaiting = await settle(handle)
    assert isinstance(awaiting, RunState.Awaiting)
    assert awaiting.ticket.reason == "user_input"

    resumed = await runtime.resume("p", "answer")
    paused = await settle(resumed)
    assert isinstance(paused, RunState.Awaiting)
    assert paused.ticket.reason == "manual_pause"
    assert boundaries == [2]

    # Honoured once: the next resume runs to the end.
    final = await runtime.resume("p", "again")
    assert await settle(final) == RunState.Ended(EndCause.NaturalEnd())
