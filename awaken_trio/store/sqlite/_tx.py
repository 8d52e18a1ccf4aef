"""One write transaction on the SQLite store: what the file holds, read through the store's
cache (``_cache``), and the writes the transaction makes, queued and handed to SQLite
together. The rules' side of it, shared with the PostgreSQL store, is ``store/_textrows.py``
(`TextRunTx`); this module is where the rows come from and how the writes go out.

A batch of commits then costs a few statements instead of several per commit: each commit
is checked and applied in memory, in order, seeing what the commits before it did, and its
writes are queued; `Transaction.flush` writes each kind of row many at a time
(``_bulk``). That keeps every order that matters and only those:

* an event's seq is given when it is queued, counting on from the largest seq the file
  has handed out, as AUTOINCREMENT would: seqs increase in the order events were written,
  and the transaction's answers carry them before anything reaches SQLite. No other
  connection can insert an event while this one holds the write lock;
* a run is inserted as its row stands when the writes are handed over (what the rest of
  its creating commit set included: its claim's epoch, its attempt, what it carries), and
  written once more, as it ended up, if a later commit changed it (its checkpoint, steps
  and result are the last ones given): what separate updates in order would have left;
* a claim or a ticket is written once, as it ended up; tickets are put in the order of
  their last put, so their rowids (the tie-break among tickets due at the same moment)
  keep the order separate statements would give them;
* apart from that, order does not matter: each kind writes one table, and no statement
  reads what another kind writes.

A read the cache cannot answer goes to the file. A run row or a claim the transaction has
not read is one it has not written (every write starts from a read), so it needs no flush;
a query over other rows (the live attempts on a thread, a run's children, a run's stored
commands, a record) flushes first, so it sees this transaction's writes.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final, final

import attrs

from ..._core import (
    CommandKind,
    Commit,
    Ended,
    JsonValue,
    NewRun,
    RunRecord,
    RunState,
)
from .._codec import dump_json, dump_retry
from .._textrows import EVENT_COLUMNS, EVENT_WIDTH, NULL, CommandRow, TextRunTx
from . import _streams as streams
from ._bulk import insert_rows, write_rows
from ._cache import RunCache
from ._rows import UPDATABLE, Row, load_record

# Rows of NULLs pad a statement's rows to a power of two (see ``_bulk``): inserts
# skip them, and a NULL key matches nothing in an update or a delete.
_INSERT_RUNS: Final = (
    "INSERT INTO runs (rowid, run_id, thread_id, parent_run_id, root_run_id, name, input,"
    " kind, state, generation, result, max_steps, carried, carried_pause, resume_value,"
    " resume_ticket, epoch, attempt_epoch, queued_order, created_at, updated_at, started_at,"
    " ended_at, worker_id, cause, not_before, deadline, queue_deadline, body_version, retry,"
    " retries)"
    " SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL"
)

UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
"""Whether this SQLite updates many runs in one statement (``UPDATE ... FROM``, 3.33);
an older one is given the same updates a row at a time."""


@functools.cache
def _update_statement(columns: tuple[str, ...], many: bool) -> str:
    """The update of ``columns`` for rows given as (rowid, *values): a template for
    ``_bulk`` with ``many``, else one row's statement for ``executemany``."""
    if many:
        sets = ", ".join(f"{name} = v.column{i}" for i, name in enumerate(columns, 2))
        return f"UPDATE runs SET {sets} FROM (VALUES {{}}) AS v WHERE runs.rowid = v.column1"
    sets = ", ".join(f"{name} = ?{i}" for i, name in enumerate(columns, 2))
    return f"UPDATE runs SET {sets} WHERE rowid = ?1"


_INSERT_EVENTS: Final = (
    f"INSERT INTO events ({', '.join(EVENT_COLUMNS)})"
    " SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL"
)
_PUT_CLAIMS: Final = (
    "INSERT OR REPLACE INTO claims (run_id, owner, epoch, lease_until)"
    " SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL"
)
_DROP_CLAIMS: Final = "DELETE FROM claims WHERE run_id IN (VALUES {})"
# In order, unpadded: a ticket's rowid (the tie-break among tickets due at the same moment)
# is its place in the order of puts.
_PUT_TICKETS: Final = "INSERT OR REPLACE INTO tickets (run_id, correlation_id, wake_at) VALUES {}"
_DROP_TICKETS: Final = "DELETE FROM tickets WHERE run_id IN (VALUES {})"
_DROP_COMMANDS_BY_ID: Final = "DELETE FROM inbox WHERE id IN (VALUES {})"
_DELIVER_COMMANDS: Final = "UPDATE inbox SET delivered = 1 WHERE id IN (VALUES {})"
_DROP_COMMANDS_OF_RUNS: Final = "DELETE FROM inbox WHERE run_id IN (VALUES {})"
_SET_FORK: Final = "UPDATE runs SET checkpoint = ?, forked_from = ? WHERE run_id = ?"
# A commit that writes a checkpoint twice under one seq (no event between) keeps the last.
_INSERT_CHECKPOINTS: Final = (
    "INSERT OR REPLACE INTO checkpoints (run_id, seq, checkpoint) VALUES (?, ?, ?)"
)
# What a queued named root run's ``queued_order`` holds: only whether it is set counts
# (`runnable` hands queued runs out by rowid, oldest first, so a run put back in the queue
# keeps its place). Files written before schema version 4 hold the places they numbered.
QUEUED_MARK: Final = 1


@final
@attrs.define
class _Insert:
    """A run created in this transaction and not yet handed to SQLite: its row is read
    when it is, so what later writes of the transaction did to it goes in with it."""

    row: Row
    input: str
    result: str
    max_steps: int | None
    queued_order: int | None
    deadline: float | None
    queue_deadline: float | None
    retry: str | None  # the policy's JSON text (`dump_retry`)


@final
class Transaction(TextRunTx[Row, _Insert]):
    """The file as one write transaction sees it, and the writes it has queued: the store
    rules' `RunTx` (``_rules``) over the SQLite file, a `TextRunTx` over the store's cache
    (``_cache``). Values are encoded here, and decoded only when a rule asks for them."""

    def __init__(self, conn: sqlite3.Connection, cache: RunCache) -> None:
        super().__init__(cache.rows, cache.claims, cache.threads)
        self.conn = conn
        self.cache = cache
        self._checkpoints: dict[str, str] = {}
        self._last_rowid = 0
        # The forked runs created in this transaction: run id -> [checkpoint, forked_from]
        # (JSON texts), written after their insert.
        self._forks: dict[str, list[str]] = {}
        self._history: list[tuple[str, int, str]] = []  # `_INSERT_CHECKPOINTS` rows

    # ------------------------------------------------------------------ reading

    def begin(self) -> None:
        """Make sure the transaction has read the file once: the cache is checked then."""
        if not self._begun:
            self._read()

    def _read(
        self,
        run_ids: Collection[str] = (),
        thread_ids: Collection[str] = (),
        claim_ids: Collection[str] = (),
        command_run_ids: Collection[str] = (),
    ) -> dict[str, list[CommandRow]]:
        marks, commands = self.cache.read(
            self.conn, run_ids, thread_ids, claim_ids, command_run_ids, begin=not self._begun
        )
        if not self._begun:
            self._begun = True
            self._last_seq, self._last_rowid = marks.last_seq, marks.last_rowid
        return commands

    def prefetch(self, batch: Sequence[Commit]) -> None:
        """Read what ``batch`` will check, all at once instead of a query per check: its
        runs, the live attempts on the threads it guards, the claims its fences and thread
        checks name, and the stored commands of the runs it ends or starts an attempt of.
        Called before anything is queued; one read, unless the cache was dropped or a
        guarded run's thread was unknown until its row was read."""
        ending = [commit.run_id for commit in batch if isinstance(commit.state, Ended)]
        # The streams of runs a commit writes chunks on or ends (its "end" chunks).
        streaming = self._streams.missing(
            [*ending, *(commit.run_id for commit in batch if commit.chunks)]
        )
        if streaming:
            self.begin()
            self._read_heads(streaming)
        # An attempt's start is handed its run's commands (`_rules.update`).
        commanded = ending + [
            commit.run_id for commit in batch if commit.take_messages and commit.new_run is None
        ]
        while True:
            run_ids, thread_ids, claim_ids = self._missing(batch)
            if self._begun and not (run_ids or thread_ids or claim_ids or commanded):
                return
            commands = self._read(run_ids, thread_ids, claim_ids, commanded)
            if commanded:
                self._commands, commanded = commands, []

    def _missing(self, batch: Sequence[Commit]) -> tuple[set[str], set[str], set[str]]:
        """What ``batch`` will read that the cache does not hold, as far as it can tell."""
        rows, claims, threads = self._rows, self._claims, self._threads
        run_ids: set[str] = set()
        thread_ids: set[str] = set()
        claim_ids: set[str] = set()
        for commit in batch:
            run_id = commit.run_id
            known = run_id in rows
            row = rows.get(run_id)
            if not known:
                run_ids.add(run_id)
            if commit.thread_guard:
                # A new run's thread is the one it names (asked for before its row is read).
                new = commit.new_run
                thread_id = (
                    row.thread_id if row is not None else None if new is None else new.thread_id
                )
                if thread_id is not None:
                    live = threads.get(thread_id)
                    if live is None:
                        thread_ids.add(thread_id)
                    else:
                        claim_ids.update(r for r, _ in live.values() if r not in claims)
            fence = commit.fence
            if fence is not None and fence.root_run_id not in claims:
                claim_ids.add(fence.root_run_id)
            if commit.claim is not None and row is not None and run_id not in claims:
                claim_ids.add(run_id)  # (a new run's claim is taken without a look)
        return run_ids, thread_ids, claim_ids

    def prefetch_claims(self, run_ids: Iterable[str]) -> None:
        """Read the claims of ``run_ids`` the cache does not hold, in one query."""
        self.begin()
        claims = self._claims
        missing = [run_id for run_id in run_ids if run_id not in claims]
        if missing:
            self._read(claim_ids=missing)

    def _read_row(self, run_id: str) -> None:
        self._read(run_ids=(run_id,))

    def _read_claim(self, run_id: str) -> None:
        self._read(claim_ids=(run_id,))

    def _read_thread(self, thread_id: str) -> None:
        self.flush()  # the query reads attempt epochs this transaction may have changed
        self._read(thread_ids=(thread_id,))

    def _read_commands(self, run_id: str) -> list[CommandRow]:
        return self._read(command_run_ids=(run_id,))[run_id]

    def _read_unended(self, thread_id: str) -> list[str]:
        # (The index of schema version 9, runs_unended_on_thread, holds these rows alone.)
        return [
            run_id
            for (run_id,) in self.conn.execute(
                "SELECT run_id FROM runs WHERE thread_id = ? AND kind != 'ended' ORDER BY rowid",
                (thread_id,),
            )
        ]

    def _read_heads(self, run_ids: list[str]) -> None:
        streams.read_heads(self.conn, self._streams, run_ids)

    def _load_record(self, run_id: str) -> RunRecord | None:
        return load_record(self.conn, run_id)

    def children(self, parent: str) -> list[str]:
        """The runs created with ``parent`` as their parent, oldest first."""
        self.flush()
        return [
            run_id
            for (run_id,) in self.conn.execute(
                "SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY rowid", (parent,)
            )
        ]

    def expired_claims(self, now: float) -> list[str]:
        self.flush()
        return [
            run_id
            for (run_id,) in self.conn.execute(
                "SELECT run_id FROM claims WHERE lease_until < ? ORDER BY lease_until, run_id",
                (now,),
            )
        ]

    def last_seq(self) -> int:
        """The seq of the last event in the file, this transaction's included."""
        self.begin()
        return self._last_seq

    # ------------------------------------------------------------------ writing

    def create(
        self,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        result: JsonValue,
        at: float,
        *,
        not_before: float | None = None,
    ) -> Row:
        """Create the run (new to the file)."""
        self.begin()
        row = self._created(Row.created(run_id, new, state, generation, at, not_before))
        self._last_rowid += 1
        row.rowid = self._last_rowid
        self._inserted[run_id] = _Insert(
            row,
            dump_json(new.input),
            dump_json(result),
            new.max_steps,
            self._queued_order(row),
            new.deadline,
            new.queue_deadline,
            dump_retry(new.retry),
        )
        if new.forked_from is not None:
            self._forks[run_id] = [NULL, dump_json(new.forked_from)]
        return row

    def put_checkpoint(self, row: Row, checkpoint: JsonValue, seq: int) -> None:
        run_id = row.run_id
        text = dump_json(checkpoint)
        fork = self._forks.get(run_id)
        if fork is not None and run_id in self._inserted:
            fork[0] = text
        else:
            # (An update, even of a run not yet inserted: the insert has no checkpoint.)
            self._checkpoints[run_id] = text
            self._changed[run_id] = row
        self._history.append((run_id, seq, text))

    def insert_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int:
        """Store a command now; its id."""
        self.flush()  # a queued delete of the run's commands must not reach this one
        cursor = self.conn.execute(
            "INSERT INTO inbox (run_id, kind, payload, reason, at) VALUES (?, ?, ?, ?, ?)",
            (run_id, kind, dump_json(payload), dump_json(reason), at),
        )
        command_id = cursor.lastrowid
        assert command_id is not None
        return command_id

    def end(self) -> None:
        """Flush, and forget what only the runs that ended in this transaction needed: a
        commit for an ended run is rare (it is refused), so the cache keeps the runs that
        can still change, and reads an ended one again if it must."""
        self.flush()
        rows, claims, threads = self._rows, self._claims, self._threads
        for ended in self._ended:
            run_id = ended.run_id
            row = rows.pop(run_id, None)
            if run_id in claims and claims[run_id] is None:
                del claims[run_id]
            if row is not None and threads.get(row.thread_id) == {}:
                del threads[row.thread_id]

    def flush(self) -> None:
        """Hand every queued write to SQLite (see the module's docstring for the order)."""
        conn = self.conn
        if self._inserted:
            self._flush_inserts()
        if self._forks:
            conn.executemany(_SET_FORK, [(*fork, run_id) for run_id, fork in self._forks.items()])
            self._forks.clear()
        if self._history:
            conn.executemany(_INSERT_CHECKPOINTS, self._history)
            self._history.clear()
        if self._changed:
            self._flush_updates()
        if self._events:
            write_rows(conn, _INSERT_EVENTS, EVENT_WIDTH, self._events)
            self._events.clear()
        if self._claims_changed:
            claims = self._claims
            put: list[Any] = []
            dropped: list[str] = []
            for run_id in self._claims_changed:
                claim = claims[run_id]
                if claim is None:
                    dropped.append(run_id)
                else:
                    put.append(run_id)
                    put.extend(claim)
            write_rows(conn, _DROP_CLAIMS, 1, dropped)
            write_rows(conn, _PUT_CLAIMS, 4, put)
            self._claims_changed.clear()
        if self._tickets:
            tickets = self._tickets.items()
            write_rows(conn, _DROP_TICKETS, 1, [r for r, t in tickets if t is None])
            put_tickets = [v for r, t in tickets if t is not None for v in (r, *t)]
            insert_rows(conn, _PUT_TICKETS, 3, put_tickets)
            self._tickets.clear()
        if self._delivered:
            write_rows(conn, _DELIVER_COMMANDS, 1, self._delivered)
            self._delivered.clear()
        if self._consumed:
            write_rows(conn, _DROP_COMMANDS_BY_ID, 1, self._consumed)
            self._consumed.clear()
        if self._dropped:
            write_rows(conn, _DROP_COMMANDS_OF_RUNS, 1, self._dropped)
            self._dropped.clear()
        streams.write_queue(conn, self._streams)

    def _flush_inserts(self) -> None:
        values: list[Any] = []
        steps, results, changed = self._steps, self._results, self._changed
        for run_id, new in self._inserted.items():
            row = new.row
            if run_id in steps or run_id in results:
                changed[run_id] = row  # written by an update: the insert sets neither
            values.extend(
                (
                    row.rowid,
                    row.run_id,
                    row.thread_id,
                    row.parent_run_id,
                    row.root_run_id,
                    row.name,
                    new.input,
                    row.kind,
                    row.state_text,
                    row.generation,
                    new.result,
                    new.max_steps,
                    row.carried,
                    row.carried_pause,
                    row.resume_value,
                    row.resume_ticket,
                    row.epoch,
                    row.attempt_epoch,
                    new.queued_order,
                    row.created_at,
                    row.updated_at,
                    row.started_at,
                    row.ended_at,
                    row.worker_id,
                    row.cause,
                    row.not_before,
                    new.deadline,
                    new.queue_deadline,
                    row.body_version,
                    new.retry,
                    row.retries,
                )
            )
            row.filed, row.filed_queued = row.updatable(), new.queued_order is not None
        self._inserted.clear()
        write_rows(self.conn, _INSERT_RUNS, 31, values)

    def _flush_updates(self) -> None:
        checkpoints, steps, results = self._checkpoints, self._steps, self._results
        # Rows grouped by the columns that changed: one statement per group.
        groups: dict[tuple[str, ...], list[Any]] = {}
        for run_id, row in self._changed.items():
            now = row.updatable()
            names: list[str] = []
            values: list[Any] = [row.rowid]
            for name, new, old in zip(UPDATABLE, now, row.filed, strict=True):
                if new != old:
                    names.append(name)
                    values.append(new)
            for name, given in (
                ("checkpoint", checkpoints.get(run_id)),
                ("steps", steps.get(run_id)),
                ("result", results.get(run_id)),
            ):
                if given is not None:
                    names.append(name)
                    values.append(given)
            order = self._queued_order(row)
            if row.filed_queued != (order is not None):
                names.append("queued_order")  # it enters or leaves the queue
                values.append(order)
            row.filed, row.filed_queued = now, order is not None
            if names:
                groups.setdefault(tuple(names), []).extend(values)
        conn = self.conn
        for columns, values in groups.items():
            width = len(columns) + 1
            if UPDATE_FROM:
                write_rows(conn, _update_statement(columns, True), width, values)
            else:
                conn.executemany(
                    _update_statement(columns, False),
                    [values[i : i + width] for i in range(0, len(values), width)],
                )
        self._changed.clear()
        checkpoints.clear()
        steps.clear()
        results.clear()

    @staticmethod
    def _queued_order(row: Row) -> int | None:
        """`QUEUED_MARK` for a named root run written Queued (the runs `runnable` hands
        out); None for any other run."""
        return QUEUED_MARK if row.in_queue else None
