"""The next place in a thread's queue is read from the queue's index, not by a scan.

Every commit that queues a named root asks for the highest ``queued_order`` so far. Only
queued rows carry one, and the index over it is partial (``WHERE queued_order IS NOT
NULL``): a query SQLite cannot prove restricted to those rows scans every run, so each
queueing commit would cost time in proportion to all the runs the file has ever held.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from awaken_trio.store._sqlite import SQLiteStore
from awaken_trio.store._sqlite_tx import _LAST_QUEUED


async def test_the_last_place_in_the_queue_is_read_from_the_queue_index(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path):
        pass
    with sqlite3.connect(path) as conn:
        plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _LAST_QUEUED))
    assert "USING COVERING INDEX runs_queued" in plan, plan
