"""The SQLite store's worker rows (DESIGN §3.11): one per serving runtime, its times the
machine's wall clock (the store's, as leases are). These run on the store's thread, in a
transaction `Session` opened."""

from __future__ import annotations

import sqlite3
from typing import Final

from ..._core import WorkerInfo, WorkerRecord, WorkerState
from .._workers import WORKER_COLUMNS, bodies_text, worker_of


def create_v10(conn: sqlite3.Connection) -> None:
    """Version 10: the workers. A row per serving runtime, replaced when one registers
    again with its id; ``lease`` is the worker's own, which decides when it reads lost.
    Listing reads the workers that have not stopped through ``workers_by_state`` (however
    many stopped ones are kept), newest registered first (by rowid); forgetting reads
    ``workers_by_seen``."""
    conn.execute(
        """CREATE TABLE workers (
            worker_id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('serving', 'draining', 'stopped')),
            started_at REAL NOT NULL,
            last_seen REAL NOT NULL,
            bodies TEXT NOT NULL,
            concurrency INTEGER NOT NULL,
            active INTEGER NOT NULL DEFAULT 0,
            lease REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX workers_by_state ON workers (state)")
    conn.execute("CREATE INDEX workers_by_seen ON workers (last_seen)")


_SEEN: Final = "UPDATE workers SET last_seen = ?, active = ? WHERE worker_id = ?"


def seen(conn: sqlite3.Connection, worker_id: str, active: int, now: float) -> WorkerState | None:
    if conn.execute(_SEEN, (now, active, worker_id)).rowcount == 0:
        return None  # no row: a runtime that does not serve, or a row deleted by hand
    return state(conn, worker_id)


def register(conn: sqlite3.Connection, worker: WorkerInfo, now: float) -> None:
    conn.execute("DELETE FROM workers WHERE worker_id = ?", (worker.worker_id,))
    conn.execute(
        f"INSERT INTO workers ({WORKER_COLUMNS}) VALUES (?, ?, ?, 'serving', ?, ?, ?, ?, 0, ?)",
        (
            worker.worker_id,
            worker.host,
            worker.pid,
            now,
            now,
            bodies_text(worker.bodies),
            worker.concurrency,
            worker.lease,
        ),
    )


def state(conn: sqlite3.Connection, worker_id: str) -> WorkerState | None:
    found = conn.execute("SELECT state FROM workers WHERE worker_id = ?", (worker_id,)).fetchone()
    return None if found is None else found[0]


def listed(conn: sqlite3.Connection, ended: bool, now: float) -> list[WorkerRecord]:
    where = "" if ended else "WHERE state IN ('serving', 'draining')"  # workers_by_state
    found = conn.execute(f"SELECT {WORKER_COLUMNS} FROM workers {where} ORDER BY rowid DESC")
    return [worker_of(row, now) for row in found]


def drain(conn: sqlite3.Connection, worker_id: str, now: float) -> WorkerRecord | None:
    conn.execute(
        "UPDATE workers SET state = 'draining' WHERE worker_id = ? AND state = 'serving'",
        (worker_id,),
    )
    found = conn.execute(
        f"SELECT {WORKER_COLUMNS} FROM workers WHERE worker_id = ?", (worker_id,)
    ).fetchone()
    return None if found is None else worker_of(found, now)


def end(conn: sqlite3.Connection, worker_id: str, now: float) -> None:
    conn.execute(
        "UPDATE workers SET state = 'stopped', last_seen = ?, active = 0 WHERE worker_id = ?",
        (now, worker_id),
    )


def forget(conn: sqlite3.Connection, before: float) -> int:
    return conn.execute("DELETE FROM workers WHERE last_seen < ?", (before,)).rowcount
