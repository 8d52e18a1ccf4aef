"""What the SQLite store remembers of its file between write transactions: run rows, claims,
and the runs whose attempts may be live on a thread. A commit checks its fences against
these in memory instead of asking SQLite once per fence.

Why what the cache holds is true
--------------------------------
The cache belongs to the store's one connection and only the store's thread touches it. It
holds copies of what the file held, and it is read only inside a write transaction, after
``BEGIN IMMEDIATE`` took the file's write lock: until ``COMMIT`` nobody else can change the
file. So the cache is true whenever a write transaction reads it if it is true when that
transaction begins, which holds because:

1. It was true when this connection's last transaction ended. Every write this connection
   makes goes through `Transaction` (``sqlite/_tx.py``), which changes a cached copy together
   with the write it queues (write-through). A transaction that fails (rolled back, or a
   ``COMMIT`` whose outcome is unknown) drops the whole cache, so nothing it changed in
   memory outlives it.
2. Nobody else has written since. SQLite's ``data_version`` on this connection changes
   exactly when another connection, in this process or another, has committed since this
   connection last looked; this connection's own commits leave it still. A transaction's
   first read (`RunCache.read` with ``begin``) reads it in the same statement, so under
   the write lock and in the transaction's snapshot, and drops every entry it held before
   if it moved.

Entries are read lazily, from the snapshot of the transaction that needs them, so an entry
is as true as the file was then and stays true by (1) and (2). What is cached per key says
so for that key: a run id mapped to None is a run the file does not hold, a thread id
mapped to an empty dict is a thread no run's attempt may be live on.

What the cache holds is mostly the runs that can still change: a transaction forgets the
runs that ended in it (`Transaction.end`). And it is bounded: a transaction that begins
with more than `MAX_ENTRIES` entries drops them all (they are read again as needed).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import Final, NamedTuple, final

from .._codec import dump_json
from .._rules import ClaimRow
from .._textrows import CommandRow, LiveAttempts
from ._rows import ROW_COLUMNS, Row, row_of

MAX_ENTRIES = 100_000
"""Entries (rows, claims and threads together) the cache may hold when a transaction
begins: some tens of megabytes at most."""


class Marks(NamedTuple):
    """Where the file's counters stand when a transaction begins."""

    data_version: int
    last_seq: int  # the largest event seq handed out (AUTOINCREMENT never reuses one)
    last_rowid: int  # the largest rowid of runs (a new run's is the next)


_WIDTH: Final = ROW_COLUMNS.count(",") + 1  # the widest part: a run's row
_NONE_15: Final = ", NULL" * (_WIDTH - 3)
_NONE_14: Final = ", NULL" * (_WIDTH - 4)
_NONE_11: Final = ", NULL" * (_WIDTH - 7)

# Everything a transaction reads, in one statement (so one call into SQLite: see
# ``sqlite/_bulk.py``), by tag: 0 the marks, 1 runs by id, 2 live attempts by thread, 3 claims
# by run, 4 stored commands by run. Each list is JSON text (ids are text, exact in JSON).
_READ: Final = (
    "SELECT 0, data_version,"
    " MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),"
    " COALESCE((SELECT MAX(seq) FROM events), 0)),"
    f" (SELECT COALESCE(MAX(rowid), 0) FROM runs){_NONE_15} FROM pragma_data_version"
    f" UNION ALL SELECT 1, {ROW_COLUMNS} FROM runs"
    " WHERE run_id IN (SELECT value FROM json_each(?1))"
    f" UNION ALL SELECT 2, thread_id, run_id, root_run_id, attempt_epoch{_NONE_14} FROM runs"
    " WHERE attempt_epoch IS NOT NULL AND thread_id IN (SELECT value FROM json_each(?2))"
    f" UNION ALL SELECT 3, run_id, owner, epoch, lease_until{_NONE_14} FROM claims"
    " WHERE run_id IN (SELECT value FROM json_each(?3))"
    f" UNION ALL SELECT 4, run_id, id, kind, payload, delivered, reason, at{_NONE_11}"
    " FROM inbox"
    " WHERE run_id IN (SELECT value FROM json_each(?4))"
)


@final
class RunCache:
    """Run rows, claims and live attempts per thread, as the file holds them (see the
    module's docstring for why they are true whenever they are read)."""

    def __init__(self) -> None:
        self.rows: dict[str, Row | None] = {}
        self.claims: dict[str, ClaimRow | None] = {}
        self.threads: dict[str, LiveAttempts] = {}
        self._data_version: int | None = None

    def clear(self) -> None:
        """Forget everything (a failed transaction, or another connection's commit)."""
        self.rows.clear()
        self.claims.clear()
        self.threads.clear()
        self._data_version = None

    def size(self) -> int:
        return len(self.rows) + len(self.claims) + len(self.threads)

    def read(
        self,
        conn: sqlite3.Connection,
        run_ids: Collection[str] = (),
        thread_ids: Collection[str] = (),
        claim_ids: Collection[str] = (),
        command_run_ids: Collection[str] = (),
        *,
        begin: bool = False,
    ) -> tuple[Marks, dict[str, list[CommandRow]]]:
        """Read from the transaction's snapshot the rows of ``run_ids``, the live attempts
        on ``thread_ids``, the claims of ``claim_ids`` (all into the cache, a key the file
        does not hold as absent) and the stored commands of ``command_run_ids``, oldest
        first (returned).

        ``begin``: this is the transaction's first read, so first drop everything cached
        if another connection has committed since the last transaction (or if the cache
        grew too big). Live attempts are read from the file, so the caller must have
        written its own changes to attempt epochs first.
        """
        found = conn.execute(
            _READ,
            (
                dump_json(list(run_ids)),
                dump_json(list(thread_ids)),
                dump_json(list(claim_ids)),
                dump_json(list(command_run_ids)),
            ),
        ).fetchall()
        marks = next(Marks(*values[1:4]) for values in found if values[0] == 0)
        if begin and (marks.data_version != self._data_version or self.size() > MAX_ENTRIES):
            self.clear()
            self._data_version = marks.data_version
        rows, claims, threads = self.rows, self.claims, self.threads
        for run_id in run_ids:
            rows[run_id] = None
        for thread_id in thread_ids:
            threads[thread_id] = {}
        for run_id in claim_ids:
            claims[run_id] = None
        commands: dict[str, list[CommandRow]] = {run_id: [] for run_id in command_run_ids}
        for tag, *values in found:
            if tag == 0:
                continue
            if tag == 1:
                rows[values[0]] = row_of(values)
            elif tag == 2:
                threads[values[0]][values[1]] = (values[2], values[3])
            elif tag == 3:
                claims[values[0]] = ClaimRow(values[1], values[2], values[3])
            else:
                commands[values[0]].append(CommandRow(*values[1:7]))
        for listed in commands.values():
            listed.sort()
        return marks, commands
