"""The SQLite store's rows as Python sees them: the columns of a run a commit reads (`Row`,
a `TextRow` that knows what the file holds of it) and records.

These functions run on the store's thread, inside a transaction `Session` opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from ..._core import RunRecord
from .._codec import RECORD_COLUMNS, record_of
from .._textrows import TextRow

ROW_COLUMNS: Final = (
    "run_id, thread_id, parent_run_id, root_run_id, name, kind, state, generation, carried,"
    " carried_pause, resume_value, resume_ticket, epoch, attempt_epoch, recoveries,"
    " created_at, updated_at, started_at, ended_at, worker_id, not_before, body_version, retries,"
    " rowid,"
    " queued_order IS NOT NULL"
)
"""The columns `row_of` reads, in its order."""

UPDATABLE: Final = (
    "kind",
    "state",
    "generation",
    "carried",
    "carried_pause",
    "resume_value",
    "resume_ticket",
    "epoch",
    "attempt_epoch",
    "recoveries",
    "updated_at",
    "started_at",
    "ended_at",
    "worker_id",
    "cause",
    "not_before",
    "body_version",
    "retries",
)
"""The run columns a commit may change besides its checkpoint, steps, result and place in
the queue, in the order of `Row.updatable`."""


@final
@attrs.define(eq=False)
class Row(TextRow):
    """A run's `TextRow` as the SQLite store reads it, with where the row is in the file
    and what the file holds of it.

    What the file holds in the columns an update may set (`updatable`), and whether it
    holds a place in the queue: an update sets only the columns that changed. SQLite's
    cost grows with every column an update sets, and setting an indexed one takes the row
    out of that index and puts it back."""

    rowid: int = 0
    filed: tuple[Any, ...] = ()
    filed_queued: bool = False

    def updatable(self) -> tuple[Any, ...]:
        """The values of `UPDATABLE`, as the row has them now."""
        return (
            self.kind,
            self.state_text,
            self.generation,
            self.carried,
            self.carried_pause,
            self.resume_value,
            self.resume_ticket,
            self.epoch,
            self.attempt_epoch,
            self.recoveries,
            self.updated_at,
            self.started_at,
            self.ended_at,
            self.worker_id,
            self.cause,
            self.not_before,
            self.body_version,
            self.retries,
        )


def row_of(found: Sequence[Any]) -> Row:
    """A `Row` of a row read with `ROW_COLUMNS`."""
    *columns, queued = found  # every field up to rowid, in order; then the queue mark
    columns[9] = bool(columns[9])  # carried_pause (SQLite keeps an integer)
    row = Row(*columns)
    row.filed, row.filed_queued = row.updatable(), bool(queued)
    return row


def load_record(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    found = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM runs r WHERE r.run_id = ?", (run_id,)
    ).fetchone()
    return None if found is None else record_of(found)
