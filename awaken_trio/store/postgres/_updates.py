"""The run rows one PostgreSQL write transaction updates: one statement for all of them,
setting only the columns some row of them changed (`Queries.update_runs_of`).

What a row changed is told against what the store holds of it: the row as the
transaction read it, then as its last update wrote it. The transaction locked the row
when it read it, so nobody else changes it meanwhile; or, for a row it did not read but
guessed as this store last wrote it (``_known``), its update checks that guess, and the
transaction writes nothing if it was wrong. A row never read here (none is written
otherwise) is sent whole.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from operator import is_not, ne
from typing import Any, Final, final

from .._textrows import TextRow
from ._conn import Conn
from ._queries import IN_QUEUE, UPDATED, UPDATED_READ, Queries, rows_json

_run_of: Final = operator.itemgetter(0)
_READ_PLACES: Final = range(UPDATED_READ)
_GIVEN_PLACES: Final = range(UPDATED_READ, len(UPDATED.columns))
_NONES: Final = (None,) * len(UPDATED.given)


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

    def send(
        self,
        conn: Conn,
        q: Queries,
        updates: Sequence[tuple[Any, ...]],
        written_by: Mapping[str, int] | None = None,
    ) -> bool:
        """Queue the update of ``updates`` (`UPDATED` rows, each of its own run) in one
        statement, none if no row changed anything; whether it did. Given ``written_by``
        (a transaction written on a guess of the rows, ``_known``: the transaction that
        last wrote each), the update checks the guess (``update_guessed``), so it is sent
        whatever changed."""
        places = {0}  # (the key)
        for values in updates:
            places.update(self._changed(values))
        sent = sorted(places)
        wrote = True
        if written_by is not None:
            if len(sent) == 1:
                # No row changed a column, and the update is the rows' check: it sets one
                # to what it holds (the statement sets at least one).
                sent.append(1)
            pick = operator.itemgetter(*sent)  # (two places at least: a tuple)
            # Sorted by run: the order the rows are locked in, as every read locks them.
            guessed = [
                (*pick(values), written_by[values[0]]) for values in sorted(updates, key=_run_of)
            ]
            conn.execute(
                q.update_guessed_of(sent), (rows_json(guessed), len(guessed), len(guessed))
            )
        elif len(sent) > 1:  # (else every row holds what it would be set to)
            # A row that did not change a column another did sets it to what it holds.
            rows: Sequence[Sequence[Any]] = updates
            if len(sent) < len(UPDATED.columns):
                # (Picked in C: a comprehension a row cost three times as much.)
                rows = list(map(operator.itemgetter(*sent), updates))
            conn.execute(q.update_runs_of(sent), (rows_json(rows), len(rows)))
        else:
            wrote = False
        for values in updates:
            self._written[values[0]] = values[:UPDATED_READ]
        return wrote

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
        # Compared and picked in C (``map`` stops at ``held``'s end, the places read; the
        # key, at place 0, is always the same): 1.8 µs a row, 2.2 with comprehensions.
        changed = list(compress(_READ_PLACES, map(ne, values, held)))
        if values[IN_QUEUE]:
            changed.append(IN_QUEUE)
        changed.extend(compress(_GIVEN_PLACES, map(is_not, values[UPDATED_READ:], _NONES)))
        return changed
