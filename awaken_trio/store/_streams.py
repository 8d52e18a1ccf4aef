"""What the stores that keep streams as rows of text share (SQLite, PostgreSQL): the queue of
a write transaction's stream rows (`ChunkRows`), and a page of chunks cut from the rows a
read found (`page_of`).

A row holds the chunks one commit wrote on one channel, at consecutive offsets, their
values as one JSON array: a body that sends thousands of chunks between two flushes costs
a row per flush, not a row per chunk.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, final

from .._core import ChunkKind, JsonValue, StreamChunk
from ._codec import dump_json, load_wrapped
from ._rules import StreamHead

SegmentRow = tuple[int, int, ChunkKind, float, str]
"""A stored row as a read returns it: its first offset, generation, kind, ``at``, and its
values as JSON text."""

ChunkRow = tuple[str, str, int, int, int, ChunkKind, bool, float, str]
"""A row to write: run, channel, first and last offset, generation, kind, keep, ``at``, and
the values as JSON text."""


def page_of(
    rows: Iterable[SegmentRow], after: int, limit: int, what: str
) -> tuple[StreamChunk, ...]:
    """The chunks after offset ``after``, at most ``limit``, cut from ``rows`` (in offset
    order, the first holding the first offset after ``after`` that is still kept)."""
    chunks: list[StreamChunk] = []
    for first, generation, kind, at, text in rows:
        values = load_wrapped(text, what, 1)
        assert isinstance(values, list)
        skip = max(after + 1 - first, 0)
        wanted = values[skip : skip + limit - len(chunks)]
        for offset, value in enumerate(wanted, first + skip):
            chunks.append(StreamChunk(offset, generation, kind, value, at))
        if len(chunks) >= limit:
            break
    return tuple(chunks)


@final
class ChunkRows:
    """What one write transaction knows of streams and has queued for them: the heads of
    the channels of the runs it read (then kept up to date by its own appends), and the
    rows and deletions to write. A store reads the heads (`missing`, `take`) and writes
    the queue (`rows`, `drops`) its own way."""

    def __init__(self) -> None:
        self._heads: dict[str, dict[str, StreamHead]] = {}
        self.rows: list[ChunkRow] = []
        self.drops: list[tuple[str, str, int]] = []

    def missing(self, run_ids: Collection[str]) -> list[str]:
        """Those of ``run_ids`` whose heads the transaction has not read, once each."""
        return [run_id for run_id in dict.fromkeys(run_ids) if run_id not in self._heads]

    def take(self, run_ids: Iterable[str], found: Iterable[Sequence[Any]]) -> None:
        """The heads read of ``run_ids``: ``(run_id, channel, last, generation, keep)``."""
        heads = self._heads
        for run_id in run_ids:
            heads[run_id] = {}
        for run_id, channel, last, generation, keep in found:
            heads[run_id][channel] = StreamHead(int(last), int(generation), bool(keep))

    def heads(self, run_id: str) -> Mapping[str, StreamHead] | None:
        """The run's heads as of now (None: not read yet)."""
        found = self._heads.get(run_id)
        return None if found is None else dict(found)

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
        self.rows.append((run_id, channel, first, last, generation, kind, keep, float(at), text))

    def drop(self, run_id: str, channel: str, before: int) -> None:
        self.drops.append((run_id, channel, before))

    @property
    def queued(self) -> bool:
        return bool(self.rows or self.drops)
