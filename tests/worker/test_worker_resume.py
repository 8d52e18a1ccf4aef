"""`resume` across runtimes: a run paused in one runtime resumed from another."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    InvalidArgument,
    InvalidPayload,
    LiveCommand,
    NotAwaiting,
    ResumeTicket,
    RunContext,
    RunState,
    TicketMismatch,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    POLL,
    history,
    is_ended,
    serving,
    settle,
    shared_runtime,
    until_state,
)

Seen = list[tuple[str, int, Any, Any, ResumeTicket | None]]


def pausing(tag: str, seen: Seen) -> Any:
    """Pauses itself (generation 1, after a checkpoint); later attempts return."""

    async def body(ctx: RunContext) -> object:
        seen.append((tag, ctx.generation, ctx.checkpoint, ctx.resume_value, ctx.resumed_ticket))
        if ctx.generation == 1:
            await ctx.boundary({"step": 1})
            await ctx.await_input(
                "user_input", payload={"q": "colour?"}, accepts={"type": "string"}
            )
        return {"tag": tag, "answer": ctx.resume_value}

    return body


async def test_a_run_paused_in_one_runtime_resumes_in_another_that_has_its_body(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: Seen = []
    body_a, body_b = pausing("a", seen), pausing("b", seen)
    async with (
        shared_runtime(shared_store, bodies={"p": body_a}) as a,
        shared_runtime(shared_store, bodies={"p": body_b}) as b,
    ):
        state = await settle(await a.start(body_a, run_id="r", thread_id="T"))
        assert isinstance(state, RunState.Awaiting)
        handle = await b.resume("r", "blue")
        assert handle.generation == 2
        assert b.active_attempt_run_id("T") == "r"
        assert a.active_attempt_run_id("T") is None
        assert await settle(handle) == NATURAL
        assert (await a.record("r")).result == {"tag": "b", "answer": "blue"}
    assert [s[:4] for s in seen] == [("a", 1, None, None), ("b", 2, {"step": 1}, "blue")]
    assert seen[1][4] == state.ticket


async def test_a_resume_from_a_runtime_without_the_body_waits_for_a_serving_one(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: Seen = []
    body_a, body_c = pausing("a", seen), pausing("c", seen)
    async with (
        shared_runtime(shared_store, bodies={"p": body_a}) as a,
        shared_runtime(shared_store) as b,
        shared_runtime(shared_store, bodies={"p": body_c}) as c,
    ):
        state = await settle(await a.start(body_a, run_id="r"))
        assert isinstance(state, RunState.Awaiting)
        handle = await b.resume("r", "green")
        assert await b.state("r") == RunState.Queued()
        events = await history(b, "r")
        assert dict(events[-1].detail) == {
            "source": "resume",
            "correlation_id": state.ticket.correlation_id,
        }
        await trio.sleep(100 * POLL)
        assert await b.state("r") == RunState.Queued()  # nobody serving with the body yet
        async with serving(c):
            assert await settle(handle) == NATURAL
        record = await b.record("r")
        assert (record.generation, record.result) == (2, {"tag": "c", "answer": "green"})
    assert [s[:4] for s in seen] == [("a", 1, None, None), ("c", 2, {"step": 1}, "green")]
    assert seen[1][4] == state.ticket


async def test_a_queued_resume_is_answered_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: Seen = []
    body_a = pausing("a", seen)
    async with (
        shared_runtime(shared_store, bodies={"p": body_a}) as a,
        shared_runtime(shared_store) as b,
    ):
        await settle(await a.start(body_a, run_id="r"))
        await b.resume("r", "first")
        with pytest.raises(NotAwaiting):
            await b.resume("r", "second")
        with pytest.raises(NotAwaiting):
            await a.resume("r", "third")
        async with serving(a):
            await until_state(a, "r", is_ended)
        assert (await a.record("r")).result == {"tag": "a", "answer": "first"}


async def test_a_queued_resume_can_be_cancelled_before_anyone_runs_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: Seen = []
    body_a = pausing("a", seen)
    async with (
        shared_runtime(shared_store, bodies={"p": body_a}) as a,
        shared_runtime(shared_store) as b,
    ):
        await settle(await a.start(body_a, run_id="r"))
        handle = await b.resume("r", "late")
        assert await a.cancel_run("r") == CANCELLED
        assert await settle(handle) == CANCELLED
        async with serving(a):
            await trio.sleep(100 * POLL)
        assert await a.state("r") == CANCELLED
    assert [s[:2] for s in seen] == [("a", 1)]


async def test_a_resume_from_another_runtime_checks_the_ticket_first(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    seen: Seen = []
    body_a = pausing("a", seen)
    async with (
        shared_runtime(shared_store, bodies={"p": body_a}) as a,
        shared_runtime(shared_store) as b,
    ):
        state = await settle(await a.start(body_a, run_id="r"))
        assert isinstance(state, RunState.Awaiting)
        log = await history(a)
        with pytest.raises(InvalidPayload):
            await b.resume("r", 42)  # the ticket accepts a string
        with pytest.raises(TicketMismatch):
            await b.resume("r", "x", correlation_id="someone-else")
        assert await history(a) == log
        assert await a.state("r") == state


async def test_a_run_paused_by_a_sent_pause_resumes_in_the_sender(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    where: list[tuple[str, int, list[Any]]] = []

    def looping(tag: str) -> Any:
        async def body(ctx: RunContext) -> object:
            while True:
                batch = await ctx.boundary(wait=True)
                where.append((tag, ctx.generation, batch))
                if "stop" in batch:
                    return tag

        return body

    body_a = looping("a")
    async with (
        shared_runtime(shared_store, bodies={"loop": body_a}) as a,
        shared_runtime(shared_store, bodies={"loop": looping("b")}) as b,
    ):
        first = await a.start(body_a, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "one"))
        await b.send(LiveCommand.Pause("r"))
        paused = await settle(first)
        assert isinstance(paused, RunState.Awaiting)
        handle = await b.resume("r")
        await trio.testing.wait_all_tasks_blocked()
        await b.send(LiveCommand.Message("r", "stop"))
        assert await settle(handle) == NATURAL
        assert (await b.record("r")).result == "b"
    assert [(tag, gen) for tag, gen, _ in where][-1] == ("b", 2)
    assert [m for _, _, batch in where for m in batch] == ["one", "stop"]


async def test_a_resume_of_a_run_with_no_name_from_a_runtime_without_its_body_is_refused(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # Started with a body registered under no name: only the runtime that has the body
    # can ever run it, so a resume elsewhere would leave it Queued forever.
    seen: Seen = []
    body = pausing("a", seen)
    async with (
        shared_runtime(shared_store) as a,
        shared_runtime(shared_store, bodies={"other": pausing("b", seen)}) as b,
    ):
        paused = await settle(await a.start(body, run_id="r"))
        assert isinstance(paused, RunState.Awaiting)
        assert (await a.record("r")).name is None
        log = await history(a)
        async with serving(b):
            with pytest.raises(InvalidArgument) as refused:
                await b.resume("r", "blue")
            await trio.sleep(10 * POLL)
        message = str(refused.value)
        assert "'r'" in message
        assert "has no name" in message
        assert "the runtime that started it" in message
        assert "body=" in message
        # Nothing was committed: the ticket is live, and the runtime with the body answers it.
        assert await history(a) == log
        assert await b.state("r") == paused
        assert await settle(await a.resume("r", "blue")) == NATURAL
    assert [s[:4] for s in seen] == [("a", 1, None, None), ("a", 2, {"step": 1}, "blue")]
