"""Runs' streams in the PostgreSQL store: the ``stream_chunks`` table (schema version 4),
what a write transaction does to it (`PgStreamWrites`), and the read of a page
(`read_chunks`).

As in the SQLite store, a row holds the chunks one commit wrote on one channel, at
consecutive offsets, as one JSON array. A transaction reads a run's heads only after it
holds the run's row lock (``FOR UPDATE``), so two transactions writing one run's stream
(its owner's chunks, an end committed by another runtime) never number chunks alike: the
second reads the heads the first committed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, final

import attrs
import psycopg
from psycopg import sql

from ..._core import ChunkKind, JsonValue, StreamChunk, StreamPage
from .._codec import dump_json, load_wrapped
from .._rules import StreamHead
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
    """What one write transaction reads of streams and writes to them (see the module's
    docstring for when it reads)."""

    def __init__(self, statements: StreamStatements) -> None:
        self.q = statements
        self._heads: dict[str, dict[str, StreamHead]] = {}
        self._rows: list[tuple[Any, ...]] = []
        self._drops: list[tuple[str, str, int]] = []

    @property
    def queued(self) -> bool:
        return bool(self._rows or self._drops)

    def missing(self, run_ids: Collection[str]) -> list[str]:
        return [run_id for run_id in run_ids if run_id not in self._heads]

    def read(self, conn: Conn, run_ids: list[str]) -> Cursor:
        """Queue the read of ``run_ids``' heads (`take` takes it); after their rows' locks."""
        return conn.execute(self.q.heads, (run_ids,))

    def take(self, run_ids: list[str], found: Cursor) -> None:
        heads = self._heads
        for run_id in run_ids:
            heads[run_id] = {}
        for run_id, channel, last, generation, keep in found.fetchall():
            heads[run_id][channel] = StreamHead(int(last), int(generation), bool(keep))

    def heads(self, conn: Conn, run_id: str) -> Mapping[str, StreamHead]:
        found = self._heads.get(run_id)
        if found is None:
            self.take([run_id], self.read(conn, [run_id]))
            found = self._heads[run_id]
        return dict(found)

    def append(
        self,
        run_id: str,
        channel: str,
        first: int,
        generation: int,
        kind: ChunkKind,
        values: Sequence[JsonValue],
        at: float,
        keep: bool,
    ) -> None:
        last = first + len(values) - 1
        self._heads[run_id][channel] = StreamHead(last, generation, keep)
        text = dump_json(list(values))
        self._rows.append((run_id, channel, first, last, generation, kind, keep, float(at), text))

    def drop(self, run_id: str, channel: str, before: int) -> None:
        self._drops.append((run_id, channel, before))

    def flush(self, conn: Conn) -> None:
        """Queue the rows, then the deletions (each deletes only rows written before the
        ``"end"`` row queued with it)."""
        if self._rows:
            rows = self._rows
            conn.execute(self.q.insert, tuple([row[i] for row in rows] for i in range(9)))
            self._rows = []
        if self._drops:
            drops = self._drops
            conn.execute(self.q.drop, tuple([row[i] for row in drops] for i in range(3)))
            self._drops = []


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
    chunks: list[StreamChunk] = []
    what = f"stream {channel!r} of run {run_id!r}"
    for first, generation, kind, at, text in rows:
        values = load_wrapped(text, what, 1)
        assert isinstance(values, list)
        skip = max(after + 1 - first, 0)
        wanted = values[skip : skip + limit - len(chunks)]
        for offset, value in enumerate(wanted, first + skip):
            chunks.append(StreamChunk(offset, int(generation), kind, value, at))
        if len(chunks) >= limit:
            break
    return StreamPage(tuple(chunks), last, ended)
