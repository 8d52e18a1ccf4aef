"""The queue is read from its index, not by a scan of every run the file holds.

`runnable` (every serving loop's look) hands queued runs out oldest first, at most a
batch. A query SQLite cannot prove restricted to the queued rows walks every run ever
written, ended ones included, so each look would cost time in proportion to the file's
whole history.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from awaken_trio.store.sqlite._reads import _QUEUED, OVERDUE
from awaken_trio.store.sqlite._store import SQLiteStore


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
                {"names": '["job"]', "lease_now": 0.0, "now": 0.0, "limit": 8},
            )
        ]
    assert plan[0] == "SEARCH r USING INDEX runs_queue_by_age (kind=?)", plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    assert not any(step == "SCAN r" for step in plan), plan


async def test_the_look_for_runs_past_their_limits_searches_their_partial_indexes(
    tmp_path: Path,
) -> None:
    # Every serving loop turn looks for the root runs past a deadline or a queue timeout:
    # each statement reads the partial index that holds its candidates alone, never a
    # scan of every run, and the runs past a limit come in the index's order (no sort).
    path = tmp_path / "runs.db"
    async with SQLiteStore(path):
        pass
    params = {"now": 5.0, "limit": 8}
    with sqlite3.connect(path) as conn:
        plan = [str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + OVERDUE, params)]
    searches = [step for step in plan if step.startswith("SEARCH r")]
    # The runs past a deadline, past a queue deadline, and the first of each still to come.
    assert sum("USING INDEX runs_past_deadline (deadline" in s for s in searches) == 2, plan
    assert sum("USING INDEX runs_past_queue_deadline (queue_deadline" in s for s in searches) == 2
    assert len(searches) == 4, plan
    assert not any(step == "SCAN r" or "TEMP B-TREE" in step for step in plan), plan
