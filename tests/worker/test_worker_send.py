"""`send`: live commands for a run's current attempt, whichever runtime runs it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    InvalidArgument,
    JsonValue,
    LiveCommand,
    NotActive,
    RunContext,
    RunState,
    Runtime,
)
from awaken_trio.store import MemoryStore

from .worker_helpers import (
    CANCELLED,
    LEASE,
    NATURAL,
    POLL,
    POLL_BOUND,
    Stall,
    history,
    is_ended,
    past_lease,
    reach,
    serving,
    settle,
    shared_runtime,
    terminal,
    terminal_event,
    until_state,
)


class Listener:
    """A body that collects messages at ``boundary(wait=True)`` until it gets "stop"."""

    def __init__(self) -> None:
        self.received: list[tuple[float, list[JsonValue]]] = []
        self.generations: list[int] = []
        self.waiting = trio.Event()

    @property
    def messages(self) -> list[JsonValue]:
        return [m for _, batch in self.received for m in batch]

    async def body(self, ctx: RunContext) -> object:
        self.generations.append(ctx.generation)
        while True:
            self.waiting.set()
            batch = await ctx.boundary(wait=True)
            self.received.append((trio.current_time(), batch))
            if "stop" in batch:
                return len(self.messages)


async def test_messages_sent_from_another_runtime_arrive_in_send_order(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(listener.body, run_id="r")
        await reach(listener.waiting)
        sent = trio.current_time()
        for payload in ("m1", {"n": 2}, ["m", 3]):
            await b.send(LiveCommand.Message("r", payload))
        await trio.sleep(POLL_BOUND)
        assert listener.messages == ["m1", {"n": 2}, ["m", 3]]
        assert listener.received[0][0] - sent <= POLL_BOUND
        await b.send(LiveCommand.Message("r", "stop"))
        assert await settle(handle) == NATURAL
        assert (await a.record("r")).result == 4
        # Every message was taken: none is reported discarded.
        assert [e for e in await history(a, "r") if e.kind == "messages_discarded"] == []


async def test_messages_sent_from_the_owner_arrive_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with shared_runtime(shared_store) as a:
        handle = await a.start(listener.body, run_id="r")
        await reach(listener.waiting)
        await a.send(LiveCommand.Message("r", "m1"))
        await a.send(LiveCommand.Message("r", "m2"))
        await trio.sleep(20 * POLL)  # the relay sees them in the store too
        await a.send(LiveCommand.Message("r", "stop"))
        assert await settle(handle) == NATURAL
    assert listener.messages == ["m1", "m2", "stop"]


async def test_a_pause_sent_from_another_runtime_pauses_the_run(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(listener.body, run_id="r")
        await reach(listener.waiting)
        sent = trio.current_time()
        await b.send(LiveCommand.Pause("r"))
        state = await settle(handle, POLL_BOUND)
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        assert trio.current_time() - sent <= POLL_BOUND
        assert await b.state("r") == state
        assert listener.received == []


async def test_a_wake_sent_from_another_runtime_wakes_a_waiting_boundary(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(listener.body, run_id="r")
        await reach(listener.waiting)
        sent = trio.current_time()
        await b.send(LiveCommand.Wake("r", "look again"))
        await trio.sleep(POLL_BOUND)
        assert [batch for _, batch in listener.received] == [[]]
        assert listener.received[0][0] - sent <= POLL_BOUND
        await b.send(LiveCommand.Message("r", "stop"))
        assert await settle(handle) == NATURAL


async def test_a_cancel_sent_from_another_runtime_ends_the_run_cancelled(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    observed: list[float] = []

    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            observed.append(trio.current_time())

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(body, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        sent = trio.current_time()
        await b.send(LiveCommand.Cancel("r", "operator said so"))
        assert await settle(handle, POLL_BOUND) == CANCELLED
        assert observed[0] - sent <= POLL_BOUND
        end = await terminal_event(b, "r")
        assert dict(end.detail) == {"source": "send", "reason": "operator said so"}


async def start_queued(rt: Runtime) -> str:
    await rt.submit("listener", run_id="queued")
    return "queued"


async def start_awaiting(rt: Runtime) -> str:
    async def asking(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        return None

    await settle(await rt.start(asking, run_id="awaiting"))
    return "awaiting"


async def start_ended(rt: Runtime) -> str:
    async def done(ctx: RunContext) -> object:
        return None

    await settle(await rt.start(done, run_id="ended"))
    return "ended"


async def unknown(rt: Runtime) -> str:
    await trio.lowlevel.checkpoint()
    return "unknown"


COMMANDS: dict[str, Any] = {
    "message": lambda run_id: LiveCommand.Message(run_id, "hello"),
    "pause": LiveCommand.Pause,
    "wake": LiveCommand.Wake,
    "cancel": LiveCommand.Cancel,
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("where", [start_queued, start_awaiting, start_ended, unknown])
async def test_send_to_a_run_with_no_active_attempt_raises_not_active_and_stores_nothing(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    command: str,
    where: Any,
) -> None:
    listener = Listener()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"listener": listener.body}) as b,
    ):
        run_id = await where(a)
        before = await history(a)
        with pytest.raises(NotActive):
            await b.send(COMMANDS[command](run_id))
        with pytest.raises(NotActive):
            await a.send(COMMANDS[command](run_id))
        assert await history(a) == before
        if run_id == "queued":
            # Nothing was kept for the run: its first attempt finds no command.
            async with serving(b):
                await reach(listener.waiting)
                await trio.sleep(20 * POLL)
                assert listener.received == []
                assert await a.state("queued") == RunState.Running(1)
                await a.cancel_run("queued")


async def test_send_to_an_awaiting_run_keeps_nothing_for_its_next_attempt(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    first_batches: list[list[JsonValue]] = []

    async def asking(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        first_batches.append(await ctx.boundary())
        return None

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        await settle(await a.start(asking, run_id="r"))
        for command in (LiveCommand.Message("r", "m"), LiveCommand.Pause("r")):
            with pytest.raises(NotActive):
                await b.send(command)
        assert await settle(await a.resume("r")) == NATURAL
    assert first_batches == [[]]


async def test_send_refuses_what_is_not_a_live_command(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as b:
        with pytest.raises(InvalidArgument):
            await b.send("cancel r")


async def test_messages_sent_to_a_lost_attempt_reach_the_next_attempts_first_boundary(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    first_batches: list[tuple[int, list[JsonValue]]] = []

    async def in_a(ctx: RunContext) -> object:
        await trio.sleep_forever()  # no boundary: nothing is taken here

    async def in_c(ctx: RunContext) -> object:
        first_batches.append((ctx.generation, await ctx.boundary()))
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"w": in_c}) as c,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "before the stall"))
        await trio.sleep(20 * POLL)
        with Stall(a):
            await b.send(LiveCommand.Message("r", "during the stall"))
            await past_lease()
            await b.send(LiveCommand.Message("r", "after the lease"))
            async with serving(c):
                await until_state(c, "r", lambda s: s == NATURAL, seconds=LEASE)
    assert first_batches == [(2, ["before the stall", "during the stall", "after the lease"])]


async def test_a_cancel_sent_to_a_lost_attempt_ends_the_next_one_before_its_body_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[tuple[str, int]] = []

    async def stuck(ctx: RunContext) -> object:
        entered.append(("a", ctx.generation))
        # A stuck owner: nothing reaches this attempt for a long while.
        with trio.CancelScope(shield=True):
            await trio.sleep(5 * LEASE)
        return None

    async def in_c(ctx: RunContext) -> object:
        entered.append(("c", ctx.generation))
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": stuck}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"w": in_c}) as c,
    ):
        await a.start(stuck, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            await b.send(LiveCommand.Cancel("r", "too late for it"))
            await past_lease()
            async with serving(c):
                state = await until_state(c, "r", is_ended, LEASE)
        assert state == CANCELLED
        end = await terminal_event(c, "r")
        assert dict(end.detail) == {"source": "send", "reason": "too late for it"}
        assert end.generation == 2
        await trio.sleep(5 * LEASE)
        assert len(terminal(await history(c, "r"))) == 1
    assert entered == [("a", 1)]


async def test_a_pause_sent_to_a_lost_attempt_pauses_the_next_one_at_its_first_boundary(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    progress: list[tuple[int, str]] = []

    async def in_a(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def in_c(ctx: RunContext) -> object:
        progress.append((ctx.generation, "entered"))
        await ctx.boundary()
        progress.append((ctx.generation, "past the boundary"))
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"w": in_c}) as c,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            await b.send(LiveCommand.Pause("r"))
            await past_lease()
            async with serving(c):
                state = await until_state(c, "r", lambda s: s != RunState.Running(1), LEASE)
                if isinstance(state, RunState.Running):
                    await trio.sleep(20 * POLL)
                    state = await c.state("r")
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        assert (await c.record("r")).generation == 2
    assert progress == [(2, "entered")]
