"""Runs' streams in the SQLite store: the ``stream_chunks`` table (schema version 5), what a
write transaction does to it (`StreamWrites`), and the read of a page (`read_chunks`).

A row holds the chunks one commit wrote on one channel, at consecutive offsets
(``first_offset`` to ``last_offset``), their values as one JSON array: a body that sends
thousands of chunks between two flushes costs a row per flush, not a row per chunk. The
rows of a channel never overlap, so ``(run_id, channel, last_offset)`` orders and finds
them (its unique index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, final

from ..._core import ChunkKind, JsonValue, StreamChunk, StreamPage
from .._codec import dump_json, load_wrapped
from .._rules import StreamHead
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


def create_v5(conn: sqlite3.Connection) -> None:
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


@final
class StreamWrites:
    """What one write transaction reads of streams and writes to them: the heads of the
    channels of the runs it touched (read once per run, then kept up to date by its own
    appends), and the rows and deletions it queued."""

    def __init__(self) -> None:
        self._heads: dict[str, dict[str, StreamHead]] = {}
        self._rows: list[Any] = []  # the values of `_INSERT` rows, one after another
        self._drops: list[tuple[str, str, int]] = []

    def prefetch(self, conn: sqlite3.Connection, run_ids: Collection[str]) -> None:
        """Read the heads of ``run_ids`` not read yet, in one query."""
        missing = [run_id for run_id in run_ids if run_id not in self._heads]
        if not missing:
            return
        for run_id in missing:
            self._heads[run_id] = {}
        heads = self._heads
        for run_id, channel, last, generation, keep in conn.execute(_HEADS, (dump_json(missing),)):
            heads[run_id][channel] = StreamHead(last, generation, bool(keep))

    def heads(self, conn: sqlite3.Connection, run_id: str) -> Mapping[str, StreamHead]:
        found = self._heads.get(run_id)
        if found is None:
            self.prefetch(conn, (run_id,))
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
        self._rows.extend((run_id, channel, first, last, generation, kind, keep, at, text))

    def drop(self, run_id: str, channel: str, before: int) -> None:
        self._drops.append((run_id, channel, before))

    def flush(self, conn: sqlite3.Connection) -> None:
        """Hand the queued rows, then the deletions, to SQLite (a deletion only ever
        removes rows written before the ``"end"`` chunk queued with it)."""
        if self._rows:
            insert_rows(conn, _INSERT, 9, self._rows)
            self._rows.clear()
        if self._drops:
            conn.executemany(_DROP, self._drops)
            self._drops.clear()


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
    chunks: list[StreamChunk] = []
    what = f"stream {channel!r} of run {run_id!r}"
    rows = conn.execute(_PAGE, (run_id, channel, after))
    try:
        for first, generation, kind, at, text in rows:
            values = load_wrapped(text, what, 1)
            assert isinstance(values, list)
            skip = max(after + 1 - first, 0)
            wanted = values[skip : skip + limit - len(chunks)]
            for offset, value in enumerate(wanted, first + skip):
                chunks.append(StreamChunk(offset, generation, kind, value, at))
            if len(chunks) >= limit:
                break
    finally:
        rows.close()
    (last,) = conn.execute(_LAST, (run_id, channel)).fetchone()
    return StreamPage(tuple(chunks), last or 0, ended)
