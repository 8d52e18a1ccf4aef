"""Journaled steps across runtimes sharing one store: a run recovered from a lost owner gets
the steps that owner committed without running them again, and runs the rest; an owner that
lost its claim journals nothing more (its step commit is fenced off and it stops)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from awaken_trio import EventKind, JsonValue, RunContext, RunEvent, RunState
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    Stall,
    history,
    is_ended,
    past_lease,
    reach,
    serving,
    shared_runtime,
    until_state,
)


def steps(events: list[RunEvent]) -> list[tuple[str, int, JsonValue, int]]:
    return [
        (e.detail["name"], e.detail["index"], e.detail["result"], e.generation)
        for e in events
        if e.kind == EventKind.STEP
    ]


async def test_a_recovered_run_gets_the_committed_steps_and_runs_the_rest(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    calls: list[tuple[str, int]] = []
    first_committed = trio.Event()
    hang = trio.Event()

    async def effect(name: str, generation: int) -> JsonValue:
        await trio.lowlevel.checkpoint()
        calls.append((name, generation))
        return f"{name} by attempt {generation}"

    async def body(ctx: RunContext) -> JsonValue:
        one = await ctx.step("one", effect, "one", ctx.generation)
        first_committed.set()
        if ctx.generation == 1:
            await hang.wait()  # the owner stalls here, and is lost
        two = await ctx.step("two", effect, "two", ctx.generation)
        return [one, two]

    async with (
        shared_runtime(shared_store, bodies={"w": body}) as a,
        shared_runtime(shared_store, bodies={"w": body}) as b,
    ):
        await a.start(body, run_id="r")
        await reach(first_committed)
        with Stall(a):
            async with serving(b):
                await past_lease()
                assert await until_state(b, "r", is_ended) == NATURAL
        assert await b.state("r") == NATURAL
        assert (await b.record("r")).result == ["one by attempt 1", "two by attempt 2"]
        assert calls == [("one", 1), ("two", 2)]
        assert steps(await history(b, "r")) == [
            ("one", 0, "one by attempt 1", 1),
            ("two", 0, "two by attempt 2", 2),
        ]
        hang.set()


async def test_an_owner_that_lost_its_claim_journals_nothing_and_stops(
    shared_store: MemoryStore,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="awaken_trio")
    a_in_step = trio.Event()
    b_in_step = trio.Event()
    late = trio.Event()
    b_release = trio.Event()
    a_stopped = trio.Event()
    calls: list[int] = []

    async def slow(generation: int) -> JsonValue:
        calls.append(generation)
        if generation == 1:
            a_in_step.set()
            await late.wait()  # returns once another runtime has recovered the run
        else:
            b_in_step.set()
            await b_release.wait()
        return generation

    async def body(ctx: RunContext) -> JsonValue:
        try:
            return await ctx.step("slow", slow, ctx.generation)
        except trio.Cancelled:
            if ctx.generation == 1:
                a_stopped.set()
            raise

    async with (
        shared_runtime(shared_store, bodies={"w": body}) as a,
        shared_runtime(shared_store, bodies={"w": body}) as b,
    ):
        await a.start(body, run_id="r")
        await reach(a_in_step)
        with Stall(a):
            async with serving(b):
                await past_lease()
                await reach(b_in_step)  # attempt 2 runs the step: attempt 1's was never committed
                assert await b.state("r") == RunState.Running(2)
                late.set()  # attempt 1's step returns: its commit is fenced off
                await reach(a_stopped)
                assert steps(await history(b, "r")) == []
                b_release.set()
                assert await until_state(b, "r", is_ended) == NATURAL
        assert steps(await history(b, "r")) == [("slow", 0, 2, 2)]
        assert (await b.record("r")).result == 2
    assert calls == [1, 2]
    fenced = [r for r in caplog.records if "fenced off" in r.getMessage()]
    assert [r.__dict__["run_id"] for r in fenced] == ["r"]
    assert "step 'slow'" in fenced[0].getMessage()
