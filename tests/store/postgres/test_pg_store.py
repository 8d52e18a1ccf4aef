"""The PostgreSQL store beyond the contracts: URLs, its schema (versions, concurrent
openings), the runtime on it, and what it shows of a password. Real time, bounded by
``trio.fail_after``."""

from __future__ import annotations

import logging

import psycopg
import pytest
import trio

from awaken_trio import EndCause, JsonValue, RunContext, RunState, StoreError, open_runtime
from awaken_trio.store import open_store
from awaken_trio.store.postgres._conn import _SPARE_CURSORS, StoreConnection
from awaken_trio.store.postgres._queries import Queries
from awaken_trio.store.postgres._schema import LATEST
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued
from tests.pg_server import PgServer

DONE = RunState.Ended(EndCause.NaturalEnd())


async def _body(ctx: RunContext) -> JsonValue:
    messages = await ctx.boundary({"step": 1})
    return {"run": ctx.run_id, "messages": messages}


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        return {str(name) for (name,) in rows}


def test_both_schemes_select_the_postgres_store_and_its_options() -> None:
    store = open_store("postgres://alice:pw@db.example:5433/runs?schema=team_a&pool_size=9")
    assert isinstance(store, PostgresStore)
    assert (store.schema, store.pool_size) == ("team_a", 9)
    store = open_store("postgresql://db.example/runs?sslmode=require")
    assert isinstance(store, PostgresStore)
    assert (store.schema, store.pool_size) == ("awaken", 4)


def test_a_keyword_string_and_keyword_options_are_accepted() -> None:
    store = PostgresStore("host=db.example dbname=runs password=pw", schema="s", pool_size=2)
    assert (store.schema, store.pool_size) == ("s", 2)
    assert "pw" not in repr(store)
    assert "password=***" in repr(store)


def test_repr_never_shows_the_password() -> None:
    store = PostgresStore("postgresql://alice:s3cr%2Fet@db.example/runs")
    assert "s3cr" not in repr(store)
    assert "alice:***@db.example" in repr(store)


async def test_the_runtime_runs_on_a_postgresql_url(pg_url: str) -> None:
    with trio.fail_after(30):
        async with open_runtime(pg_url) as runtime:
            handle = await runtime.start(_body, run_id="r1")
            assert await handle.wait() == DONE
            record = await runtime.record("r1")
            assert record.result == {"run": "r1", "messages": []}
            assert record.checkpoint == {"step": 1}
        async with PostgresStore(pg_url) as store:
            assert await store.load("r1") == record
            assert [e.state for e in await store.events_after(0, "r1")] == [
                RunState.Running(1),
                RunState.Running(1),
                DONE,
            ]


async def test_the_schema_option_keeps_stores_apart_in_one_database(pg_url: str) -> None:
    with trio.fail_after(30):
        async with open_runtime(f"{pg_url}?schema=team_a") as runtime:
            await (await runtime.start(_body, run_id="r1")).wait()
        async with PostgresStore(pg_url, schema="team_b") as other:
            assert await other.load("r1") is None
        async with PostgresStore(pg_url, schema="team_a") as same:
            record = await same.load("r1")
            assert record is not None
            assert record.state == DONE
    assert "runs" in _tables(pg_url, "team_a")
    assert "runs" in _tables(pg_url, "team_b")


async def test_runtimes_opening_a_fresh_database_at_once_all_open(pg_url: str) -> None:
    """Eight stores open one empty database at the same moment: the advisory lock makes
    one of them create the schema, and every other one finds it made."""
    stores = [PostgresStore(pg_url) for _ in range(8)]
    go = trio.Event()

    async def open_one(store: PostgresStore) -> None:
        await go.wait()
        await store.open()

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for store in stores:
                    nursery.start_soon(open_one, store)
                go.set()
            for store in stores:
                assert await store.version() >= 0
    finally:
        for store in stores:
            await store.aclose()
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT value FROM awaken.meta WHERE key = 'version'").fetchone()
    assert row == (str(LATEST),)


async def test_a_newer_schema_is_refused_and_left_as_it_was(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.open()
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE awaken.meta SET value = %s WHERE key = 'version'", (str(LATEST + 1),))
        before = conn.execute("SELECT * FROM awaken.meta ORDER BY key").fetchall()
    store = PostgresStore(pg_url)
    with pytest.raises(StoreError) as refused:
        await store.open()
    await store.aclose()
    message = str(refused.value)
    assert "newer version" in message
    assert "upgrade awaken_trio" in message
    assert refused.value.outcome_unknown is False
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT * FROM awaken.meta ORDER BY key").fetchall() == before


async def test_a_schema_of_another_application_is_refused(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE SCHEMA awaken")
        conn.execute("CREATE TABLE awaken.users (id int)")
    store = PostgresStore(pg_url)
    with pytest.raises(StoreError, match=r"not an awaken_trio store.*users"):
        await store.open()
    await store.aclose()
    assert _tables(pg_url, "awaken") == {"users"}


async def test_a_wrong_password_fails_opening_without_showing_it(
    pg_server: PgServer, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "Wr0ngPassw0rdXyz"
    url = pg_url.replace(pg_server.password, secret)
    store = PostgresStore(url)
    with pytest.raises(StoreError) as refused:
        await store.open()
    await store.aclose()
    assert "password authentication failed" in str(refused.value)
    assert secret not in str(refused.value)
    assert secret not in repr(refused.value)
    assert secret not in repr(store)
    assert all(secret not in r.getMessage() for r in caplog.records)
    with pytest.raises(StoreError) as again:
        async with open_runtime(url):
            pass  # pragma: no cover
    assert secret not in str(again.value)


async def test_a_closed_store_refuses_calls(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    await store.aclose()
    await store.aclose()  # twice is allowed
    with pytest.raises(StoreError, match="closed"):
        await store.load("r1")


async def test_a_pooled_connection_lends_its_cursors_one_a_statement_and_takes_them_back(
    pg_url: str,
) -> None:
    # The cursors a call used serve the next call on the connection (a new cursor costs as
    # much as its statement); within a call, each statement has a cursor of its own, so
    # results queued in one pipeline are all there when it is flushed.
    async with PostgresStore(pg_url, pool_size=1) as store:

        def pipelined(conn: StoreConnection) -> tuple[list[int], list[object]]:
            with conn.pipeline():
                cursors = [conn.execute("SELECT %s::int", (i,)) for i in range(3)]
            values = [found[0] for c in cursors if (found := c.fetchone()) is not None]
            return values, [*cursors, conn]

        with trio.fail_after(30):
            values, first = await store._conns.call(pipelined, write=True)
            again_values, again = await store._conns.call(pipelined, write=True)
        assert values == again_values == [0, 1, 2]
        assert again[-1] is first[-1]  # one connection (calls one at a time)
        assert len({id(c) for c in first[:-1]}) == 3
        # (both lists hold their cursors, so equal ids are the same cursors)
        assert {id(c) for c in again[:-1]} == {id(c) for c in first[:-1]}

        def poll_many(conn: StoreConnection) -> int:
            for _ in range(100):
                conn.execute("SELECT 1").fetchone()
            return len(conn._lent)

        with trio.fail_after(30):
            assert await store._conns.call(poll_many, write=True) == 100
            kept = await store._conns.call(lambda conn: len(conn._spare), write=True)
        assert kept == _SPARE_CURSORS


async def test_the_queue_is_read_oldest_first_from_its_index(pg_url: str) -> None:
    # With a backlog (and the table's statistics current, as autovacuum keeps them), the
    # serving loop's read of queued runs walks the queue's own index in the order it hands
    # runs out and stops at its limit: no sort of the queue, no walk past ended runs.
    async with PostgresStore(pg_url) as store:
        with trio.fail_after(60):
            await store.apply([new_queued(f"q{i:04}", thread_id=f"t{i}") for i in range(400)])
            handed = await store.runnable({"job"}, 0.0, 8)
    assert [record.run_id for record in handed] == [f"q{i:04}" for i in range(8)]

    def plan() -> list[str]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ANALYZE awaken.runs")
            rows = conn.execute(
                b"EXPLAIN " + Queries.of("awaken").queued,
                {"names": ["job"], "lease_now": 0.0, "now": 0.0, "limit": 8, "by": "w"},
            ).fetchall()
            return [str(line) for (line,) in rows]

    steps = await trio.to_thread.run_sync(plan)
    assert any("Index Scan using runs_queue_by_age on runs r" in step for step in steps), steps
    assert not any("Sort" in step for step in steps), steps
    indexes = await trio.to_thread.run_sync(_indexes, pg_url)
    assert "runs_queue_by_age" in indexes
    assert "runs_queued" not in indexes


def _indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'awaken'")
        return {str(name) for (name,) in rows}
