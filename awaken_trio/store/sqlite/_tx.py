"""One write transaction on the SQLite store: what the file holds, read through the store's
cache (``_sqlite_cache``), and the writes the transaction makes, queued and handed to
SQLite together.

A batch of commits then costs a few statements instead of several per commit: each commit
is checked and applied in memory, in order, seeing what the commits before it did, and its
writes are queued; `Transaction.flush` writes each kind of row many at a time
(``_sqlite_bulk``). That keeps every order that matters and only those:

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
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from ..._core import (
    UNSET,
    ChunkKind,
    CommandKind,
    Commit,
    Ended,
    JsonValue,
    NewRun,
    ResumeTicket,
    RunRecord,
    RunState,
    wake_at,
)
from .._codec import (
    ENDED,
    NO_MESSAGES,
    QUEUED,
    TextCarried,
    dump_json,
    dump_shared,
    dump_state,
    dump_ticket,
    load_json,
    load_ticket,
)
from .._rules import (
    NO_RESUME,
    NOTHING_CARRIED,
    Carried,
    ClaimRow,
    HeldResume,
    StreamHead,
    state_kind,
)
from ._bulk import insert_rows, write_rows
from ._cache import Command, RunCache
from ._rows import NULL, UPDATABLE, Row, load_record
from ._streams import StreamWrites

# Rows of NULLs pad a statement's rows to a power of two (see ``_sqlite_bulk``): inserts
# skip them, and a NULL key matches nothing in an update or a delete.
_INSERT_RUNS: Final = (
    "INSERT INTO runs (rowid, run_id, thread_id, parent_run_id, root_run_id, name, input,"
    " kind, state, generation, result, max_steps, carried, carried_pause, resume_value,"
    " resume_ticket, epoch, attempt_epoch, queued_order)"
    " SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL"
)

UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
"""Whether this SQLite updates many runs in one statement (``UPDATE ... FROM``, 3.33);
an older one is given the same updates a row at a time."""


@functools.cache
def _update_statement(columns: tuple[str, ...], many: bool) -> str:
    """The update of ``columns`` for rows given as (rowid, *values): a template for
    ``_sqlite_bulk`` with ``many``, else one row's statement for ``executemany``."""
    if many:
        sets = ", ".join(f"{name} = v.column{i}" for i, name in enumerate(columns, 2))
        return f"UPDATE runs SET {sets} FROM (VALUES {{}}) AS v WHERE runs.rowid = v.column1"
    sets = ", ".join(f"{name} = ?{i}" for i, name in enumerate(columns, 2))
    return f"UPDATE runs SET {sets} WHERE rowid = ?1"


_INSERT_EVENTS: Final = (
    "INSERT INTO events (seq, run_id, thread_id, generation, kind, state, detail, at)"
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


@final
class Transaction:
    """The file as one write transaction sees it, and the writes it has queued: the store
    rules' `RunTx` (``_rules``) over the SQLite file. Values are encoded here, and decoded
    only when a rule asks for them."""

    def __init__(self, conn: sqlite3.Connection, cache: RunCache) -> None:
        self.conn = conn
        self.cache = cache
        # Runs created since the last flush, in the order they were created.
        self._inserts: dict[str, _Insert] = {}
        # Runs changed since the last flush, and what their updates set past the row.
        self._changed: dict[str, Row] = {}
        self._checkpoints: dict[str, str] = {}
        self._steps: dict[str, int] = {}
        self._results: dict[str, str] = {}
        self._begun = False  # whether the transaction has read (and checked the cache)
        self._last_seq = 0
        self._last_rowid = 0
        self._events: list[Any] = []  # the values of `_INSERT_EVENTS` rows, one after another
        self._claims: dict[str, None] = {}  # changed claims (their value is in the cache)
        self._tickets: dict[str, tuple[str, str, float | None] | None] = {}
        self._consumed: list[int] = []
        self._consumed_ids: set[int] = set()
        self._delivered: list[int] = []
        self._delivered_ids: set[int] = set()
        self._dropped: list[str] = []
        self._commands: dict[str, list[Command]] = {}  # read ahead for runs that end
        self._ended: list[str] = []  # runs that ended in this transaction
        # The forked runs created in this transaction: run id -> [checkpoint, forked_from]
        # (JSON texts), written after their insert.
        self._forks: dict[str, list[str]] = {}
        self._history: list[tuple[str, int, str]] = []  # `_INSERT_CHECKPOINTS` rows
        self._streams = StreamWrites()

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
    ) -> dict[str, list[Command]]:
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
        checks name, and the stored commands of the runs it ends. Called before anything
        is queued; one read, unless the cache was dropped or a guarded run's thread was
        unknown until its row was read."""
        ending = [commit.run_id for commit in batch if isinstance(commit.state, Ended)]
        # The streams of runs a commit writes chunks on or ends (its "end" chunks).
        streaming = [commit.run_id for commit in batch if commit.chunks]
        if ending or streaming:
            self.begin()
            self._streams.prefetch(self.conn, [*ending, *streaming])
        while True:
            run_ids, thread_ids, claim_ids = self._missing(batch)
            if self._begun and not (run_ids or thread_ids or claim_ids or ending):
                return
            commands = self._read(run_ids, thread_ids, claim_ids, ending)
            if ending:
                self._commands, ending = commands, []

    def _missing(self, batch: Sequence[Commit]) -> tuple[set[str], set[str], set[str]]:
        """What ``batch`` will read that the cache does not hold, as far as it can tell."""
        rows, claims, threads = self.cache.rows, self.cache.claims, self.cache.threads
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
        claims = self.cache.claims
        missing = [run_id for run_id in run_ids if run_id not in claims]
        if missing:
            self._read(claim_ids=missing)

    def row(self, run_id: str) -> Row | None:
        rows = self.cache.rows
        if not self._begun or run_id not in rows:
            self._read(run_ids=(run_id,))
        return rows[run_id]

    def claim(self, run_id: str) -> ClaimRow | None:
        claims = self.cache.claims
        if not self._begun or run_id not in claims:
            self._read(claim_ids=(run_id,))
        return claims[run_id]

    def thread_busy(self, thread_id: str, run_id: str, now: float) -> bool:
        """Whether another run's attempt may be live on ``thread_id``: its attempt's epoch
        is its root's current claim, and that claim's lease has not expired."""
        self.begin()
        threads = self.cache.threads
        live = threads.get(thread_id)
        if live is None:
            self.flush()  # the query reads attempt epochs this transaction may have changed
            self._read(thread_ids=(thread_id,))
            live = threads[thread_id]
        for other, (root, epoch) in live.items():
            if other != run_id:
                held = self.claim(root)
                if held is not None and held.epoch == epoch and held.lease_until >= now:
                    return True
        return False

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

    def take_carried(self, row: Row) -> Carried:
        if row.carried == NO_MESSAGES and not row.carried_pause:
            return NOTHING_CARRIED
        taken = TextCarried(row.carried, row.carried_pause)
        row.carried, row.carried_pause = NO_MESSAGES, False
        self._touch(row)
        return taken

    def held_resume(self, row: Row) -> HeldResume:
        if row.resume_value == NULL and row.resume_ticket is None:
            return NO_RESUME
        ticket = None if row.resume_ticket is None else load_ticket(row.resume_ticket)
        return HeldResume(load_json(row.resume_value, "a resume value"), ticket)

    def drop_commands(self, run_id: str) -> list[JsonValue]:
        """Delete the run's stored commands; the payloads of the messages no attempt
        received, oldest first (frozen, each checked at its own depth)."""
        found = self._commands.pop(run_id, None)
        if found is None:
            self.flush()  # commands consumed or received in this transaction first
            found = self._read(command_run_ids=(run_id,))[run_id]
        elif self._consumed_ids:
            found = [command for command in found if command.id not in self._consumed_ids]
        if not found:
            return []
        self._dropped.append(run_id)
        received = self._delivered_ids
        return [
            load_json(command.payload, "a stored message")
            for command in found
            if command.kind == "message" and not command.delivered and command.id not in received
        ]

    def last_seq(self) -> int:
        """The seq of the last event in the file, this transaction's included."""
        self.begin()
        return self._last_seq

    def record(self, run_id: str) -> RunRecord:
        self.flush()  # the record is read from the file
        record = load_record(self.conn, run_id)
        assert record is not None
        return record

    def stream_heads(self, run_id: str) -> Mapping[str, StreamHead]:
        return self._streams.heads(self.conn, run_id)

    # ------------------------------------------------------------------ writing

    def _touch(self, row: Row) -> None:
        """Queue ``row``'s update, unless it is a new run not yet inserted: its insert
        reads the row when it is handed to SQLite."""
        run_id = row.run_id
        if run_id not in self._inserts:
            self._changed[run_id] = row

    def create(
        self,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        result: JsonValue,
    ) -> Row:
        """Create the run (new to the file)."""
        self.begin()
        kind = state_kind(state)
        row = Row(
            run_id=run_id,
            thread_id=new.thread_id,
            parent_run_id=new.parent_run_id,
            root_run_id=new.root_run_id or run_id,
            name=new.name,
            kind=kind,
            state_text=dump_state(state),
            generation=generation,
            carried=NO_MESSAGES,
            carried_pause=False,
            resume_value=NULL,
            resume_ticket=None,
            epoch=0,
            attempt_epoch=None,
            recoveries=0,
        )
        self.cache.rows[run_id] = row
        if kind == ENDED:
            self._ended.append(run_id)
        self._last_rowid += 1
        row.rowid = self._last_rowid
        self._inserts[run_id] = _Insert(
            row, dump_json(new.input), dump_json(result), new.max_steps, self._queued_order(row)
        )
        if new.forked_from is not None:
            self._forks[run_id] = [NULL, dump_json(new.forked_from)]
        return row

    def put_state(
        self,
        row: Row,
        state: RunState,
        generation: int,
        *,
        steps: int | None = None,
        result: JsonValue = UNSET,
    ) -> None:
        run_id = row.run_id
        row.kind, row.state_text, row.generation = state_kind(state), dump_state(state), generation
        self._changed[run_id] = row
        if row.kind == ENDED:
            self._ended.append(run_id)
        if steps is not None:
            self._steps[run_id] = steps
        if result is not UNSET:
            self._results[run_id] = dump_json(result)

    def put_checkpoint(self, row: Row, checkpoint: JsonValue, seq: int) -> None:
        run_id = row.run_id
        text = dump_json(checkpoint)
        fork = self._forks.get(run_id)
        if fork is not None and run_id in self._inserts:
            fork[0] = text
        else:
            self._checkpoints[run_id] = text
            self._changed[run_id] = row
        self._history.append((run_id, seq, text))

    def set_ticket(self, row: Row, ticket: ResumeTicket | None) -> None:
        """Put the run's ticket, or delete it (None)."""
        run_id = row.run_id
        # Popped first: a put goes to the end, so tickets are put in their last put's order.
        self._tickets.pop(run_id, None)
        self._tickets[run_id] = (
            None if ticket is None else (run_id, ticket.correlation_id, wake_at(ticket))
        )

    def keep_carried(self, row: Row, messages: tuple[JsonValue, ...], pause: bool) -> None:
        row.carried = dump_json(list(messages)) if messages else NO_MESSAGES
        row.carried_pause = pause
        self._touch(row)

    def keep_resume(self, row: Row, resume: HeldResume) -> None:
        value, ticket = resume
        row.resume_value = dump_json(value)
        row.resume_ticket = None if ticket is None else dump_ticket(ticket)
        self._touch(row)

    def set_epoch(self, row: Row, epoch: int) -> None:
        row.epoch = epoch
        self._touch(row)

    def set_recoveries(self, row: Row, recoveries: int) -> None:
        row.recoveries = recoveries
        self._touch(row)

    def set_attempt(self, row: Row, epoch: int | None) -> None:
        """Mark the run's attempt live at ``epoch``, or not live (None)."""
        row.attempt_epoch = epoch
        self._touch(row)
        live = self.cache.threads.get(row.thread_id)
        if live is not None:
            if epoch is None:
                live.pop(row.run_id, None)
            else:
                live[row.run_id] = (row.root_run_id, epoch)

    def set_claim(self, run_id: str, claim: ClaimRow | None) -> None:
        """Put the run's claim, or drop it (None)."""
        self.cache.claims[run_id] = claim
        self._claims[run_id] = None

    def consume(self, command_ids: Collection[int]) -> None:
        """Delete stored commands an attempt has applied."""
        self._consumed.extend(command_ids)
        self._consumed_ids.update(command_ids)

    def deliver(self, command_ids: Collection[int]) -> None:
        """Mark stored messages as handed to an attempt's body: kept, never discarded."""
        self._delivered.extend(command_ids)
        self._delivered_ids.update(command_ids)

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

    def event(
        self,
        row: Row,
        generation: int,
        kind: str,
        detail: Mapping[str, JsonValue],
        at: float,
    ) -> int:
        """Queue an event of ``row``'s run; its seq."""
        if not self._begun:
            self._read()
        self._last_seq = seq = self._last_seq + 1
        self._events.extend(
            (
                seq,
                row.run_id,
                row.thread_id,
                generation,
                kind,
                row.state_text,
                dump_shared(detail),
                at,
            )
        )
        return seq

    def append_chunks(
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
        self._streams.queue.append(run_id, channel, first, generation, kind, values, at, keep)

    def drop_chunks(self, run_id: str, channel: str, before: int) -> None:
        self._streams.queue.drop(run_id, channel, before)

    def end(self) -> None:
        """Flush, and forget what only the runs that ended in this transaction needed: a
        commit for an ended run is rare (it is refused), so the cache keeps the runs that
        can still change, and reads an ended one again if it must."""
        self.flush()
        rows, claims, threads = self.cache.rows, self.cache.claims, self.cache.threads
        for run_id in self._ended:
            row = rows.pop(run_id, None)
            if run_id in claims and claims[run_id] is None:
                del claims[run_id]
            if row is not None and threads.get(row.thread_id) == {}:
                del threads[row.thread_id]

    def flush(self) -> None:
        """Hand every queued write to SQLite (see the module's docstring for the order)."""
        conn = self.conn
        if self._inserts:
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
            write_rows(conn, _INSERT_EVENTS, 8, self._events)
            self._events.clear()
        if self._claims:
            claims = self.cache.claims
            put: list[Any] = []
            dropped: list[str] = []
            for run_id in self._claims:
                claim = claims[run_id]
                if claim is None:
                    dropped.append(run_id)
                else:
                    put.append(run_id)
                    put.extend(claim)
            write_rows(conn, _DROP_CLAIMS, 1, dropped)
            write_rows(conn, _PUT_CLAIMS, 4, put)
            self._claims.clear()
        if self._tickets:
            tickets = self._tickets.items()
            write_rows(conn, _DROP_TICKETS, 1, [r for r, t in tickets if t is None])
            insert_rows(conn, _PUT_TICKETS, 3, [v for _, t in tickets if t is not None for v in t])
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
        self._streams.flush(conn)

    def _flush_inserts(self) -> None:
        values: list[Any] = []
        for new in self._inserts.values():
            row = new.row
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
                )
            )
            row.filed, row.filed_queued = row.updatable(), new.queued_order is not None
        self._inserts.clear()
        write_rows(self.conn, _INSERT_RUNS, 19, values)

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

    def _queued_order(self, row: Row) -> int | None:
        """`QUEUED_MARK` for a named root run written Queued (the runs `runnable` hands
        out); None for any other run."""
        if row.kind != QUEUED or not row.named_root:
            return None
        return QUEUED_MARK
