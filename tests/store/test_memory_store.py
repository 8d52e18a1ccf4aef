"""The memory store: the store contract on both of its commit paths, and what only it does
(forgetting the oldest ended runs past ``max_ended_runs``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence

import pytest
import trio

from awaken_trio import (
    EndCause,
    InvalidArgument,
    JsonValue,
    RunContext,
    RunEvent,
    RunRecord,
    RunState,
    UnknownRun,
    open_runtime,
)
from awaken_trio.store import (
    Accepted,
    Commit,
    CommitResult,
    Expect,
    MemoryStore,
    NewRun,
    Rejected,
    RejectReason,
    RunFilter,
    Store,
)
from awaken_trio.testing import DurableStoreContract, StoreContract, StreamStoreContract
from awaken_trio.testing._checks import _accepted, _Landed
from tests.store.handover_checks import HandsOverStoredCommands
from tests.wrapped_stores import LeaseClock

Running = RunState.Running
Ended = RunState.Ended

DONE = Ended(EndCause.NaturalEnd())


class TestMemoryStoreInline(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        store = MemoryStore(inline=True)
        yield store
        await store.aclose()


class TestMemoryStoreThroughTheMailbox(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        store = MemoryStore(inline=False)
        yield store
        await store.aclose()


class _ApplyNow:
    """A memory store whose ``apply`` is its ``apply_now``: the path the supervisor takes
    for an inline store, which must keep the same contract."""

    def __init__(self) -> None:
        self.inner = MemoryStore(inline=True)

    @property
    def durable(self) -> bool:
        return False

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await trio.lowlevel.checkpoint()
        return self.inner.apply_now(batch)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        return await self.inner.runnable(names, now, limit)

    async def load(self, run_id: str) -> RunRecord | None:
        return await self.inner.load(run_id)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self.inner.events_after(seq, run_id, limit)

    # The listing and counting reads, so the contract's checks of what an applied commit
    # leaves behind (its times, its end cause) run on this path too.
    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        return await self.inner.list_runs(
            state=state, thread_id=thread_id, name=name, limit=limit, before=before
        )

    async def count_runs(self) -> Mapping[str, int]:
        return await self.inner.count_runs()

    async def aclose(self) -> None:
        await self.inner.aclose()


class TestMemoryStoreApplyNow(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        store = _ApplyNow()
        yield store
        await store.aclose()


# ---------------------------------------------------------------- forgetting ended runs


def _start(run_id: str) -> Commit:
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(f"thread-{run_id}", None, None, {"run": run_id}),
    )


def _progress(run_id: str, step: int) -> Commit:
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=2.0,
        checkpoint={"step": step},
    )


def _end(run_id: str) -> Commit:
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=3.0,
        result=run_id,
    )


async def _apply(store: MemoryStore, commit: Commit) -> _Landed:
    return await _accepted(store, commit)


async def test_a_run_ended_in_a_batch_is_not_forgotten_before_the_batch_is_done() -> None:
    # Forgetting is the store's housekeeping, not a rule: inside one batch a commit for a run
    # an earlier commit ended meets the terminal fence, as on every other store, never an
    # unknown run; the oldest ended run is forgotten once the batch is applied.
    store = MemoryStore(max_ended_runs=1)
    for run_id in ("a", "b"):
        await _apply(store, _start(run_id))
    results = await store.apply([_end("a"), _end("b"), _progress("a", 1)])
    assert [type(r) for r in results[:2]] == [Accepted, Accepted]
    assert results[2] == Rejected(RejectReason.ENDED, DONE)
    assert await store.load("a") is None  # forgotten after the batch
    assert await store.load("b") is not None


async def test_the_run_that_ended_longest_ago_is_forgotten_first() -> None:
    store = MemoryStore(max_ended_runs=2)
    for run_id in ("a", "b", "c", "d"):
        await _apply(store, _start(run_id))
    # Ending order, not creation order, decides.
    await _apply(store, _end("b"))
    await _apply(store, _end("a"))
    assert await store.load("b") is not None

    await _apply(store, _end("c"))
    assert await store.load("b") is None
    assert await store.events_after(0, "b") == []
    assert all(e.run_id != "b" for e in await store.events_after(0))
    for kept in ("a", "c"):
        record = await store.load(kept)
        assert record is not None
        assert record.result == kept
        assert [e.state for e in await store.events_after(0, kept)] == [Running(1), DONE]

    await _apply(store, _end("d"))
    assert await store.load("a") is None
    assert await store.events_after(0, "a") == []
    assert {e.run_id for e in await store.events_after(0)} == {"c", "d"}


async def test_runs_that_have_not_ended_are_never_forgotten() -> None:
    store = MemoryStore(max_ended_runs=1)
    await _apply(store, _start("running"))
    await _apply(
        store,
        Commit(
            run_id="queued",
            state=RunState.Queued(),
            generation=0,
            expect=Expect(new=True),
            at=1.0,
            new_run=NewRun("thread-queued", None, None, None),
        ),
    )
    for i in range(5):
        await _apply(store, _start(f"ended{i}"))
        await _apply(store, _end(f"ended{i}"))
        await _apply(store, _progress("running", i))

    running = await store.load("running")
    assert running is not None
    assert running.checkpoint == {"step": 4}
    assert len(await store.events_after(0, "running")) == 6
    queued = await store.load("queued")
    assert queued is not None
    assert queued.state == RunState.Queued()
    assert len(await store.events_after(0, "queued")) == 1
    assert [i for i in range(5) if await store.load(f"ended{i}") is not None] == [4]


async def _returns_its_id(ctx: RunContext) -> JsonValue:
    await trio.lowlevel.checkpoint()
    return ctx.run_id


async def test_a_forgotten_run_is_unknown_to_the_runtime() -> None:
    store = MemoryStore(max_ended_runs=1)
    async with open_runtime(store) as runtime:
        assert await runtime.execute(_returns_its_id, run_id="first") == DONE
        assert (await runtime.record("first")).result == "first"
        assert await runtime.execute(_returns_its_id, run_id="second") == DONE
        with pytest.raises(UnknownRun) as caught:
            await runtime.record("first")
        assert caught.value.run_id == "first"
        assert (await runtime.record("second")).state == DONE


async def test_events_of_all_runs_skip_forgotten_ones_and_honour_limit() -> None:
    store = MemoryStore(max_ended_runs=1)
    await _apply(store, _start("live"))
    for step in range(9):
        await _apply(store, _progress("live", step))
    await _apply(store, _start("gone"))
    await _apply(store, _progress("live", 9))
    await _apply(store, _end("gone"))
    await _apply(store, _start("kept"))
    await _apply(store, _end("kept"))  # "gone" is forgotten
    assert await store.load("gone") is None
    # Its events are still in the log (too few to compact it), so readers must skip them.
    assert store._tx.forgotten_events == 2

    everything = await store.events_after(0)
    assert [e.run_id for e in everything] == ["live"] * 11 + ["kept"] * 2
    assert [e.seq for e in everything] == [*range(1, 11), 12, 14, 15]
    for limit in (1, 5, 10, 11, 12):
        assert await store.events_after(0, limit=limit) == everything[:limit]
    # A page that starts right before a forgotten event still fills up to its limit.
    assert [e.seq for e in await store.events_after(10, limit=2)] == [12, 14]
    assert [e.seq for e in await store.events_after(11, limit=1)] == [12]


async def test_a_reused_run_id_shows_only_the_new_runs_events() -> None:
    store = MemoryStore(max_ended_runs=1)
    await _apply(store, _start("filler"))
    for step in range(4):
        await _apply(store, _progress("filler", step))
    old_start = await _apply(store, _start("again"))
    await _apply(store, _end("again"))
    await _apply(store, _start("other"))
    await _apply(store, _end("other"))  # the first "again" is forgotten
    assert await store.load("again") is None
    assert store._tx.forgotten_events == 2  # its events are still in the log

    new_start = await _apply(store, _start("again"))
    new_progress = await _apply(store, _progress("again", 1))
    new_events = [*new_start.events, *new_progress.events]
    assert await store.events_after(0, "again") == new_events
    assert [e for e in await store.events_after(0) if e.run_id == "again"] == new_events
    assert old_start.events[0] not in await store.events_after(0)
    record = await store.load("again")
    assert record is not None
    assert record.checkpoint == {"step": 1}


def _expected_after(kept: dict[str, list[RunEvent]], cursor: int) -> list[RunEvent]:
    after = (e for events in kept.values() for e in events if e.seq > cursor)
    return sorted(after, key=lambda e: e.seq)


async def test_log_compaction_keeps_what_readers_see() -> None:
    # A model of the store's promise (every kept run's events, none of a forgotten run's)
    # is checked before and after each ending, through compactions of the log.
    store = MemoryStore(max_ended_runs=2)
    kept: dict[str, list[RunEvent]] = {}
    ended: list[str] = []
    compactions = 0

    async def commit(c: Commit) -> None:
        nonlocal compactions
        log_before = len(store._tx.log)
        accepted = await _apply(store, c)
        if len(store._tx.log) < log_before:
            compactions += 1
        kept.setdefault(c.run_id, []).extend(accepted.events)
        if accepted.accepted.state.is_ended:
            ended.append(c.run_id)
            if len(ended) > 2:
                del kept[ended.pop(0)]

    async def check() -> None:
        all_events = _expected_after(kept, 0)
        for cursor in [0, *(e.seq for e in all_events)]:
            for limit in (1, 2, 1000):
                got = await store.events_after(cursor, limit=limit)
                assert got == _expected_after(kept, cursor)[:limit], (cursor, limit)
        for run_id in kept:
            assert await store.events_after(0, run_id) == kept[run_id]
        for run_id in {*ended, *kept}:
            assert (await store.load(run_id) is not None) == (run_id in kept)

    await commit(_start("live"))
    for i in range(20):
        await commit(_start(f"r{i}"))
        for step in range(i % 3):
            await commit(_progress(f"r{i}", step))
        if i % 4 == 0:
            await commit(_progress("live", i))
        await check()
        await commit(_end(f"r{i}"))
        await check()
    # Reuse a forgotten id: its old events, compacted or not, stay hidden.
    await commit(_start("r0"))
    await check()
    assert compactions >= 3


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_ended_runs_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="max_ended_runs"):
        MemoryStore(max_ended_runs=bad)  # type: ignore[arg-type]
    assert MemoryStore(max_ended_runs=1).max_ended_runs == 1


class _OnAClockOfItsOwn:
    """The shared memory store with a lease clock the test moves (`elapse`) instead of
    Trio's, so no test waits for a lease to lapse."""

    @pytest.fixture
    def lease_clock(self) -> LeaseClock:
        return LeaseClock()

    @pytest.fixture
    def elapse(self, lease_clock: LeaseClock) -> Callable[[float], Awaitable[None]]:
        return lease_clock.elapse


class TestSharedMemoryStore(HandsOverStoredCommands, _OnAClockOfItsOwn, DurableStoreContract):
    @pytest.fixture
    async def store(self, lease_clock: LeaseClock) -> AsyncIterator[Store]:
        store = MemoryStore(shared=True, lease_clock=lease_clock)
        yield store
        await store.aclose()


class TestSharedMemoryStoreThroughTheMailbox(
    HandsOverStoredCommands, _OnAClockOfItsOwn, DurableStoreContract
):
    @pytest.fixture
    async def store(self, lease_clock: LeaseClock) -> AsyncIterator[Store]:
        store = MemoryStore(inline=False, shared=True, lease_clock=lease_clock)
        yield store
        await store.aclose()


class TestMemoryStoreStreams(StreamStoreContract):
    @pytest.fixture(params=["inline", "mailbox"])
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[MemoryStore]:
        store = MemoryStore(inline=request.param == "inline")
        yield store
        await store.aclose()
