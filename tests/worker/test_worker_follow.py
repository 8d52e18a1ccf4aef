"""Reading committed truth across runtimes: `RunHandle.wait()` and ``events(follow=True)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import EventKind, LiveCommand, RunContext, RunEvent, RunState
from awaken_trio._core import _follow
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    POLL,
    POLL_BOUND,
    Body,
    Follower,
    history,
    is_running,
    reach,
    serving,
    settle,
    shared_runtime,
    until_state,
)


async def test_a_handle_waits_for_the_end_another_runtime_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return "from b"

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        handle = await a.submit("job", run_id="r")
        ends: list[tuple[float, RunState]] = []
        async with trio.open_nursery() as nursery:

            async def wait_for_it() -> None:
                state = await settle(handle)
                ends.append((trio.current_time(), state))

            nursery.start_soon(wait_for_it)
            await until_state(a, "r", is_running)
            await trio.sleep(100 * POLL)
            assert ends == []
            release.set()
            released = trio.current_time()
        assert [state for _, state in ends] == [NATURAL]
        assert ends[0][0] - released <= POLL_BOUND
        # The end stays the answer.
        assert await settle(handle) == NATURAL


async def test_a_handle_returns_the_first_awaiting_another_runtime_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        while True:
            await ctx.boundary(wait=True)

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        handle = await a.submit("job", run_id="r")
        await until_state(a, "r", is_running)
        await a.send(LiveCommand.Pause("r"))
        state = await settle(handle)
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        await a.resume("r")
        await until_state(a, "r", is_running)
        assert await settle(handle) == state


async def test_events_followed_in_one_runtime_include_another_runtimes_commits(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    stepped = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        stepped.set()
        await release.wait()
        await ctx.emit("test.almost", {"n": 2})
        return "done"

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        await a.submit("job", run_id="r")
        follower = Follower(a.events("r", follow=True))
        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                await reach(stepped)
                at = trio.current_time()
                await trio.sleep(POLL_BOUND)
                # The step B committed reached the follower in A without waiting for
                # anything A commits.
                sources = [dict(e.detail).get("source") for e in follower.events]
                assert "boundary" in sources, follower.events
                assert max(follower.arrived) - at <= POLL_BOUND
                release.set()
        events = follower.events
        assert events == await history(b, "r")
        assert events[-1].state == NATURAL
        assert events[-1].kind == EventKind.COMMITTED
        assert [e.kind for e in events].count("test.almost") == 1


async def test_events_of_all_runs_followed_in_one_runtime_include_another_runtimes(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        return ctx.input

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store) as b,
        trio.open_nursery() as nursery,
    ):
        follower = Follower(a.events(follow=True))
        nursery.start_soon(follower.run)
        await trio.testing.wait_all_tasks_blocked()
        await settle(await b.start(body, run_id="in-b", input=1))
        await trio.sleep(POLL_BOUND)
        assert [(e.run_id, e.state) for e in follower.events] == [
            ("in-b", RunState.Running(1)),
            ("in-b", NATURAL),
        ]
        nursery.cancel_scope.cancel()


async def test_a_follower_in_a_closed_runtime_reads_the_history_from_the_shared_store(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        return "done"

    async with shared_runtime(shared_store, bodies={"job": body}) as b:
        async with shared_runtime(shared_store) as a:
            handle = await a.submit("job", run_id="r")
        async with serving(b):
            await until_state(b, "r", lambda s: s == NATURAL)
        assert await settle(handle) == NATURAL
        events = [e async for e in a.events("r", follow=True)]
        assert events == await history(b, "r")


class CountingStore:
    """The shared store as one runtime sees it, counting that runtime's event reads."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.reads: list[str | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        self.reads.append(run_id)
        return await self._inner.events_after(seq, run_id, limit)

    async def aclose(self) -> None:
        pass  # the shared store outlives the runtime


class StallingStore(CountingStore):
    """Holds an event read back until ``go_on`` is set, when ``stall`` says so of the run
    it reads (None: every run); ``stalled`` is set when one is held."""

    def __init__(
        self,
        inner: MemoryStore,
        stall: Callable[[str | None], bool],
        stalled: trio.Event,
        go_on: trio.Event,
    ) -> None:
        super().__init__(inner)
        self._stall = stall
        self._stalled = stalled
        self._go_on = go_on

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        if self._stall(run_id):
            self._stalled.set()
            await self._go_on.wait()
        return await super().events_after(seq, run_id, limit)


RUNS = 40


async def _ended_together(
    store: Any, shared_store: MemoryStore, before_release: Callable[[], None]
) -> dict[str, RunState]:
    """RUNS handles of a runtime on ``store`` wait on runs another runtime on
    ``shared_store`` executes, whose bodies return together once every run is running
    (``before_release`` is called then); the state each handle answered."""
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return ctx.run_id

    async with (
        shared_runtime(store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b, concurrency=RUNS),
    ):
        handles = [await a.submit("job", run_id=f"r{i}") for i in range(RUNS)]
        ends: dict[str, RunState] = {}

        async def wait_for(i: int) -> None:
            ends[f"r{i}"] = await settle(handles[i])

        async with trio.open_nursery() as nursery:
            for i in range(RUNS):
                nursery.start_soon(wait_for, i)
            for i in range(RUNS):
                await until_state(a, f"r{i}", is_running)
            before_release()
            release.set()
    return ends


async def test_many_handles_on_runs_elsewhere_share_one_read_per_change(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A submitter waits on many runs another runtime executes: each handle reads its own
    run once, and after that every change costs one read of the log for all of them, not
    one per handle (which made a busy submitter read the store RUNS times per commit)."""
    counting = CountingStore(shared_store)
    ends = await _ended_together(counting, shared_store, counting.reads.clear)
    shared_reads = counting.reads.count(None)
    own_reads = len(counting.reads) - shared_reads
    assert ends == {f"r{i}": NATURAL for i in range(RUNS)}
    assert own_reads == 0  # the handles read their own runs when they began waiting
    # The ends land in a few group commits; each wakes every waiter once.
    assert 1 <= shared_reads < RUNS // 4, counting.reads


async def test_handles_answered_by_one_read_pass_the_lead_on_once(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read hands every waiting handle its end at once, and they all leave: the lead
    passes on when its holder leaves, not once for each handle that leaves (each of which
    searched all the others, quadratic in the handles: seconds of CPU for 10,000)."""
    handed_over: list[None] = []
    hand_over = _follow.EndFollowers._hand_over

    def counted(self: _follow.EndFollowers) -> None:
        handed_over.append(None)
        hand_over(self)

    monkeypatch.setattr(_follow.EndFollowers, "_hand_over", counted)
    ends = await _ended_together(shared_store, shared_store, lambda: None)
    assert ends == {f"r{i}": NATURAL for i in range(RUNS)}
    # Once for each leader that left: a few, as the ends land in a few group commits.
    assert 1 <= len(handed_over) < RUNS // 4, len(handed_over)


async def test_a_waiter_cancelled_while_it_reads_for_the_others_leaves_them_waiting(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The waiter whose read serves everyone is cancelled in the middle of it: the others
    are not left without a read; one of them makes the next, and each gets its end."""
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        await release.wait()
        return ctx.run_id

    stalled = trio.Event()
    go_on = trio.Event()

    stalling = StallingStore(
        shared_store, lambda run_id: run_id is None and not stalled.is_set(), stalled, go_on
    )
    async with (
        shared_runtime(stalling) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b, concurrency=4),
    ):
        handles = [await a.submit("job", run_id=f"r{i}") for i in range(4)]
        ends: dict[str, RunState] = {}
        scopes: list[trio.CancelScope] = []

        async def wait_for(i: int) -> None:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                ends[f"r{i}"] = await settle(handles[i])

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(wait_for, i)
            for i in range(4):
                await until_state(a, f"r{i}", is_running)
            release.set()
            await reach(stalled)
            for scope in scopes:  # the one stalled in its read gives up; so does r0's
                scope.cancel()
                break
            go_on.set()
    assert len(ends) == 3
    assert all(state == NATURAL for state in ends.values())


async def test_a_handle_takes_the_first_end_even_when_a_shared_read_found_a_later_one(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A handle's own first read stalls while its run pauses, is resumed and ends, and
    another handle's shared reads hand it both ends: it answers with the Awaiting, the
    first end after it began waiting, never the later Ended."""
    release = trio.Event()
    go_on = trio.Event()

    async def body(ctx: RunContext) -> object:
        if ctx.run_id == "r":
            if ctx.generation == 1:  # paused there, and resumed by a new attempt
                await ctx.boundary(wait=True)
        else:
            await release.wait()
        return "done"

    stalling = StallingStore(shared_store, lambda run_id: run_id == "r", trio.Event(), go_on)
    async with (
        shared_runtime(stalling) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        first = await a.submit("job", run_id="r")
        other = await a.submit("job", run_id="s")
        ends: list[RunState] = []

        async def wait_for_r() -> None:
            ends.append(await settle(first))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_r)
            nursery.start_soon(settle, other)
            await until_state(b, "r", is_running)
            await until_state(b, "s", is_running)
            await b.send(LiveCommand.Pause("r"))
            await until_state(b, "r", lambda state: isinstance(state, RunState.Awaiting))
            await b.resume("r")
            await until_state(b, "r", lambda state: state == NATURAL)
            await trio.sleep(10 * POLL)  # the waiter on s reads the log meanwhile
            assert stalling.reads.count(None) >= 1
            go_on.set()
            release.set()
    [state] = ends
    assert isinstance(state, RunState.Awaiting)


def _each_released(run_ids: list[str]) -> tuple[dict[str, trio.Event], Body]:
    """A body that returns its run's id once that run's event (of those handed back) is
    set."""
    releases = {run_id: trio.Event() for run_id in run_ids}

    async def body(ctx: RunContext) -> object:
        await releases[ctx.run_id].wait()
        return ctx.run_id

    return releases, body


async def test_waiters_on_runs_that_end_one_by_one_each_get_their_end(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Runs end one at a time, the first waiter's first: the waiter that watched for
    changes leaves with its end and another takes over, until the last has its own."""
    releases, body = _each_released([f"r{i}" for i in range(5)])

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        handles = [await a.submit("job", run_id=f"r{i}") for i in range(5)]
        ended: list[str] = []
        seen = {f"r{i}": trio.Event() for i in range(5)}

        async def wait_for(i: int) -> None:
            assert await settle(handles[i], 60) == NATURAL
            ended.append(f"r{i}")
            seen[f"r{i}"].set()

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(wait_for, i)
            for i in range(5):
                await until_state(a, f"r{i}", is_running)
                await trio.sleep(10 * POLL)
            for i in range(5):
                releases[f"r{i}"].set()
                with trio.fail_after(POLL_BOUND):
                    await seen[f"r{i}"].wait()
    assert ended == [f"r{i}" for i in range(5)]


async def _ended_while_another_is_waited_on(
    counting: CountingStore, shared_store: MemoryStore
) -> tuple[RunState, list[str | None]]:
    """Runs ``early``, ``next`` and ``late`` are submitted; a waiter on ``late`` follows
    the log while ``early`` ends, then ``next``; then ``early``'s handle is waited on,
    behind the shared cursor (the waiter on ``late`` moved it past both ends). Answers
    ``early``'s end and the reads made from the moment its handle began waiting."""
    releases, body = _each_released(["early", "next", "late"])

    async with (
        shared_runtime(counting) as a,
        shared_runtime(shared_store, bodies={"job": body}) as b,
        serving(b),
    ):
        early = await a.submit("job", run_id="early")
        await a.submit("job", run_id="next")
        late = await a.submit("job", run_id="late")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(settle, late)
            for name in ("early", "next"):
                await until_state(b, name, is_running)
                releases[name].set()
                await until_state(b, name, lambda state: state == NATURAL)
                await trio.sleep(10 * POLL)  # the waiter on late reads the log meanwhile
            counting.reads.clear()
            state = await settle(early)
            reads = list(counting.reads)
            releases["late"].set()
    return state, reads


async def test_a_handle_behind_the_shared_reads_takes_the_end_they_found(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A submitter waits on each run it submits: a handle that begins waiting after the
    shared reads passed its run's end takes that end without a read of its own."""
    counting = CountingStore(shared_store)
    state, reads = await _ended_while_another_is_waited_on(counting, shared_store)
    assert state == NATURAL
    assert "early" not in reads, reads


async def test_a_handle_behind_the_ends_remembered_reads_its_own_run(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the latest ends are kept: a handle whose run's end was forgotten (here one end
    is kept, so next's forgets early's) reads its own run, and still gets its end."""
    monkeypatch.setattr(_follow, "REMEMBERED", 1)
    counting = CountingStore(shared_store)
    state, reads = await _ended_while_another_is_waited_on(counting, shared_store)
    assert state == NATURAL
    assert reads.count("early") == 1, reads
