"""Runs' streams in the SQLite store: the ``stream_chunks`` table (schema version 6), how a
write transaction reads its heads and writes its rows (`read_heads`, `write_queue`), and
the read of a page (`read_chunks`).

A row holds the chunks one commit wrote on one channel, at consecutive offsets
(``first_offset`` to ``last_offset``), their values as one JSON array (``_streams``). The
rows of a channel never overlap, so ``(run_id, channel, last_offset)`` orders and finds
them (its unique index).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ..._core import StreamPage
from .._codec import dump_json
from .._streams import ChunkRows, page_of
from ._bulk import insert_rows

_HEADS: Final = (
    # (SQLite takes the bare columns of a MAX() aggregate from the row holding the maximum.)
    "SELECT run_id, channel, MAX(last_offset), generation, keep FROM stream_chunks"
    " WHERE run_id IN (SELECT value FROM json_each(?)) GROUP BY run_id, channel"
)
_INSERT: Final = (
    "INSERT INTO stream_chunks (run_id, channel, first_offset, last_offset, generation, kind,"
    " keep, at, chunks) VALUES {}"
)
_DROP: Final = "DELETE FROM stream_chunks WHERE run_id = ? AND channel = ? AND last_offset < ?"
_PAGE: Final = (
    "SELECT first_offset, generation, kind, at, chunks FROM stream_chunks"
    " WHERE run_id = ? AND channel = ? AND last_offset > ? ORDER BY last_offset"
)
_LAST: Final = "SELECT MAX(last_offset) FROM stream_chunks WHERE run_id = ? AND channel = ?"
_CHANNELS: Final = (
    "SELECT channel FROM stream_chunks WHERE run_id = ? GROUP BY channel ORDER BY MIN(at), channel"
)


def create_v6(conn: sqlite3.Connection) -> None:
    """Version 5: runs' streams. A file from before has none: every run reads as having
    written no channel."""
    conn.execute(
        """CREATE TABLE stream_chunks (
            run_id TEXT NOT NULL,
            channel TEXT NOT NULL,
            first_offset INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('data', 'reset', 'end')),
            keep INTEGER NOT NULL,
            at REAL NOT NULL,
            chunks TEXT NOT NULL
        )"""
    )
    conn.execute(
        "CREATE UNIQUE INDEX stream_chunks_by_offset ON stream_chunks"
        " (run_id, channel, last_offset)"
    )


def read_heads(conn: sqlite3.Connection, queue: ChunkRows, run_ids: list[str]) -> None:
    """Read the stream heads of ``run_ids`` into ``queue``, in one query."""
    queue.take(run_ids, conn.execute(_HEADS, (dump_json(run_ids),)))


def write_queue(conn: sqlite3.Connection, queue: ChunkRows) -> None:
    """Hand the queued rows, then the deletions, to SQLite (a deletion only ever removes
    rows written before the ``"end"`` chunk queued with it)."""
    if queue.rows:
        insert_rows(conn, _INSERT, 9, [value for row in queue.rows for value in row])
        queue.rows.clear()
    if queue.drops:
        conn.executemany(_DROP, queue.drops)
        queue.drops.clear()


def stream_channels(conn: sqlite3.Connection, run_id: str) -> list[str] | None:
    """The channels the run has written (inside the read's one snapshot)."""
    if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
        return None
    return [channel for (channel,) in conn.execute(_CHANNELS, (run_id,))]


def read_chunks(
    conn: sqlite3.Connection, run_id: str, channel: str, after: int, limit: int
) -> StreamPage | None:
    """A page of the channel's chunks after ``after`` (inside the read's one snapshot)."""
    found = conn.execute("SELECT kind FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if found is None:
        return None
    ended = found[0] == "ended"
    rows = conn.execute(_PAGE, (run_id, channel, after))
    try:
        chunks = page_of(rows, after, limit, f"stream {channel!r} of run {run_id!r}")
    finally:
        rows.close()
    (last,) = conn.execute(_LAST, (run_id, channel)).fetchone()
    return StreamPage(chunks, last or 0, ended)
