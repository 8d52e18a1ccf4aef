"""Times, end causes and counts on PostgreSQL: a schema written before them is migrated
with its runs' times taken from their events, and a filter by cause or unended kind, and
the counts, read their partial indexes."""

from __future__ import annotations

import psycopg
import trio

from awaken_trio.store.postgres import _schema as schema
from awaken_trio.store.postgres._queries import Queries
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued


def _version_5_schema(pg_url: str) -> None:
    failed = '{"kind":"ended","cause":{"kind":"failed","code":"x","message":"m"}}'
    running = '{"kind":"running","generation":1}'
    queued = '{"kind":"queued"}'
    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema.open_schema(conn, "awaken", "test", schema.MIGRATIONS[:5])
        for run_id, kind, state in (
            ("done", "ended", failed),
            ("live", "running", running),
            ("bare", "queued", queued),
        ):
            conn.execute(
                "INSERT INTO awaken.runs (run_id, thread_id, root_run_id, name, input, kind,"
                " state, generation) VALUES (%s, %s, %s, 'job', 'null', %s, %s, 1)",
                (run_id, run_id, run_id, kind, state),
            )
        for seq, (run_id, state, at) in enumerate(
            (
                ("done", queued, 10.0),
                ("done", running, 11.0),
                ("done", failed, 12.0),
                ("live", running, 20.0),
            ),
            1,
        ):
            conn.execute(
                "INSERT INTO awaken.events (seq, run_id, thread_id, generation, kind, state,"
                " detail, at) VALUES (%s, %s, %s, 1, 'committed', %s, '{}', %s)",
                (seq, run_id, run_id, state, at),
            )
        conn.execute(
            "INSERT INTO awaken.claims (run_id, owner, epoch, lease_until)"
            " VALUES ('live', 'host:1:abc', 1, 1e12)"
        )


async def test_a_schema_from_before_times_takes_them_from_its_events(pg_url: str) -> None:
    _version_5_schema(pg_url)
    async with PostgresStore(pg_url) as store:
        done = await store.load("done")
        live = await store.load("live")
        bare = await store.load("bare")
        assert done is not None
        assert live is not None
        assert bare is not None
        assert (done.created_at, done.started_at, done.updated_at, done.ended_at) == (
            10.0,
            11.0,
            12.0,
            12.0,
        )
        assert (live.created_at, live.started_at, live.ended_at) == (20.0, 20.0, None)
        assert live.worker_id == "host:1:abc"
        assert (bare.created_at, bare.worker_id) == (None, None)
        assert [r.run_id for r in await store.list_runs(state="failed")] == ["done"]
        counts = await store.count_runs()
        assert (counts["failed"], counts["ended"], counts["queued"]) == (1, 1, 1)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        version = conn.execute("SELECT value FROM awaken.meta WHERE key = 'version'").fetchone()
    assert version == (str(schema.LATEST),)


def _plan(url: str, query: bytes | str, params: dict[str, object]) -> str:
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")  # a few rows: ask what it could use
        found = conn.execute(
            b"EXPLAIN " + (query if isinstance(query, bytes) else query.encode()), params
        )
        return "\n".join(str(line) for (line,) in found.fetchall())


async def test_filters_and_counts_read_the_partial_indexes(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        with trio.fail_after(60):
            await store.apply([new_queued(f"r{i}", thread_id=f"t{i}") for i in range(200)])
    q = Queries.of("awaken")
    plan = await trio.to_thread.run_sync(
        _plan,
        pg_url,
        q.list_runs.format(s='"awaken"', where="WHERE r.cause = %(state)s"),
        {"state": "failed", "limit": 50},
    )
    assert "runs_by_cause" in plan, plan
    assert "Sort" not in plan, plan
    plan = await trio.to_thread.run_sync(
        _plan,
        pg_url,
        q.list_runs.format(s='"awaken"', where="WHERE r.kind = %(state)s AND r.kind <> 'ended'"),
        {"state": "queued", "limit": 50},
    )
    assert "runs_unended" in plan, plan
    assert "Sort" not in plan, plan
    plan = await trio.to_thread.run_sync(_plan, pg_url, q.count_runs, {})
    assert "runs_unended" in plan, plan
    assert "runs_by_cause" in plan, plan
