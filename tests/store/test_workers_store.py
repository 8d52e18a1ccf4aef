"""Worker rows at scale on the SQLite store: ten thousand ended workers leave listing the
live ones as cheap as ever (a partial index of the workers that have not stopped), and
are deleted once a day old."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from awaken_trio.store import WorkerInfo
from awaken_trio.store.sqlite._store import SQLiteStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_ten_thousand_ended_workers_are_neither_listed_nor_kept(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, lease_clock=clock) as store:
        for n in range(10_000):
            await store.register_worker(WorkerInfo(f"old-{n}", "host", n, {"job": None}, 1, 30.0))
            await store.end_worker(f"old-{n}")
        clock.now += 3600
        await store.register_worker(WorkerInfo("live", "host", 1, {"job": None}, 4, 30.0))
        (live,) = await store.list_workers()
        assert (live.worker_id, live.state) == ("live", "serving")
        plan = _plan(path)
        assert "USING INDEX workers_by_state" in plan, plan
        assert len(await store.list_workers(ended=True)) == 10_001
        clock.now += 86400 - 1800  # the ended ones are a day old; the live one is not
        assert await store.worker_seen("live", 0) == "serving"
        assert await store.forget_workers(86400) == 10_000
        assert [w.worker_id for w in await store.list_workers(ended=True)] == ["live"]


def _plan(path: Path) -> str:
    """How SQLite reads the live workers, as `list_workers` asks."""
    conn = sqlite3.connect(path)
    try:
        return " ".join(
            row[-1]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM workers"
                " WHERE state IN ('serving', 'draining') ORDER BY rowid DESC"
            )
        )
    finally:
        conn.close()
