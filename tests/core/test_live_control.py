"""Live control: deliver, deliver_to_current_attempt, pre-start and racing cancels,
generation replacement and the active-attempt registry."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    LiveCommand,
    NotActive,
    OwnershipVerifier,
    RunAlreadyEnded,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, snapshot, start_parked, terminal_commits
from tests.wrapped_stores import HoldingStore, ParkingStore

CANCELLED = RunState.Ended(EndCause.Cancelled())
NATURAL = RunState.Ended(EndCause.NaturalEnd())

COMMANDS: dict[str, Callable[[str], LiveCommand]] = {
    "cancel": lambda run_id: LiveCommand.Cancel(run_id),
    "pause": lambda run_id: LiveCommand.Pause(run_id),
    "wake": lambda run_id: LiveCommand.Wake(run_id, reason="poke"),
    "message": lambda run_id: LiveCommand.Message(run_id, {"m": 1}),
}


async def deliver_noting(
    runtime: Runtime, command: LiveCommand, outcome: list[BaseException | None]
) -> None:
    """deliver_to_current_attempt, noting the NotActive it raised (or None)."""
    try:
        await runtime.deliver_to_current_attempt(command)
    except NotActive as exc:
        outcome.append(exc)
    else:
        outcome.append(None)


# ---------------------------------------------------------------------- NotActive


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_deliver_to_unknown_run_is_not_active(runtime: Runtime, kind: str) -> None:
    with pytest.raises(NotActive) as info:
        runtime.deliver(COMMANDS[kind]("ghost"))
    assert info.value.run_id == "ghost"
    assert await history(runtime) == []


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_deliver_to_queued_run_is_not_active_and_changes_nothing(
    runtime: Runtime, kind: str
) -> None:
    release = trio.Event()

    async def blocker(ctx: RunContext) -> object:
        await release.wait()
        return "first"

    async def queued_body(ctx: RunContext) -> object:
        return await ctx.boundary()

    first = await runtime.start(blocker, thread_id="t")
    second = await runtime.start(queued_body, thread_id="t")
    assert await runtime.state(second.run_id) == RunState.Queued()
    before = await snapshot(runtime, second.run_id)

    with pytest.raises(NotActive):
        runtime.deliver(COMMANDS[kind](second.run_id))

    assert await snapshot(runtime, second.run_id) == before
    release.set()
    assert await first.wait() == NATURAL
    # The rejected command left no trace: no cancel, no pause, no message.
    assert await second.wait() == NATURAL
    assert (await runtime.record(second.run_id)).result == []


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_deliver_to_awaiting_run_is_not_active_and_changes_nothing(
    runtime: Runtime, kind: str
) -> None:
    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.boundary(wait=True)
            raise AssertionError("the pause ends the first attempt")
        return await ctx.boundary()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    paused = await handle.wait()
    assert isinstance(paused, RunState.Awaiting)
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(NotActive):
        runtime.deliver(COMMANDS[kind](handle.run_id))

    assert await snapshot(runtime, handle.run_id) == before
    resumed = await runtime.resume(handle.run_id)
    assert await resumed.wait() == NATURAL
    assert (await runtime.record(handle.run_id)).result == []


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_deliver_to_ended_run_is_not_active_and_changes_nothing(
    runtime: Runtime, kind: str
) -> None:
    async def body(ctx: RunContext) -> object:
        return {"ok": True}

    handle = await runtime.start(body)
    assert await handle.wait() == NATURAL
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(NotActive):
        runtime.deliver(COMMANDS[kind](handle.run_id))

    assert await snapshot(runtime, handle.run_id) == before
    assert (await runtime.record(handle.run_id)).result == {"ok": True}


# ---------------------------------------------------------------------- bad commands


@pytest.mark.parametrize(
    "command",
    [object(), "run-1", None, {"run_id": "run-1"}],
    ids=["object", "str", "none", "dict"],
)
async def test_deliver_rejects_what_is_not_a_live_command(
    runtime: Runtime, command: object
) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="run-1")
    await trio.testing.wait_all_tasks_blocked()
    before = await snapshot(runtime, handle.run_id)
    with pytest.raises(InvalidArgument):
        runtime.deliver(cast("Any", command))
    with pytest.raises(InvalidArgument):
        await runtime.deliver_to_current_attempt(cast("Any", command))
    assert await snapshot(runtime, handle.run_id) == before
    assert runtime.active_attempt_run_id(handle.thread_id) == handle.run_id


async def test_deliver_rejects_an_empty_run_id(runtime: Runtime) -> None:
    with pytest.raises(InvalidArgument):
        runtime.deliver(LiveCommand.Cancel(""))


NON_JSON: dict[str, object] = {
    "tuple": (1, 2),
    "set": {1, 2},
    "nan": math.nan,
    "infinity": math.inf,
    "bytes": b"raw",
    "int_key": {1: "one"},
    "nested_tuple": {"items": [("a", "b")]},
}


@pytest.mark.parametrize("name", sorted(NON_JSON))
async def test_message_with_non_json_payload_is_rejected_and_not_delivered(
    runtime: Runtime, name: str
) -> None:
    proceed = trio.Event()

    async def body(ctx: RunContext) -> object:
        await proceed.wait()
        return await ctx.boundary()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    payload = cast("Any", NON_JSON[name])

    with pytest.raises(InvalidPayload):
        runtime.deliver(LiveCommand.Message(handle.run_id, payload))
    with pytest.raises(InvalidPayload):
        await runtime.deliver_to_current_attempt(LiveCommand.Message(handle.run_id, payload))

    proceed.set()
    assert await handle.wait() == NATURAL
    assert (await runtime.record(handle.run_id)).result == []


async def test_messages_reach_boundary_in_send_order(runtime: Runtime) -> None:
    proceed = trio.Event()

    async def body(ctx: RunContext) -> object:
        await proceed.wait()
        return await ctx.boundary()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    for payload in ["a", {"b": [1, 2.5]}, None, 3]:
        runtime.deliver(LiveCommand.Message(handle.run_id, payload))
    proceed.set()
    assert await handle.wait() == NATURAL
    assert (await runtime.record(handle.run_id)).result == ["a", {"b": [1, 2.5]}, None, 3]


# ---------------------------------------------------------------------- live cancel


# Whether the new actor or the caller of start/resume runs first after the commit is up to
# the scheduler; repeating the pre-start cancel covers both orders.
PRE_START_ROUNDS = 24


async def test_cancel_right_after_start_means_the_body_never_runs(runtime: Runtime) -> None:
    ran: list[str] = []

    async def body(ctx: RunContext) -> object:
        ran.append(ctx.run_id)
        return "ran"

    for i in range(PRE_START_ROUNDS):
        handle = await runtime.start(body, run_id=f"pre-{i}")
        runtime.deliver(LiveCommand.Cancel(handle.run_id))

        assert await handle.wait() == CANCELLED
        record = await runtime.record(handle.run_id)
        assert record.state == CANCELLED
        assert record.result is None
        events = await history(runtime, handle.run_id)
        assert [e.kind for e in events] == ["committed", "committed"]
        assert events[-1].detail == {"source": "deliver", "reason": None}
    assert ran == []


async def test_cancel_right_after_resume_means_the_new_attempt_never_runs(
    runtime: Runtime,
) -> None:
    generations: list[int] = []

    async def body(ctx: RunContext) -> object:
        generations.append(ctx.generation)
        await ctx.boundary(wait=True)
        return "done"

    run_ids = [f"paused-{i}" for i in range(PRE_START_ROUNDS)]
    for run_id in run_ids:
        handle = await runtime.start(body, run_id=run_id)
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Pause(run_id))
        assert isinstance(await handle.wait(), RunState.Awaiting)
    assert generations == [1] * PRE_START_ROUNDS

    for run_id in run_ids:
        resumed = await runtime.resume(run_id)
        runtime.deliver(LiveCommand.Cancel(run_id))
        with trio.fail_after(5):
            assert await resumed.wait() == CANCELLED
        assert (await runtime.record(run_id)).generation == 2
    assert generations == [1] * PRE_START_ROUNDS


async def test_cancel_while_sleeping_forever(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    cleaned_up = False

    async def body(ctx: RunContext) -> object:
        nonlocal cleaned_up
        try:
            await trio.sleep_forever()
        finally:
            cleaned_up = True

    handle = await runtime.start(body)
    await trio.sleep(3600)
    assert not handle.done
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == CANCELLED
    assert cleaned_up
    assert await runtime.state(handle.run_id) == CANCELLED


async def test_cancel_while_waiting_on_an_event_that_is_never_set(runtime: Runtime) -> None:
    never = trio.Event()
    entered = trio.Event()

    async def body(ctx: RunContext) -> object:
        entered.set()
        await never.wait()
        return "unreachable"

    handle = await runtime.start(body)
    await entered.wait()
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == CANCELLED
    record = await runtime.record(handle.run_id)
    assert record.state == CANCELLED
    assert record.result is None
    assert runtime.active_attempt_run_id(handle.thread_id) is None


async def test_cancel_while_the_body_runs_shielded_discards_its_late_result(
    runtime: Runtime,
) -> None:
    entered = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):
            entered.set()
            await release.wait()
        return {"late": True}

    handle = await runtime.start(body)
    await entered.wait()
    runtime.deliver(LiveCommand.Cancel(handle.run_id, reason="user"))
    release.set()

    assert await handle.wait() == CANCELLED
    record = await runtime.record(handle.run_id)
    assert record.state == CANCELLED
    assert record.result is None
    events = await history(runtime, handle.run_id)
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["late_result_discarded", "committed"]
    late, terminal = events[-2], events[-1]
    assert late.seq < terminal.seq
    assert late.detail["result"] == {"late": True}
    assert terminal.state == CANCELLED
    assert terminal.detail == {"source": "deliver", "reason": "user"}


async def test_body_that_swallows_the_cancel_and_returns_still_ends_cancelled(
    runtime: Runtime,
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> object:
        entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            return "value after cancel"
        raise AssertionError("sleep_forever returned")

    handle = await runtime.start(body)
    await entered.wait()
    runtime.deliver(LiveCommand.Cancel(handle.run_id))

    assert await handle.wait() == CANCELLED
    assert (await runtime.record(handle.run_id)).result is None
    events = await history(runtime, handle.run_id)
    assert [e.kind for e in events][-2:] == ["late_result_discarded", "committed"]
    assert events[-2].detail["result"] == "value after cancel"
    assert len(terminal_commits(events)) == 1


async def test_body_that_returns_first_wins_over_a_later_cancel(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        return {"answer": 42}

    handle = await runtime.start(body)
    assert await handle.wait() == NATURAL
    before = await snapshot(runtime, handle.run_id)

    with pytest.raises(NotActive):
        runtime.deliver(LiveCommand.Cancel(handle.run_id))
    with pytest.raises(RunAlreadyEnded) as info:
        await runtime.cancel_run(handle.run_id)
    assert info.value.state == NATURAL

    assert await snapshot(runtime, handle.run_id) == before
    record = await runtime.record(handle.run_id)
    assert record.result == {"answer": 42}
    events = await history(runtime, handle.run_id)
    assert "late_result_discarded" not in [e.kind for e in events]


async def test_double_deliver_cancel_commits_one_terminal_state(runtime: Runtime) -> None:
    handle = await start_parked(runtime)
    runtime.deliver(LiveCommand.Cancel(handle.run_id, reason="first"))
    runtime.deliver(LiveCommand.Cancel(handle.run_id, reason="second"))

    assert await handle.wait() == CANCELLED
    events = await history(runtime, handle.run_id)
    terminal = terminal_commits(events)
    assert len(terminal) == 1
    assert terminal[0].detail == {"source": "deliver", "reason": "first"}


async def test_deliver_cancel_then_cancel_run_commits_one_terminal_state(
    runtime: Runtime,
) -> None:
    handle = await start_parked(runtime)
    runtime.deliver(LiveCommand.Cancel(handle.run_id, reason="user"))
    assert await runtime.cancel_run(handle.run_id) == CANCELLED

    assert await handle.wait() == CANCELLED
    terminal = terminal_commits(await history(runtime, handle.run_id))
    assert len(terminal) == 1
    assert terminal[0].detail == {"source": "deliver", "reason": "user"}


async def test_deliver_cancel_without_reason_records_source(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == CANCELLED
    terminal = terminal_commits(await history(runtime, handle.run_id))
    assert [e.detail for e in terminal] == [{"source": "deliver", "reason": None}]


async def test_cancel_wins_over_a_pending_pause(runtime: Runtime) -> None:
    entered = trio.Event()
    proceed = trio.Event()

    async def body(ctx: RunContext) -> object:
        entered.set()
        with trio.CancelScope(shield=True):
            await proceed.wait()
        await ctx.boundary()
        return "unreachable"

    handle = await runtime.start(body)
    await entered.wait()
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    proceed.set()
    assert await handle.wait() == CANCELLED


# ---------------------------------------------------------------------- deliver_to_current_attempt


class FixedVerifier:
    """Answers ``verify_current`` with a fixed value, or raises a fixed error."""

    def __init__(self, answer: bool | Exception) -> None:
        self.answer = answer
        self.calls = 0

    async def verify_current(self) -> bool:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class GatedVerifier:
    """Answers True once ``release`` is set."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()

    async def verify_current(self) -> bool:
        self.entered.set()
        await self.release.wait()
        return True


def _boundary_body(entered: trio.Event, proceed: trio.Event) -> Callable[[RunContext], Any]:
    async def body(ctx: RunContext) -> object:
        entered.set()
        await proceed.wait()
        messages = await ctx.boundary()
        return {"messages": messages}

    return body


async def test_deliver_to_current_attempt_without_verifier_works_like_deliver(
    runtime: Runtime,
) -> None:
    entered, proceed = trio.Event(), trio.Event()
    handle = await runtime.start(_boundary_body(entered, proceed))
    await entered.wait()
    await runtime.deliver_to_current_attempt(LiveCommand.Message(handle.run_id, "hello"))
    proceed.set()
    assert await handle.wait() == NATURAL
    assert (await runtime.record(handle.run_id)).result == {"messages": ["hello"]}


async def test_deliver_to_current_attempt_without_verifier_cancels(runtime: Runtime) -> None:
    handle = await start_parked(runtime)
    await runtime.deliver_to_current_attempt(LiveCommand.Cancel(handle.run_id, reason="r"))
    assert await handle.wait() == CANCELLED
    terminal = terminal_commits(await history(runtime, handle.run_id))
    assert [e.detail for e in terminal] == [{"source": "deliver", "reason": "r"}]


async def test_deliver_to_current_attempt_to_unknown_run_is_not_active(
    runtime: Runtime,
) -> None:
    with pytest.raises(NotActive):
        await runtime.deliver_to_current_attempt(LiveCommand.Cancel("ghost"))
    assert await history(runtime) == []


async def test_deliver_to_current_attempt_with_an_approving_verifier_delivers(
    store: MemoryStore,
) -> None:
    verifiers: list[tuple[str, str, int, FixedVerifier]] = []

    def factory(run_id: str, thread_id: str, generation: int) -> OwnershipVerifier:
        verifier = FixedVerifier(True)
        verifiers.append((run_id, thread_id, generation, verifier))
        return verifier

    async with open_runtime(store, ownership_verifier=factory) as runtime:
        entered, proceed = trio.Event(), trio.Event()
        handle = await runtime.start(_boundary_body(entered, proceed), thread_id="t")
        await entered.wait()
        await runtime.deliver_to_current_attempt(LiveCommand.Pause(handle.run_id))
        proceed.set()
        state = await handle.wait()
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"

    assert [(r, t, g) for r, t, g, _ in verifiers] == [(handle.run_id, "t", 1)]
    assert verifiers[0][3].calls == 1


@pytest.mark.parametrize("kind", ["pause", "cancel"])
@pytest.mark.parametrize(
    "answer",
    [False, ConnectionError("claim store unreachable")],
    ids=["claim-lost", "verifier-raises"],
)
async def test_deliver_to_current_attempt_refused_by_verifier_has_no_effect(
    store: MemoryStore, kind: str, answer: bool | Exception
) -> None:
    verifier = FixedVerifier(answer)

    def factory(run_id: str, thread_id: str, generation: int) -> OwnershipVerifier:
        return verifier

    async with open_runtime(store, ownership_verifier=factory) as runtime:
        entered, proceed = trio.Event(), trio.Event()
        handle = await runtime.start(_boundary_body(entered, proceed))
        await entered.wait()
        before = await snapshot(runtime, handle.run_id)

        with pytest.raises(NotActive):
            await runtime.deliver_to_current_attempt(COMMANDS[kind](handle.run_id))

        assert verifier.calls == 1
        assert await snapshot(runtime, handle.run_id) == before
        proceed.set()
        assert await handle.wait() == NATURAL
        assert (await runtime.record(handle.run_id)).result == {"messages": []}


async def test_deliver_to_current_attempt_refuses_when_the_attempt_ends_during_the_check(
    store: MemoryStore,
) -> None:
    verifier = GatedVerifier()

    def factory(run_id: str, thread_id: str, generation: int) -> OwnershipVerifier:
        return verifier

    async with open_runtime(store, ownership_verifier=factory) as runtime:

        async def body(ctx: RunContext) -> object:
            await trio.sleep_forever()

        handle = await runtime.start(body)
        outcome: list[BaseException | None] = []

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                deliver_noting, runtime, LiveCommand.Message(handle.run_id, "stale"), outcome
            )
            await verifier.entered.wait()
            runtime.deliver(LiveCommand.Cancel(handle.run_id))
            assert await handle.wait() == CANCELLED
            events_before = len(await history(runtime))
            verifier.release.set()

        assert len(outcome) == 1
        assert isinstance(outcome[0], NotActive)
        assert len(await history(runtime)) == events_before
        events = await history(runtime, handle.run_id)
        assert "messages_discarded" not in [e.kind for e in events]


async def test_deliver_to_current_attempt_refuses_when_a_new_generation_replaced_it(
    store: MemoryStore,
) -> None:
    first_verifier = GatedVerifier()

    def factory(run_id: str, thread_id: str, generation: int) -> OwnershipVerifier:
        return first_verifier if generation == 1 else FixedVerifier(True)

    async with open_runtime(store, ownership_verifier=factory) as runtime:
        second_started = trio.Event()
        proceed = trio.Event()

        async def body(ctx: RunContext) -> object:
            if ctx.generation == 1:
                await ctx.boundary(wait=True)
                raise AssertionError("the pause ends the first attempt")
            second_started.set()
            await proceed.wait()
            return await ctx.boundary()

        handle = await runtime.start(body)
        await trio.testing.wait_all_tasks_blocked()
        outcome: list[BaseException | None] = []

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                deliver_noting,
                runtime,
                LiveCommand.Message(handle.run_id, "for generation 1"),
                outcome,
            )
            await first_verifier.entered.wait()
            runtime.deliver(LiveCommand.Pause(handle.run_id))
            assert isinstance(await handle.wait(), RunState.Awaiting)
            second = await runtime.resume(handle.run_id)
            await second_started.wait()
            first_verifier.release.set()

        assert len(outcome) == 1
        assert isinstance(outcome[0], NotActive)
        proceed.set()
        assert await second.wait() == NATURAL
        assert (await runtime.record(handle.run_id)).result == []


async def test_commands_after_the_body_returned_are_refused_while_its_end_commits() -> None:
    store = HoldingStore(RunState.Ended)
    async with open_runtime(store) as runtime:

        async def body(ctx: RunContext) -> object:
            return "value"

        handle = await runtime.start(body)
        try:
            await store.holding.wait()
            assert not handle.done
            assert await runtime.state(handle.run_id) == RunState.Running(1)
            assert runtime.active_attempt_run_id(handle.thread_id) is None
            with pytest.raises(NotActive):
                runtime.deliver(LiveCommand.Cancel(handle.run_id))
            with pytest.raises(NotActive):
                runtime.deliver(LiveCommand.Message(handle.run_id, "too late"))
            with pytest.raises(NotActive):
                await runtime.deliver_to_current_attempt(LiveCommand.Pause(handle.run_id))
        finally:
            store.release.set()

        assert await handle.wait() == NATURAL
        assert (await runtime.record(handle.run_id)).result == "value"
        events = await history(runtime, handle.run_id)
        assert [e.kind for e in events] == ["committed", "committed"]


# ---------------------------------------------------------------------- generations and registry


async def test_resumed_attempt_replaces_the_paused_one_in_the_registry(
    store: MemoryStore,
) -> None:
    created: list[int] = []

    def factory(run_id: str, thread_id: str, generation: int) -> OwnershipVerifier:
        created.append(generation)
        return FixedVerifier(True)

    async with open_runtime(store, ownership_verifier=factory) as runtime:
        second_started = trio.Event()

        async def body(ctx: RunContext) -> object:
            if ctx.generation == 1:
                await ctx.boundary(wait=True)
                raise AssertionError("the pause ends the first attempt")
            second_started.set()
            messages = await ctx.boundary(wait=True)
            return {"generation": ctx.generation, "messages": messages}

        first = await runtime.start(body, thread_id="th")
        assert first.generation == 1
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.active_attempt_run_id("th") == first.run_id
        runtime.deliver(LiveCommand.Pause(first.run_id))
        assert isinstance(await first.wait(), RunState.Awaiting)
        assert runtime.active_attempt_run_id("th") is None
        with pytest.raises(NotActive):
            runtime.deliver(LiveCommand.Message(first.run_id, "while paused"))

        second = await runtime.resume(first.run_id)
        assert second.generation == 2
        assert await runtime.state(first.run_id) == RunState.Running(2)
        await second_started.wait()
        assert runtime.active_attempt_run_id("th") == first.run_id

        await runtime.deliver_to_current_attempt(LiveCommand.Message(first.run_id, "to gen 2"))
        assert await second.wait() == NATURAL
        record = await runtime.record(first.run_id)
        assert record.generation == 2
        assert record.result == {"generation": 2, "messages": ["to gen 2"]}
        assert runtime.active_attempt_run_id("th") is None
        with pytest.raises(NotActive):
            runtime.deliver(LiveCommand.Cancel(first.run_id))
        with pytest.raises(NotActive):
            await runtime.deliver_to_current_attempt(LiveCommand.Cancel(first.run_id))

    assert created == [1, 2]


async def test_active_attempt_run_id(runtime: Runtime) -> None:
    release = trio.Event()

    async def blocker(ctx: RunContext) -> object:
        await release.wait()
        return 1

    async def follower(ctx: RunContext) -> object:
        await trio.sleep_forever()

    assert runtime.active_attempt_run_id("t1") is None
    first = await runtime.start(blocker, thread_id="t1")
    assert runtime.active_attempt_run_id("t1") == first.run_id
    second = await runtime.start(follower, thread_id="t1")
    assert await runtime.state(second.run_id) == RunState.Queued()
    assert runtime.active_attempt_run_id("t1") == first.run_id
    assert runtime.active_attempt_run_id("unknown-thread") is None

    release.set()
    assert await first.wait() == NATURAL
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state(second.run_id) == RunState.Running(1)
    assert runtime.active_attempt_run_id("t1") == second.run_id

    runtime.deliver(LiveCommand.Cancel(second.run_id))
    assert await second.wait() == CANCELLED
    assert runtime.active_attempt_run_id("t1") is None


async def test_default_thread_is_the_run_id(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="solo")
    assert handle.thread_id == "solo"
    assert runtime.active_attempt_run_id("solo") == "solo"
    runtime.deliver(LiveCommand.Cancel("solo"))
    assert await handle.wait() == CANCELLED
    assert runtime.active_attempt_run_id("solo") is None


async def test_wake_releases_a_waiting_boundary_without_ending_the_run(
    runtime: Runtime,
) -> None:
    woke = trio.Event()

    async def body(ctx: RunContext) -> object:
        messages: list[JsonValue] = await ctx.boundary(wait=True)
        woke.set()
        await trio.sleep_forever()
        return messages

    handle = await runtime.start(body)
    await trio.testing.wait_all_tasks_blocked()
    assert not woke.is_set()
    runtime.deliver(LiveCommand.Wake(handle.run_id, reason="poke"))
    await woke.wait()
    assert await runtime.state(handle.run_id) == RunState.Running(1)
    assert runtime.active_attempt_run_id(handle.thread_id) == handle.run_id


@pytest.mark.parametrize("first", ["message", "cancel"])
@pytest.mark.parametrize("progress", [None, {"step": 1}])
async def test_a_cancel_that_arrives_with_a_message_wins_at_a_waiting_boundary(
    runtime: Runtime, first: str, progress: JsonValue
) -> None:
    """A message and a cancel delivered in the same step: the boundary raises the
    cancellation rather than hand the message to a cancelled run, and the message is
    recorded as discarded (never lost)."""
    received: list[JsonValue] = []

    async def body(ctx: RunContext) -> object:
        received.extend(await ctx.boundary(progress, wait=True))
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="r")
    await trio.testing.wait_all_tasks_blocked()
    message, cancel = LiveCommand.Message("r", "late"), LiveCommand.Cancel("r", "enough")
    for command in (message, cancel) if first == "message" else (cancel, message):
        runtime.deliver(command)
    assert await handle.wait() == CANCELLED
    assert received == []
    events = await history(runtime, "r")
    discarded = [e.detail for e in events if e.kind == "messages_discarded"]
    assert discarded == [{"messages": ["late"]}]
    assert terminal_commits(events)[0].detail == {"source": "deliver", "reason": "enough"}


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "shared"])
async def test_a_cancel_that_arrives_while_a_boundary_commits_progress_wins_over_its_messages(
    shared: bool,
) -> None:
    """The boundary's progress commit is in flight when a cancel comes: the boundary
    raises the cancellation instead of returning the messages, which are discarded."""
    store = ParkingStore(shared=shared)
    go = trio.Event()
    received: list[JsonValue] = []

    async def body(ctx: RunContext) -> object:
        await go.wait()
        received.extend(await ctx.boundary({"step": 1}))
        await trio.sleep_forever()

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Message("r", "unread"))
        parked = store.park("apply")
        go.set()
        await parked.arrived.wait()
        runtime.deliver(LiveCommand.Cancel("r", "enough"))
        parked.release.set()
        assert await handle.wait() == CANCELLED
        assert received == []
        assert (await runtime.record("r")).checkpoint == {"step": 1}
        events = await history(runtime, "r")
        assert [e.detail for e in events if e.kind == "messages_discarded"] == [
            {"messages": ["unread"]}
        ]
