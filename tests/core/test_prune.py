"""`Runtime.prune`: ended runs older than a duration go with their events, tickets, stored
messages and checkpoints; a run that has not ended, or whose root has not ended, stays. On
the memory store and on SQLite (whose freed pages are reused)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from awaken_trio import (
    EndCause,
    InvalidArgument,
    JsonValue,
    RunContext,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import MemoryStore, Store
from awaken_trio.store.sqlite._store import SQLiteStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())


class Clock:
    """The runtime's clock, moved by hand: it dates every event."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def done(ctx: RunContext) -> JsonValue:
    await ctx.boundary(1)
    return "done"


async def asks(ctx: RunContext) -> JsonValue:
    await ctx.await_input("question")


async def parent(ctx: RunContext) -> JsonValue:
    await ctx.run_child(done, run_id=f"{ctx.run_id}-child")
    await ctx.await_input("after the child")


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    return MemoryStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def rt(any_store: Store, clock: Clock) -> AsyncIterator[Runtime]:
    async with open_runtime(any_store, clock=clock) as runtime:
        yield runtime


async def _run(runtime: Runtime, body: Any, run_id: str) -> RunState:
    return await (await runtime.start(body, run_id=run_id)).wait()


async def _exists(runtime: Runtime, run_id: str) -> bool:
    try:
        await runtime.record(run_id)
    except UnknownRun:
        return False
    return True


async def test_only_trees_that_ended_long_enough_ago_are_deleted(rt: Runtime, clock: Clock) -> None:
    assert await _run(rt, done, "old") == NATURAL
    assert isinstance(await _run(rt, asks, "waiting"), RunState.Awaiting)
    assert isinstance(await _run(rt, parent, "root"), RunState.Awaiting)
    assert await rt.state("root-child") == NATURAL
    clock.now = 1900.0
    assert await _run(rt, done, "recent") == NATURAL
    clock.now = 2000.0
    kept = ["waiting", "root", "root-child", "recent"]
    assert await rt.prune(ended_before=500, dry_run=True) == 1
    assert await _exists(rt, "old")  # a dry run deletes nothing
    assert await rt.prune(ended_before=500) == 1
    assert not await _exists(rt, "old")
    assert [e async for e in rt.events(follow=False) if e.run_id == "old"] == []
    assert [await _exists(rt, run_id) for run_id in kept] == [True] * 4
    assert await rt.prune(ended_before=500) == 0
    # Everything ended: only "recent"; the ended child stays with its awaiting root.
    assert await rt.prune(ended_before=0) == 1
    assert [await _exists(rt, run_id) for run_id in kept] == [True, True, True, False]
    with pytest.raises(UnknownRun):
        await rt.fork("old")


async def test_a_tree_whose_root_ended_goes_whole(rt: Runtime, clock: Clock) -> None:
    assert isinstance(await _run(rt, parent, "root"), RunState.Awaiting)
    await rt.cancel_run("root")
    assert await rt.prune(ended_before=0) == 2
    assert not await _exists(rt, "root")
    assert not await _exists(rt, "root-child")


@pytest.mark.parametrize("bad", [-1, "1h", None, float("nan")])
async def test_a_bad_duration_is_refused(rt: Runtime, bad: Any) -> None:
    assert await _run(rt, done, "r") == NATURAL
    with pytest.raises(InvalidArgument, match="ended_before"):
        await rt.prune(ended_before=bad)
    assert await _exists(rt, "r")


def _pages(path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow
async def test_sqlite_reuses_the_pages_a_prune_frees(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "runs.db"
    async with open_runtime(SQLiteStore(path, synchronous="normal"), clock=clock) as rt:
        for i in range(400):
            await _run(rt, done, f"a{i}")
        before = _pages(path)
        assert await rt.prune(ended_before=0) == 400
        for i in range(400):
            await _run(rt, done, f"b{i}")
        after = _pages(path)
    assert after <= before * 1.1, (before, after)
