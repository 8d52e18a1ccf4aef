"""Write transactions on the PostgreSQL store run side by side: what still holds when many
stores (each its own pool, as runtimes in other processes have) write at once. The locks
each transaction takes (claims, rows, threads; no lock all writers share) are real
server locks here, so these tests race real transactions. Real time, bounded by
``trio.fail_after``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, suppress
from functools import partial

import psycopg
import pytest
import trio

from awaken_trio import EndCause, RunState
from awaken_trio.store import (
    Accepted,
    Claim,
    Commit,
    CommitResult,
    Expect,
    Fence,
    Rejected,
    RejectReason,
)
from awaken_trio.store.postgres import _store as store_module
from awaken_trio.store.postgres._guess import Guess
from awaken_trio.store.postgres._schema import LATEST, MIGRATIONS, open_schema
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_commit, still_running
from tests.pg_server import lock_waiters

LIVE = 3600.0
WRITERS = 6


def _natural_end(run_id: str, owner: str, *, generation: int) -> Commit:
    """The natural end of ``run_id``'s first attempt (claim epoch 1), by ``owner``."""
    return Commit(
        run_id=run_id,
        state=RunState.Ended(EndCause.NaturalEnd()),
        generation=generation,
        expect=Expect(generation=1),
        at=2.0,
        fence=Fence(run_id, owner, 1),
    )


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[list[PostgresStore]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(PostgresStore(pg_url, pool_size=2))
            for _ in range(WRITERS)
        ]


async def _all(calls: Sequence[Callable[[], Awaitable[list[CommitResult]]]]) -> list[CommitResult]:
    results: list[CommitResult] = []

    async def one(call: Callable[[], Awaitable[list[CommitResult]]]) -> None:
        results.extend(await call())

    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(one, call)
    return results


async def test_runtimes_starting_runs_on_one_thread_at_once_start_one(
    stores: list[PostgresStore],
) -> None:
    """Each store starts a run on the same thread at the same moment, with the thread
    guard: exactly one starts, every other is refused THREAD_BUSY (two transactions must not
    both find the thread free)."""
    with trio.fail_after(60):
        for round_ in range(10):
            thread = f"shared-{round_}"
            calls = [
                partial(
                    store.apply,
                    [
                        new_commit(
                            f"r{round_}-{i}",
                            thread_id=thread,
                            state=RunState.Running(1),
                            claim=Claim(f"owner-{i}", LIVE),
                            thread_guard=True,
                        )
                    ],
                )
                for i, store in enumerate(stores)
            ]
            results = await _all(calls)
            started = [r for r in results if isinstance(r, Accepted)]
            assert len(started) == 1, results
            assert all(
                r == Rejected(RejectReason.THREAD_BUSY, None) for r in results if r not in started
            )


async def test_runtimes_creating_one_run_at_once_create_it_once(
    stores: list[PostgresStore],
) -> None:
    """Each store creates the same run id at the same moment. No row exists to lock, so the
    inserts meet at the key: the server makes each wait for the first, then fails it; that
    transaction is run again, finds the run, and is refused EXISTS (not a store error).
    Every store writes on afterwards."""
    with trio.fail_after(60):
        for round_ in range(5):
            results = await _all(
                [partial(store.apply, [new_commit(f"same-{round_}")]) for store in stores]
            )
            assert sum(isinstance(r, Accepted) for r in results) == 1, results
            assert all(
                r == Rejected(RejectReason.EXISTS, RunState.Queued())
                for r in results
                if not isinstance(r, Accepted)
            ), results
        for i, store in enumerate(stores):
            [after] = await store.apply([new_commit(f"after-{i}")])
            assert isinstance(after, Accepted)


async def test_a_follower_never_sees_a_seq_after_a_greater_one(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """Stores commit at once while a follower reads `events_after` its cursor again and
    again: every event it ends up with was seen in seq order, none appeared behind its
    cursor (a seq made visible after a greater one would be skipped for good)."""
    per_store = 40
    seen: list[int] = []
    done = trio.Event()

    async def follow(store: PostgresStore) -> None:
        cursor = 0
        while True:
            finished = done.is_set()  # read before the last look: it sees every commit
            for event in await store.events_after(cursor):
                seen.append(event.seq)
                cursor = event.seq
            if finished:
                return

    async def write(store: PostgresStore, i: int) -> None:
        for k in range(per_store):
            [result] = await store.apply([new_commit(f"w{i}-{k}")])
            assert isinstance(result, Accepted)

    with trio.fail_after(120):
        async with PostgresStore(pg_url) as follower, trio.open_nursery() as outer:
            outer.start_soon(follow, follower)
            async with trio.open_nursery() as writers:
                for i, store in enumerate(stores):
                    writers.start_soon(write, store, i)
            done.set()
        everything = [e.seq for e in await stores[0].events_after(0, limit=10_000)]
    assert len(everything) == WRITERS * per_store
    assert everything == list(range(1, len(everything) + 1))  # one seq each, in order
    assert seen == everything


async def test_a_commit_answers_with_the_seqs_it_was_given(stores: list[PostgresStore]) -> None:
    """Transactions number their events from 1 until their commit gives them their place:
    what `apply` answers is the store's seq of the commit's last event, whoever committed
    in between."""
    with trio.fail_after(60):
        results = await _all(
            [
                partial(store.apply, [new_commit(f"a{i}"), new_commit(f"b{i}")])
                for i, store in enumerate(stores)
            ]
        )
        events = await stores[0].events_after(0)
    by_run = {e.run_id: e.seq for e in events}
    answered = [r.last_seq for r in results if isinstance(r, Accepted)]
    assert sorted(answered) == sorted(by_run.values())
    for i in range(WRITERS):
        # One transaction's events in the order it queued them (other transactions' seqs,
        # taken at the same moment from the one sequence, may fall between them).
        assert by_run[f"b{i}"] > by_run[f"a{i}"]


async def test_recovery_leaves_a_claim_another_transaction_holds(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """An expired claim whose row another transaction has locked (a renewal or a release
    on its way) is skipped, not waited for; it is recovered once that transaction ends."""
    owner, rescuer = stores[0], stores[1]
    offset = [0.0]
    async with PostgresStore(pg_url, lease_offset=lambda: offset[0]) as late:
        claim = Claim("a", 1.0)
        [taken] = await owner.apply([new_commit("r1", state=RunState.Running(1), claim=claim)])
        assert isinstance(taken, Accepted)
        offset[0] = 10.0  # the lease has expired, as ``late`` reads the clock
        holder = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_url))
        try:
            await trio.to_thread.run_sync(
                lambda: holder.execute("SELECT 1 FROM awaken.claims WHERE run_id = 'r1' FOR UPDATE")
            )
            with trio.fail_after(20):
                assert await late.recover("b", {"job"}, 2.0, LIVE, 3, 10) == []
            await trio.to_thread.run_sync(holder.rollback)  # the lock goes with it, at once
        finally:
            await trio.to_thread.run_sync(holder.close)
        with trio.fail_after(20):
            recovered = await late.recover("b", {"job"}, 2.0, LIVE, 3, 10)
        assert [(r.record.run_id, r.epoch) for r in recovered] == [("r1", 2)]
        # The owner's claim is gone: its next commit is fenced.
        stale = still_running("r1", expect=Expect(), at=3.0, fence=Fence("r1", "a", 1))
        [fenced] = await rescuer.apply([stale])
        assert isinstance(fenced, Rejected)
        assert fenced.reason == RejectReason.FENCED


async def test_a_transaction_the_server_rolls_back_in_a_deadlock_is_run_again(
    stores: list[PostgresStore], pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection holds run b's claim and then asks for run a's, which the store's
    batch holds while it waits for b's: the server breaks the circle by rolling the store's
    transaction back, and the store runs it again, so the batch lands whole."""
    store = stores[0]
    for run_id in ("a", "b"):
        [taken] = await store.apply(
            [new_commit(run_id, state=RunState.Running(1), claim=Claim("o", LIVE))]
        )
        assert isinstance(taken, Accepted)
    batch = [
        still_running(run_id, expect=Expect(), at=2.0, fence=Fence(run_id, "o", 1))
        for run_id in ("a", "b")
    ]
    holder = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_url))

    def lock(run_id: str) -> None:
        holder.execute("SELECT 1 FROM awaken.claims WHERE run_id = %s FOR UPDATE", (run_id,))

    def waiting() -> int:
        return lock_waiters(pg_url)

    results: list[CommitResult] = []

    async def apply() -> None:
        results.extend(await store.apply(batch))

    caplog.set_level(logging.DEBUG, logger="awaken_trio.store")
    try:
        await trio.to_thread.run_sync(lock, "b")
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(apply)
                while await trio.to_thread.run_sync(waiting) == 0:  # noqa: ASYNC110 - a server's state
                    await trio.sleep(0.01)
                # The store's transaction holds a's claim and waits for b's: closing the
                # circle makes the server end one of the two.
                # The store's rerun can take a's claim again before the holder's waiting
                # request is granted, closing a second circle; the server may end the
                # holder's side of that one. Either way the batch must land whole, and the
                # log below shows the store was rolled back at least once.
                with suppress(psycopg.errors.DeadlockDetected):
                    await trio.to_thread.run_sync(lock, "a")
                await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    assert [type(r) for r in results] == [Accepted, Accepted]
    assert any("rolled back, running it again" in r.getMessage() for r in caplog.records)


async def test_a_first_version_schema_is_brought_forward(pg_url: str) -> None:
    """A database a version-1 store wrote (its queue places kept in the counters row) opens
    at the latest version, with what it held and its queue going on."""

    def create_v1() -> None:
        with psycopg.connect(pg_url) as conn:
            open_schema(conn, "awaken", "the test database", MIGRATIONS[:1])
            conn.execute(
                "UPDATE awaken.counters SET last_queued = 41, last_seq = 7, writes = 9 WHERE id = 1"
            )

    await trio.to_thread.run_sync(create_v1)
    with trio.fail_after(30):
        async with PostgresStore(pg_url) as store:
            [queued] = await store.apply([new_commit("q1")])
            assert isinstance(queued, Accepted)
            assert queued.last_seq == 8  # after the seven events version 1 counted
            assert [r.run_id for r in await store.runnable({"job"}, 0.0, 10)] == ["q1"]

    def read() -> tuple[object, ...]:
        with psycopg.connect(pg_url) as conn:
            found = conn.execute(
                "SELECT (SELECT value FROM awaken.meta WHERE key = 'version'),"
                " (SELECT queued_order FROM awaken.runs WHERE run_id = 'q1')"
            ).fetchone()
            assert found is not None
            return tuple(found)

    assert await trio.to_thread.run_sync(read) == (str(LATEST), 42)

    def indexes() -> set[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'awaken'")
            return {str(name) for (name,) in rows}

    found = await trio.to_thread.run_sync(indexes)
    assert "runs_queue_by_age" in found  # version 3
    assert "runs_queued" not in found
    assert "events_steps" in found  # version 4: the journaled steps' own index


async def test_workers_looking_at_once_are_handed_different_runs(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """A queued run another transaction holds (another worker claiming it) is passed over
    by `runnable`, so a worker looking meanwhile is handed the next one instead of racing
    for it; once the other transaction ends, the run is runnable again."""
    store = stores[0]
    [first, second] = await store.apply([new_commit("q1"), new_commit("q2")])
    assert isinstance(first, Accepted)
    assert isinstance(second, Accepted)
    holder = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_url))
    try:
        await trio.to_thread.run_sync(
            lambda: holder.execute("SELECT 1 FROM awaken.runs WHERE run_id = 'q1' FOR UPDATE")
        )
        with trio.fail_after(20):
            assert [r.run_id for r in await store.runnable({"job"}, 0.0, 10)] == ["q2"]
        await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    with trio.fail_after(20):
        assert [r.run_id for r in await store.runnable({"job"}, 0.0, 10)] == ["q1", "q2"]


async def test_a_write_transaction_is_one_pipeline_with_one_sync(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An end's transaction is one pipeline: what it reads comes back in one flush, and its
    writes, the sealing statement and ``COMMIT`` go with the one Sync at its end (a nested
    pipeline, or a fetch per statement, would add round trips); a start's, written on a
    guess of its reads (``_guess``), has no flush at all, nor has the end of a run whose
    row this store wrote last (``_known``). Counted at psycopg's pipeline: a
    Sync queued, and a cursor's fetch that has to go to the server."""
    from psycopg import _pipeline_base

    syncs: list[None] = []
    flushes: list[None] = []
    enqueue_sync = _pipeline_base.BasePipeline._enqueue_sync
    fetch_pipeline = psycopg.Cursor._fetch_pipeline

    def counting_sync(self: _pipeline_base.BasePipeline) -> None:
        syncs.append(None)
        enqueue_sync(self)

    def counting_fetch(self: psycopg.Cursor[tuple[object, ...]]) -> None:
        if self._conn._pipeline is not None and not self.pgresult:
            flushes.append(None)
        fetch_pipeline(self)

    monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync", counting_sync)
    monkeypatch.setattr(psycopg.Cursor, "_fetch_pipeline", counting_fetch)
    store = stores[0]
    with trio.fail_after(30):
        [started] = await store.apply(
            [
                new_commit(
                    "one", state=RunState.Running(1), claim=Claim("owner", LIVE), thread_guard=True
                )
            ]
        )
        assert isinstance(started, Accepted)
        assert (len(syncs), len(flushes)) == (1, 0)
        syncs.clear()
        flushes.clear()
        [ended] = await store.apply([_natural_end("one", "owner", generation=2)])
        assert isinstance(ended, Accepted), ended
        # (Written on its row as this store wrote it: ``_known``.)
        assert (len(syncs), len(flushes)) == (1, 0)
        # An end of a run another runtime wrote last reads it first.
        [theirs] = await stores[1].apply(
            [new_commit("theirs", state=RunState.Running(1), claim=Claim("owner", LIVE))]
        )
        assert isinstance(theirs, Accepted)
        syncs.clear()
        flushes.clear()
        [ended] = await store.apply([_natural_end("theirs", "owner", generation=2)])
        assert isinstance(ended, Accepted), ended
        assert (len(syncs), len(flushes)) == (1, 1)
        # A committed cancel from elsewhere, which ends the run's descendants first: the
        # children of a run that has none are read with the rest, in the one flush.
        [two] = await store.apply([new_commit("two", state=RunState.Running(1))])
        assert isinstance(two, Accepted)
        syncs.clear()
        flushes.clear()
        [cancel] = await store.apply([_cancel("two")])
        assert isinstance(cancel, Accepted), cancel
        assert (len(syncs), len(flushes)) == (1, 1)


def _cancel(run_id: str) -> Commit:
    """A committed cancel of a running run from another runtime (as ``cancel_run``)."""
    return Commit(
        run_id=run_id,
        state=RunState.Ended(EndCause.Cancelled()),
        generation=1,
        expect=Expect(generation=1, state=RunState.Running),
        at=2.0,
        end_descendants="parent_ended",
    )


async def test_ending_a_run_with_its_descendants_ends_every_one(
    stores: list[PostgresStore],
) -> None:
    """The children read with the transaction's first round trip, then their own
    descendants, are all ended; so is a child the same batch creates before it ends its
    parent (the children read first are kept up to date with the transaction's own)."""
    store = stores[0]
    with trio.fail_after(30):
        [root] = await store.apply([new_commit("root", state=RunState.Running(1))])
        assert isinstance(root, Accepted)
        for run_id, parent in (("child", "root"), ("grandchild", "child")):
            [made] = await store.apply(
                [new_commit(run_id, state=RunState.Running(1), parent=parent)]
            )
            assert isinstance(made, Accepted)
        results = await store.apply(
            [new_commit("late", state=RunState.Running(1), parent="root"), _cancel("root")]
        )
        assert all(isinstance(result, Accepted) for result in results), results
        tree = ["root", "child", "grandchild", "late"]
        states = await store.states(tree)
        assert sorted(states) == sorted(tree)
        assert all(isinstance(state, RunState.Ended) for state in states.values()), states


async def test_runs_queued_in_one_batch_take_their_places_in_its_order(
    stores: list[PostgresStore],
) -> None:
    """A batch's new rows go to the server as one statement; the queue places they take
    (and the order `runnable` hands them out in) are the batch's order, not the ids'."""
    store = stores[0]
    run_ids = [f"q{i:02d}" for i in reversed(range(30))]
    with trio.fail_after(30):
        results = await store.apply([new_commit(run_id) for run_id in run_ids])
        assert all(isinstance(result, Accepted) for result in results), results
        handed = await store.runnable({"job"}, 1.0, 100)
    assert [record.run_id for record in handed] == run_ids


def _reads_of(monkeypatch: pytest.MonkeyPatch, store: PostgresStore) -> list[list[bytes]]:
    """The row and claim reads of each write transaction ``store`` runs from now on."""
    from awaken_trio.store.postgres._conn import StoreConnection
    from awaken_trio.store.postgres._tx import PgTx

    statements = store._queries
    watched = {statements.rows: b"rows", statements.claims: b"claims"}
    transactions: list[list[bytes]] = []
    execute = StoreConnection.execute
    begin, begin_guessed = PgTx.begin, PgTx.begin_guessed

    def counted_begin(self: PgTx, batch: Sequence[Commit] = ()) -> float:
        transactions.append([])
        return begin(self, batch)

    def counted_guessed(self: PgTx, guess: Guess) -> float:
        transactions.append([])
        return begin_guessed(self, guess)

    def counted(self: StoreConnection, query: object, *args: object, **kwargs: object) -> object:
        if transactions and isinstance(query, bytes) and query in watched:
            transactions[-1].append(watched[query])
        return execute(self, query, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PgTx, "begin", counted_begin)
    monkeypatch.setattr(PgTx, "begin_guessed", counted_guessed)
    monkeypatch.setattr(StoreConnection, "execute", counted)
    return transactions


async def test_a_run_created_does_not_read_its_claim(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that creates a run (claimed, as a start is) does not read the run's claim:
    the rules never look at the claim of a run they create (one that exists is refused
    EXISTS first). A commit on an existing run still reads (and locks) its claim. Written
    on a guess of its reads (``_guess``), the start reads neither."""
    store = stores[0]
    reads = _reads_of(monkeypatch, store)
    with trio.fail_after(30):
        [guessed] = await store.apply(
            [new_commit("guessed", state=RunState.Running(1), claim=Claim("me", LIVE))]
        )
        assert isinstance(guessed, Accepted)
        assert reads == [[]]
        monkeypatch.setattr(store_module, "guess_of", lambda *batch: None)
        [created] = await store.apply(
            [new_commit("fresh", state=RunState.Running(1), claim=Claim("me", LIVE))]
        )
        assert isinstance(created, Accepted)
        assert reads[1] == [b"rows"]
        [ended] = await store.apply([_natural_end("fresh", "me", generation=1)])
        assert isinstance(ended, Accepted), ended
        assert reads[2] == [b"claims", b"rows"]
