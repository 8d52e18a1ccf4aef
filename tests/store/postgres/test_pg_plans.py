"""The plans of the PostgreSQL store's statements on the hot path: by key, whatever the
planner believes of the table's size.

The store prepares every statement (``prepare_threshold=0``), so after its first few
executions a connection runs a generic plan, made once, with the table's size as the
statistics said then. In a store that grows fast (a backlog submitted at once) that is a
fraction of its size later, and a plan that scans every run for a batch of a few dozen
costs time in proportion to the whole history: 17 ms a statement at 20,000 runs, measured.
These tests plan each statement the way a connection does after its first executions
(``plan_cache_mode = force_generic_plan``) over a few thousand runs, and check that it
reaches runs by key."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import trio
from psycopg import sql
from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from awaken_trio.store.postgres._queries import Queries
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued

RUNS = 3000


async def _store_of(url: str) -> None:
    """Fill the store with RUNS runs, each on a thread of its own, half of them with a live
    attempt (as a busy store's statistics say), then gather statistics."""
    async with PostgresStore(url) as store:
        with trio.fail_after(120):
            for first in range(0, RUNS, 500):
                await store.apply(
                    [new_queued(f"r{i:05}", thread_id=f"t{i}") for i in range(first, first + 500)]
                )

    def analyze() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            # (Only the planner looks at these rows: no runtime serves this store.)
            conn.execute(
                "UPDATE awaken.runs SET attempt_epoch = 1, queued_order = NULL WHERE run_id < %s",
                (f"r{RUNS // 2:05}",),
            )
            conn.execute("ANALYZE")

    await trio.to_thread.run_sync(analyze)


def _generic_plan(url: str, statement: bytes, params: Sequence[Any] | Mapping[str, Any]) -> str:
    """The generic plan of ``statement`` (psycopg's placeholders), as a connection of the
    store runs it once the statement has been prepared and run a few times."""
    with psycopg.connect(url) as conn:
        query = PostgresQuery(Transformer(conn))
        query.convert(statement, params)
        assert query.params is not None
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(b"PREPARE probe AS " + query.query)
        # The values only have to be valid: a generic plan does not look at them.
        values = ", ".join("NULL" for _ in query.params)
        found = conn.execute(f"EXPLAIN EXECUTE probe({values})").fetchall()
        conn.rollback()
        return "\n".join(str(line) for (line,) in found)


async def _assert_reached_by(
    url: str, statement: bytes, params: Sequence[Any] | Mapping[str, Any], index: str
) -> None:
    """The statement's generic plan reaches runs through ``index``, never by a scan."""
    plan = await trio.to_thread.run_sync(_generic_plan, url, statement, params)
    assert "Seq Scan on runs" not in plan, plan
    assert index in plan, plan


async def test_a_transactions_reads_and_its_update_reach_runs_by_key(pg_url: str) -> None:
    await _store_of(pg_url)
    q = Queries.of("awaken")
    keys = ["r00001", "r00002"]
    await _assert_reached_by(pg_url, q.rows, (keys,), "Index Scan using runs_pkey")
    await _assert_reached_by(pg_url, q.live, (keys,), "runs_live_on_thread")
    await _assert_reached_by(pg_url, q.update_runs, ("[]", 2), "Index Scan using runs_pkey")


async def test_a_look_for_work_asks_each_candidate_for_its_threads_live_attempts(
    pg_url: str,
) -> None:
    # Not one join that reads every run to find the live attempts.
    await _store_of(pg_url)
    params = {"names": ["job"], "lease_now": 0.0, "now": 0.0, "limit": 8, "by": "a look"}
    await _assert_reached_by(pg_url, Queries.of("awaken").queued, params, "runs_live_on_thread")
    # And each candidate's reservation by its key, not a join that reads them all.
    await trio.to_thread.run_sync(_reserve_many, pg_url)
    await _assert_reached_by(pg_url, Queries.of("awaken").queued, params, "reserved_pkey")


def _reserve_many(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awaken.reserved SELECT 'r' || lpad(i::text, 5, '0'), 'a look', 1e12"
            " FROM generate_series(0, 2999) AS i"
        )
        conn.execute("ANALYZE awaken.reserved")


async def test_a_look_at_ended_runs_and_a_read_of_states_reach_runs_by_key(pg_url: str) -> None:
    await _store_of(pg_url)
    r = Queries.of("awaken")
    keys = ["r00001", "r00002"]
    ended = {"anyway": True, "known": 0, "running": keys}
    await _assert_reached_by(pg_url, r.states, (keys,), "Index Scan using runs_pkey")
    await _assert_reached_by(pg_url, r.look_ended, ended, "Index Scan using runs_pkey")


async def test_the_stores_connections_compile_no_jit(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        with trio.fail_after(30):
            for write in (False, True):
                found = await store._conns.call(
                    lambda conn: conn.execute("SHOW jit").fetchone(), write=write
                )
                assert found == ("off",)


async def test_a_look_for_runs_past_their_limits_reads_their_partial_indexes(
    pg_url: str,
) -> None:
    # Every serving loop turn asks for the root runs past a deadline or a queue timeout:
    # through the partial indexes that hold those runs alone, never a scan of every run.
    await _store_of(pg_url)
    q = Queries.of("awaken")
    params = {"now": 0.0, "limit": 8}
    plan = await trio.to_thread.run_sync(_generic_plan, pg_url, q.past_deadline, params)
    assert "Seq Scan" not in plan, plan
    # Each index twice: the runs past it, and the first still to come.
    assert plan.count("runs_past_deadline") == 2, plan
    assert plan.count("runs_past_queue_deadline") == 2, plan


def _look_planned_before_claims(url: str, params: Mapping[str, Any], claims: int) -> str:
    """The plan of a look (``queued``, in a look's transaction) on a connection that
    prepared it and keeps a generic plan of it made while no run was claimed, once
    ``claims`` runs are claimed since (as a connection of the store runs it: the statement
    prepared on its first run)."""
    r = Queries.of("awaken")
    with psycopg.connect(url, autocommit=True) as conn:
        query = PostgresQuery(Transformer(conn))
        query.convert(r.queued, params)
        assert query.params is not None
        conn.execute(b"PREPARE look AS " + query.query)
        # The values in the placeholders' order (utility statements take no parameters).
        names = dict.fromkeys(re.findall(rb"%\((\w+)\)", r.queued))
        values = ", ".join(sql.Literal(params[name.decode()]).as_string(conn) for name in names)
        # The generic plan a connection keeps after a statement's first runs (it may,
        # when its cost is no worse than the custom plans'), made now.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"EXECUTE look({values})").fetchall()
        conn.execute(
            "INSERT INTO awaken.claims SELECT run_id, 'w', 1, 1e12 FROM awaken.runs"
            " ORDER BY run_id LIMIT %s",
            (claims,),
        )
        with conn.transaction():
            conn.execute(r.look_async)
            found = conn.execute(f"EXPLAIN EXECUTE look({values})").fetchall()
        return "\n".join(str(line) for (line,) in found)


async def test_a_look_asks_each_candidate_for_its_claims_by_key_as_claims_grow(
    pg_url: str,
) -> None:
    # A look made while no run was claimed (a store's first looks) runs again once workers
    # hold hundreds of runs: a walk of every claim would then be paid for each candidate
    # (measured: a look by the second of two workers holding 1,024 runs cost twice as
    # much). The candidate's claim, and the claim of a live attempt on its thread, are
    # read by the claims' key.
    await _store_of(pg_url)
    params = {"names": ["job"], "lease_now": 0.0, "now": 0.0, "limit": 8, "by": "a look"}
    plan = await trio.to_thread.run_sync(_look_planned_before_claims, pg_url, params, 1500)
    claims = [line for line in plan.splitlines() if " on claims " in line]
    assert len(claims) == 2, plan
    assert all("Index Scan using claims_pkey on claims" in line for line in claims), plan
