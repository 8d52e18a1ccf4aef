"""`send`: live commands for a run's current attempt, whichever runtime runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
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
    StoreError,
    open_runtime,
)
from awaken_trio.store import Accepted, CommitResult, MemoryStore
from tests.worker.worker_helpers import (
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
from tests.wrapped_stores import ParkingStore


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
@pytest.mark.parametrize("where", [start_awaiting, start_ended, unknown])
async def test_send_to_a_run_that_is_not_queued_or_running_raises_not_active_and_stores_nothing(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    command: str,
    where: Any,
) -> None:
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        run_id = await where(a)
        before = await history(a)
        with pytest.raises(NotActive):
            await b.send(COMMANDS[command](run_id))
        with pytest.raises(NotActive):
            await a.send(COMMANDS[command](run_id))
        assert await history(a) == before


async def test_messages_sent_to_a_queued_run_reach_its_first_boundary_in_send_order(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"listener": listener.body}) as b,
    ):
        handle = await a.submit("listener", run_id="q")
        for payload in ("m1", {"n": 2}, "stop"):
            await a.send(LiveCommand.Message("q", payload))
        assert await a.state("q") == RunState.Queued()
        async with serving(b):
            assert await settle(handle) == NATURAL
    assert [batch for _, batch in listener.received] == [["m1", {"n": 2}, "stop"]]
    assert listener.generations == [1]


async def test_a_cancel_sent_to_a_queued_run_ends_it_before_its_body_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"listener": listener.body}) as b,
    ):
        handle = await a.submit("listener", run_id="q")
        await a.send(LiveCommand.Message("q", "never read"))
        await a.send(LiveCommand.Cancel("q", "not wanted after all"))
        async with serving(b):
            assert await settle(handle) == CANCELLED
        end = await terminal_event(a, "q")
        assert dict(end.detail) == {"source": "send", "reason": "not wanted after all"}
        discarded = [e for e in await history(a, "q") if e.kind == "messages_discarded"]
        assert [dict(e.detail)["messages"] for e in discarded] == [["never read"]]
    assert listener.generations == []


async def test_a_pause_sent_to_a_queued_run_pauses_it_at_its_first_boundary(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    passed: list[int] = []

    async def body(ctx: RunContext) -> object:
        await ctx.boundary()
        passed.append(ctx.generation)
        return None

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"w": body}) as b,
    ):
        handle = await a.submit("w", run_id="q")
        await a.send(LiveCommand.Pause("q"))
        async with serving(b):
            state = await settle(handle)
            assert isinstance(state, RunState.Awaiting)
            assert state.ticket.reason == "manual_pause"
            # The pause was honoured once: the resumed attempt passes its boundary.
            assert await settle(await b.resume("q")) == NATURAL
    assert passed == [2]


async def test_a_wake_sent_to_a_queued_run_is_dropped(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    listener = Listener()
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"listener": listener.body}) as b,
    ):
        handle = await a.submit("listener", run_id="q")
        await a.send(LiveCommand.Wake("q", "nobody is waiting yet"))
        async with serving(b):
            await reach(listener.waiting)
            await trio.sleep(20 * POLL)
            # No attempt was waiting when it came: the first boundary still waits.
            assert listener.received == []
            await a.send(LiveCommand.Message("q", "stop"))
            assert await settle(handle) == NATURAL
    assert [batch for _, batch in listener.received] == [["stop"]]


@pytest.mark.parametrize("sender", ["owner", "other"])
async def test_a_cancel_sent_to_a_run_queued_behind_a_busy_thread_ends_it_at_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, sender: str
) -> None:
    entered: list[str] = []
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        entered.append(ctx.run_id)
        await release.wait()
        return None

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        first = await a.start(body, run_id="first", thread_id="T")
        queued = await a.start(body, run_id="queued", thread_id="T")
        assert await a.state("queued") == RunState.Queued()
        await (a if sender == "owner" else b).send(LiveCommand.Cancel("queued", sender))
        assert await settle(queued, POLL_BOUND) == CANCELLED
        end = await terminal_event(a, "queued")
        assert dict(end.detail) == {"source": "send", "reason": sender}
        release.set()
        assert await settle(first) == NATURAL
    assert entered == ["first"]


async def test_messages_sent_to_a_run_queued_here_reach_its_first_boundary(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    release = trio.Event()
    listener = Listener()

    async def blocker(ctx: RunContext) -> object:
        await release.wait()
        return None

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        first = await a.start(blocker, run_id="first", thread_id="T")
        queued = await a.start(listener.body, run_id="queued", thread_id="T")
        await b.send(LiveCommand.Message("queued", "from elsewhere"))
        await a.send(LiveCommand.Message("queued", "from here"))
        await a.send(LiveCommand.Wake("queued"))
        await a.send(LiveCommand.Message("queued", "stop"))
        release.set()
        assert await settle(first) == NATURAL
        assert await settle(queued) == NATURAL
    assert [batch for _, batch in listener.received] == [["from elsewhere", "from here", "stop"]]


async def test_send_to_a_queued_run_of_a_memory_store_is_deliver(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return None

    async with open_runtime() as rt:
        first = await rt.start(body, run_id="first", thread_id="T")
        queued = await rt.start(body, run_id="queued", thread_id="T")
        with pytest.raises(NotActive):
            await rt.send(LiveCommand.Message("queued", "m"))
        release.set()
        assert await settle(first) == NATURAL
        assert await settle(queued) == NATURAL


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


@pytest.mark.parametrize("command", ["message", "cancel"])
async def test_a_command_stored_while_the_relay_reads_reaches_an_attempt_that_registers_meanwhile(
    autojump_clock: trio.testing.MockClock, command: str
) -> None:
    """The owner's relay reads the commands of the attempts it knows; an attempt that
    registers while that read is in flight, and a command stored for it meanwhile, must
    not be skipped because the read saw a later command of another run."""
    store = ParkingStore()
    known, fresh = Listener(), Listener()
    async with shared_runtime(store) as a, shared_runtime(store) as b:
        known_run = await a.start(known.body, run_id="known")
        await reach(known.waiting)
        await b.send(LiveCommand.Message("known", "first"))
        parked = store.park("commands")
        await reach(parked.arrived)  # a's relay reads for the attempts it knows: "known"
        handle = await a.start(fresh.body, run_id="fresh")
        await reach(fresh.waiting)
        sent = trio.current_time()
        if command == "message":
            await b.send(LiveCommand.Message("fresh", "stop"))
        else:
            await b.send(LiveCommand.Cancel("fresh", "sent while it registered"))
        await b.send(LiveCommand.Message("known", "later"))
        parked.release.set()
        expected = NATURAL if command == "message" else CANCELLED
        assert await settle(handle, POLL_BOUND) == expected
        assert trio.current_time() - sent <= POLL_BOUND
        await b.send(LiveCommand.Message("known", "stop"))
        assert await settle(known_run) == NATURAL
    assert fresh.messages == (["stop"] if command == "message" else [])
    assert known.messages == ["first", "later", "stop"]


async def test_the_readme_durable_sample_submit_then_send_then_cancel_works_on_sqlite(
    tmp_path: Path,
) -> None:
    """The durable sample: a control process submits, sends a message and cancels
    while the run is still queued; a worker then finds the run ended and never runs it."""
    entered: list[str] = []

    async def summarise(ctx: RunContext) -> object:
        entered.append(ctx.run_id)
        return await ctx.boundary()

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with trio.fail_after(30):
        async with open_runtime(url, poll=0.01) as control:
            handle = await control.submit("summarise", input={"doc": 7}, thread_id="t1")
            await control.send(LiveCommand.Message(handle.run_id, "focus on costs"))
            sent = await control.submit("summarise", input={"doc": 8}, thread_id="t2")
            await control.send(LiveCommand.Message(sent.run_id, "focus on costs"))
            assert await control.cancel_run(handle.run_id) == CANCELLED
            async with (
                open_runtime(url, bodies={"summarise": summarise}, poll=0.01) as worker,
                serving(worker),
            ):
                assert await sent.wait() == NATURAL
            assert (await control.record(sent.run_id)).result == ["focus on costs"]
            discarded = [
                dict(e.detail)["messages"]
                for e in await history(control, handle.run_id)
                if e.kind == "messages_discarded"
            ]
            assert discarded == [["focus on costs"]]
    assert entered == [sent.run_id]


async def test_a_cancel_sent_with_a_message_wins_at_a_waiting_boundary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Another runtime sends a message and then a cancel, and the owner reads both at
    once: the waiting boundary raises the cancellation, and the message is recorded as
    discarded."""
    store = ParkingStore()
    listener = Listener()
    async with shared_runtime(store) as a, shared_runtime(store) as b:
        handle = await a.start(listener.body, run_id="r")
        await reach(listener.waiting)
        await trio.sleep(POLL_BOUND)  # the relay knows the attempt
        parked = store.park("commands")
        await b.send(LiveCommand.Message("r", "too late"))
        await reach(parked.arrived)
        await b.send(LiveCommand.Cancel("r", "enough"))
        parked.release.set()
        assert await settle(handle, POLL_BOUND) == CANCELLED
        events = await history(a, "r")
        assert [dict(e.detail) for e in events if e.kind == "messages_discarded"] == [
            {"messages": ["too late"]}
        ]
        assert dict(terminal(events)[0].detail) == {"source": "send", "reason": "enough"}
    assert listener.received == []


async def test_messages_whose_handover_the_store_fails_to_commit_are_handed_over_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The commit that consumes the messages a boundary takes fails: the boundary raises
    the store's error, the messages stay unread, and the next boundary returns them."""
    store = ParkingStore()
    batches: list[list[JsonValue]] = []
    errors: list[str] = []
    waiting, got_local, failed = trio.Event(), trio.Event(), trio.Event()

    async def body(ctx: RunContext) -> object:
        waiting.set()
        while True:
            try:
                batch = await ctx.boundary(wait=True)
            except StoreError as exc:
                errors.append(type(exc).__name__)
                failed.set()
                continue
            batches.append(batch)
            got_local.set()
            if "stop" in batch:
                return batches

    async with shared_runtime(store) as a, shared_runtime(store) as b:
        handle = await a.start(body, run_id="r")
        await reach(waiting)
        await a.send(LiveCommand.Message("r", "local"))
        # The boundary returned the local message; now one sent from elsewhere, whose
        # handover commit fails once.
        await reach(got_local)
        assert batches == [["local"]]
        store.fail("apply")
        await b.send(LiveCommand.Message("r", "stored"))
        await reach(failed)
        assert errors == ["StoreError"]
        await b.send(LiveCommand.Message("r", "stop"))
        assert await settle(handle) == NATURAL
    assert [m for batch in batches for m in batch] == ["local", "stored", "stop"]
    assert await history_discarded(store) == []


async def history_discarded(store: ParkingStore) -> list[object]:
    return [e for e in await store.events_after(0) if e.kind == "messages_discarded"]


class _CountingCommands:
    """The shared store as the serving runtime sees it, counting its `commands` reads."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.reads: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commands(self, run_ids: Any, after: int = 0) -> Any:
        self.reads.append(sorted(run_ids))
        return await self._inner.commands(run_ids, after)

    async def aclose(self) -> None:
        pass  # the shared store outlives the runtime


class _NoCommandsWithStarts(_CountingCommands):
    """A store whose starts do not hand the run's commands over (``Accepted.commands`` is
    None), as a store that does not read them in the start's transaction answers."""

    async def apply(self, batch: Any) -> list[CommitResult]:
        return _without_commands(await self._inner.apply(batch))

    def apply_now(self, batch: Any) -> list[CommitResult]:
        return _without_commands(self._inner.apply_now(batch))


def _without_commands(results: list[CommitResult]) -> list[CommitResult]:
    return [
        attrs.evolve(result, commands=None) if isinstance(result, Accepted) else result
        for result in results
    ]


@pytest.mark.parametrize("handed_over", [True, False], ids=["with-the-start", "read-after"])
async def test_runs_claimed_together_take_the_commands_stored_while_they_waited(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, handed_over: bool
) -> None:
    """Queued runs each hold a command sent while they waited (a cancel for some, a message
    for the others); served in one claim, each takes its own before its body runs (the
    cancelled end first). Their starts hand the commands over, so no attempt reads them;
    from a store whose starts do not, the attempts read them with one store read."""
    ran: list[str] = []

    async def body(ctx: RunContext) -> object:
        ran.append(ctx.run_id)
        return await ctx.boundary()

    counting = (_CountingCommands if handed_over else _NoCommandsWithStarts)(shared_store)
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(counting, bodies={"w": body}) as b,
    ):
        handles = [await a.submit("w", run_id=f"q{i}") for i in range(6)]
        for i in range(6):
            if i % 2:
                await a.send(LiveCommand.Cancel(f"q{i}"))
            else:
                await a.send(LiveCommand.Message(f"q{i}", f"for q{i}"))
        async with serving(b, concurrency=6):
            ends = [await settle(handle) for handle in handles]
        states = {f"q{i}": await a.state(f"q{i}") for i in range(6)}
    assert sorted(ran) == ["q0", "q2", "q4"]
    assert ends[1] == ends[3] == ends[5] == CANCELLED
    for i in (0, 2, 4):
        assert states[f"q{i}"] == NATURAL
        assert (await shared_store.load(f"q{i}")).result == [f"for q{i}"]  # type: ignore[union-attr]
    if handed_over:
        assert counting.reads == []
    else:
        assert len(counting.reads) < 6, counting.reads
        assert sorted(run for read in counting.reads for run in read) == [f"q{i}" for i in range(6)]
