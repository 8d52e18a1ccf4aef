"""The runs this store wrote last, as it wrote them (`KnownRows`): what a batch of their
steps and ends is written on, in one round trip, with no read of their rows (``_guess``).

A known row is a run's `TextRow` fields as a transaction of this store committed them,
with that transaction's id (`KnownRow`): the 32-bit transaction id the row's ``xmin``
system column holds while that version is the row's latest. The server's check of a step
or an end written on a known row updates the row only where its ``xmin`` is still that id
(``update_guessed``), and raises ``GUESS_MISSED`` unless every row was updated.

Why the id is enough. A row version whose ``xmin`` is X was written by transaction X,
and by no other. X is this store's, it committed, and this store knows the fields it left
(a transaction writes each of its rows from the values it holds of them: `TextRunTx`).
Any later write of the row (by any runtime, a cancel, a recovery, a prune and a new
insert) makes a version whose ``xmin`` is its own transaction's. So a row whose ``xmin``
is X holds the known fields. Locks (``FOR UPDATE``) do not change ``xmin``; ``VACUUM
FREEZE`` either keeps it or makes it read as frozen (2), and then the check fails, which
costs a round trip and is never wrong. Ids are 32 bits and wrap: a transaction 2**32
later has the same one. A known row is used at most `KnownRows.longest` seconds (60)
after its transaction committed; 2**32 transactions in a minute would be 70 million a
second.

A row is known from when its transaction's answer reached the store (the Trio thread:
every change here is made there, after the transaction, never by the store's threads)
until its run ends, it is older than `KnownRows.longest`, or it is the oldest of more
than `KnownRows.most`. Nothing else needs to forget it: a transaction that failed wrote
nothing; one whose outcome is unknown, or that another runtime's write followed, left a
row whose ``xmin`` is not the known one, so the check fails once and the batch runs
again with its reads, after which the row is known as that transaction wrote it. Two
transactions of the store that wrote one run may answer out of order; the row then known
is the older one, and its check fails likewise.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, final

import attrs

from .._textrows import TextRow

LONGEST: Final = 60.0
"""The most seconds a row stays known after its transaction committed."""
MOST: Final = 8192
"""The most rows a store knows (a worker's runs in flight, with room to spare)."""


@final
@attrs.frozen
class KnownRow:
    """A run's row as a transaction of this store committed it."""

    fields: tuple[Any, ...]
    """Its `TextRow` fields, in order (``TextRow(*fields)``)."""
    written_by: int
    """The 32-bit id of the transaction that wrote it (the row's ``xmin`` since)."""
    at: float
    """When the store learned of it (`KnownRows`' clock)."""


fields_of: Final[Callable[[TextRow], tuple[Any, ...]]] = operator.attrgetter(
    *(f.name for f in attrs.fields(TextRow))
)
"""A row's fields, in order."""


@final
@attrs.define(eq=False)
class KnownRows:
    """The rows this store wrote last, by run: each until its run ends, it is older than
    ``longest`` seconds or the oldest of more than ``most``."""

    most: int = MOST
    longest: float = LONGEST
    clock: Callable[[], float] = time.monotonic
    # Oldest first (a row written again moves to the end), so the stale are at the front.
    _rows: dict[str, KnownRow] = attrs.field(factory=dict, init=False)

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, run_id: str) -> KnownRow | None:
        """The row of ``run_id`` as this store last wrote it, if it is known."""
        found = self._rows.get(run_id)
        if found is None:
            return None
        if self.clock() - found.at > self.longest:
            self._drop_stale()
            return None
        return found

    def wrote(self, rows: Iterable[TextRow], written_by: int) -> None:
        """``rows`` are as the committed transaction ``written_by`` left them: an ended
        run's is forgotten (no commit of it is guessed), any other is known."""
        known = self._rows
        at = self.clock()
        for row in rows:
            known.pop(row.run_id, None)
            if row.kind != "ended":
                known[row.run_id] = KnownRow(fields_of(row), written_by, at)
        while len(known) > self.most:
            del known[next(iter(known))]
        self._drop_stale()

    def _drop_stale(self) -> None:
        known = self._rows
        edge = self.clock() - self.longest
        while known:
            oldest = next(iter(known))
            if known[oldest].at >= edge:
                return
            del known[oldest]
