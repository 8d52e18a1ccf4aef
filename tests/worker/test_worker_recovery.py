"""Claims and recovery: a lost owner's runs are re-executed elsewhere from their checkpoint,
or ended when they can never run again; the lost attempt commits nothing more."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    EventKind,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    LEASE,
    NATURAL,
    OWNER_LOST,
    POLL,
    Stall,
    history,
    is_ended,
    is_running,
    past_lease,
    reach,
    serving,
    settle,
    shared_runtime,
    terminal,
    until,
    until_state,
)
from tests.wrapped_stores import FailingEnds, LateRecovery


def got(seen: list[Any], n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        await trio.lowlevel.checkpoint()
        return len(seen) >= n

    return check


NOT_RESUMED = RunState.Ended(EndCause.Stopped("not resumed by parent"))


def lost_times(n: int) -> RunState:
    return RunState.Ended(EndCause.Indeterminate(f"owner lost {n} times"))


async def test_a_stalled_owners_named_run_is_re_executed_from_its_checkpoint(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, int, Any]] = []
    finish = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        seen.append(("a", ctx.generation, ctx.checkpoint))
        await ctx.boundary({"step": 1})
        await trio.sleep_forever()

    async def in_b(ctx: RunContext) -> object:
        seen.append(("b", ctx.generation, ctx.checkpoint))
        await ctx.boundary({"step": ctx.checkpoint["step"] + 1})
        await finish.wait()
        return {"by": "b"}

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r", input={"q": 1})
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("r") == RunState.Running(2)
                record = await b.record("r")
                assert record.checkpoint == {"step": 2}
                assert record.generation == 2
                finish.set()
                await until_state(b, "r", is_ended)
        assert await b.state("r") == NATURAL
        assert (await b.record("r")).result == {"by": "b"}
        events = await history(b, "r")
        recovery = [e for e in events if dict(e.detail).get("source") == "recovery"]
        assert [(e.generation, e.state) for e in recovery] == [(2, RunState.Running(2))]
    assert seen == [("a", 1, None), ("b", 2, {"step": 1})]


async def test_the_stalled_owners_later_commits_are_rejected(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    late = trio.Event()
    a_done = trio.Event()
    finish = trio.Event()
    errors: dict[str, BaseException] = {}
    cancelled_at: list[str] = []

    async def in_a(ctx: RunContext) -> object:
        try:
            await ctx.boundary({"step": 1})
            await late.wait()
            try:
                await ctx.boundary({"step": "late"})
            except Exception as exc:
                errors["boundary"] = exc
            except trio.Cancelled:
                # The fenced commit stops the attempt right there.
                cancelled_at.append("boundary")
                raise
            try:
                await ctx.emit("test.late", {"n": 1})
            except Exception as exc:
                errors["emit"] = exc
            return {"by": "a"}
        finally:
            a_done.set()

    async def in_b(ctx: RunContext) -> object:
        await ctx.boundary({"step": 2})
        await finish.wait()
        return {"by": "b"}

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        handle_a = await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("r") == RunState.Running(2)
                log_before = await history(b, "r")
                late.set()
                await reach(a_done)
                await trio.testing.wait_all_tasks_blocked()
                # The late boundary's commit was fenced: the attempt stopped at once, so the
                # body never went on to emit.
                assert cancelled_at == ["boundary"]
                assert errors == {}
                # Nothing the stalled attempt did landed: no checkpoint, no event, no end.
                assert await history(b, "r") == log_before
                record = await b.record("r")
                assert (record.state, record.checkpoint) == (RunState.Running(2), {"step": 2})
                ends: list[RunState] = []
                async with trio.open_nursery() as nursery:

                    async def wait_a() -> None:
                        ends.append(await settle(handle_a))

                    nursery.start_soon(wait_a)
                    await trio.sleep(100 * POLL)
                    assert ends == []  # a lost attempt is not an end: it waits for one
                    finish.set()
                assert ends == [NATURAL]
        assert (await b.record("r")).result == {"by": "b"}
        events = await history(b, "r")
        assert not [e for e in events if e.kind == "test.late"]
        assert len(terminal(events)) == 1


async def test_a_stalled_owner_that_wakes_stops_its_attempt_at_its_next_renewal(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    stopped_at: list[float] = []
    finish = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            stopped_at.append(trio.current_time())

    async def in_b(ctx: RunContext) -> object:
        await finish.wait()
        return "b"

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        handle_a = await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        async with serving(b):
            with Stall(a):
                await past_lease()
                assert await b.state("r") == RunState.Running(2)
                assert stopped_at == []
            woke = trio.current_time()
            await trio.sleep(LEASE / 3 + 10 * POLL)
            assert len(stopped_at) == 1
            assert stopped_at[0] - woke <= LEASE / 3 + POLL
            assert await b.state("r") == RunState.Running(2)
            assert a.active_attempt_run_id("r") is None
            assert b.active_attempt_run_id("r") == "r"
            finish.set()
            assert await settle(handle_a) == NATURAL
        assert len(terminal(await history(b, "r"))) == 1


async def test_unended_children_of_the_lost_attempt_are_handed_back_with_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # Rule 22: a loss hands the tree back (a running child back to Queued, a queued or
    # awaiting one as it is); the recovered attempt does not take them back here, so each
    # ends Stopped("not resumed by parent") before the parent's own end.
    kids = ("kid-running", "kid-awaiting", "kid-queued")
    seen_by_b: dict[str, RunState] = {}
    b_runtime: list[Runtime] = []
    finish = trio.Event()

    async def parked_kid(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def asking_kid(ctx: RunContext) -> object:
        await ctx.await_input("user_input")

    async def in_a(ctx: RunContext) -> object:
        await ctx.start_child(parked_kid, run_id="kid-running", thread_id="kt")
        await ctx.run_child(asking_kid, run_id="kid-awaiting")
        await ctx.start_child(parked_kid, run_id="kid-queued", thread_id="kt")
        await ctx.boundary({"kids": 3})
        await trio.sleep_forever()

    async def in_b(ctx: RunContext) -> object:
        for kid in kids:
            seen_by_b[kid] = await b_runtime[0].state(kid)
        await finish.wait()
        return None

    async with (
        shared_runtime(shared_store, bodies={"p": in_a}) as a,
        shared_runtime(shared_store, bodies={"p": in_b}) as b,
    ):
        b_runtime.append(b)
        handle = await a.start(in_a, run_id="p")
        await trio.testing.wait_all_tasks_blocked()
        assert await a.state("kid-running") == RunState.Running(1)
        awaiting = await a.state("kid-awaiting")
        assert isinstance(awaiting, RunState.Awaiting)
        assert await a.state("kid-queued") == RunState.Queued()
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("p") == RunState.Running(2)
                # The new attempt found the tree handed back to it, not ended.
                assert seen_by_b == {
                    "kid-running": RunState.Queued(),
                    "kid-awaiting": awaiting,
                    "kid-queued": RunState.Queued(),
                }
                events = await history(b)
                recovery = next(
                    e
                    for e in events
                    if e.run_id == "p" and dict(e.detail).get("source") == "recovery"
                )
                handed = [
                    e for e in events if e.run_id == "kid-running" and e.state == RunState.Queued()
                ]
                assert [dict(e.detail) for e in handed] == [
                    {"source": "recovery", "reason": "handed back with its parent"}
                ]
                assert handed[0].seq < recovery.seq
                assert (await b.record("kid-running")).generation == 1
                finish.set()
                assert await settle(handle) == NATURAL
        events = await history(b)
        [parent_end] = terminal([e for e in events if e.run_id == "p"])
        for kid in kids:
            [end] = terminal([e for e in events if e.run_id == kid])
            assert end.state == NOT_RESUMED
            assert dict(end.detail) == {"source": "parent", "reason": "not resumed by parent"}
            assert end.seq < parent_end.seq
        # The old attempt's children stopped with it, committing nothing more.
        for kid in kids:
            assert await b.state(kid) == NOT_RESUMED


async def test_a_lost_run_with_no_name_ends_owner_lost(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[int] = []

    async def unregistered(ctx: RunContext) -> object:
        entered.append(ctx.generation)
        await trio.sleep_forever()

    async def other(ctx: RunContext) -> object:
        return None

    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"other": other}) as b,
    ):
        handle = await a.start(unregistered, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        assert (await a.record("r")).name is None
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await b.state("r") == OWNER_LOST
                assert await settle(handle) == OWNER_LOST
                end = terminal(await history(b, "r"))
                assert [dict(e.detail) for e in end] == [
                    {"source": "recovery", "reason": "owner lost"}
                ]
        await trio.sleep(LEASE)
        assert await b.state("r") == OWNER_LOST
    assert entered == [1]


@pytest.mark.parametrize("max_recoveries", [0, 1, 2])
async def test_after_max_recoveries_the_next_loss_ends_the_run(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, max_recoveries: int
) -> None:
    """A chain of runtimes: each stalls in turn and the next one serves. The claiming
    runtime's setting applies (the first runtime's own max_recoveries is 0)."""
    entered: list[tuple[int, int]] = []

    def body_in(index: int) -> Any:
        async def body(ctx: RunContext) -> object:
            entered.append((index, ctx.generation))
            await ctx.boundary({"by": index})
            await trio.sleep_forever()

        return body

    count = max_recoveries + 2
    bodies = [body_in(index) for index in range(count)]
    async with contextlib.AsyncExitStack() as runtimes:
        rts: list[Runtime] = [
            await runtimes.enter_async_context(
                shared_runtime(
                    shared_store,
                    bodies={"w": bodies[index]},
                    max_recoveries=0 if index == 0 else max_recoveries,
                )
            )
            for index in range(count)
        ]
        with contextlib.ExitStack() as stalls:
            await rts[0].start(bodies[0], run_id="r")
            await trio.testing.wait_all_tasks_blocked()
            for index in range(1, count):
                stalls.enter_context(Stall(rts[index - 1]))
                async with serving(rts[index]):
                    await past_lease()
                    state = await rts[index].state("r")
                if index <= max_recoveries:
                    assert state == RunState.Running(index + 1)
                    assert (await rts[index].record("r")).checkpoint == {"by": index}
                else:
                    assert state == lost_times(max_recoveries + 1)
        end = terminal(await history(rts[0], "r"))
        assert [dict(e.detail) for e in end] == [
            {"source": "recovery", "reason": f"owner lost {max_recoveries + 1} times"}
        ]
    assert entered == [(i, i + 1) for i in range(max_recoveries + 1)]


async def test_a_serving_runtime_without_the_body_ends_what_can_never_run_again(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entered: list[tuple[str, int]] = []

    async def in_a(ctx: RunContext) -> object:
        entered.append((ctx.run_id, ctx.generation))
        await trio.sleep_forever()

    async def unregistered(ctx: RunContext) -> object:
        await trio.sleep_forever()

    async def other(ctx: RunContext) -> object:
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"other": other}) as bystander,
        shared_runtime(shared_store, bodies={"other": other}, max_recoveries=0) as strict,
        shared_runtime(shared_store, bodies={"w": in_a}) as heir,
    ):
        await a.start(in_a, run_id="named")
        await a.start(in_a, run_id="named-2")
        await a.start(unregistered, run_id="nameless")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            async with serving(bystander):
                await past_lease()
                # The nameless run can never run again: ended by a runtime without its body.
                assert await a.state("nameless") == OWNER_LOST
                # The named ones are left for a runtime that has their body.
                assert await a.state("named") == RunState.Running(1)
                assert await a.state("named-2") == RunState.Running(1)
                await past_lease()
                assert await a.state("named") == RunState.Running(1)
            # Its max_recoveries (0) applies: the named run can never run again either.
            async with serving(strict, concurrency=1):
                await until_state(strict, "named", is_ended, seconds=10)
            assert await a.state("named") == lost_times(1)
            async with serving(heir):
                await until_state(heir, "named-2", is_running)
                assert await heir.state("named-2") == RunState.Running(2)
    assert sorted(entered) == [("named", 1), ("named-2", 1), ("named-2", 2)]


@pytest.mark.parametrize("cleanup", [0.0, 5 * LEASE], ids=["prompt", "slow-cleanup"])
async def test_a_lost_attempt_does_not_count_toward_concurrency(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, cleanup: float
) -> None:
    """The runtime's claim on its only run expires; once it knows, the slot is free for
    other work even while the lost attempt is still unwinding."""
    started: dict[str, float] = {}

    async def body(ctx: RunContext) -> object:
        started[ctx.run_id] = trio.current_time()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(cleanup)

    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"w": body}, max_recoveries=0) as worker,
        serving(worker, concurrency=1),
    ):
        await submitter.submit("w", run_id="first")
        await until_state(submitter, "first", is_running)
        with Stall(worker):
            await past_lease()
        woke = trio.current_time()
        await submitter.submit("w", run_id="second")
        await trio.sleep(LEASE / 3 + 20 * POLL)
        assert "second" in started
        assert started["second"] - woke <= LEASE / 3 + 20 * POLL
        await submitter.cancel_run("second")


async def test_a_run_whose_stalled_owner_woke_before_anyone_recovered_it_is_still_recovered(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The owner stalls past its lease while no runtime serves; it wakes, its renewal
    reports the claim lost and its attempt stops, committing nothing. The run's owner is
    lost all the same: a serving runtime that comes later re-executes it."""
    entered: list[tuple[str, int]] = []
    stopped = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        entered.append(("a", ctx.generation))
        try:
            await ctx.boundary({"step": 1})
            await trio.sleep_forever()
        finally:
            stopped.set()

    async def in_b(ctx: RunContext) -> object:
        entered.append(("b", ctx.generation))
        return ctx.checkpoint

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            await past_lease()
        await reach(stopped, LEASE)
        assert await a.state("r") == RunState.Running(1)
        async with serving(b):
            state = await until_state(b, "r", is_ended, seconds=3 * LEASE)
        assert state == NATURAL
        assert (await b.record("r")).result == {"step": 1}
    assert entered == [("a", 1), ("b", 2)]


async def test_the_claim_of_a_live_owner_is_never_taken(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Renewals keep the lease: a run held by a live runtime is never recovered."""
    entered: list[tuple[str, int]] = []

    def body_in(tag: str) -> Any:
        async def body(ctx: RunContext) -> object:
            entered.append((tag, ctx.generation))
            await trio.sleep(20 * LEASE)
            return tag

        return body

    async with (
        shared_runtime(shared_store, bodies={"w": body_in("a")}) as a,
        shared_runtime(shared_store, bodies={"w": body_in("b")}) as b,
        serving(b),
    ):
        handle = await a.start(body_in("a"), run_id="r", name="w")
        assert await settle(handle) == NATURAL
        assert (await b.record("r")).result == "a"
        assert [e for e in await history(b, "r") if e.kind != EventKind.COMMITTED] == []
    assert entered == [("a", 1)]


async def test_a_recovered_attempt_keeps_the_runs_input_and_step_budget(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, int, Any, int]] = []

    async def in_a(ctx: RunContext) -> object:
        seen.append(("a", ctx.generation, ctx.input, ctx.steps))
        await ctx.boundary({"step": 1})
        await ctx.boundary({"step": 2})
        await trio.sleep_forever()

    async def in_b(ctx: RunContext) -> object:
        seen.append(("b", ctx.generation, ctx.input, ctx.steps))
        await ctx.boundary({"step": 3})
        await ctx.boundary({"step": 4})  # one more than max_steps allows
        return "over budget"

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r", input={"doc": 7}, max_steps=3)
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            async with serving(b):
                await past_lease()
                state = await until_state(b, "r", is_ended)
        assert state == RunState.Ended(EndCause.MaxSteps())
        assert (await b.record("r")).checkpoint == {"step": 3}
    assert seen == [("a", 1, {"doc": 7}, 0), ("b", 2, {"doc": 7}, 2)]


def answer_taker(tag: str, seen: list[tuple[str, int, Any, str | None]]) -> Any:
    """Asks once (ticket ``ask``); its second attempt parks with the answer (its owner is
    then lost), a later one returns the answer it was handed."""

    async def body(ctx: RunContext) -> object:
        ticket = ctx.resumed_ticket
        seen.append(
            (
                tag,
                ctx.generation,
                ctx.resume_value,
                None if ticket is None else ticket.correlation_id,
            )
        )
        if ticket is None:
            await ctx.await_input("user_input", correlation_id="ask", accepts={"type": "string"})
        await ctx.boundary({"answered": True})
        if ctx.generation == 2:
            await trio.sleep_forever()
        return {"answer": ctx.resume_value, "generation": ctx.generation}

    return body


def settled(state: RunState) -> bool:
    return not isinstance(state, RunState.Running | RunState.Queued)


@pytest.mark.parametrize("how", ["resumed_here", "queued_resume", "released"])
async def test_the_attempt_that_replaces_a_resumed_one_is_handed_the_same_answer(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    # resumed_here: the owner had the body and ran the answer at once; queued_resume: the
    # answer waited Queued and a serving owner took it; released: the owner closed (its
    # run goes back to Queued) instead of being lost.
    seen: list[tuple[str, int, Any, str | None]] = []
    body_a, body_b = answer_taker("a", seen), answer_taker("b", seen)
    async with (
        shared_runtime(shared_store, bodies={"w": body_b}) as b,
        shared_runtime(shared_store) as person,
    ):
        async with shared_runtime(shared_store, bodies={"w": body_a}) as a:
            asked = await settle(await a.start(body_a, run_id="r"))
            assert isinstance(asked, RunState.Awaiting)
            if how == "queued_resume":
                await person.resume("r", "yes")
                async with serving(a):
                    await until_state(a, "r", lambda s: s == RunState.Running(2))
            else:
                await a.resume("r", "yes")
            await trio.testing.wait_all_tasks_blocked()
            assert (await a.record("r")).checkpoint == {"answered": True}
            if how != "released":
                with Stall(a):
                    async with serving(b):
                        await past_lease()
                        final = await until_state(b, "r", settled)
        if how == "released":
            async with serving(b):
                final = await until_state(b, "r", settled)
        assert final == NATURAL
        assert (await b.record("r")).result == {"answer": "yes", "generation": 3}
    assert seen == [("a", 1, None, None), ("a", 2, "yes", "ask"), ("b", 3, "yes", "ask")]


async def test_a_recovery_whose_first_commit_is_fenced_leaves_the_run_recoverable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The recovering runtime's fresh lease lapses before its attempt's first commit (its
    event loop was blocked, or its lease is tiny): that commit is fenced, and the claim it
    gives up leaves the run where recovery finds it. A later runtime re-executes it."""
    store = MemoryStore(shared=True)
    late = LateRecovery(store, delay=2 * LEASE)
    entered: list[int] = []

    async def body(ctx: RunContext) -> object:
        entered.append(ctx.generation)
        if ctx.generation == 1:
            await trio.sleep_forever()
        return "done"

    async with shared_runtime(store, bodies={"w": body}) as a:
        await a.start(body, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        with Stall(a):
            async with shared_runtime(late, bodies={"w": body}) as b, serving(b):
                await past_lease()
                await reach(late.answered)
                # Its recovered attempt's Running commit was fenced: nothing ran there.
                await trio.sleep(LEASE)
                assert entered == [1]
                assert await b.state("r") == RunState.Running(1)
            async with shared_runtime(store, bodies={"w": body}) as c, serving(c):
                state = await until_state(c, "r", is_ended, seconds=3 * LEASE)
            assert state == NATURAL
            assert (await c.record("r")).result == "done"
    assert entered == [1, 2]


async def test_a_run_whose_end_commit_failed_is_left_for_recovery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The store refuses an attempt's terminal commit: the run stays Running in the store
    with no attempt behind it, so its owner stops renewing the claim, and once the lease
    lapses the run is recovered like any lost owner's (here, by the same runtime)."""
    store = MemoryStore(shared=True)
    failing = FailingEnds(store, "r")
    entered: list[int] = []

    async def body(ctx: RunContext) -> object:
        entered.append(ctx.generation)
        return ctx.generation

    async with shared_runtime(failing, bodies={"w": body}) as a, serving(a):
        await a.submit("w", run_id="r")
        await reach(failing.failed)
        state = await until_state(a, "r", is_ended, seconds=3 * LEASE)
        assert state == NATURAL
        assert (await a.record("r")).result == 2
    assert entered == [1, 2]


@pytest.mark.parametrize("offset", [3600.0, -3600.0], ids=["ahead", "behind"])
async def test_leases_follow_the_stores_clock_whatever_a_runtimes_clock_says(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, offset: float
) -> None:
    """A runtime whose ``clock=`` is an hour off serves beside a healthy owner: it never
    takes the owner's live claim, nor starts a run on the owner's busy thread, and once
    the owner stalls it recovers the run within a lease of the store's clock."""
    entered: list[tuple[str, int]] = []
    finish = trio.Event()

    def body_in(tag: str) -> Any:
        async def body(ctx: RunContext) -> object:
            entered.append((tag, ctx.generation))
            if ctx.run_id == "r" and ctx.generation == 1:
                await trio.sleep_forever()
            await finish.wait()
            return tag

        return body

    async with (
        shared_runtime(shared_store, bodies={"w": body_in("a")}) as a,
        open_runtime(
            shared_store,
            clock=lambda: trio.current_time() + offset,
            bodies={"w": body_in("off")},
            lease=LEASE,
            poll=POLL,
        ) as off,
        serving(off),
    ):
        await a.start(body_in("a"), run_id="r", thread_id="t", name="w")
        await a.submit("w", run_id="r2", thread_id="t")
        await trio.sleep(5 * LEASE)  # many passes of the skewed runtime, renewals of a's
        assert entered == [("a", 1)]
        assert await a.state("r2") == RunState.Queued()
        with Stall(a):
            await until_state(a, "r", lambda s: s == RunState.Running(2), seconds=3 * LEASE)
            assert entered == [("a", 1), ("off", 2)]
            finish.set()
            assert await until_state(a, "r", is_ended) == NATURAL
            assert await until_state(a, "r2", is_ended) == NATURAL
    assert entered == [("a", 1), ("off", 2), ("off", 1)]


async def test_a_message_the_lost_attempt_received_is_handed_to_the_attempt_replacing_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The lost attempt's body received the message but never committed again: the
    recovered attempt starts from the checkpoint taken before it was read and is handed it
    again (its receipt is in the history twice), and the run's end discards nothing."""
    seen: list[tuple[str, int, Any, list[Any]]] = []

    async def in_a(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        messages = await ctx.boundary({"step": 2}, wait=True)
        seen.append(("a", ctx.generation, ctx.checkpoint, messages))
        await trio.sleep_forever()  # the owner stalls before it commits again

    async def in_b(ctx: RunContext) -> object:
        messages = await ctx.boundary({"step": 3})
        seen.append(("b", ctx.generation, ctx.checkpoint, messages))
        return {"got": messages}

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "approve"))
        await until(got(seen, 1))
        with Stall(a):
            async with serving(b):
                await until_state(b, "r", is_ended)
        assert await b.state("r") == NATURAL
        assert (await b.record("r")).result == {"got": ["approve"]}
        events = await history(b, "r")
        received = [
            (e.generation, dict(e.detail)["received"])
            for e in events
            if "received" in dict(e.detail)
        ]
        assert received == [(1, ["approve"]), (2, ["approve"])]
        assert not [e for e in events if e.kind == EventKind.MESSAGES_DISCARDED]
    assert seen == [("a", 1, {"step": 2}, ["approve"]), ("b", 2, {"step": 3}, ["approve"])]


async def test_a_message_the_lost_attempt_received_is_not_discarded_by_an_end_made_elsewhere(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Received by the lost attempt, not yet by any other: cancel_run then ends the run
    with no attempt; the message was received, so it is not listed as discarded."""
    received: list[Any] = []

    async def in_a(ctx: RunContext) -> object:
        received.extend(await ctx.boundary({"step": 1}, wait=True))
        await trio.sleep_forever()

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store) as b,
    ):
        await a.start(in_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "approve"))
        await until(got(received, 1))
        with Stall(a):
            await past_lease()
            assert await b.cancel_run("r") == RunState.Ended(EndCause.Cancelled())
        events = await history(b, "r")
        assert not [e for e in events if e.kind == EventKind.MESSAGES_DISCARDED]
