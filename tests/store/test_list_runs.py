"""`Runtime.list_runs`: newest first, filtered by state kind, thread and name, paged with
``before``, on the memory store and the SQLite store alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from awaken_trio import (
    EndCause,
    InvalidArgument,
    RunContext,
    RunRecord,
    RunState,
    Runtime,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import ListingStore, MemoryStore, StateKind, open_store
from tests.wrapped_stores import WrappedStore


async def finish(ctx: RunContext) -> object:
    return {"done": True}


async def wait_forever(ctx: RunContext) -> object:
    await trio.sleep_forever()


@pytest.fixture(params=["memory", "sqlite"])
async def listing(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runtime]:
    """A runtime holding, oldest first: ``a`` ended on thread ``t1``, ``b`` (on ``t1``)
    and ``c`` queued for a body named ``job``, ``d`` running on ``t2``, ``e`` awaiting on
    ``t3``."""
    store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store) as runtime, trio.open_nursery() as nursery:
        await runtime.execute(finish, run_id="a", thread_id="t1")
        await runtime.submit("job", run_id="b", thread_id="t1")
        await runtime.submit("job", run_id="c")
        await runtime.start(wait_forever, run_id="d", thread_id="t2")
        await runtime.execute(pauses, run_id="e", thread_id="t3")
        yield runtime
        nursery.cancel_scope.cancel()


async def pauses(ctx: RunContext) -> object:
    await ctx.await_input("user_input")
    return None


def ids(records: list[RunRecord]) -> list[str]:
    return [record.run_id for record in records]


async def test_runs_are_listed_newest_first(listing: Runtime) -> None:
    assert ids(await listing.list_runs()) == ["e", "d", "c", "b", "a"]
    newest = (await listing.list_runs(limit=1))[0]
    assert newest == await listing.record("e")


@pytest.mark.parametrize(
    ("state", "expected"),
    [("queued", ["c", "b"]), ("running", ["d"]), ("awaiting", ["e"]), ("ended", ["a"])],
)
async def test_a_state_kind_selects_runs_in_that_state(
    listing: Runtime, state: StateKind, expected: list[str]
) -> None:
    assert ids(await listing.list_runs(state=state)) == expected


async def test_thread_and_name_filters_combine(listing: Runtime) -> None:
    assert ids(await listing.list_runs(thread_id="t1")) == ["b", "a"]
    assert ids(await listing.list_runs(name="job")) == ["c", "b"]
    assert ids(await listing.list_runs(name="job", thread_id="t1")) == ["b"]
    assert ids(await listing.list_runs(name="job", state="ended")) == []


async def test_before_pages_through_older_runs(listing: Runtime) -> None:
    first = await listing.list_runs(limit=2)
    assert ids(first) == ["e", "d"]
    second = await listing.list_runs(limit=2, before=first[-1].run_id)
    assert ids(second) == ["c", "b"]
    assert ids(await listing.list_runs(limit=2, before="b")) == ["a"]
    assert await listing.list_runs(before="a") == []
    assert ids(await listing.list_runs(before="d", state="queued")) == ["c", "b"]


async def test_a_listing_sees_a_state_committed_since(listing: Runtime) -> None:
    assert await listing.cancel_run("c") == RunState.Ended(EndCause.Cancelled())
    assert ids(await listing.list_runs(state="ended")) == ["c", "a"]
    assert ids(await listing.list_runs(state="queued")) == ["b"]


async def test_bad_filters_are_refused_naming_the_problem(listing: Runtime) -> None:
    with pytest.raises(InvalidArgument, match="unknown state 'paused'"):
        await listing.list_runs(state="paused")  # type: ignore[arg-type]
    for limit in (0, -1, 1.5, True):
        with pytest.raises(InvalidArgument, match="limit must be a positive int"):
            await listing.list_runs(limit=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="thread_id"):
        await listing.list_runs(thread_id="")
    with pytest.raises(UnknownRun, match="'nope'"):
        await listing.list_runs(before="nope")


async def test_both_stores_are_listing_stores(tmp_path: Path) -> None:
    assert isinstance(MemoryStore(), ListingStore)
    assert isinstance(open_store(f"sqlite:///{tmp_path}/x.db"), ListingStore)


async def test_a_store_that_cannot_list_says_so() -> None:
    async with open_runtime(WrappedStore()) as runtime:
        with pytest.raises(InvalidArgument, match="cannot list its runs"):
            await runtime.list_runs()
