"""The memory store's tables, and the store rules' transaction over them (`MemoryTx`).

The memory store never yields inside a call, so a call is a transaction by itself: the
rules (``_rules``) run over these tables directly, with no copy and nothing to flush. What
stays here is the representation: the values themselves (frozen already, so every payload
method is the identity), the indexes `MemoryStore`'s reads use (the queue, the due tickets,
the runs on each thread, each run's children), the two event logs, and eviction of the
runs that ended longest ago.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import final

import attrs

from ..._core import (
    UNSET,
    ChunkKind,
    CommandKind,
    Commit,
    JsonValue,
    NewRun,
    ResumeTicket,
    RetryPolicy,
    RunRecord,
    RunState,
    StateKind,
    StoredCommand,
    wake_at,
)
from .._rules import (
    KIND_OF,
    NO_RESUME,
    NOTHING_CARRIED,
    Carried,
    CarriedValues,
    ClaimRow,
    HeldResume,
    StreamHead,
)

# An event as the store keeps it: the fields of a `RunEvent`, in order. A tuple costs a
# fraction of a frozen object to build, and events are written far more often than read.
Entry = tuple[int, str, str, int, str, RunState, Mapping[str, JsonValue], float]


Segment = tuple[int, int, int, ChunkKind, tuple[JsonValue, ...], float]
"""Chunks of one channel written together: first and last offset, generation, kind, their
values (frozen already), ``at``."""

_NO_CHANNELS: Mapping[str, StreamHead] = {}


@final
@attrs.define(eq=False)
class MemoryChannel:
    """One channel of a run's stream: its segments in offset order, and its head."""

    segments: list[Segment]
    head: StreamHead


@final
@attrs.define(eq=False)
class RowExtras:
    """The columns of a run that most runs never set, kept apart so a run's row is small
    (a memory store holds every run it keeps in memory): made on the first of them."""

    # The messages an Awaiting commit carried, and the resume the run's current or next
    # attempt answers (kept until the run awaits or ends).
    carried: tuple[JsonValue, ...] = ()
    carried_pause: bool = False
    resume_value: JsonValue = None
    resume_ticket: ResumeTicket | None = None
    # Claims (shared stores): the last epoch granted, how many times its owner was lost,
    # and the last owner of its claim.
    epoch: int = 0
    recoveries: int = 0
    worker_id: str | None = None
    # The run's checkpoints, each with the seq of the last event its commit wrote (the
    # store's last seq when it wrote none), in seq order: the checkpoint as of an event is
    # the last one at or before it (`checkpoint_at`). Forgotten with the run. Made on the
    # first checkpoint: most runs never commit one.
    history: list[tuple[int, JsonValue]] | None = None
    # The run's ``step`` events (`MemoryStore.step_events`), a subset of ``events`` in seq
    # order. Made on the first: most runs never journal a step.
    step_entries: list[Entry] | None = None


@final
@attrs.define(eq=False)
class MemoryRow:
    """One run's committed truth, updated in place by each accepted commit (the store
    rules' `StoredRun`); `MemoryStore.load` hands out a frozen `RunRecord` of it."""

    # What a run is created with comes first, in the order `MemoryTx.create` passes it.
    run_id: str
    thread_id: str
    parent_run_id: str | None
    root_run_id: str
    name: str | None
    input: JsonValue
    max_steps: int | None
    state: RunState
    kind: StateKind  # the kind of ``state``, set with it
    generation: int
    result: JsonValue
    # The order runs were created in: queued runs start oldest first.
    created: int
    # A queued run's earliest start (`Commit.not_before`: a delayed start, a retry's
    # wait); None when it may start now.
    not_before: float | None
    # Its time limits (`NewRun.deadline`, `NewRun.queue_deadline`), fixed at creation.
    deadline: float | None
    queue_deadline: float | None
    forked_from: JsonValue
    body_version: str | None
    # How it is tried again when its body fails (`NewRun.retry`, fixed at creation), and
    # the retries scheduled so far.
    retry: RetryPolicy | None
    # `RunRecord`'s times (the runtime's clock) and the last owner of its claim.
    created_at: float | None
    updated_at: float | None
    started_at: float | None
    ended_at: float | None
    retries: int = 0
    checkpoint: JsonValue = None
    steps: int = 0
    # The epoch of the attempt live on the run (shared stores; None when none is).
    attempt_epoch: int | None = None
    events: list[Entry] = attrs.field(factory=list)
    # What few runs ever hold (`RowExtras`), made on the first of it.
    extras: RowExtras | None = None

    def more(self) -> RowExtras:
        """The run's `RowExtras`, made now if it has none yet."""
        extras = self.extras
        if extras is None:
            extras = self.extras = RowExtras()
        return extras

    @property
    def carried(self) -> tuple[JsonValue, ...]:
        return () if self.extras is None else self.extras.carried

    @property
    def carried_pause(self) -> bool:
        return self.extras is not None and self.extras.carried_pause

    @property
    def resume_value(self) -> JsonValue:
        return None if self.extras is None else self.extras.resume_value

    @property
    def resume_ticket(self) -> ResumeTicket | None:
        return None if self.extras is None else self.extras.resume_ticket

    @property
    def epoch(self) -> int:
        return 0 if self.extras is None else self.extras.epoch

    @property
    def recoveries(self) -> int:
        return 0 if self.extras is None else self.extras.recoveries

    @property
    def worker_id(self) -> str | None:
        return None if self.extras is None else self.extras.worker_id

    @property
    def history(self) -> list[tuple[int, JsonValue]] | None:
        return None if self.extras is None else self.extras.history

    @property
    def step_entries(self) -> list[Entry] | None:
        return None if self.extras is None else self.extras.step_entries

    @property
    def named_root(self) -> bool:
        """Only named root runs are ever handed out by `runnable`."""
        return self.name is not None and self.parent_run_id is None

    def record(self) -> RunRecord:
        return RunRecord(
            run_id=self.run_id,
            thread_id=self.thread_id,
            parent_run_id=self.parent_run_id,
            name=self.name,
            state=self.state,
            generation=self.generation,
            result=self.result,
            checkpoint=self.checkpoint,
            input=self.input,
            steps=self.steps,
            max_steps=self.max_steps,
            forked_from=self.forked_from,
            created_at=self.created_at,
            updated_at=self.updated_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            worker_id=self.worker_id,
            not_before=self.not_before,
            deadline=self.deadline,
            body_version=self.body_version,
            retry=self.retry,
            retries=self.retries,
        )


def _created(row: MemoryRow) -> int:
    return row.created


@final
@attrs.define(eq=False)
class MemoryTx:
    """Everything a memory store holds, and the store rules' `RunTx` over it.

    ``shared`` is the store's: a store of one runtime keeps no runs per thread, and its
    `thread_busy` answers False (that runtime's own thread gate keeps the rule).
    """

    shared: bool
    rows: dict[str, MemoryRow] = attrs.field(factory=dict)
    # Ended runs, oldest end first: the eviction queue (`MemoryStore.evict`).
    ended: deque[str] = attrs.field(factory=deque)
    # Every event in seq order. Events of forgotten runs stay until they are more than half
    # of it; readers skip them.
    log: list[Entry] = attrs.field(factory=list)
    forgotten_events: int = 0
    seq: int = 0
    # Indexes: queued named root runs, awaiting ones with a scheduled ticket (its time), the
    # runs on each thread (shared stores), each run's children in the order they were made.
    queued: dict[str, None] = attrs.field(factory=dict)
    scheduled: dict[str, float] = attrs.field(factory=dict)
    # Root runs with a time limit that have not ended (`MemoryStore.overdue` reads these).
    limited: dict[str, None] = attrs.field(factory=dict)
    on_thread: dict[str, set[str]] = attrs.field(factory=dict)
    children_of: dict[str, list[str]] = attrs.field(factory=dict)
    claims: dict[str, ClaimRow] = attrs.field(factory=dict)
    commands: dict[int, StoredCommand] = attrs.field(factory=dict)
    # Stored messages an attempt has handed to its body (`Commit.delivered`): kept for an
    # attempt that replaces it, never listed as discarded. Invariant: a subset of the keys
    # of ``commands``.
    delivered: set[int] = attrs.field(factory=set)
    command_id: int = 0
    # Whether a claim was written since the store last cleared it (the store's version
    # moves for claim calls that changed something).
    wrote_claims: bool = False
    # The runs' streams: run id -> channel -> its chunks (only runs that wrote one).
    streams: dict[str, dict[str, MemoryChannel]] = attrs.field(factory=dict)

    # ------------------------------------------------------------------ reading

    def prefetch(self, batch: Sequence[Commit]) -> None:
        pass  # everything is at hand

    def prefetch_claims(self, run_ids: Iterable[str]) -> None:
        pass

    def row(self, run_id: str) -> MemoryRow | None:
        return self.rows.get(run_id)

    def claim(self, run_id: str) -> ClaimRow | None:
        return self.claims.get(run_id)

    def thread_busy(self, thread_id: str, run_id: str, now: float) -> bool:
        on_thread = self.on_thread.get(thread_id)
        if not on_thread:
            return False
        rows, claims = self.rows, self.claims
        for other in on_thread:
            if other == run_id:
                continue
            row = rows[other]
            if row.attempt_epoch is not None:
                held = claims.get(row.root_run_id)
                if held is not None and held.epoch == row.attempt_epoch and held.lease_until >= now:
                    return True
        return False

    def children(self, parent: str) -> list[str]:
        return list(self.children_of.get(parent, ()))

    def unended_on_thread(self, thread_id: str) -> list[MemoryRow]:
        # A shared store indexes its runs by thread; a store of one runtime looks through
        # its runs (read only for a start with a busy-thread policy).
        rows = self.rows
        if self.shared:
            candidates: Iterable[MemoryRow] = [
                rows[run_id] for run_id in self.on_thread.get(thread_id, ())
            ]
        else:
            candidates = rows.values()
        found = [row for row in candidates if row.thread_id == thread_id and row.kind != "ended"]
        found.sort(key=_created)
        return found

    def expired_claims(self, now: float) -> list[str]:
        expired = sorted((c.lease_until, r) for r, c in self.claims.items() if c.lease_until < now)
        return [run_id for _, run_id in expired]

    def take_carried(self, row: MemoryRow) -> Carried:
        extras = row.extras
        if extras is None or (not extras.carried and not extras.carried_pause):
            return NOTHING_CARRIED
        taken = CarriedValues(extras.carried, extras.carried_pause)
        extras.carried, extras.carried_pause = (), False
        return taken

    def held_resume(self, row: MemoryRow) -> HeldResume:
        extras = row.extras
        if extras is None or (extras.resume_value is None and extras.resume_ticket is None):
            return NO_RESUME
        return HeldResume(extras.resume_value, extras.resume_ticket)

    def stored_commands(self, run_id: str) -> list[StoredCommand]:
        commands = self.commands
        if not commands:
            return []
        # (Ids grow, and each is added once: the dict's order is the order they came in.)
        return [command for command in commands.values() if command.run_id == run_id]

    def drop_commands(self, run_id: str) -> list[JsonValue]:
        commands = self.commands
        if not commands:
            return []
        dropped = [c for c in commands.values() if c.run_id == run_id]
        discarded = []
        for command in dropped:
            del commands[command.id]
            if command.id in self.delivered:
                self.delivered.discard(command.id)
            elif command.kind == "message":
                discarded.append(command.payload)
        return discarded

    def last_seq(self) -> int:
        return self.seq

    def record(self, run_id: str) -> RunRecord:
        return self.rows[run_id].record()

    def stream_heads(self, run_id: str) -> Mapping[str, StreamHead]:
        channels = self.streams.get(run_id)
        if channels is None:
            return _NO_CHANNELS
        return {name: channel.head for name, channel in channels.items()}

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
    ) -> MemoryRow:
        kind = KIND_OF[type(state)]
        row = object.__new__(MemoryRow)  # (a class called with keywords costs twice as much)
        MemoryRow.__init__(  # (positionally: in the order of its fields)
            row,
            run_id,
            new.thread_id,
            new.parent_run_id,
            new.root_run_id or run_id,
            new.name,
            new.input,
            new.max_steps,
            state,
            kind,
            generation,
            result,
            self.seq,
            not_before,
            new.deadline,
            new.queue_deadline,
            new.forked_from,
            new.body_version,
            new.retry,
            at,
            at,
            at if kind == "running" else None,
            at if kind == "ended" else None,
        )
        self.rows[run_id] = row
        if self.shared:
            self.on_thread.setdefault(row.thread_id, set()).add(run_id)
        parent = new.parent_run_id
        if parent is not None:
            self.children_of.setdefault(parent, []).append(run_id)
        elif kind == "queued" and new.name is not None:
            self.queued[run_id] = None
        if kind == "ended":
            self.ended.append(run_id)
        elif parent is None and (new.deadline is not None or new.queue_deadline is not None):
            self.limited[run_id] = None
        return row

    def put_state(
        self,
        row: MemoryRow,
        state: RunState,
        generation: int,
        *,
        at: float,
        steps: int | None = None,
        result: JsonValue = UNSET,
        not_before: float | None = None,
    ) -> None:
        kind = KIND_OF[type(state)]
        row.state, row.kind, row.generation = state, kind, generation
        row.updated_at = at
        if kind == "running":
            if row.started_at is None:
                row.started_at = at
        elif kind == "ended":
            row.ended_at = at
        row.not_before = not_before
        if steps is not None:
            row.steps = steps
        if result is not UNSET:
            row.result = result
        if row.parent_run_id is None and row.name is not None:
            if kind == "queued":
                self.queued[row.run_id] = None
            else:
                self.queued.pop(row.run_id, None)
        if kind == "ended":
            self.ended.append(row.run_id)
            self.limited.pop(row.run_id, None)

    def put_checkpoint(self, row: MemoryRow, checkpoint: JsonValue, seq: int) -> None:
        row.checkpoint = checkpoint
        extras = row.more()
        if extras.history is None:
            extras.history = [(seq, checkpoint)]
        else:
            extras.history.append((seq, checkpoint))

    def set_ticket(self, row: MemoryRow, ticket: ResumeTicket | None) -> None:
        # The ticket itself lives in the Awaiting state; only the due-time index is kept.
        if row.named_root:
            when = None if ticket is None else wake_at(ticket)
            if when is None:
                self.scheduled.pop(row.run_id, None)
            else:
                self.scheduled[row.run_id] = when

    def keep_carried(self, row: MemoryRow, messages: tuple[JsonValue, ...], pause: bool) -> None:
        if row.extras is not None or messages or pause:
            extras = row.more()
            extras.carried, extras.carried_pause = messages, pause

    def keep_resume(self, row: MemoryRow, resume: HeldResume) -> None:
        if row.extras is not None or resume.value is not None or resume.ticket is not None:
            extras = row.more()
            extras.resume_value, extras.resume_ticket = resume

    def set_epoch(self, row: MemoryRow, epoch: int) -> None:
        row.more().epoch = epoch

    def set_attempt(self, row: MemoryRow, epoch: int | None) -> None:
        row.attempt_epoch = epoch

    def set_body_version(self, row: MemoryRow, version: str | None) -> None:
        row.body_version = version

    def set_retries(self, row: MemoryRow, retries: int) -> None:
        row.retries = retries

    def set_recoveries(self, row: MemoryRow, recoveries: int) -> None:
        row.more().recoveries = recoveries

    def set_worker(self, row: MemoryRow, worker_id: str) -> None:
        row.more().worker_id = worker_id

    def set_claim(self, run_id: str, claim: ClaimRow | None) -> None:
        if claim is None:
            self.claims.pop(run_id, None)
        else:
            self.claims[run_id] = claim
        self.wrote_claims = True

    def consume(self, command_ids: Collection[int]) -> None:
        for command_id in command_ids:
            self.commands.pop(command_id, None)
            self.delivered.discard(command_id)

    def deliver(self, command_ids: Collection[int]) -> None:
        for command_id in command_ids:
            if command_id in self.commands:
                self.delivered.add(command_id)

    def insert_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int:
        self.command_id = command_id = self.command_id + 1
        self.commands[command_id] = StoredCommand(command_id, run_id, kind, payload, reason, at)
        return command_id

    def event(
        self,
        row: MemoryRow,
        generation: int,
        kind: str,
        detail: Mapping[str, JsonValue],
        at: float,
    ) -> int:
        self.seq = seq = self.seq + 1
        entry = (seq, row.run_id, row.thread_id, generation, kind, row.state, detail, at)
        self.log.append(entry)
        row.events.append(entry)
        if kind == "step":
            extras = row.more()
            if extras.step_entries is None:
                extras.step_entries = []
            extras.step_entries.append(entry)
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
        last = first + len(values) - 1
        head = StreamHead(last, generation, keep)
        segment: Segment = (first, last, generation, kind, tuple(values), at)
        channels = self.streams.setdefault(run_id, {})
        found = channels.get(channel)
        if found is None:
            channels[channel] = MemoryChannel([segment], head)
        else:
            found.segments.append(segment)
            found.head = head

    def drop_chunks(self, run_id: str, channel: str, before: int) -> None:
        found = self.streams[run_id][channel]
        found.segments = [segment for segment in found.segments if segment[0] >= before]

    # ------------------------------------------------------------------ forgetting

    def forget(self, run_id: str) -> None:
        """Drop an ended run's row, its events and its place in the indexes (its entry in
        ``ended`` is the caller's)."""
        row = self.rows.pop(run_id)
        self.streams.pop(run_id, None)
        self.forgotten_events += len(row.events)
        on_thread = self.on_thread.get(row.thread_id)
        if on_thread is not None:
            on_thread.discard(run_id)
            if not on_thread:
                del self.on_thread[row.thread_id]
        if row.parent_run_id is not None:
            siblings = self.children_of.get(row.parent_run_id)
            if siblings is not None:
                siblings.remove(run_id)
                if not siblings:
                    del self.children_of[row.parent_run_id]
        if self.forgotten_events * 2 > len(self.log):
            self.log = [entry for entry in self.log if self.is_live(entry)]
            self.forgotten_events = 0

    def is_live(self, entry: Entry) -> bool:
        """Whether an event's run is still kept and the event belongs to that run's current
        life (a run id may be reused after the run that had it was forgotten)."""
        row = self.rows.get(entry[1])
        return row is not None and bool(row.events) and row.events[0][0] <= entry[0]
