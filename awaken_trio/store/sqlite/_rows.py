"""The SQLite store's rows as Python sees them: the columns of a run a commit reads (`Row`,
the store rules' `StoredRun`) and records.

These functions run on the store's thread, inside a transaction `Session` opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from ..._core import (
    RunRecord,
    RunState,
    StateKind,
)
from .._codec import RECORD_COLUMNS, load_state, record_of

NULL: Final = "null"

ROW_COLUMNS: Final = (
    "run_id, thread_id, parent_run_id, root_run_id, name, kind, state, generation, carried,"
    " carried_pause, resume_value, resume_ticket, epoch, attempt_epoch, recoveries, rowid,"
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
)
"""The run columns a commit may change besides its checkpoint, steps, result and place in
the queue, in the order of `Row.updatable`."""


@final
@attrs.define(eq=False)
class Row:
    """The columns of a run a commit reads (payload columns it does not need stay in the
    database: a commit never reads its run's input, checkpoint or result)."""

    run_id: str
    thread_id: str
    parent_run_id: str | None
    root_run_id: str
    name: str | None
    kind: StateKind
    state_text: str
    generation: int
    carried: str
    carried_pause: bool
    resume_value: str
    resume_ticket: str | None
    epoch: int
    attempt_epoch: int | None
    recoveries: int
    # Where the row is, and what the file holds in the columns an update may set
    # (`updatable`) and whether it holds a place in the queue: an update sets only the
    # columns that changed. SQLite's cost grows with every column an update sets, and
    # setting an indexed one takes the row out of that index and puts it back.
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
        )

    @property
    def state(self) -> RunState:
        return load_state(self.state_text)

    @property
    def named_root(self) -> bool:
        """Only named root runs are ever handed out by `runnable`."""
        return self.name is not None and self.parent_run_id is None


def row_of(found: Sequence[Any]) -> Row:
    """A `Row` of a row read with `ROW_COLUMNS`."""
    *columns, queued = found  # every field up to rowid, in order; then the queue mark
    columns[9] = bool(columns[9])  # carried_pause
    row = Row(*columns)
    row.filed, row.filed_queued = row.updatable(), bool(queued)
    return row


def load_record(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    found = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM runs r WHERE r.run_id = ?", (run_id,)
    ).fetchone()
    return None if found is None else record_of(found)
