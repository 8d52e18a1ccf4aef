"""The run rows one PostgreSQL write transaction updates: one statement for all of them,
setting only the columns some row of them changed (`Queries.update_runs_of`).

What a row changed is told against what the store holds of it: the row as the
transaction read it, then as its last update wrote it. The transaction locked the row
when it read it, so nobody else changes it meanwhile. A row never read here (none is
written otherwise) is sent whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, final

from .._textrows import TextRow
from ._conn import Conn
from ._queries import IN_QUEUE, UPDATED, UPDATED_READ, Queries, rows_json


@final
class RowUpdates:
    """What the store holds of the rows one transaction read, and their updates."""

    __slots__ = ("_as_read", "_written")

    def __init__(self) -> None:
        self._as_read: dict[str, Sequence[Any]] = {}
        self._written: dict[str, tuple[Any, ...]] = {}

    def read(self, found: Sequence[Any]) -> None:
        """The row ``found`` was read (`TextRow`'s fields, in order)."""
        self._as_read[found[0]] = found

    def send(self, conn: Conn, q: Queries, updates: Sequence[tuple[Any, ...]]) -> None:
        """Queue the update of ``updates`` (`UPDATED` rows, each of its own run) in one
        statement, none if no row changed anything."""
        places = {0}  # (the key)
        for values in updates:
            places.update(self._changed(values))
        sent = sorted(places)
        if len(sent) > 1:  # (else every row holds what it would be set to)
            # A row that did not change a column another did sets it to what it holds.
            rows: Sequence[Sequence[Any]] = updates
            if len(sent) < len(UPDATED.columns):
                rows = [[values[place] for place in sent] for values in updates]
            conn.execute(q.update_runs_of(sent), (rows_json(rows), len(rows)))
        for values in updates:
            self._written[values[0]] = values[:UPDATED_READ]

    def _changed(self, values: tuple[Any, ...]) -> Iterable[int]:
        """The places of ``values`` its update must send: the columns that differ from
        what the store holds, a place in the queue whenever the run takes one (a new
        place, as every write of a queued run takes), and the result, checkpoint and
        steps given; every place for a row never read here."""
        run_id = values[0]
        held = self._written.get(run_id)
        if held is None:
            found = self._as_read.get(run_id)
            if found is None:
                return range(len(values))
            held = UPDATED.read(TextRow(*found))
        changed = [place for place in range(1, UPDATED_READ) if values[place] != held[place]]
        if values[IN_QUEUE]:
            changed.append(IN_QUEUE)
        changed.extend(
            place for place in range(UPDATED_READ, len(values)) if values[place] is not None
        )
        return changed
