"""Deleting ended runs from the SQLite store (`PruningStore.prune`).

A tree goes whole or not at all: its root's terminal event is old enough and every run in
it (``root_run_id``) has ended. SQLite puts the pages it frees on the file's free list and
reuses them for later writes, so a pruned file stops growing.
"""

from __future__ import annotations

from typing import Final

from ._tx import Transaction

_DOOMED: Final = """
    CREATE TEMP TABLE IF NOT EXISTS awaken_doomed (run_id TEXT PRIMARY KEY) WITHOUT ROWID
"""
_SELECT: Final = """
    INSERT INTO awaken_doomed (run_id)
    SELECT m.run_id FROM runs m WHERE m.root_run_id IN (
        SELECT r.run_id FROM runs r
        WHERE r.parent_run_id IS NULL AND r.kind = 'ended'
        AND (SELECT e.at FROM events e WHERE e.run_id = r.run_id ORDER BY e.seq DESC LIMIT 1)
            <= ?
        AND NOT EXISTS (
            SELECT 1 FROM runs o WHERE o.root_run_id = r.run_id AND o.kind != 'ended'
        )
    )
"""
_TABLES: Final = (
    "events",
    "tickets",
    "inbox",
    "claims",
    "checkpoints",
    "stream_chunks",
    "runs",
)


def prune(tx: Transaction, ended_before: float, dry_run: bool) -> int:
    conn = tx.conn
    conn.execute(_DOOMED)
    conn.execute("DELETE FROM awaken_doomed")
    conn.execute(_SELECT, (ended_before,))
    (count,) = conn.execute("SELECT COUNT(*) FROM awaken_doomed").fetchone()
    if count and not dry_run:
        for table in _TABLES:
            conn.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM awaken_doomed)")
        # The cache may hold rows just deleted: it reads the file again.
        tx.cache.clear()
    conn.execute("DELETE FROM awaken_doomed")
    return int(count)
