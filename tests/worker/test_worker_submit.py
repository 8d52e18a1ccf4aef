"""`submit`: a run committed ``Queued`` for any serving runtime with its body; idempotent by
run id; its handle follows the run wherever it runs."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    InvalidArgument,
    InvalidPayload,
    RunContext,
    RunExists,
    RunHandle,
    RunState,
    RuntimeClosed,
    UnknownRun,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    NATURAL,
    POLL,
    history,
    is_running,
    serving,
    settle,
    shared_runtime,
    until_state,
)


async def echo(ctx: RunContext) -> object:
    return {"got": ctx.input, "generation": ctx.generation}


async def other(ctx: RunContext) -> object:
    return None


async def test_submit_commits_the_run_queued_with_its_name_input_and_thread(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        handle = await rt.submit("echo", input={"n": 1}, run_id="r", thread_id="t")
        assert (handle.run_id, handle.thread_id) == ("r", "t")
        record = await rt.record("r")
        assert record.state == RunState.Queued()
        assert (record.name, record.input, record.thread_id, record.parent_run_id) == (
            "echo",
            {"n": 1},
            "t",
            None,
        )
        [event] = await history(rt, "r")
        assert event.state == RunState.Queued()
        assert dict(event.detail) == {"source": "submit"}


async def test_submit_defaults_to_a_fresh_run_id_on_its_own_thread(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        one = await rt.submit("echo")
        two = await rt.submit("echo")
        assert one.run_id != two.run_id
        assert one.thread_id == one.run_id
        assert (await rt.record(one.run_id)).thread_id == one.run_id


async def test_submit_is_idempotent_by_run_id(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        first = await rt.submit("echo", input=[1, 2], run_id="r")
        log = await history(rt)
        again = await rt.submit("echo", input=[1, 2], run_id="r")
        # thread_id=None means the run's own thread: the same run.
        explicit = await rt.submit("echo", input=[1, 2], run_id="r", thread_id="r")
        assert first.run_id == again.run_id == explicit.run_id == "r"
        assert await history(rt) == log  # nothing new committed
        assert await rt.state("r") == RunState.Queued()


@pytest.mark.parametrize(
    "change",
    [
        {"name": "other"},
        {"input": [1, 3]},
        {"input": None},
        {"thread_id": "elsewhere"},
    ],
    ids=["name", "input", "no-input", "thread"],
)
async def test_submit_of_a_taken_run_id_that_differs_raises_run_exists(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, change: dict[str, Any]
) -> None:
    async with shared_runtime(shared_store) as rt:
        await rt.submit("echo", input=[1, 2], run_id="r")
        log = await history(rt)
        arguments: dict[str, Any] = {"name": "echo", "input": [1, 2], **change}
        name = arguments.pop("name")
        with pytest.raises(RunExists):
            await rt.submit(name, run_id="r", **arguments)
        assert await history(rt) == log
        record = await rt.record("r")
        assert (record.name, record.input, record.thread_id) == ("echo", [1, 2], "r")


async def test_submit_of_a_child_run_id_raises_run_exists(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def child(ctx: RunContext) -> object:
        return None

    async def parent(ctx: RunContext) -> object:
        await ctx.run_child(child, run_id="kid", thread_id="kid")
        return None

    async with shared_runtime(shared_store, bodies={"child": child}) as rt:
        await settle(await rt.start(parent, run_id="p"))
        with pytest.raises(RunExists):
            await rt.submit("child", run_id="kid")


async def test_submit_from_another_runtime_is_idempotent_too(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as a, shared_runtime(shared_store) as b:
        await a.submit("echo", input=5, run_id="r")
        handle = await b.submit("echo", input=5, run_id="r")
        assert handle.run_id == "r"
        with pytest.raises(RunExists):
            await b.submit("echo", input=6, run_id="r")


async def test_a_serving_runtime_with_the_body_runs_a_submitted_run(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"echo": echo}) as worker,
        serving(worker),
    ):
        handle = await submitter.submit("echo", input=7, run_id="r")
        assert await settle(handle) == NATURAL
        record = await submitter.record("r")
        assert record.result == {"got": 7, "generation": 1}
        assert record.generation == 1


async def test_a_serving_runtime_without_the_body_leaves_a_submitted_run_queued(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"other": other}) as worker,
    ):
        async with serving(worker):
            await submitter.submit("echo", run_id="r")
            await trio.sleep(100 * POLL)
            assert await submitter.state("r") == RunState.Queued()
        async with shared_runtime(shared_store, bodies={"echo": echo}) as late, serving(late):
            handle = await submitter.submit("echo", run_id="r")
            assert await settle(handle) == NATURAL


async def test_the_handle_of_a_submit_waits_for_the_end_whoever_runs_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    release = trio.Event()

    async def slow(ctx: RunContext) -> object:
        await release.wait()
        return "done"

    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"slow": slow}) as worker,
        serving(worker),
    ):
        handle = await submitter.submit("slow", run_id="r")
        async with trio.open_nursery() as nursery:
            ends: list[RunState] = []

            async def wait_for_it() -> None:
                ends.append(await settle(handle))

            nursery.start_soon(wait_for_it)
            await until_state(submitter, "r", is_running)
            await trio.sleep(100 * POLL)
            assert ends == []
            release.set()
        assert ends == [NATURAL]
        assert (await submitter.record("r")).result == "done"


async def test_an_idempotent_submit_of_an_ended_run_gives_a_handle_to_its_end(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"echo": echo}) as rt:
        async with serving(rt):
            await settle(await rt.submit("echo", input=1, run_id="r"))
        handle = await rt.submit("echo", input=1, run_id="r")
        assert await settle(handle) == NATURAL


async def test_submit_after_the_runtime_closed_raises_runtime_closed(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        pass
    with pytest.raises(RuntimeClosed):
        await rt.submit("echo", run_id="r")
    assert await shared_store.load("r") is None


@pytest.mark.parametrize(
    "arguments",
    [
        {"name": ""},
        {"name": 3},
        {"run_id": ""},
        {"thread_id": 4},
    ],
    ids=["empty-name", "int-name", "empty-run-id", "int-thread"],
)
async def test_submit_refuses_bad_arguments_and_commits_nothing(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, arguments: dict[str, Any]
) -> None:
    async with shared_runtime(shared_store) as rt:
        arguments = dict(arguments)
        name = arguments.pop("name", "echo")
        with pytest.raises(InvalidArgument):
            await rt.submit(name, **arguments)
        assert await history(rt) == []


async def test_submit_refuses_an_input_that_is_not_json(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidPayload):
            await rt.submit("echo", input=(1, 2), run_id="r")
        with pytest.raises(UnknownRun):
            await rt.state("r")


async def test_the_handle_of_a_repeated_submit_waits_for_what_the_run_commits_after_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # The run awaited and was answered before the handles were made: that Awaiting is
    # history, not what a new handle waits for.
    release = trio.Event()

    async def asks(ctx: RunContext) -> object:
        if ctx.resumed_ticket is None:
            await ctx.await_input("user_input")
        await release.wait()
        return ctx.resume_value

    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"asks": asks}) as worker,
    ):
        first = await submitter.submit("asks", run_id="r")
        async with serving(worker):
            assert isinstance(await settle(first), RunState.Awaiting)
        await submitter.resume("r", "yes")  # nobody serves: the resume waits Queued
        queued = await submitter.submit("asks", run_id="r")
        ends: list[tuple[str, RunState]] = []

        async def wait_for(tag: str, handle: RunHandle) -> None:
            ends.append((tag, await settle(handle)))

        async with serving(worker), trio.open_nursery() as nursery:
            nursery.start_soon(wait_for, "queued", queued)
            assert await until_state(submitter, "r", is_running) == RunState.Running(2)
            running = await submitter.submit("asks", run_id="r")
            nursery.start_soon(wait_for, "running", running)
            await trio.sleep(100 * POLL)
            assert ends == []
            release.set()
        assert sorted(ends) == [("queued", NATURAL), ("running", NATURAL)]
        assert (queued.generation, running.generation) == (2, 2)
        assert (await submitter.record("r")).result == "yes"
        # A run that had already ended: its end, at once.
        ended = await submitter.submit("asks", run_id="r")
        assert ended.generation == 2
        assert await settle(ended) == NATURAL
