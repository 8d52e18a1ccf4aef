"""What the SQLite store remembers between transactions (its rows, claims and busy
threads) is never staler than the file: whatever another connection, in this process or
another, commits in between, the next batch's fences see it; and a batch that fails leaves
nothing of itself behind in memory.

Each test first makes the store remember something (a commit it applied), then changes the
truth behind its back, then applies a commit that the stale memory would decide wrongly.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from awaken_trio import EndCause, RunState, StoreError
from awaken_trio._core import (
    Claim,
    Fence,
)
from awaken_trio.store import Accepted, Commit, Expect, NewRun, Rejected, RejectReason, Store
from awaken_trio.store.sqlite import _cache as cache_module
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.store.sqlite_helpers import run_python, start
from tests.wrapped_stores import LeaseClock

Running = RunState.Running
DONE = RunState.Ended(EndCause.NaturalEnd())


@pytest.fixture
def lease_clock() -> LeaseClock:
    return LeaseClock()


@pytest.fixture
async def pair(
    tmp_path: Path, lease_clock: LeaseClock
) -> AsyncIterator[tuple[SQLiteStore, SQLiteStore]]:
    path = tmp_path / "runs.db"
    async with (
        SQLiteStore(path, synchronous="normal", lease_clock=lease_clock) as one,
        SQLiteStore(path, synchronous="normal", lease_clock=lease_clock) as two,
    ):
        yield one, two


def _claimed(run_id: str, owner: str = "a", *, lease: float = 100.0, thread: str = "") -> Commit:
    """``run_id`` created Running under a new claim, with the thread guard."""
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(thread or f"thread-{run_id}", None, "job", None),
        claim=Claim(owner, lease),
        thread_guard=True,
    )


def _step(run_id: str, owner: str = "a", epoch: int = 1, *, at: float = 2.0) -> Commit:
    """A progress commit under ``owner``'s claim at ``epoch``."""
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=at,
        checkpoint={"at": at},
        fence=Fence(run_id, owner, epoch),
    )


def _finish(run_id: str, owner: str = "a", epoch: int = 1, *, at: float = 3.0) -> Commit:
    """``run_id`` ended under ``owner``'s claim, which it releases."""
    return Commit(
        run_id=run_id,
        state=DONE,
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=at,
        fence=Fence(run_id, owner, epoch),
        release=True,
    )


async def _one(store: Store, commit: Commit) -> Accepted | Rejected:
    (result,) = await store.apply([commit])
    return result


async def _accepted(store: Store, commit: Commit) -> Accepted:
    result = await _one(store, commit)
    assert isinstance(result, Accepted), result
    return result


# ---------------------------------------------------------------------------- another store


async def test_a_run_another_store_ended_refuses_the_next_commit(
    pair: tuple[SQLiteStore, SQLiteStore],
) -> None:
    one, two = pair
    await _accepted(one, _claimed("r1"))
    await _accepted(one, _step("r1"))  # `one` has seen r1 Running, claimed by a at 1
    await _accepted(two, _finish("r1"))
    assert await _one(one, _step("r1", at=4.0)) == Rejected(RejectReason.ENDED, DONE)


async def test_a_claim_another_store_released_fences_the_next_commit(
    pair: tuple[SQLiteStore, SQLiteStore],
) -> None:
    one, two = pair
    await _accepted(one, _claimed("r1"))
    await two.release("a", "r1")
    assert await _one(one, _step("r1")) == Rejected(RejectReason.FENCED, Running(1))
    # And the claim another store takes next is the one the fence must name.
    taken = await _accepted(two, _claimed_again("r1", "b"))
    assert taken.epoch == 2
    assert isinstance(await _one(one, _step("r1", "b", 2)), Accepted)


def _claimed_again(run_id: str, owner: str) -> Commit:
    return Commit(
        run_id=run_id,
        state=Running(1),
        generation=1,
        expect=Expect(generation=1),
        at=2.0,
        claim=Claim(owner, 100.0),
    )


async def test_a_lease_another_store_renewed_lets_the_next_commit_land(
    pair: tuple[SQLiteStore, SQLiteStore], lease_clock: LeaseClock
) -> None:
    one, two = pair
    await _accepted(one, _claimed("r1", lease=10.0))
    assert await two.renew("a", {"r1": 1}, 100.0) == []
    # The lease `one` remembers ended 10 s after the claim; the file's lasts 100 s.
    await lease_clock.elapse(50.0)
    assert isinstance(await _one(one, _step("r1", at=50.0)), Accepted)


async def test_a_thread_another_store_occupied_is_busy_for_the_next_commit(
    pair: tuple[SQLiteStore, SQLiteStore],
) -> None:
    one, two = pair
    await _accepted(one, _claimed("r1", thread="t"))
    await _accepted(one, _finish("r1"))  # `one` has seen thread t free
    await _accepted(two, _claimed("r2", "b", thread="t"))
    assert await _one(one, _claimed("r3", thread="t")) == Rejected(RejectReason.THREAD_BUSY, None)
    await _accepted(two, _finish("r2", "b"))
    await _accepted(one, _claimed("r3", thread="t"))


async def test_a_run_another_store_created_exists_for_the_next_commit(
    pair: tuple[SQLiteStore, SQLiteStore],
) -> None:
    one, two = pair
    assert await _one(one, _step("r1")) == Rejected(RejectReason.UNKNOWN, None)
    await _accepted(two, _claimed("r1"))
    assert await _one(one, _claimed("r1")) == Rejected(RejectReason.EXISTS, Running(1))
    await _accepted(one, _step("r1"))


# ---------------------------------------------------------------------------- another process

_END_FROM_AFAR = """
import sys
import trio
from awaken_trio import EndCause, RunState
from awaken_trio._core._storage import Fence
from awaken_trio.store import Commit, Expect
from awaken_trio.store.sqlite._store import SQLiteStore

async def main():
    async with SQLiteStore(sys.argv[1]) as store:
        [result] = await store.apply([Commit(
            run_id="r1", state=RunState.Ended(EndCause.Stopped("from afar")), generation=1,
            expect=Expect(generation=1), at=3.0, fence=Fence("r1", "a", 1), release=True,
        )])
        print(type(result).__name__)

trio.run(main)
"""


async def test_a_run_another_process_ended_refuses_the_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path) as store:
        await _accepted(store, _claimed("r1"))
        await _accepted(store, _step("r1"))
        assert (await run_python(_END_FROM_AFAR, str(path))).strip() == "Accepted"
        stopped = RunState.Ended(EndCause.Stopped("from afar"))
        assert await _one(store, _step("r1", at=4.0)) == Rejected(RejectReason.ENDED, stopped)
        # r1's attempt is over, so its thread is free.
        await _accepted(store, _claimed("r2", thread="thread-r1"))


# ---------------------------------------------------------------------------- this store


async def test_a_failed_batch_leaves_nothing_of_itself_in_memory(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "runs.db", synchronous="normal") as store:
        await _accepted(store, start("r0"))
        await _accepted(store, _claimed("r1"))
        broken = Commit(
            run_id="r0",
            state=Running(1),
            generation=1,
            expect=Expect(),
            at=2.0,
            checkpoint=math.nan,  # never handed over by the runtime: it checks payloads first
        )
        with pytest.raises(StoreError, match="rolled back"):
            await store.apply([_finish("r1"), _claimed("r2", thread="thread-r1"), broken])
        # The end, the release and the new run were rolled back with the batch.
        assert isinstance(await _one(store, _step("r1")), Accepted)
        assert await _one(store, _step("r2")) == Rejected(RejectReason.UNKNOWN, None)
        busy = _claimed("r2", thread="thread-r1")
        assert await _one(store, busy) == Rejected(RejectReason.THREAD_BUSY, None)


async def test_the_stores_own_claim_calls_keep_its_memory_true(
    tmp_path: Path, lease_clock: LeaseClock
) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal", lease_clock=lease_clock) as store:
        await _accepted(store, _claimed("r1", lease=10.0))
        assert await store.renew("a", {"r1": 1}, 100.0) == []
        await lease_clock.elapse(50.0)
        assert isinstance(await _one(store, _step("r1", at=50.0)), Accepted)
        await store.release("a", "r1")
        assert await _one(store, _step("r1", at=51.0)) == Rejected(RejectReason.FENCED, Running(1))
        # Recovery takes the run: take it again and let that lease lapse.
        await _accepted(store, _claimed_again("r1", "a"))
        await lease_clock.elapse(150.0)
        (recovered,) = await store.recover("b", {"job"}, 200.0, 300.0, 3, 10)
        assert recovered.epoch == 3
        assert await _one(store, _step("r1", "a", 2, at=201.0)) == Rejected(
            RejectReason.FENCED, Running(1)
        )
        assert isinstance(await _one(store, _step("r1", "b", 3, at=201.0)), Accepted)
        # A stored message is discarded by the end, with the commit that ends the run.
        assert isinstance(await store.post_command("r1", "message", "hello", None, 202.0), int)
        ended = await _accepted(store, _finish("r1", "b", 3, at=203.0))
        events = await store.events_after(ended.last_seq - 2, "r1")
        assert [(e.kind, e.detail) for e in events][-2:] == [
            ("messages_discarded", {"messages": ["hello"]}),
            ("committed", {}),
        ]


async def test_a_store_that_remembers_too_much_forgets_and_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "MAX_ENTRIES", 8)
    async with SQLiteStore(tmp_path / "runs.db", synchronous="normal") as store:
        for i in range(20):
            await _accepted(store, _claimed(f"r{i}", thread="shared" if i == 0 else ""))
        thread = await store._opened()
        size = await thread.run(lambda session: session.cache.size())
        assert 0 < size <= 8 + 3  # at most the limit, and one batch's worth more
        # What was forgotten is read again: r0's claim, row and busy thread.
        assert await _one(store, _step("r0", "b")) == Rejected(RejectReason.FENCED, Running(1))
        assert await _one(store, _claimed("x", thread="shared")) == Rejected(
            RejectReason.THREAD_BUSY, None
        )
        for i in range(20):
            await _accepted(store, _finish(f"r{i}"))
        await _accepted(store, _claimed("x", thread="shared"))


async def test_the_first_commit_of_a_run_created_in_the_same_batch_sees_it(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "runs.db", synchronous="normal") as store:
        results = await store.apply(
            [
                _claimed("r1", thread="t"),
                _step("r1"),
                _claimed("r2", thread="t"),  # r1's attempt is live on t
                _finish("r1"),
                _claimed("r2", thread="t"),
                _step("r2"),
                start("r3"),
            ]
        )
        assert [type(r).__name__ for r in results] == [
            "Accepted",
            "Accepted",
            "Rejected",
            "Accepted",
            "Accepted",
            "Accepted",
            "Accepted",
        ]
        assert results[2] == Rejected(RejectReason.THREAD_BUSY, None)
        seqs = [r.last_seq for r in results if isinstance(r, Accepted)]
        assert seqs == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in await store.events_after(0)] == [1, 2, 3, 4, 5, 6]
