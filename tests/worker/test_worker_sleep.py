"""`ctx.sleep` / `ctx.sleep_until`: durable scheduled resumes."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    ResumeTicket,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from awaken_trio.worker._cadence import IDLE_CEILING
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    POLL,
    POLL_BOUND,
    Stall,
    history,
    is_ended,
    is_running,
    past_lease,
    serving,
    settle,
    shared_runtime,
    until_state,
)

STOPPED = RunState.Ended(EndCause.Stopped("budget"))


class Sleeper:
    """Sleeps ``seconds`` in its first attempt (after a checkpoint), then returns."""

    def __init__(self, tag: str, seconds: float = 30.0, *, until: bool = False) -> None:
        self.tag = tag
        self.seconds = seconds
        self.until = until
        self.entries: list[tuple[str, int, float, Any, ResumeTicket | None, Any]] = []
        # One function object, so the name it is registered under is found again.
        self.body = self._body

    async def _body(self, ctx: RunContext) -> object:
        self.entries.append(
            (
                self.tag,
                ctx.generation,
                trio.current_time(),
                ctx.resume_value,
                ctx.resumed_ticket,
                ctx.checkpoint,
            )
        )
        if ctx.generation == 1:
            await ctx.boundary({"before": "sleep"})
            if self.until:
                await ctx.sleep_until(trio.current_time() + self.seconds)
            await ctx.sleep(self.seconds)
        return {"by": self.tag}


def check_scheduled(state: RunState, wake_at: float) -> ResumeTicket:
    assert isinstance(state, RunState.Awaiting)
    ticket = state.ticket
    assert ticket.reason == "scheduled_action"
    assert ticket.payload == {"wake_at": wake_at}
    assert ticket.deadline is None
    return ticket


@pytest.mark.parametrize("until", [False, True], ids=["sleep", "sleep_until"])
async def test_sleep_commits_awaiting_and_the_runtime_that_ran_it_resumes_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, until: bool
) -> None:
    sleeper = Sleeper("a", 30.0, until=until)
    async with shared_runtime(shared_store) as a:
        started = trio.current_time()
        state = await settle(await a.start(sleeper.body, run_id="r"))
        ticket = check_scheduled(state, started + 30.0)
        assert await a.state("r") == state
        await until_state(a, "r", is_ended, seconds=60)
        assert await a.state("r") == NATURAL
        assert (await a.record("r")).generation == 2
    [_, second] = sleeper.entries
    assert second[1:2] == (2,)
    assert started + 30.0 <= second[2] <= started + 30.0 + POLL_BOUND
    assert second[3] is None  # resumed with value None
    assert second[4] == ticket
    assert second[5] == {"before": "sleep"}


async def test_a_sleep_is_resumed_by_a_serving_runtime_once_its_runtime_closed(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    in_a, in_b = Sleeper("a"), Sleeper("b")
    async with shared_runtime(shared_store, bodies={"nap": in_b.body}) as b, serving(b):
        async with shared_runtime(shared_store, bodies={"nap": in_a.body}) as a:
            started = trio.current_time()
            state = await settle(await a.start(in_a.body, run_id="r"))
            check_scheduled(state, started + 30.0)
        await trio.sleep(10)
        assert await b.state("r") == state  # not before it is due
        await until_state(b, "r", is_ended, seconds=60)
        assert await b.state("r") == NATURAL
        assert (await b.record("r")).result == {"by": "b"}
    assert [e[:2] for e in in_a.entries + in_b.entries] == [("a", 1), ("b", 2)]
    woke = in_b.entries[0]
    # An idle serving runtime looks for due resumes at least every IDLE_CEILING seconds.
    assert started + 30.0 <= woke[2] <= started + 30.0 + IDLE_CEILING + POLL_BOUND
    assert woke[3] is None
    assert woke[5] == {"before": "sleep"}


async def test_a_sleep_that_fell_due_while_nobody_served_is_resumed_when_one_does(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    in_a, in_b = Sleeper("a"), Sleeper("b")
    async with shared_runtime(shared_store, bodies={"nap": in_a.body}) as a:
        await settle(await a.start(in_a.body, run_id="r"))
    await trio.sleep(100)
    async with shared_runtime(shared_store, bodies={"nap": in_b.body}) as b:
        assert isinstance(await b.state("r"), RunState.Awaiting)
        async with serving(b):
            await until_state(b, "r", is_ended, seconds=POLL_BOUND)
    assert [e[:2] for e in in_a.entries + in_b.entries] == [("a", 1), ("b", 2)]


async def test_only_one_runtime_resumes_a_due_sleep(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    sleepers = [Sleeper(tag) for tag in "abc"]
    async with (
        shared_runtime(shared_store, bodies={"nap": sleepers[0].body}) as a,
        shared_runtime(shared_store, bodies={"nap": sleepers[1].body}) as b,
        shared_runtime(shared_store, bodies={"nap": sleepers[2].body}) as c,
        serving(a),
        serving(b),
        serving(c),
    ):
        for index in range(5):
            await settle(await a.start(sleepers[0].body, run_id=f"r{index}"))
        for index in range(5):
            await until_state(a, f"r{index}", is_ended, seconds=60)
            assert (await a.record(f"r{index}")).generation == 2
    entries = [e for s in sleepers for e in s.entries]
    assert sorted(e[1] for e in entries) == [1] * 5 + [2] * 5


@pytest.mark.parametrize("where", ["owner", "other"])
async def test_resume_may_answer_a_sleep_early(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, where: str
) -> None:
    sleeper = Sleeper("a")
    async with (
        shared_runtime(shared_store, bodies={"nap": sleeper.body}) as a,
        shared_runtime(shared_store, bodies={"nap": sleeper.body}) as b,
        serving(b),
    ):
        started = trio.current_time()
        await settle(await a.start(sleeper.body, run_id="r"))
        await trio.sleep(5)
        handle = await (a if where == "owner" else b).resume("r", "early")
        assert await settle(handle) == NATURAL
        await trio.sleep(60)  # past the time it was due: nothing more happens
        assert (await a.record("r")).generation == 2
    assert [(e[1], e[3]) for e in sleeper.entries] == [(1, None), (2, "early")]
    assert sleeper.entries[1][2] < started + 30.0


@pytest.mark.parametrize("how", ["cancel_run", "stop_run"])
@pytest.mark.parametrize("where", ["owner", "other"])
async def test_a_sleep_cancelled_or_stopped_before_it_is_due_never_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str, where: str
) -> None:
    sleeper = Sleeper("a")
    async with (
        shared_runtime(shared_store, bodies={"nap": sleeper.body}) as a,
        shared_runtime(shared_store, bodies={"nap": sleeper.body}) as b,
        serving(b),
    ):
        await settle(await a.start(sleeper.body, run_id="r"))
        ender = a if where == "owner" else b
        if how == "cancel_run":
            assert await ender.cancel_run("r") == CANCELLED
        else:
            assert await ender.stop_run("r", "budget") == STOPPED
        log = await history(a, "r")
        await trio.sleep(120)
        assert await history(a, "r") == log
    assert [e[1] for e in sleeper.entries] == [1]


async def end_in(runtime: Runtime, how: str) -> RunState:
    if how == "cancel_run":
        return await runtime.cancel_run("r")
    return await runtime.stop_run("r", "budget")


async def test_sleep_works_on_a_store_of_one_runtime(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    sleeper = Sleeper("a")
    async with open_runtime(store, clock=trio.current_time) as rt:
        started = trio.current_time()
        state = await settle(await rt.start(sleeper.body, run_id="r"))
        check_scheduled(state, started + 30.0)
        await until_state(rt, "r", is_ended, seconds=60)
        assert await rt.state("r") == NATURAL
    [_, second] = sleeper.entries
    assert (second[1], second[3], second[5]) == (2, None, {"before": "sleep"})
    assert started + 30.0 <= second[2] <= started + 30.0 + POLL_BOUND


@pytest.mark.parametrize("how", ["cancel_run", "stop_run"])
async def test_a_sleep_ended_early_on_a_store_of_one_runtime_never_runs(
    store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    sleeper = Sleeper("a")
    async with open_runtime(store, clock=trio.current_time) as rt:
        await settle(await rt.start(sleeper.body, run_id="r"))
        await end_in(rt, how)
        await trio.sleep(120)
        assert isinstance(await rt.state("r"), RunState.Ended)
    assert [e[1] for e in sleeper.entries] == [1]


async def test_a_zero_sleep_is_resumed_at_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    sleeper = Sleeper("a", 0)
    async with shared_runtime(shared_store) as a:
        started = trio.current_time()
        await settle(await a.start(sleeper.body, run_id="r"))
        await until_state(a, "r", is_ended, seconds=POLL_BOUND)
    assert sleeper.entries[1][2] - started <= POLL_BOUND


BAD_SLEEPS: list[Any] = [-1, -0.5, math.inf, math.nan, "1", True, None, [1]]
BAD_WAKE_TIMES: list[Any] = [math.inf, -math.inf, math.nan, "soon", True, None, {"at": 1}]


@pytest.mark.parametrize(
    ("call", "value"),
    [("sleep", seconds) for seconds in BAD_SLEEPS]
    + [("sleep_until", when) for when in BAD_WAKE_TIMES],
    ids=repr,
)
async def test_sleep_and_sleep_until_refuse_a_bad_time(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, call: str, value: Any
) -> None:
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> object:
        try:
            await getattr(ctx, call)(value)
        except Exception as exc:
            raised.append(exc)
        return "went on"

    async with shared_runtime(shared_store) as rt:
        assert await settle(await rt.start(body, run_id="r")) == NATURAL
        states = [e.state for e in await history(rt, "r")]
    assert [type(e) for e in raised] == [InvalidArgument]
    assert not any(isinstance(s, RunState.Awaiting) for s in states)


async def test_sleep_until_a_time_already_past_is_resumed_at_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entries: list[tuple[int, float]] = []

    async def body(ctx: RunContext) -> object:
        entries.append((ctx.generation, trio.current_time()))
        if ctx.generation == 1:
            await ctx.sleep_until(trio.current_time() - 100)
        return None

    async with shared_runtime(shared_store) as rt:
        started = trio.current_time()
        state = await settle(await rt.start(body, run_id="r"))
        assert isinstance(state, RunState.Awaiting)
        await until_state(rt, "r", is_ended, seconds=POLL_BOUND)
    assert [g for g, _ in entries] == [1, 2]
    assert entries[1][1] - started <= POLL_BOUND
    await trio.sleep(POLL)


async def test_the_attempt_that_replaces_a_woken_one_does_not_sleep_again(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[str, int, ResumeTicket | None]] = []

    def napper(tag: str) -> Any:
        async def body(ctx: RunContext) -> object:
            seen.append((tag, ctx.generation, ctx.resumed_ticket))
            if ctx.resumed_ticket is None:
                await ctx.sleep(30.0)
            if ctx.generation == 2:
                await trio.sleep_forever()  # woken, then its owner is lost
            return {"by": tag, "generation": ctx.generation}

        return body

    body_a = napper("a")
    async with (
        shared_runtime(shared_store, bodies={"nap": body_a}) as a,
        shared_runtime(shared_store, bodies={"nap": napper("b")}) as b,
    ):
        asleep = await settle(await a.start(body_a, run_id="r"))
        assert isinstance(asleep, RunState.Awaiting)
        await until_state(a, "r", lambda s: s == RunState.Running(2), seconds=60)
        with Stall(a):
            async with serving(b):
                await past_lease()
                final = await until_state(b, "r", lambda s: not is_running(s))
        assert final == NATURAL  # not Awaiting a second sleep
        assert (await b.record("r")).result == {"by": "b", "generation": 3}
    assert seen == [("a", 1, None), ("a", 2, asleep.ticket), ("b", 3, asleep.ticket)]
