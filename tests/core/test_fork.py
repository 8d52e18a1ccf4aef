"""`Runtime.fork`: a new run with its source's name and input, started from the checkpoint
the source had committed as of one of its events; the source untouched; bad requests
commit nothing. On the memory store (inline and through the mailbox) and on SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from awaken_trio import (
    EndCause,
    InvalidArgument,
    JsonValue,
    RunContext,
    RunEvent,
    RunExists,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore, Store
from awaken_trio.store.sqlite._store import SQLiteStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())


async def count(ctx: RunContext) -> JsonValue:
    """Counts from its checkpoint up to ``input["to"]``, one boundary per step."""
    start = ctx.checkpoint if isinstance(ctx.checkpoint, int) else 0
    n = start
    while n < ctx.input["to"]:
        n += 1
        await ctx.boundary(n)
    return {"from": start, "to": n}


@pytest.fixture(params=["memory-inline", "memory-mailbox", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    return MemoryStore(inline=request.param == "memory-inline")


@pytest.fixture
async def rt(any_store: Store) -> AsyncIterator[Runtime]:
    async with open_runtime(any_store, bodies={"count": count}) as runtime:
        yield runtime


async def _events(runtime: Runtime, run_id: str | None = None) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]


def _progress_seqs(events: list[RunEvent]) -> list[int]:
    """The seqs of the boundary commits, in order: the n-th wrote checkpoint n."""
    return [e.seq for e in events if e.kind == "committed" and e.detail.get("source") == "boundary"]


async def _ended_source(runtime: Runtime, to: int = 3) -> tuple[str, list[RunEvent]]:
    handle = await runtime.start(count, input={"to": to}, run_id="src", name="count")
    assert await handle.wait() == NATURAL
    return "src", await _events(runtime, "src")


async def test_a_fork_at_a_progress_event_starts_from_the_checkpoint_of_that_event(
    rt: Runtime,
) -> None:
    source, events = await _ended_source(rt)
    seqs = _progress_seqs(events)
    assert len(seqs) == 3
    before = await rt.record(source)
    for n, seq in enumerate(seqs, start=1):
        handle = await rt.fork(source, at=seq, new_run_id=f"fork{n}")
        assert await handle.wait() == NATURAL
        record = await rt.record(f"fork{n}")
        assert record.result == {"from": n, "to": 3}
        assert (record.name, record.input, record.thread_id) == ("count", {"to": 3}, f"fork{n}")
        assert record.forked_from == {"run_id": source, "seq": seq}
    assert await rt.record(source) == before
    assert await _events(rt, source) == events, "forking changed its source's history"


async def test_a_fork_defaults_to_the_last_event_and_a_fresh_run_on_its_own_thread(
    rt: Runtime,
) -> None:
    source, events = await _ended_source(rt)
    handle = await rt.fork(source)
    assert handle.run_id != source
    assert handle.thread_id == handle.run_id
    assert await handle.wait() == NATURAL
    record = await rt.record(handle.run_id)
    assert record.result == {"from": 3, "to": 3}
    assert record.forked_from == {"run_id": source, "seq": events[-1].seq}
    assert (await rt.record(source)).forked_from is None


async def test_a_fork_before_any_checkpoint_starts_from_none(rt: Runtime) -> None:
    source, events = await _ended_source(rt)
    handle = await rt.fork(source, at=events[0].seq, thread_id="elsewhere")
    assert handle.thread_id == "elsewhere"
    assert await handle.wait() == NATURAL
    assert (await rt.record(handle.run_id)).result == {"from": 0, "to": 3}


async def test_a_fork_of_a_fork_at_its_first_event_has_the_checkpoint_it_started_from(
    rt: Runtime,
) -> None:
    source, events = await _ended_source(rt, to=4)
    second = _progress_seqs(events)[1]
    first = await rt.fork(source, at=second, new_run_id="f1")
    assert await first.wait() == NATURAL
    [start, *_] = await _events(rt, "f1")
    again = await rt.fork("f1", at=start.seq, new_run_id="f2")
    assert await again.wait() == NATURAL
    assert (await rt.record("f2")).result == {"from": 2, "to": 4}


@pytest.mark.parametrize("at", [0, -1, 10**9, "3", 1.0])
async def test_a_seq_that_is_not_one_of_the_sources_events_commits_nothing(
    rt: Runtime, at: Any
) -> None:
    source, _ = await _ended_source(rt)
    log = await _events(rt)
    with pytest.raises(InvalidArgument, match="seq"):
        await rt.fork(source, at=at, new_run_id="f")
    assert await _events(rt) == log
    with pytest.raises(UnknownRun):
        await rt.record("f")


async def test_the_seq_of_another_runs_event_is_refused(rt: Runtime) -> None:
    source, _ = await _ended_source(rt)
    other = await rt.start(count, input={"to": 1}, run_id="other", name="count")
    await other.wait()
    [theirs, *_] = await _events(rt, "other")
    log = await _events(rt)
    with pytest.raises(InvalidArgument, match="is not the seq of one of run 'src'"):
        await rt.fork(source, at=theirs.seq)
    assert await _events(rt) == log


async def test_an_unknown_run_cannot_be_forked(rt: Runtime) -> None:
    log = await _events(rt)
    with pytest.raises(UnknownRun):
        await rt.fork("nobody")
    assert await _events(rt) == log


async def test_a_run_without_a_name_cannot_be_forked(rt: Runtime) -> None:
    async def unregistered(ctx: RunContext) -> JsonValue:
        await ctx.boundary(1)
        return None

    handle = await rt.start(unregistered, run_id="anon")
    assert await handle.wait() == NATURAL
    log = await _events(rt)
    with pytest.raises(InvalidArgument, match="has no name"):
        await rt.fork("anon")
    assert await _events(rt) == log


async def test_a_taken_new_run_id_is_refused(rt: Runtime) -> None:
    source, _ = await _ended_source(rt)
    log = await _events(rt)
    with pytest.raises(RunExists):
        await rt.fork(source, new_run_id=source)
    assert await _events(rt) == log


async def test_a_running_source_is_forked_and_keeps_running(any_store: Store) -> None:
    go = trio.Event()
    at_two = trio.Event()

    async def slow(ctx: RunContext) -> JsonValue:
        n = ctx.checkpoint if isinstance(ctx.checkpoint, int) else 0
        while n < 4:
            n += 1
            await ctx.boundary(n)
            if n == 2 and ctx.run_id == "src":
                at_two.set()
                await go.wait()
        return n

    async with open_runtime(any_store, bodies={"slow": slow}) as runtime:
        source = await runtime.submit("slow", run_id="src", input=None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.serve)
            with trio.fail_after(10):
                await at_two.wait()
            assert isinstance(await runtime.state("src"), RunState.Running)
            fork = await runtime.fork("src", new_run_id="f")
            assert await fork.wait() == NATURAL
            record = await runtime.record("f")
            assert record.result == 4
            assert record.forked_from is not None
            assert isinstance(await runtime.state("src"), RunState.Running)
            go.set()
            assert await source.wait() == NATURAL
            nursery.cancel_scope.cancel()
        assert (await runtime.record("src")).result == 4


async def test_an_awaiting_source_is_forked_and_keeps_its_ticket(rt: Runtime) -> None:
    async def asks(ctx: RunContext) -> JsonValue:
        if ctx.resume_value is not None:
            return {"answer": ctx.resume_value, "progress": ctx.checkpoint}
        await ctx.boundary("before")
        await ctx.await_input("question", correlation_id="q", progress="asked")

    rt.register("asks", asks)
    handle = await rt.start(asks, run_id="src", name="asks")
    state = await handle.wait()
    assert isinstance(state, RunState.Awaiting)
    fork = await rt.fork("src", new_run_id="f")
    # The fork starts from the source's last checkpoint and, with no answer, asks again.
    forked = await fork.wait()
    assert isinstance(forked, RunState.Awaiting)
    assert await rt.state("src") == state
    resumed = await rt.resume("src", "yes", correlation_id="q")
    assert await resumed.wait() == NATURAL
    assert (await rt.record("src")).result == {"answer": "yes", "progress": "asked"}


async def test_the_memory_stores_bounded_retention_forgets_a_runs_checkpoints_with_it() -> None:
    store = MemoryStore(max_ended_runs=1)
    async with open_runtime(store, bodies={"count": count}) as runtime:
        _, events = await _ended_source(runtime)
        fork = await runtime.fork("src", at=_progress_seqs(events)[0], new_run_id="f")
        assert await fork.wait() == NATURAL  # one more ended run: the source is forgotten
        with pytest.raises(UnknownRun):
            await runtime.fork("src")
        assert await store.checkpoint_at("src", None) is None
        assert list(store._tx.rows) == ["f"]  # its checkpoints lived in its row, gone with it
        again = await runtime.fork("f", new_run_id="g")
        assert await again.wait() == NATURAL
        assert (await runtime.record("g")).result == {"from": 3, "to": 3}
