"""The text-row half of a transaction, written once for the stores that keep runs as rows of
text (SQLite, PostgreSQL): `TextRow`, the columns of a run the rules read, and
`TextRunTx`, the store rules' `RunTx` (``_rules``) over those rows, runs' streams
included (``_streams``).

A store that keeps text encodes values when a rule writes them and decodes them only when a
rule asks (a state for a rejection's answer, a held resume, carried messages handed over):
most commits pass their values on unread. `TextRunTx` holds what a transaction has read
(rows, claims, the live attempts on threads, the stored commands of the runs it ends) and
the writes it has queued, and implements every rule method that only reads and changes
those. A store subclasses it and supplies where the rows come from and how the writes go
out: its reads (`_read_row`, `_read_claim`, `_read_thread`, `_read_commands`,
`_read_heads`, `_load_record`), `create` and `put_checkpoint` (what a store writes with a
new run, and where it keeps checkpoints, differ), `last_seq`, `flush` and its own begin and
commit.

Invariant: every change to a run row goes through `_change`, which queues the row's update
(unless the row is a run created in this transaction and not yet inserted: its insert reads
the row as it stands when it is sent) and marks the transaction as one that wrote. Every
other write marks it too (`wrote`), so a store can tell a transaction that only read.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Generic, NamedTuple, Self, TypeVar

import attrs

from .._core import (
    UNSET,
    CauseKind,
    ChunkKind,
    CommandKind,
    JsonValue,
    NewRun,
    ResumeTicket,
    RunRecord,
    RunState,
    StateKind,
    StoredCommand,
    wake_at,
)
from ._codec import (
    ENDED,
    NO_MESSAGES,
    QUEUED,
    TextCarried,
    dump_json,
    dump_shared,
    dump_state,
    dump_ticket,
    load_json,
    load_raw,
    load_state,
    load_ticket,
)
from ._rules import (
    NO_RESUME,
    NOTHING_CARRIED,
    Carried,
    ClaimRow,
    HeldResume,
    StreamHead,
    cause_of,
    state_kind,
)
from ._streams import ChunkRows

NULL: Final = "null"
"""The JSON text of None: a column that holds no value (a resume value, a checkpoint)."""

EVENT_COLUMNS: Final = ("seq", "run_id", "thread_id", "generation", "kind", "state", "detail", "at")
"""An event's columns, in the order `TextRunTx.event` queues its values."""
EVENT_WIDTH: Final = len(EVENT_COLUMNS)

LiveAttempts = dict[str, tuple[str, int]]
"""The runs on one thread whose attempt may be live: run id -> (root run id, attempt
epoch). The attempt is live while its epoch is the root's current claim, unexpired."""


class CommandRow(NamedTuple):
    """A stored command as a run's start or end reads it (sorted by id: the order they were
    stored)."""

    id: int
    kind: CommandKind
    payload: str  # JSON text
    delivered: int  # true once an attempt handed the message to its body
    reason: str  # JSON text
    at: float


@attrs.define(eq=False)
class TextRow:
    """The columns of a run the rules read (`_rules.StoredRun`), as one transaction sees
    them, its writes included; payload columns a commit does not read (input, checkpoint,
    result) stay in the database. Mutable only through `TextRunTx`."""

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
    # `RunRecord`'s times and last owner (None where a file written before them holds
    # none); an update writes them when they change.
    created_at: float | None
    updated_at: float | None
    started_at: float | None
    ended_at: float | None
    worker_id: str | None
    # A queued run's earliest start (`Commit.not_before`), None when it may start now.
    not_before: float | None
    body_version: str | None
    # Retries scheduled so far (`Commit.retries`).
    retries: int

    @classmethod
    def created(
        cls,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        at: float,
        not_before: float | None = None,
    ) -> Self:
        """The row of a run ``new`` creates at ``at``: nothing carried, no resume, epoch 0,
        no attempt, no worker."""
        kind = state_kind(state)
        return cls(
            run_id,
            new.thread_id,
            new.parent_run_id,
            new.root_run_id or run_id,
            new.name,
            kind,
            dump_state(state),
            generation,
            NO_MESSAGES,
            False,
            NULL,
            None,
            0,
            None,
            0,
            at,
            at,
            at if kind == "running" else None,
            at if kind == ENDED else None,
            None,
            not_before,
            new.body_version,
            0,
        )

    @property
    def state(self) -> RunState:
        return load_state(self.state_text)  # (decoded texts are cached by `load_state`)

    @property
    def cause(self) -> CauseKind | None:
        """The kind of an ended run's cause (the column `list_runs` filters and counts
        ended runs by), else None."""
        if self.kind != ENDED:
            return None
        return cause_of(self.state)

    @property
    def named_root(self) -> bool:
        """Only named root runs are ever handed out by `runnable`."""
        return self.name is not None and self.parent_run_id is None

    @property
    def in_queue(self) -> bool:
        """Whether the run holds a place in the queue `runnable` hands runs out from: a
        named root run written ``Queued``."""
        return self.kind == QUEUED and self.name is not None and self.parent_run_id is None


R = TypeVar("R", bound=TextRow)
"""The store's row type."""
N = TypeVar("N")
"""What the store keeps of a run it creates until the run's insert is sent (what the row
does not hold: its input, its result ...)."""


class TextRunTx(abc.ABC, Generic[R, N]):
    """The store rules' `RunTx` over `TextRow` rows: every method that reads or changes
    what the transaction holds, and the queues its writes wait in until `flush` sends
    them. See the module's docstring for what a subclass supplies."""

    def __init__(
        self,
        rows: dict[str, R | None],
        claims: dict[str, ClaimRow | None],
        threads: dict[str, LiveAttempts],
    ) -> None:
        # What the transaction has read (a key mapped to None or {}: read, and not there),
        # its writes applied. A store may hand in dicts that outlive the transaction (the
        # SQLite store's cache), which it then keeps true itself.
        self._rows = rows
        self._claims = claims
        self._threads = threads
        self._commands: dict[str, list[CommandRow]] = {}  # read ahead for runs that end
        self._begun = False
        """Whether what the dicts hold may be read as they are (a store whose dicts
        outlive a transaction checks them on its first read)."""
        self.wrote = False
        """Whether the transaction queued any write."""
        self._last_seq = 0
        # Queued writes: the runs created since the last flush, in the order they were; the
        # runs changed (and what their updates set past the row: steps, results); the runs
        # that ended; claims, tickets, commands.
        self._inserted: dict[str, N] = {}
        self._changed: dict[str, R] = {}
        self._steps: dict[str, int] = {}
        self._results: dict[str, str] = {}
        self._ended: list[R] = []  # runs written Ended in this transaction
        self._events: list[Any] = []  # `EVENT_COLUMNS` values, event after event
        self._claims_changed: dict[str, None] = {}  # their values are in `_claims`
        # run id -> (correlation id, wake at), or None for a deleted ticket; in the order of
        # each run's last put (a put goes to the end).
        self._tickets: dict[str, tuple[str, float | None] | None] = {}
        self._consumed: list[int] = []
        self._consumed_ids: set[int] = set()
        self._delivered: list[int] = []
        self._delivered_ids: set[int] = set()
        self._dropped: list[str] = []  # runs whose stored commands are all deleted
        # The heads of the streams of the runs read, and the stream rows queued.
        self._streams = ChunkRows()

    # ------------------------------------------------------------------ the store's part

    @abc.abstractmethod
    def _read_row(self, run_id: str) -> None:
        """Read the run into `_rows` (None when the store does not hold it)."""

    @abc.abstractmethod
    def _read_claim(self, run_id: str) -> None:
        """Read the run's claim into `_claims` (None when it has none)."""

    @abc.abstractmethod
    def _read_thread(self, thread_id: str) -> None:
        """Read the live attempts on ``thread_id`` into `_threads`, this transaction's
        writes included (a store flushes first)."""

    @abc.abstractmethod
    def _read_unended(self, thread_id: str) -> list[str]:
        """The runs on ``thread_id`` that have not ended, oldest first (called after a
        flush; a store that locks rows locks the thread first, as `_read_thread` does)."""

    @abc.abstractmethod
    def _read_commands(self, run_id: str) -> list[CommandRow]:
        """The run's stored commands, oldest first (called after a flush)."""

    @abc.abstractmethod
    def _read_heads(self, run_ids: list[str]) -> None:
        """Read the stream heads of ``run_ids`` (none read yet) into ``_streams``
        (`ChunkRows.take`). A run's heads are read once its row is (a store that locks
        rows has locked it), so no other writer numbers its chunks meanwhile."""

    @abc.abstractmethod
    def _load_record(self, run_id: str) -> RunRecord | None:
        """The run's record as the store holds it (called after a flush)."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Send every queued write (inside the transaction)."""

    # ------------------------------------------------------------------ reading

    def row(self, run_id: str) -> R | None:
        rows = self._rows
        if not self._begun or run_id not in rows:
            self._read_row(run_id)
        return rows[run_id]

    def claim(self, run_id: str) -> ClaimRow | None:
        claims = self._claims
        if not self._begun or run_id not in claims:
            self._read_claim(run_id)
        return claims[run_id]

    def thread_busy(self, thread_id: str, run_id: str, now: float) -> bool:
        """Whether another run's attempt may be live on ``thread_id``: its attempt's epoch
        is its root's current claim, and that claim's lease has not expired."""
        live = self._threads.get(thread_id) if self._begun else None
        if live is None:
            self._read_thread(thread_id)
            live = self._threads[thread_id]
        for other, (root, epoch) in live.items():
            if other != run_id:
                held = self.claim(root)
                if held is not None and held.epoch == epoch and held.lease_until >= now:
                    return True
        return False

    def unended_on_thread(self, thread_id: str) -> list[R]:
        self.flush()  # the query reads states this transaction may have changed
        found = []
        for run_id in self._read_unended(thread_id):
            row = self.row(run_id)
            if row is not None and row.kind != ENDED:
                found.append(row)
        return found

    def take_carried(self, row: R) -> Carried:
        if row.carried == NO_MESSAGES and not row.carried_pause:
            return NOTHING_CARRIED
        taken = TextCarried(row.carried, row.carried_pause)
        row.carried, row.carried_pause = NO_MESSAGES, False
        self._change(row)
        return taken

    def held_resume(self, row: R) -> HeldResume:
        if row.resume_value == NULL and row.resume_ticket is None:
            return NO_RESUME
        ticket = None if row.resume_ticket is None else load_ticket(row.resume_ticket)
        return HeldResume(load_json(row.resume_value, "a resume value"), ticket)

    def _run_commands(self, run_id: str) -> list[CommandRow]:
        """The run's stored commands left: those the prefetch read (less those an earlier
        commit of the batch consumed), else read now."""
        found = self._commands.pop(run_id, None)
        if found is None:
            self.flush()  # commands consumed or received in this transaction first
            return self._read_commands(run_id)
        if self._consumed_ids:
            consumed = self._consumed_ids
            return [command for command in found if command.id not in consumed]
        return found

    def stored_commands(self, run_id: str) -> list[StoredCommand]:
        return [
            StoredCommand(
                id=command.id,
                run_id=run_id,
                kind=command.kind,
                payload=load_json(command.payload, "a stored command's payload"),
                reason=load_raw(command.reason, "a stored command's reason"),
                at=command.at,
            )
            for command in self._run_commands(run_id)
        ]

    def drop_commands(self, run_id: str) -> list[JsonValue]:
        """Delete the run's stored commands; the payloads of the messages no attempt
        received, oldest first (frozen, each checked at its own depth)."""
        found = self._run_commands(run_id)
        if not found:
            return []
        self._dropped.append(run_id)
        self.wrote = True
        received = self._delivered_ids
        return [
            load_json(command.payload, "a stored message")
            for command in found
            if command.kind == "message" and not command.delivered and command.id not in received
        ]

    def record(self, run_id: str) -> RunRecord:
        self.flush()  # the record is read from the store
        record = self._load_record(run_id)
        assert record is not None
        return record

    def stream_heads(self, run_id: str) -> Mapping[str, StreamHead]:
        found = self._streams.heads(run_id)
        if found is None:
            self._read_heads([run_id])
            found = self._streams.heads(run_id)
            assert found is not None
        return found

    # ------------------------------------------------------------------ writing

    def _change(self, row: R) -> None:
        """Queue ``row``'s update (see the module's invariant)."""
        run_id = row.run_id
        if run_id not in self._inserted:
            self._changed[run_id] = row
        self.wrote = True

    def _created(self, row: R) -> R:
        """Hold the row of a run this transaction creates (the store queues its insert)."""
        self._rows[row.run_id] = row
        if row.kind == ENDED:
            self._ended.append(row)
        self.wrote = True
        return row

    def put_state(
        self,
        row: R,
        state: RunState,
        generation: int,
        *,
        at: float,
        steps: int | None = None,
        result: JsonValue = UNSET,
        not_before: float | None = None,
    ) -> None:
        run_id = row.run_id
        row.kind = kind = state_kind(state)
        row.state_text = dump_state(state)
        row.generation = generation
        row.updated_at = at
        row.not_before = not_before
        if kind == ENDED:
            row.ended_at = at
            self._ended.append(row)
        elif kind == "running" and row.started_at is None:
            row.started_at = at
        if steps is not None:
            self._steps[run_id] = steps
        if result is not UNSET:
            self._results[run_id] = dump_json(result)
        self._change(row)

    def set_ticket(self, row: R, ticket: ResumeTicket | None) -> None:
        """Put the run's ticket, or delete it (None)."""
        run_id = row.run_id
        tickets = self._tickets
        # Popped first: a put goes to the end, so tickets are put in their last put's order.
        tickets.pop(run_id, None)
        tickets[run_id] = None if ticket is None else (ticket.correlation_id, wake_at(ticket))
        self.wrote = True

    def keep_carried(self, row: R, messages: tuple[JsonValue, ...], pause: bool) -> None:
        row.carried = dump_json(list(messages)) if messages else NO_MESSAGES
        row.carried_pause = pause
        self._change(row)

    def keep_resume(self, row: R, resume: HeldResume) -> None:
        value, ticket = resume
        row.resume_value = dump_json(value)
        row.resume_ticket = None if ticket is None else dump_ticket(ticket)
        self._change(row)

    def set_epoch(self, row: R, epoch: int) -> None:
        row.epoch = epoch
        self._change(row)

    def set_recoveries(self, row: R, recoveries: int) -> None:
        row.recoveries = recoveries
        self._change(row)

    def set_worker(self, row: R, worker_id: str) -> None:
        if row.worker_id != worker_id:
            row.worker_id = worker_id
            self._change(row)

    def set_body_version(self, row: R, version: str | None) -> None:
        row.body_version = version
        self._change(row)

    def set_retries(self, row: R, retries: int) -> None:
        row.retries = retries
        self._change(row)

    def set_attempt(self, row: R, epoch: int | None) -> None:
        """Mark the run's attempt live at ``epoch``, or not live (None)."""
        row.attempt_epoch = epoch
        live = self._threads.get(row.thread_id)
        if live is not None:
            if epoch is None:
                live.pop(row.run_id, None)
            else:
                live[row.run_id] = (row.root_run_id, epoch)
        self._change(row)

    def set_claim(self, run_id: str, claim: ClaimRow | None) -> None:
        """Put the run's claim, or drop it (None)."""
        self._claims[run_id] = claim
        self._claims_changed[run_id] = None
        self.wrote = True

    def consume(self, command_ids: Collection[int]) -> None:
        """Delete stored commands an attempt has applied."""
        if command_ids:
            self._consumed.extend(command_ids)
            self._consumed_ids.update(command_ids)
            self.wrote = True

    def deliver(self, command_ids: Collection[int]) -> None:
        """Mark stored messages as handed to an attempt's body: kept, never discarded."""
        if command_ids:
            self._delivered.extend(command_ids)
            self._delivered_ids.update(command_ids)
            self.wrote = True

    def event(
        self,
        row: R,
        generation: int,
        kind: str,
        detail: Mapping[str, JsonValue],
        at: float,
    ) -> int:
        """Queue an event of ``row``'s run; its seq (the row was read or created, so the
        transaction has begun and `_last_seq` counts from where the store stands)."""
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
        self.wrote = True
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
        self._streams.append(run_id, channel, first, generation, kind, values, at, keep)
        self.wrote = True

    def drop_chunks(self, run_id: str, channel: str, before: int) -> None:
        self._streams.drop(run_id, channel, before)
        self.wrote = True
