"""Runs' streams in the PostgreSQL store: the ``stream_chunks`` table (schema version 5),
how a write transaction reads its heads and writes its rows (`read_heads`, `write_queue`),
and the reads of a page and of a run's channels (`read_chunks`, `stream_channels`). The
statements are named in ``queries.sql``.

As in the SQLite store, a row holds the chunks one commit wrote on one channel, at
consecutive offsets, as one JSON array (``store/_streams``). A transaction reads a run's
heads only after it holds the run's row lock (``FOR UPDATE``), so two transactions writing
one run's stream (its owner's chunks, an end committed by another runtime) never number
chunks alike: the second reads the heads the first committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg import sql

from ..._core import StreamPage
from .._streams import ChunkRows, page_of

if TYPE_CHECKING:  # (the schema's migrations import this module before `_conn` exists)
    from ._conn import StoreConnection as Conn
    from ._queries import Queries

Cursor = psycopg.Cursor[tuple[Any, ...]]

_V4: Final = (
    """CREATE TABLE {s}.stream_chunks (
        run_id text NOT NULL,
        channel text NOT NULL,
        first_offset bigint NOT NULL,
        last_offset bigint NOT NULL,
        generation bigint NOT NULL,
        kind text NOT NULL CHECK (kind IN ('data', 'reset', 'end')),
        keep boolean NOT NULL,
        at double precision NOT NULL,
        chunks text NOT NULL,
        PRIMARY KEY (run_id, channel, last_offset)
    )""",
)


def to_v5(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 4: runs' streams. A store from before has none: every run reads as having
    written no channel."""
    for statement in _V4:
        conn.execute(sql.SQL(statement).format(s=schema))


def read_heads(conn: Conn, statement: bytes, run_ids: list[str]) -> Cursor:
    """Queue, in the pipeline the caller holds, the read of ``run_ids``' heads (the caller
    hands the cursor's rows to `ChunkRows.take`)."""
    return conn.execute(statement, (run_ids,))


def write_queue(conn: Conn, insert: bytes, drop: bytes, queue: ChunkRows) -> None:
    """Queue the rows, then the deletions (each deletes only rows written before the
    ``"end"`` row queued with it)."""
    if queue.rows:
        rows = queue.rows
        conn.execute(insert, tuple([row[i] for row in rows] for i in range(9)))
        queue.rows = []
    if queue.drops:
        drops = queue.drops
        conn.execute(drop, tuple([row[i] for row in drops] for i in range(3)))
        queue.drops = []


def stream_channels(conn: Conn, q: Queries, run_id: str) -> list[str] | None:
    """The channels the run has written: the run first, then its chunks."""
    with conn.pipeline():
        c_kind = conn.execute(q.run_kind, (run_id,))
        c_channels = conn.execute(q.stream_channels, (run_id,))
    if c_kind.fetchone() is None:
        return None
    return [str(channel) for (channel,) in c_channels.fetchall()]


def read_chunks(
    conn: Conn, q: Queries, run_id: str, channel: str, after: int, limit: int
) -> StreamPage | None:
    """A page of the channel's chunks after ``after``: the run's state first, then its
    chunks (each statement sees what had committed when it started, so an ended run's
    chunks are all there)."""
    with conn.pipeline():
        c_kind = conn.execute(q.run_kind, (run_id,))
        c_page = conn.execute(q.chunk_page, (run_id, channel, after, after + limit))
        c_last = conn.execute(q.chunk_last, (run_id, channel))
    found = c_kind.fetchone()
    if found is None:
        return None
    ended = found[0] == "ended"
    rows = c_page.fetchall()
    last_found = c_last.fetchone()
    last = 0 if last_found is None or last_found[0] is None else int(last_found[0])
    if not rows and last > after:
        rows = conn.execute(q.chunk_first_after, (run_id, channel, after)).fetchall()
    segments = [(int(first), int(g), kind, at, text) for first, g, kind, at, text in rows]
    chunks = page_of(segments, after, limit, f"stream {channel!r} of run {run_id!r}")
    return StreamPage(chunks, last, ended)
