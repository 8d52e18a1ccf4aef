"""Event seqs on the PostgreSQL store without a lock every writer takes (``_order``): under
concurrent writers on a real server, a follower sees every committed event exactly once and
in seq order, a writer sees its own run's events at once after its answer, no smaller seq
commits once a seq has settled, and the watermark holds readers of every run back exactly
while a writer that took seqs has not committed, while writers do not wait. Real time,
bounded by ``trio.fail_after``; the races are seeded."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import psycopg
import pytest
import trio

from awaken_trio import RunEvent
from awaken_trio.store import Accepted
from awaken_trio.store.postgres._order import ticket_space
from awaken_trio.store.postgres._queries import EVENTS
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued

WRITERS = 4


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[list[PostgresStore]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(PostgresStore(pg_url, pool_size=2))
            for _ in range(WRITERS + 1)
        ]


def _committed(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [int(seq) for (seq,) in conn.execute("SELECT seq FROM awaken.events ORDER BY seq")]


def _below(url: str, seq: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT count(*) FROM awaken.events WHERE seq < %s", (seq,))
        row = found.fetchone()
        assert row is not None
        return int(row[0])


def _lock_waits(url: str) -> int:
    """How many advisory locks a server process is waiting for."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
        assert found is not None
        return int(found[0])


async def _until_waiting_on_locks(url: str, count: int) -> None:
    """Poll (under the caller's ``fail_after``) until ``count`` advisory locks are waited
    for at the server."""
    while True:
        if await trio.to_thread.run_sync(_lock_waits, url) >= count:
            return
        await trio.sleep(0.01)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_follower_sees_every_committed_event_once_in_order(
    stores: list[PostgresStore], pg_url: str, seed: int
) -> None:
    """Writers in separate pools commit batches of random sizes at random moments while a
    follower reads after its cursor: its seqs strictly increase, and once the writers are
    done it has read exactly the events the table holds. Each writer reads its runs'
    events at once after its answer; once its last seq settled, no smaller seq ever
    commits."""
    rng = random.Random(seed)
    follower, writers = stores[0], stores[1:]
    seen: list[RunEvent] = []
    answers: list[tuple[int, int]] = []  # (a commit's last seq, events below it, settled)
    done = trio.Event()

    async def follow() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            events = await follower.events_after(cursor, limit=rng.randint(1, 50))
            for event in events:
                assert event.seq > cursor, "a seq shown after a greater one"
                cursor = event.seq
                seen.append(event)
            if finished and not events:
                return
            await trio.lowlevel.checkpoint()

    async def write(i: int, store: PostgresStore) -> None:
        own = random.Random(seed * 100 + i)
        for n in range(25):
            batch = [new_queued(f"w{i}-{n}-{k}") for k in range(own.randint(1, 6))]
            results = await store.apply(batch)
            for commit, result in zip(batch, results, strict=True):
                assert isinstance(result, Accepted), result
                mine = await store.events_after(0, commit.run_id)
                assert [e.seq for e in mine] == [result.last_seq]  # at once: no watermark
            last = max(r.last_seq for r in results if isinstance(r, Accepted))
            await store.settle(last)
            below = await trio.to_thread.run_sync(_below, pg_url, last)
            answers.append((last, below))
            await trio.sleep(own.random() * 0.005)

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            async with trio.open_nursery() as writing:
                for i, store in enumerate(writers):
                    writing.start_soon(write, i, store)
            done.set()
    committed = await trio.to_thread.run_sync(_committed, pg_url)
    assert [e.seq for e in seen] == committed  # each once, in order, none missed
    assert len(committed) == len({e.run_id for e in seen})  # one event a run created
    for last, below in answers:
        assert await trio.to_thread.run_sync(_below, pg_url, last) == below


async def test_readers_of_every_run_wait_for_a_writer_that_took_seqs_and_writers_do_not(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """A writer holds a ticket and a seq, uncommitted, while another writer commits a
    greater seq: the second is answered at once, and a read of its run shows its event,
    but readers of every run see neither until the first ends, and settling the second's
    seq waits for that too."""
    store = stores[0]
    [first] = await store.apply([new_queued("before")])
    assert isinstance(first, Accepted)
    space = ticket_space("awaken")
    holder = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_url))
    try:

        def take_a_seq() -> int:
            holder.execute(
                "SELECT pg_advisory_xact_lock_shared(%s, (last_value & 2147483647)::integer)"
                " FROM awaken.event_seqs",
                (space,),
            )
            found = holder.execute("SELECT nextval('awaken.event_seqs')").fetchone()
            assert found is not None
            return int(found[0])

        held = await trio.to_thread.run_sync(take_a_seq)
        settled: list[int] = []

        async def settle(seq: int) -> None:
            await store.settle(seq)
            settled.append(seq)

        with trio.fail_after(30):
            [second] = await stores[1].apply([new_queued("after")])
            assert isinstance(second, Accepted)
            assert second.last_seq == held + 1
            assert [e.seq for e in await store.events_after(0, "after")] == [held + 1]
            # ... but readers of every run are held back below the held seq.
            assert [e.seq for e in await store.events_after(0)] == [first.last_seq]
            await settle(first.last_seq)  # final already: at once
            async with trio.open_nursery() as nursery:
                nursery.start_soon(settle, second.last_seq)
                await _until_waiting_on_locks(pg_url, 1)  # on the held ticket's
                assert settled == [first.last_seq]
                await trio.to_thread.run_sync(holder.rollback)  # the held seq is a gap
        assert settled == [first.last_seq, second.last_seq]
        assert [e.seq for e in await store.events_after(0)] == [first.last_seq, held + 1]
    finally:
        await trio.to_thread.run_sync(holder.close)


def _numbered_in_one_transaction(url: str, count: int) -> tuple[list[int], list[int], int]:
    """``count`` events numbered as the seal numbers them (`EVENTS`' seq, rows in their
    numbers' order), in a transaction then rolled back: their seqs in number order, the
    keys of the tickets it held, and the sequence's last value before."""
    value = EVENTS.values.split(", ")[0].replace("{s}", "awaken")
    with psycopg.connect(url) as conn:
        before = conn.execute("SELECT last_value FROM awaken.event_seqs").fetchone()
        assert before is not None
        found = conn.execute(
            f"SELECT {value} FROM generate_series(%(count)s, 1, -1) AS t(n) ORDER BY n",
            {"count": count, "space": ticket_space("awaken")},
        ).fetchall()
        locks = conn.execute(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
            " AND classid::bigint = (%s::bigint & 4294967295) AND pid = pg_backend_pid()",
            (ticket_space("awaken"),),
        ).fetchall()
        conn.rollback()
    return [int(seq) for (seq,) in found], [int(objid) for (objid,) in locks], int(before[0])


async def test_a_transaction_takes_one_ticket_below_all_its_seqs(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """However many events a transaction numbers, it holds one ticket, keyed below its first
    seq, and its seqs follow its events' numbers (rows produced in another order are
    numbered after the sort)."""
    await stores[0].apply([new_queued("before")])  # the schema, and a seq taken
    seqs, keys, last = await trio.to_thread.run_sync(_numbered_in_one_transaction, pg_url, 40)
    assert keys == [last]  # (small seqs: the key is the value itself)
    assert last < seqs[0]
    assert seqs == list(range(seqs[0], seqs[0] + 40))


async def test_the_writes_count_survives_folding_ended_processes(
    stores: list[PostgresStore], pg_url: str
) -> None:
    """The count of writes is summed over server processes' rows; folding the rows of
    processes that ended into row 0 leaves the sum (`version`) where it was."""
    store, other = stores[0], stores[1]
    start = await store.version()
    for n in range(3):
        await other.apply([new_queued(f"r{n}")])
    moved = await store.version()
    assert moved > start

    def fold() -> tuple[int, int]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("INSERT INTO awaken.writes (pid, n) VALUES (-1, 5)")  # a gone one
            before = conn.execute("SELECT sum(n) FROM awaken.writes").fetchone()
            from awaken_trio.store.postgres._queries import Queries

            conn.execute(Queries.of("awaken").forget_writers)
            after = conn.execute("SELECT sum(n) FROM awaken.writes").fetchone()
            gone = conn.execute("SELECT count(*) FROM awaken.writes WHERE pid = -1").fetchone()
            assert before is not None
            assert after is not None
            assert gone is not None
            assert int(gone[0]) == 0
            return int(before[0]), int(after[0])

    before, after = await trio.to_thread.run_sync(fold)
    assert before == after
    assert await store.version() == moved + 1  # the row added by hand is a write it saw
    assert await store.version() == moved + 1


async def test_an_older_store_keeps_its_events_seqs_and_count(
    pg_url: str,
) -> None:
    """A store written before seqs came from a sequence (its last seq and writes count in
    the counters row) opens with its events readable, the next seq after its last, and
    its writes count where it was."""
    from awaken_trio.store.postgres._schema import LATEST, MIGRATIONS, open_schema

    def create_v7() -> None:
        with psycopg.connect(pg_url) as conn:
            open_schema(conn, "awaken", "the test database", MIGRATIONS[:7])
            conn.execute(
                "INSERT INTO awaken.events VALUES"
                " (3, 'old', 't-old', 0, 'committed', '{\"kind\": \"queued\"}', '{}', 1.0)"
            )
            conn.execute("UPDATE awaken.counters SET last_seq = 3, writes = 11 WHERE id = 1")

    await trio.to_thread.run_sync(create_v7)
    with trio.fail_after(30):
        async with PostgresStore(pg_url) as store:
            assert [e.seq for e in await store.events_after(0)] == [3]
            assert await store.version() == 0
            [result] = await store.apply([new_queued("new")])
            assert isinstance(result, Accepted)
            assert result.last_seq == 4
            assert [e.seq for e in await store.events_after(0)] == [3, 4]

    def read() -> tuple[object, ...]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            found = conn.execute(
                "SELECT (SELECT value FROM awaken.meta WHERE key = 'version'),"
                " (SELECT sum(n) FROM awaken.writes),"
                " (SELECT count(*) FROM pg_tables WHERE schemaname = 'awaken'"
                "  AND tablename = 'counters')"
            ).fetchone()
            assert found is not None
            return tuple(found)

    assert await trio.to_thread.run_sync(read) == (str(LATEST), 12, 0)
