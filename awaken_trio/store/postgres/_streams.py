"""Runs' streams in the PostgreSQL store: the ``stream_chunks`` table (schema version 4),
what a write transaction does to it (`PgStreamWrites`), and the read of a page
(`read_chunks`).

As in the SQLite store, a row holds the chunks one commit wrote on one channel, at
consecutive offsets, as one JSON array (``_streams``). A transaction reads a run's heads
only after it holds the run's row lock (``FOR UPDATE``), so two transactions writing one
run's stream (its owner's chunks, an end committed by another runtime) never number chunks
alike: the second reads the heads the first committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs
import psycopg
from psycopg import sql

from ..._core import StreamPage
from .._rules import StreamHead
from .._streams import ChunkRows, page_of
from ._reads import StoreConnection

Conn = StoreConnection
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


def to_v4(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    """Version 4: runs' streams. A store from before has none: every run reads as having
    written no channel."""
    for statement in _V4:
        conn.execute(sql.SQL(statement).format(s=schema))


@final
@attrs.frozen
class StreamStatements:
    """The stream statements of one store's schema, composed once."""

    heads: bytes
    insert: bytes
    drop: bytes
    kind: bytes
    page: bytes
    first_after: bytes
    last: bytes
    channels: bytes

    @classmethod
    def of(cls, schema: str) -> StreamStatements:
        s = sql.Identifier(schema)

        def q(text: str) -> bytes:
            return sql.SQL(text).format(s=s).as_bytes(None)

        return cls(
            heads=q(
                "SELECT DISTINCT ON (run_id, channel) run_id, channel, last_offset, generation,"
                " keep FROM {s}.stream_chunks WHERE run_id = ANY(%b)"
                " ORDER BY run_id, channel, last_offset DESC"
            ),
            insert=q(
                "INSERT INTO {s}.stream_chunks (run_id, channel, first_offset, last_offset,"
                " generation, kind, keep, at, chunks) SELECT * FROM unnest(%b::text[],"
                " %b::text[], %b::bigint[], %b::bigint[], %b::bigint[], %b::text[],"
                " %b::boolean[], %b::float8[], %b::text[])"
            ),
            drop=q(
                "DELETE FROM {s}.stream_chunks c USING unnest(%b::text[], %b::text[],"
                " %b::bigint[]) AS d(run_id, channel, before) WHERE c.run_id = d.run_id"
                " AND c.channel = d.channel AND c.last_offset < d.before"
            ),
            kind=q("SELECT kind FROM {s}.runs WHERE run_id = %s"),
            # The rows holding offsets after ``after`` up to ``after + limit``.
            page=q(
                "SELECT first_offset, generation, kind, at, chunks FROM {s}.stream_chunks"
                " WHERE run_id = %s AND channel = %s AND last_offset > %s"
                " AND first_offset <= %s ORDER BY last_offset"
            ),
            # The first row after ``after``, when none starts within the page (the chunks
            # between were deleted).
            first_after=q(
                "SELECT first_offset, generation, kind, at, chunks FROM {s}.stream_chunks"
                " WHERE run_id = %s AND channel = %s AND last_offset > %s"
                " ORDER BY last_offset LIMIT 1"
            ),
            last=q(
                "SELECT max(last_offset) FROM {s}.stream_chunks WHERE run_id = %s AND channel = %s"
            ),
            channels=q(
                "SELECT channel FROM {s}.stream_chunks WHERE run_id = %s GROUP BY channel"
                " ORDER BY min(at), channel"
            ),
        )


@final
class PgStreamWrites:
    """The streams of one write transaction (`ChunkRows`) over the database (see the
    module's docstring for when it reads)."""

    def __init__(self, statements: StreamStatements) -> None:
        self.q = statements
        self.queue = ChunkRows()

    def read(self, conn: Conn, run_ids: list[str]) -> Cursor:
        """Queue the read of ``run_ids``' heads (`take` takes it); after their rows' locks."""
        return conn.execute(self.q.heads, (run_ids,))

    def take(self, run_ids: list[str], found: Cursor) -> None:
        self.queue.take(run_ids, found.fetchall())

    def heads(self, conn: Conn, run_id: str) -> Mapping[str, StreamHead]:
        found = self.queue.heads(run_id)
        if found is None:
            self.take([run_id], self.read(conn, [run_id]))
            found = self.queue.heads(run_id)
            assert found is not None
        return found

    def flush(self, conn: Conn) -> None:
        """Queue the rows, then the deletions (each deletes only rows written before the
        ``"end"`` row queued with it)."""
        queue = self.queue
        if queue.rows:
            rows = queue.rows
            conn.execute(self.q.insert, tuple([row[i] for row in rows] for i in range(9)))
            queue.rows = []
        if queue.drops:
            drops = queue.drops
            conn.execute(self.q.drop, tuple([row[i] for row in drops] for i in range(3)))
            queue.drops = []


def stream_channels(conn: Conn, q: StreamStatements, run_id: str) -> list[str] | None:
    """The channels the run has written: the run first, then its chunks."""
    with conn.pipeline():
        c_kind = conn.execute(q.kind, (run_id,))
        c_channels = conn.execute(q.channels, (run_id,))
    if c_kind.fetchone() is None:
        return None
    return [str(channel) for (channel,) in c_channels.fetchall()]


def read_chunks(
    conn: Conn, q: StreamStatements, run_id: str, channel: str, after: int, limit: int
) -> StreamPage | None:
    """A page of the channel's chunks after ``after``: the run's state first, then its
    chunks (each statement sees what had committed when it started, so an ended run's
    chunks are all there)."""
    with conn.pipeline():
        c_kind = conn.execute(q.kind, (run_id,))
        c_page = conn.execute(q.page, (run_id, channel, after, after + limit))
        c_last = conn.execute(q.last, (run_id, channel))
    found = c_kind.fetchone()
    if found is None:
        return None
    ended = found[0] == "ended"
    rows = c_page.fetchall()
    last_found = c_last.fetchone()
    last = 0 if last_found is None or last_found[0] is None else int(last_found[0])
    if not rows and last > after:
        rows = conn.execute(q.first_after, (run_id, channel, after)).fetchall()
    segments = [(int(first), int(g), kind, at, text) for first, g, kind, at, text in rows]
    chunks = page_of(segments, after, limit, f"stream {channel!r} of run {run_id!r}")
    return StreamPage(chunks, last, ended)
