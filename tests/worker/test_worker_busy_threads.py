"""Busy threads across runtimes sharing a store (DESIGN §3.8): a submit that rejects or
supersedes while the thread's run is active in another runtime, and the repeated submit
that never does."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, RunContext, RunState, ThreadBusy
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    history,
    reach,
    serving,
    settle,
    shared_runtime,
)

SUPERSEDED = RunState.Ended(EndCause.Stopped("superseded"))


class Chat:
    """A chat's answering body: records who answered and whether two overlapped."""

    def __init__(self) -> None:
        self.active: str | None = None
        self.overlaps: list[tuple[str, str]] = []
        self.answered: list[str] = []
        self.entered: dict[str, trio.Event] = {}
        self.stopped: dict[str, trio.Event] = {}

    def entered_event(self, run_id: str) -> trio.Event:
        return self.entered.setdefault(run_id, trio.Event())

    async def answer(self, ctx: RunContext) -> object:
        if self.active is not None:
            self.overlaps.append((self.active, ctx.run_id))
        self.active = ctx.run_id
        self.entered_event(ctx.run_id).set()
        try:
            if ctx.input == "slow":
                await trio.sleep_forever()
            return {"answered": ctx.input}
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)  # a model call's cleanup
            self.active = None
            self.stopped.setdefault(ctx.run_id, trio.Event()).set()
            self.answered.append(ctx.run_id)


async def test_a_submit_supersedes_the_run_another_runtime_is_running(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    chat = Chat()
    bodies = {"answer": chat.answer}
    async with (
        shared_runtime(shared_store, bodies=bodies) as worker,
        shared_runtime(shared_store) as client,
        serving(worker),
    ):
        first = await client.submit("answer", input="slow", run_id="m1", thread_id="chat")
        await reach(chat.entered_event("m1"))
        second = await client.submit(
            "answer", input="second message", run_id="m2", thread_id="chat", if_busy="supersede"
        )
        assert await client.state("m1") == SUPERSEDED
        assert await settle(first) == SUPERSEDED
        assert await settle(second) == NATURAL
        assert chat.overlaps == []
        assert chat.answered == ["m1", "m2"]
        events = await history(client, "m1")
        assert events[-1].detail == {"superseded_by": "m2"}
        assert (await client.record("m2")).result == {"answered": "second message"}


async def test_a_submit_rejects_a_thread_whose_run_is_active_elsewhere(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    chat = Chat()
    async with (
        shared_runtime(shared_store, bodies={"answer": chat.answer}) as worker,
        shared_runtime(shared_store) as client,
        serving(worker),
    ):
        await client.submit("answer", input="slow", run_id="m1", thread_id="chat")
        await reach(chat.entered_event("m1"))
        with pytest.raises(ThreadBusy) as caught:
            await client.submit(
                "answer", input="x", run_id="m2", thread_id="chat", if_busy="reject"
            )
        assert (caught.value.run_id, caught.value.state) == ("m1", RunState.Running(1))
        assert await shared_store.load("m2") is None
        # A start in the other runtime sees the same thread.
        with pytest.raises(ThreadBusy):
            await worker.start(chat.answer, run_id="m3", thread_id="chat", if_busy="reject")
        await client.cancel_run("m1")


async def test_a_repeated_submit_never_supersedes(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as client:
        # Nothing serves: both wait queued.
        await client.submit("answer", input="a", run_id="m1", thread_id="chat")
        await client.submit("answer", input="b", run_id="m2", thread_id="chat")
        again = await client.submit(
            "answer", input="a", run_id="m1", thread_id="chat", if_busy="supersede"
        )
        assert again.run_id == "m1"
        rejecting = await client.submit(
            "answer", input="a", run_id="m1", thread_id="chat", if_busy="reject"
        )
        assert rejecting.run_id == "m1"
        assert await client.state("m1") == RunState.Queued()
        assert await client.state("m2") == RunState.Queued()
        # A submit of a new run supersedes both queued ones.
        await client.submit("answer", input="c", run_id="m3", thread_id="chat", if_busy="supersede")
        assert await client.state("m1") == SUPERSEDED
        assert await client.state("m2") == SUPERSEDED
        assert await client.state("m3") == RunState.Queued()


async def test_a_start_superseding_a_run_active_elsewhere_waits_for_it_to_stop(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    chat = Chat()
    async with (
        shared_runtime(shared_store, bodies={"answer": chat.answer}) as a,
        shared_runtime(shared_store, bodies={"answer": chat.answer}) as b,
    ):
        old = await a.start(chat.answer, input="slow", run_id="m1", thread_id="chat")
        await reach(chat.entered_event("m1"))
        new = await b.start(
            chat.answer, input="now", run_id="m2", thread_id="chat", if_busy="supersede"
        )
        assert await b.state("m2") == RunState.Queued()
        assert await b.state("m1") == SUPERSEDED
        assert await settle(old) == SUPERSEDED
        assert await settle(new) == NATURAL
        assert chat.overlaps == []
        assert chat.answered == ["m1", "m2"]
