"""Group commit through the runtime's supervisor: batching waiting commits, the batch
ceiling, the inline path, and what a failing store does to the runs around it."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    RunContext,
    RunState,
    StoreError,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.wrapped_stores import FailingStore

Running = RunState.Running
Ended = RunState.Ended

DONE = Ended(EndCause.NaturalEnd())


async def _returns_quickly(ctx: RunContext) -> JsonValue:
    await trio.lowlevel.checkpoint()
    return {"run": ctx.run_id}


async def test_concurrent_starts_are_group_committed() -> None:
    store = MemoryStore(inline=False)
    handles: dict[str, RunState] = {}
    async with open_runtime(store) as runtime:

        async def start_one(i: int) -> None:
            handle = await runtime.start(_returns_quickly, run_id=f"r{i}")
            handles[handle.run_id] = await handle.wait()

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(start_one, i)

        stats = runtime.statistics().supervisor
    assert len(handles) == 200
    assert set(handles.values()) == {DONE}
    assert stats.commits >= 400  # a start and an end per run
    assert stats.largest_batch > 1
    assert stats.batches < stats.commits
    assert stats.waiting == 0
    for i in range(200):
        record = await store.load(f"r{i}")
        assert record is not None
        assert record.state == DONE
        assert record.result == {"run": f"r{i}"}


async def test_group_commit_respects_max_batch() -> None:
    store = MemoryStore(inline=False)
    async with open_runtime(store, max_batch=7) as runtime:
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(partial(runtime.execute, _returns_quickly, run_id=f"r{i}"))
        stats = runtime.statistics().supervisor
    assert 1 < stats.largest_batch <= 7
    assert stats.commits >= 200
    assert stats.batches >= stats.commits / 7
    assert [e.seq for e in await store.events_after(0)] == list(range(1, stats.commits + 1))


async def test_inline_store_commits_one_at_a_time() -> None:
    store = MemoryStore(inline=True)
    async with open_runtime(store) as runtime:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(partial(runtime.execute, _returns_quickly, run_id=f"r{i}"))
        stats = runtime.statistics().supervisor
    assert stats.largest_batch == 1
    assert stats.batches == stats.commits == 40
    for i in range(20):
        record = await store.load(f"r{i}")
        assert record is not None
        assert record.state == DONE


async def test_store_failure_reaches_the_caller_and_the_runtime_keeps_working() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.failing = True
        with pytest.raises(StoreError, match="disk full"):
            await runtime.start(_returns_quickly, run_id="r1")
        assert store.failed_batches == 1
        assert await store.load("r1") is None
        assert await store.events_after(0) == []

        store.failing = False
        handle = await runtime.start(_returns_quickly, run_id="r2")
        with trio.fail_after(5):
            assert await handle.wait() == DONE
        for i in range(3):
            later = await runtime.start(_returns_quickly, run_id=f"later{i}", thread_id="t9")
            with trio.fail_after(5):
                assert await later.wait() == DONE
    assert await store.load("r1") is None
    record = await store.load("r2")
    assert record is not None
    assert record.state == DONE
    assert record.result == {"run": "r2"}


async def test_failed_start_leaves_its_thread_free() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.failing = True
        with pytest.raises(StoreError):
            await runtime.start(_returns_quickly, run_id="r1", thread_id="t1")
        store.failing = False

        # Nothing was committed, so nothing may hold the thread: a retry of the same run
        # on the same thread runs at once, and so does the next run on that thread.
        retry = await runtime.start(_returns_quickly, run_id="r1", thread_id="t1")
        other = await runtime.start(_returns_quickly, run_id="r2", thread_id="t1")
        await trio.testing.wait_all_tasks_blocked()
        assert await runtime.state("r1") == DONE
        assert await runtime.state("r2") == DONE
        assert retry.done
        assert other.done
        stats = runtime.statistics()
        assert stats.busy_threads == 0
        assert stats.active_attempts == 0
        assert stats.queued_runs == 0


async def test_store_failure_on_progress_reaches_the_body() -> None:
    store = FailingStore()
    errors: list[str] = []

    async def body(ctx: RunContext) -> JsonValue:
        await ctx.boundary(wait=True)
        store.failing = True
        try:
            await ctx.boundary({"step": 1})
        except StoreError as exc:
            errors.append(str(exc))
        store.failing = False
        await ctx.boundary({"step": 2})
        return "ok"

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body, run_id="r1")
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Wake("r1"))
        with trio.fail_after(5):
            assert await handle.wait() == DONE
    assert len(errors) == 1
    assert "disk full" in errors[0]
    record = await store.load("r1")
    assert record is not None
    assert record.checkpoint == {"step": 2}
    assert record.result == "ok"


async def test_store_answering_too_few_results_is_a_store_error() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.short = True
        with pytest.raises(StoreError, match="answered 0 results for a batch of 1 commits"):
            await runtime.start(_returns_quickly, run_id="r1")
        store.short = False
        handle = await runtime.start(_returns_quickly, run_id="r2")
        with trio.fail_after(5):
            assert await handle.wait() == DONE


async def test_store_failure_on_one_runs_end_leaves_the_other_runs_alone() -> None:
    # The store fails every commit of run "a", including its terminal one. Run "b" and
    # runs started later have nothing to do with it and keep working.
    store = FailingStore()
    observed: dict[str, object] = {}
    escaped: BaseException | None = None

    async def waits_then_returns(ctx: RunContext) -> JsonValue:
        await ctx.boundary(wait=True)
        return ctx.run_id

    try:
        async with open_runtime(store) as runtime:
            a = await runtime.start(waits_then_returns, run_id="a")
            b = await runtime.start(waits_then_returns, run_id="b")
            await trio.testing.wait_all_tasks_blocked()
            store.failing_runs.add("a")
            runtime.deliver(LiveCommand.Wake("a"))  # "a" returns; its end cannot commit
            await trio.testing.wait_all_tasks_blocked()
            observed["b after a's failure"] = await runtime.state("b")
            if not b.done:
                runtime.deliver(LiveCommand.Wake("b"))
            with trio.fail_after(5):
                observed["b's end"] = await b.wait()
            later = await runtime.start(_returns_quickly, run_id="later")
            with trio.fail_after(5):
                observed["a later run's end"] = await later.wait()
            with trio.fail_after(5):
                try:
                    observed["a's wait"] = await a.wait()
                except StoreError as exc:
                    observed["a's wait"] = exc
            observed["a's committed state"] = await runtime.state("a")
            observed["a still controllable"] = runtime.active_attempt_run_id("a")
            observed["busy threads"] = runtime.statistics().busy_threads
            store.failing_runs.clear()
            # The orphaned Running run is ended through the committed path.
            observed["stop_run(a)"] = await runtime.stop_run("a", "orphaned")
    except BaseException as exc:
        escaped = exc
    assert observed.get("b after a's failure") == Running(1), observed
    assert observed.get("b's end") == DONE, observed
    assert observed.get("a later run's end") == DONE, observed
    assert isinstance(observed.get("a's wait"), StoreError), observed
    assert "disk full" in str(observed["a's wait"])
    # Nothing was committed for a's end: it keeps its last committed state, and its
    # attempt and thread are let go.
    assert observed.get("a's committed state") == Running(1), observed
    assert observed.get("a still controllable") is None, observed
    assert observed.get("busy threads") == 0, observed
    assert observed.get("stop_run(a)") == Ended(EndCause.Stopped("orphaned")), observed
    assert escaped is None, repr(escaped)
    a_events = await store.events_after(0, "a")
    assert [e.state for e in a_events] == [Running(1), Ended(EndCause.Stopped("orphaned"))]
