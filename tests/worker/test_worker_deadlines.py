"""Time limits on a store runtimes share: a queued or awaiting run past its deadline (or a
queued one past its queue timeout) is ended by any serving runtime within a few ``poll``
intervals, whether or not it has the run's body; a run whose owner is lost keeps its
deadline in the attempt that recovers it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, NotAwaiting, RunContext, RunState
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    POLL_BOUND,
    Stall,
    is_running,
    serving,
    settle,
    shared_runtime,
    terminal_event,
    until_state,
)

DEADLINE = RunState.Ended(EndCause.Stopped("deadline"))
QUEUE_TIMEOUT = RunState.Ended(EndCause.Stopped("queue_timeout"))


async def other(ctx: RunContext) -> object:
    return None


async def asks(ctx: RunContext) -> object:
    await ctx.await_input("user_input")
    return None


async def hung(ctx: RunContext) -> object:
    await trio.sleep_forever()


async def test_a_server_without_the_body_ends_a_queued_run_at_its_deadline(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # The runtime that submitted it is gone; the one left serves other names only.
    async with shared_runtime(shared_store) as submitter:
        t0 = trio.current_time()
        await submitter.submit("job", run_id="r", timeout=20)
    async with (
        shared_runtime(shared_store, bodies={"other": other}) as server,
        serving(server),
    ):
        await until_state(server, "r", lambda s: s.is_ended)
        end = await terminal_event(server, "r")
        assert end.state == DEADLINE
        assert dict(end.detail) == {"source": "deadline"}
        # Found when its time came (the store said when), not at an idle look later.
        assert t0 + 20 <= end.at <= t0 + 20 + POLL_BOUND


async def test_a_server_ends_an_awaiting_run_its_owner_left_at_its_deadline(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"asks": asks}) as owner:
        t0 = trio.current_time()
        state = await owner.execute(asks, run_id="r", timeout=30)
        assert isinstance(state, RunState.Awaiting)
    # Awaiting runs stay so when their runtime leaves (rule 19).
    async with (
        shared_runtime(shared_store, bodies={"other": other}) as server,
        serving(server),
    ):
        await until_state(server, "r", lambda s: s.is_ended)
        end = await terminal_event(server, "r")
        assert end.state == DEADLINE
        assert t0 + 30 <= end.at <= t0 + 30 + POLL_BOUND
        with pytest.raises(NotAwaiting):
            await server.resume("r", "late")


async def test_a_server_ends_a_run_that_never_started_at_its_queue_timeout(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as submitter:
        t0 = trio.current_time()
        await submitter.submit("job", run_id="r", queue_timeout=8, timeout=100)
    async with (
        shared_runtime(shared_store, bodies={"other": other}) as server,
        serving(server),
    ):
        await until_state(server, "r", lambda s: s.is_ended)
        end = await terminal_event(server, "r")
        assert (end.state, dict(end.detail)) == (QUEUE_TIMEOUT, {"source": "queue_timeout"})
        assert t0 + 8 <= end.at <= t0 + 8 + POLL_BOUND


async def test_a_run_started_in_time_by_a_server_is_left_to_its_attempt(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def slow(ctx: RunContext) -> object:
        await trio.sleep(10)
        return "done"

    async with (
        shared_runtime(shared_store, bodies={"slow": slow}) as server,
        shared_runtime(shared_store, bodies={"other": other}) as bystander,
        serving(server),
        serving(bystander),
    ):
        handle = await server.submit("slow", run_id="r", queue_timeout=2, timeout=60)
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())


async def test_a_recovered_run_keeps_its_deadline(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        shared_runtime(shared_store, bodies={"hung": hung}) as first,
        shared_runtime(shared_store, bodies={"hung": hung}) as second,
    ):
        t0 = trio.current_time()
        async with serving(first):
            handle = await first.submit("hung", run_id="r", timeout=300)
            await until_state(first, "r", is_running)
            with Stall(first):
                async with serving(second):
                    # Its owner is lost; the attempt that recovers it meets the deadline.
                    assert await settle(handle) == DEADLINE
        end = await terminal_event(second, "r")
        assert end.generation == 2
        assert end.at == t0 + 300


async def test_a_store_failing_to_find_overdue_runs_does_not_end_serving(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures = [2]
    real = MemoryStore.overdue

    async def flaky(self: MemoryStore, now: float, limit: int) -> object:
        if failures[0]:
            failures[0] -= 1
            raise OSError("disk on fire")
        return await real(self, now, limit)

    monkeypatch.setattr(MemoryStore, "overdue", flaky)
    async with shared_runtime(shared_store) as submitter:
        await submitter.submit("job", run_id="r", timeout=1)
    async with (
        shared_runtime(shared_store, bodies={"other": other}) as server,
        serving(server),
    ):
        await until_state(server, "r", lambda s: s.is_ended)
        assert await server.state("r") == DEADLINE
    assert failures == [0]
