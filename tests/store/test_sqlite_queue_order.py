"""The queue is read from its indexes, not by a scan of every run.

Every commit that queues a named root asks for the highest ``queued_order`` so far. Only
queued rows carry one, and the index over it is partial (``WHERE queued_order IS NOT
NULL``): a query SQLite cannot prove restricted to those rows scans every run, so each
queueing commit would cost time in proportion to all the runs the file has ever held.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from awaken_trio.store._sqlite import SQLiteStore
from awaken_trio.store._sqlite_reads import _QUEUED
from awaken_trio.store._sqlite_tx import _LAST_QUEUED


async def test_the_last_place_in_the_queue_is_read_from_the_queue_index(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as conn:
        plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _LAST_QUEUED))
    assert "USING COVERING INDEX runs_queued" in plan, plan


async def test_runnable_reads_the_queue_in_order_from_its_index(tmp_path: Path) -> None:
    # The serving loop's read of queued runs walks the queued runs only, already in the
    # order it hands them out, and stops at its limit: neither a scan of every run the file
    # holds (ended ones included) nor a sort of the whole queue.
    path = tmp_path / "runs.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as conn:
        plan = [
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN " + _QUEUED,
                {"names": '["job"]', "lease_now": 0.0, "limit": 8},
            )
        ]
    assert plan[0] == "SEARCH r USING INDEX runs_queue_by_age (kind=?)", plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    assert not any(step == "SCAN r" for step in plan), plan
