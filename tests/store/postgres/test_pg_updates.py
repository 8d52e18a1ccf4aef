"""An update of the PostgreSQL store sends only the columns of a run's row that changed
(`Queries.update_runs_of`): what it compares with is the row as read, then as the last
update of the same transaction wrote it."""

from __future__ import annotations

from typing import Any

import psycopg
import trio

from awaken_trio import RunState
from awaken_trio.store import Commit
from awaken_trio.store.postgres._store import PostgresStore
from awaken_trio.store.postgres._tx import PgTx
from tests.commits import new_commit, new_queued


def _running(run_id: str) -> Commit:
    return new_commit(run_id, state=RunState.Running(1))


def _columns(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        cursor = conn.execute(
            "SELECT kind, state, attempt_epoch, worker_id, updated_at, queued_order"
            " FROM awaken.runs WHERE run_id = %s",
            (run_id,),
        )
        names = [d.name for d in cursor.description or ()]
        found = cursor.fetchone()
        assert found is not None
        return dict(zip(names, found, strict=True))


def _version(url: str, run_id: str) -> str:
    """The row version's transaction (``xmin``): every update makes a new one."""
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT xmin::text FROM awaken.runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert found is not None
        return str(found[0])


async def test_a_column_changed_back_after_an_update_is_written_back(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.apply([_running("r1")])
        before = await trio.to_thread.run_sync(_columns, pg_url, "r1")
        assert before["attempt_epoch"] is None
        assert before["worker_id"] is None

        def change_then_undo(tx: PgTx, now: float) -> None:
            row = tx.row("r1")
            assert row is not None
            tx.set_attempt(row, 7)
            tx.set_worker(row, "w1")
            tx.flush()  # sends both
            tx.set_attempt(row, None)  # as it was read, but not as the store now holds it

        await store._write(change_then_undo, "a test's writes")
        after = await trio.to_thread.run_sync(_columns, pg_url, "r1")
    assert after == {**before, "worker_id": "w1"}


async def test_a_row_set_to_what_it_holds_sends_no_update(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.apply([_running("r1"), _running("r2")])
        before = [await trio.to_thread.run_sync(_version, pg_url, r) for r in ("r1", "r2")]

        def nothing_new(tx: PgTx, now: float) -> None:
            for run_id in ("r1", "r2"):
                row = tx.row(run_id)
                assert row is not None
                assert row.attempt_epoch is None
                tx.set_attempt(row, None)  # (marks the row changed)

        await store._write(nothing_new, "a test's writes")
        after = [await trio.to_thread.run_sync(_version, pg_url, r) for r in ("r1", "r2")]
    assert after == before  # no new row version: no update was sent


async def test_a_queued_run_written_takes_a_new_place_in_the_queue(pg_url: str) -> None:
    """As every write of a queued run does, whatever else it changes."""
    async with PostgresStore(pg_url) as store:
        await store.apply([new_queued("r1"), new_queued("r2")])
        before = await trio.to_thread.run_sync(_columns, pg_url, "r1")

        def touch(tx: PgTx, now: float) -> None:
            row = tx.row("r1")
            assert row is not None
            tx.set_attempt(row, None)

        await store._write(touch, "a test's writes")
        after = await trio.to_thread.run_sync(_columns, pg_url, "r1")
        second = await trio.to_thread.run_sync(_columns, pg_url, "r2")
    assert after["queued_order"] > second["queued_order"] > before["queued_order"]
    assert {k: v for k, v in after.items() if k != "queued_order"} == {
        k: v for k, v in before.items() if k != "queued_order"
    }


async def test_rows_of_one_batch_that_change_different_columns_each_keep_the_others(
    pg_url: str,
) -> None:
    async with PostgresStore(pg_url) as store:
        await store.apply([_running("r1"), _running("r2")])
        before = {r: await trio.to_thread.run_sync(_columns, pg_url, r) for r in ("r1", "r2")}

        def one_column_each(tx: PgTx, now: float) -> None:
            one, two = tx.row("r1"), tx.row("r2")
            assert one is not None
            assert two is not None
            tx.set_worker(one, "w1")
            tx.set_attempt(two, 3)

        await store._write(one_column_each, "a test's writes")
        after = {r: await trio.to_thread.run_sync(_columns, pg_url, r) for r in ("r1", "r2")}
    assert after["r1"] == {**before["r1"], "worker_id": "w1"}
    assert after["r2"] == {**before["r2"], "attempt_epoch": 3}
