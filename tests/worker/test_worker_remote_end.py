"""`cancel_run` / `stop_run` of a run another runtime owns: committed at once (its
descendants first), the owner stops within a few polls, the thread stays occupied until it
has."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    RunAlreadyEnded,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    UnknownRun,
)
from awaken_trio._core import Body
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    LEASE,
    NATURAL,
    POLL,
    POLL_BOUND,
    Stall,
    history,
    is_running,
    past_lease,
    reach,
    serving,
    settle,
    shared_runtime,
    terminal,
    until_state,
)
from tests.wrapped_stores import Parked, ParkingStore

STOPPED = RunState.Ended(EndCause.Stopped("budget"))
ENDINGS = {
    "cancel_run": (CANCELLED, {"source": "cancel_run", "reason": None}),
    "cancel_run_with_reason": (CANCELLED, {"source": "cancel_run", "reason": "operator"}),
    "stop_run": (STOPPED, {"source": "stop_run", "reason": "budget"}),
}


async def end_run(runtime: Runtime, how: str, run_id: str) -> RunState:
    if how == "cancel_run":
        return await runtime.cancel_run(run_id)
    if how == "cancel_run_with_reason":
        return await runtime.cancel_run(run_id, reason="operator")
    return await runtime.stop_run(run_id, "budget")


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_ending_a_run_owned_elsewhere_commits_at_once_descendants_first(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    expected, detail = ENDINGS[how]
    stopped: dict[str, float] = {}
    ready = trio.Event()

    async def leaf(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            stopped[ctx.run_id] = trio.current_time()

    async def middle(ctx: RunContext) -> object:
        await ctx.start_child(leaf, run_id="grandkid")
        return await leaf(ctx)

    async def root(ctx: RunContext) -> object:
        await ctx.start_child(middle, run_id="kid")
        ready.set()
        try:
            return await leaf(ctx)
        finally:
            try:
                with trio.CancelScope(shield=True):
                    await ctx.emit("test.after_the_end", {})
            except RunAlreadyEnded:
                stopped["emit refused"] = trio.current_time()

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(root, run_id="root")
        await reach(ready)
        await trio.testing.wait_all_tasks_blocked()
        before = trio.current_time()
        assert await end_run(b, how, "root") == expected
        # Committed before it returned, with no wait for the owner.
        assert trio.current_time() == before
        assert await b.state("root") == expected
        assert await b.state("kid") == CANCELLED
        assert await b.state("grandkid") == CANCELLED
        events = await history(b)
        ends = {e.run_id: e for e in terminal(events)}
        assert ends["grandkid"].seq < ends["kid"].seq < ends["root"].seq
        assert dict(ends["root"].detail) == detail
        assert dict(ends["kid"].detail)["source"] == "parent"
        # The owner stops its attempt (and its children) within a few polls.
        assert await settle(handle, POLL_BOUND) == expected
        await trio.sleep(POLL_BOUND)
        assert sorted(stopped) == ["emit refused", "grandkid", "kid", "root"]
        assert max(stopped.values()) - before <= POLL_BOUND
        # Nothing the owner did afterwards was committed.
        assert await history(b) == events


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_the_thread_stays_occupied_until_the_owners_attempt_has_stopped(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    occupant: list[str] = []
    overlaps: list[tuple[str, str]] = []
    left: dict[str, float] = {}

    async def body(ctx: RunContext) -> object:
        if occupant:
            overlaps.append((occupant[0], ctx.run_id))
        occupant.append(ctx.run_id)
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(2.0)  # a slow cleanup, well under the lease
            occupant.remove(ctx.run_id)
            left[ctx.run_id] = trio.current_time()

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        await a.start(body, run_id="first", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        await end_run(b, how, "first")
        nxt = await b.start(body, run_id="next", thread_id="T")
        assert await b.state("next") == RunState.Queued()
        await until_state(b, "next", is_running, seconds=LEASE)
        assert left["first"] <= trio.current_time()
        await b.cancel_run("next")
        await settle(nxt)
    assert overlaps == []


async def test_a_queued_run_of_another_runtime_ended_from_here_never_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
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
        assert await b.cancel_run("queued") == CANCELLED
        release.set()
        assert await settle(first) == NATURAL
        assert await settle(queued) == CANCELLED
        await trio.sleep(20 * POLL)
        assert await a.state("queued") == CANCELLED
        assert len(terminal(await history(a, "queued"))) == 1
    assert entered == ["first"]


async def test_cancel_of_a_run_whose_owner_is_stalled_takes_effect_at_once_for_good(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[tuple[str, int]] = []

    async def in_a(ctx: RunContext) -> object:
        entered.append(("a", ctx.generation))
        await ctx.boundary({"step": 1})
        await trio.sleep_forever()

    async def in_c(ctx: RunContext) -> object:
        entered.append(("c", ctx.generation))
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"w": in_c}) as c,
        serving(c),
    ):
        handle = await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            assert await b.cancel_run("r") == CANCELLED
            assert await b.state("r") == CANCELLED
            await past_lease()
            await past_lease()
            assert await c.state("r") == CANCELLED
        await trio.sleep(LEASE)
        assert await settle(handle) == CANCELLED
        assert await c.state("r") == CANCELLED
        assert len(terminal(await history(c, "r"))) == 1
    assert entered == [("a", 1)]


async def test_cancel_of_a_run_whose_owner_lost_its_lease_never_lets_it_run_again(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[tuple[str, int]] = []

    async def in_a(ctx: RunContext) -> object:
        entered.append(("a", ctx.generation))
        await trio.sleep_forever()

    async def in_c(ctx: RunContext) -> object:
        entered.append(("c", ctx.generation))
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"w": in_c}) as c,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            await past_lease()  # the owner is down; nobody has recovered the run yet
            assert await b.stop_run("r", "budget") == STOPPED
            async with serving(c):
                await past_lease()
        assert await c.state("r") == STOPPED
    assert entered == [("a", 1)]


async def test_ending_a_run_that_ended_elsewhere_raises_run_already_ended(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def done(ctx: RunContext) -> object:
        return None

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        await settle(await a.start(done, run_id="r"))
        with pytest.raises(RunAlreadyEnded) as info:
            await b.cancel_run("r")
        assert info.value.state == NATURAL
        with pytest.raises(RunAlreadyEnded):
            await b.stop_run("r", "budget")
        with pytest.raises(UnknownRun):
            await b.cancel_run("nobody")


async def test_ending_a_run_owned_elsewhere_on_the_wrong_thread_raises_unknown_run(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def parked(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(parked, run_id="r", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(UnknownRun):
            await b.cancel_run("r", thread_id="other")
        assert await b.state("r") == RunState.Running(1)
        assert await b.cancel_run("r", thread_id="T") == CANCELLED
        assert await settle(handle) == CANCELLED


async def test_a_cancel_from_elsewhere_and_a_natural_end_commit_one_end(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The owner's end and another runtime's cancel race: exactly one terminal commit,
    and each side is told which one won."""
    for round_ in range(10):
        finish = trio.Event()

        async def body(ctx: RunContext) -> object:
            await finish.wait()  # noqa: B023 - each round's own event
            return None

        async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
            handle = await a.start(body, run_id=f"r{round_}")
            await trio.testing.wait_all_tasks_blocked()
            finish.set()
            for _ in range(round_):
                await trio.lowlevel.checkpoint()
            try:
                told = await b.cancel_run(f"r{round_}")
            except RunAlreadyEnded as exc:
                told = exc.state
            state = await settle(handle)
            assert state == told
            assert len(terminal(await history(a, f"r{round_}"))) == 1


@pytest.mark.parametrize("call", ["boundary", "emit"])
@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_a_body_whose_commit_meets_an_end_made_elsewhere_sees_a_cancellation(
    autojump_clock: trio.testing.MockClock, how: str, call: str
) -> None:
    """Another runtime ends the run while the owner's commit is on its way: the body sees
    `trio.Cancelled` (never `RunAlreadyEnded` or a store error) and the run keeps the end
    committed elsewhere, with nothing of the owner's after it."""
    expected, detail = ENDINGS[how]
    store = ParkingStore()
    go = trio.Event()
    seen: list[type[BaseException]] = []

    async def body(ctx: RunContext) -> object:
        await go.wait()
        try:
            if call == "boundary":
                await ctx.boundary({"step": 1})
            else:
                await ctx.emit("test.step", {"n": 1})
        except BaseException as exc:
            seen.append(type(exc))
            raise
        return "not reached"

    async with shared_runtime(store) as a, shared_runtime(store) as b:
        handle = await a.start(body, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        parked = store.park("apply")
        go.set()
        await reach(parked.arrived)  # the owner's commit is on its way
        assert await end_run(b, how, "r") == expected
        events = await history(b, "r")
        parked.release.set()
        assert await settle(handle, POLL_BOUND) == expected
        assert seen == [trio.Cancelled]
        assert await history(b, "r") == events
        assert dict(terminal(events)[0].detail) == detail
        assert (await b.record("r")).checkpoint is None


def discarded_messages(events: list[RunEvent]) -> list[JsonValue]:
    return [m for e in events if e.kind == "messages_discarded" for m in e.detail["messages"]]


def received_messages(events: list[RunEvent]) -> list[JsonValue]:
    return [m for e in events if e.kind == "committed" for m in e.detail.get("received", ())]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_a_message_the_body_received_is_not_also_discarded_by_an_end_made_elsewhere(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    expected, _ = ENDINGS[how]
    received: list[JsonValue] = []
    got = trio.Event()

    async def body(ctx: RunContext) -> object:
        while True:
            received.extend(await ctx.boundary(wait=True))
            if "unread" in received:
                raise AssertionError("a message sent after the first was read")
            got.set()
            await trio.sleep_forever()  # no further commit before the end

    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        handle = await a.start(body, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "read"))
        await reach(got)
        await b.send(LiveCommand.Message("r", "unread"))
        assert await end_run(b, how, "r") == expected
        assert await settle(handle, POLL_BOUND) == expected
        assert received == ["read"]
        # Received or discarded, never both; and the history accounts for each.
        events = await history(b, "r")
        assert received_messages(events) == ["read"]
        assert discarded_messages(events) == ["unread"]


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_a_message_whose_handover_meets_an_end_made_elsewhere_is_only_discarded(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    """The owner's boundary is handing a stored message over when another runtime ends
    the run: the end wins, the body never gets the message, and it is discarded once."""
    expected, _ = ENDINGS[how]
    store = ParkingStore()
    received: list[JsonValue] = []
    seen: list[type[BaseException]] = []
    waiting = trio.Event()

    async def body(ctx: RunContext) -> object:
        waiting.set()
        try:
            received.extend(await ctx.boundary(wait=True))
        except BaseException as exc:
            seen.append(type(exc))
            raise
        return received

    async with shared_runtime(store) as a, shared_runtime(store) as b:
        handle = await a.start(body, run_id="r")
        await reach(waiting)
        await trio.sleep(POLL_BOUND)
        parked = store.park("apply")
        await b.send(LiveCommand.Message("r", "m"))
        await reach(parked.arrived)  # the owner's boundary commits that it takes "m"
        assert await end_run(b, how, "r") == expected
        parked.release.set()
        assert await settle(handle, POLL_BOUND) == expected
        assert received == []
        assert seen == [trio.Cancelled]
        events = await history(b, "r")
        assert received_messages(events) == []
        assert discarded_messages(events) == ["m"]


def _done_once(go: trio.Event) -> Body:
    """A body that returns as soon as ``go`` is set."""

    async def body(ctx: RunContext) -> object:
        await go.wait()
        return "done"

    return body


async def _thread_frees_at_once(runtime: Runtime) -> None:
    """A run ``runtime`` starts on thread ``T`` runs within a few polls, not once a lease
    has lapsed: nothing holds the thread."""

    async def after(ctx: RunContext) -> object:
        return "next"

    before = trio.current_time()
    nxt = await runtime.start(after, run_id="next", thread_id="T")
    assert await settle(nxt, POLL_BOUND) == NATURAL
    assert trio.current_time() - before < LEASE


async def test_an_end_refused_for_one_made_elsewhere_still_lets_the_thread_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The owner's end is handed over, with no task waiting for it, when another runtime
    ends the run first: the store refuses it, and the owner still lets the run's claim go
    (its claim keeper does), so the thread frees at once, not when the lease lapses."""
    store = ParkingStore()
    go = trio.Event()

    async with shared_runtime(store) as a, shared_runtime(store) as b:
        handle = await a.start(_done_once(go), run_id="first", thread_id="T")
        await trio.testing.wait_all_tasks_blocked()
        parked = store.park("apply")
        go.set()
        await reach(parked.arrived)  # the owner's end, on its way
        assert await b.cancel_run("first") == CANCELLED
        parked.release.set()
        assert await settle(handle, POLL_BOUND) == CANCELLED
        await _thread_frees_at_once(b)
        assert len(terminal(await history(b, "first"))) == 1


async def test_closing_lets_go_of_the_claim_an_end_on_its_way_did_not_drop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As above, with the owner's runtime closing while its end is on its way: the claim
    is let go before it has closed, not left to lapse."""
    store = ParkingStore()
    go = trio.Event()
    parked_end: list[Parked] = []
    armed = trio.Event()
    closed = trio.Event()

    async def owner() -> None:
        async with shared_runtime(store) as a:
            await a.start(_done_once(go), run_id="first", thread_id="T")
            await trio.testing.wait_all_tasks_blocked()
            parked_end.append(store.park("apply"))
            armed.set()
            go.set()
            await reach(parked_end[0].arrived)
        closed.set()

    async with shared_runtime(store) as b, trio.open_nursery() as nursery:
        nursery.start_soon(owner)
        await reach(armed)
        [parked] = parked_end
        await reach(parked.arrived)  # the owner's end, on its way
        try:
            assert await b.cancel_run("first") == CANCELLED
            await trio.sleep(1.0)
            assert not closed.is_set()  # the owner waits for its end's answer
        finally:
            parked.release.set()
        await reach(closed)
        await _thread_frees_at_once(b)
