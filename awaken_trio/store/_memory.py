"""The memory store: committed truth in dicts, pure Trio, for tests and embedding."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping, Sequence
from typing import final

import attrs
import trio

from .._core._errors import InvalidArgument
from .._core._json import JsonValue, freeze_detail
from .._core._state import Awaiting, Ended, EventKind, Queued, RunEvent, RunRecord, RunState
from .._core._storage import (
    UNSET,
    Accepted,
    Commit,
    CommitResult,
    EventDraft,
    Rejected,
    RejectReason,
)

_NO_MESSAGES: tuple[JsonValue, ...] = ()

# An event as the store keeps it: the fields of a `RunEvent`, in order. A tuple costs a
# fraction of a frozen object to build, and events are written far more often than read.
_Entry = tuple[int, str, str, int, str, RunState, Mapping[str, JsonValue], float]


@final
@attrs.define(eq=False)
class _Row:
    """One run's committed truth, updated in place by each accepted commit; `load` hands
    out a frozen `RunRecord` of it."""

    thread_id: str
    parent_run_id: str | None
    name: str | None
    input: JsonValue
    max_steps: int | None
    state: RunState
    generation: int
    result: JsonValue = None
    checkpoint: JsonValue = None
    steps: int = 0
    # The messages an Awaiting commit carried, and the value a queued resume hands over.
    carried: tuple[JsonValue, ...] = ()
    resume_value: JsonValue = None
    events: list[_Entry] = attrs.field(factory=list)

    def record(self, run_id: str) -> RunRecord:
        return RunRecord(
            run_id=run_id,
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
        )


@final
@attrs.define(eq=False)
class MemoryStore:
    """Keeps everything in this process. Not durable: shutdown stops active runs.

    Applying a batch never yields in the middle, so each batch is one transaction. With
    ``inline=True`` (the default) the supervisor applies commits synchronously in the
    committing task; ``inline=False`` sends them through the supervisor's mailbox and
    group commit, as an I/O-bound store does.

    So that a long-lived process does not grow without limit, the store keeps at most
    ``max_ended_runs`` ended runs (10,000 by default): when one more run ends, the run that
    ended longest ago is forgotten, its record and its events with it (reading it then
    raises `UnknownRun`). Runs that have not ended are never forgotten.
    """

    inline: bool = True
    max_ended_runs: int = attrs.field(default=10_000, kw_only=True)

    _rows: dict[str, _Row] = attrs.field(factory=dict, init=False)
    # Ended runs, oldest end first: the eviction queue.
    _ended: deque[str] = attrs.field(factory=deque, init=False)
    # Every event in seq order. Events of forgotten runs stay until they are more than half
    # of it; readers skip them.
    _log: list[_Entry] = attrs.field(factory=list, init=False)
    _forgotten_events: int = attrs.field(default=0, init=False)
    _seq: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        if type(self.max_ended_runs) is not int or self.max_ended_runs < 1:
            raise InvalidArgument(
                f"max_ended_runs must be a positive int, not {self.max_ended_runs!r}"
            )

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await trio.lowlevel.checkpoint()
        return self.apply_now(batch)

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` synchronously (the memory store needs no I/O)."""
        return list(map(self._apply_one, batch))

    def _apply_one(self, commit: Commit) -> CommitResult:
        run_id = commit.run_id
        row = self._rows.get(run_id)
        state = commit.state
        taken = _NO_MESSAGES
        resume_value: JsonValue = None
        if row is None:
            new = commit.new_run
            if not commit.expect.new or new is None:
                return Rejected(RejectReason.UNKNOWN, None)
            row = _Row(
                thread_id=new.thread_id,
                parent_run_id=new.parent_run_id,
                name=new.name,
                input=new.input,
                max_steps=new.max_steps,
                state=state,
                generation=commit.generation,
            )
            self._rows[run_id] = row
        else:
            rejected = _fence(row, commit)
            if rejected is not None:
                return rejected
            # The ticket lives inside the Awaiting state, so replacing the state deletes it.
            # Carried messages move to whoever takes them (an attempt start) or are
            # discarded with a terminal commit; a Queued commit keeps them for the queued
            # attempt, and the resume value it leaves is handed to the attempt after it.
            if row.carried and (commit.take_messages or type(state) is Ended):
                taken, row.carried = row.carried, _NO_MESSAGES
            resume_value = row.resume_value
            row.resume_value = None
            row.state = state
            row.generation = commit.generation
            if commit.checkpoint is not UNSET:
                row.checkpoint = commit.checkpoint
            if commit.steps is not None:
                row.steps = commit.steps
        kind = type(state)
        if kind is Awaiting:
            row.carried = commit.carried_messages
        elif kind is Queued:
            row.resume_value = commit.resume_value
        elif kind is Ended:
            row.result = commit.result
        last_seq = self._write_events(run_id, row, commit, taken)
        if kind is Ended:
            self._ended.append(run_id)
            if len(self._ended) > self.max_ended_runs:
                self._forget_oldest()
        return Accepted(state, last_seq, taken if commit.take_messages else (), resume_value)

    def _write_events(
        self, run_id: str, row: _Row, commit: Commit, taken: tuple[JsonValue, ...]
    ) -> int:
        drafts = commit.events
        if type(commit.state) is Ended and (taken or commit.discarded_messages):
            drafts = (*drafts, _discarded((*taken, *commit.discarded_messages)))
        elif not drafts and commit.announce:  # the common commit: its own event alone
            self._write_event(run_id, row, EventKind.COMMITTED, commit.detail, commit.at)
            return self._seq
        for draft in drafts:
            self._write_event(run_id, row, draft.kind, draft.detail, commit.at)
        if commit.announce:
            self._write_event(run_id, row, EventKind.COMMITTED, commit.detail, commit.at)
        elif not drafts:
            return 0
        return self._seq

    def _write_event(
        self, run_id: str, row: _Row, kind: str, detail: Mapping[str, JsonValue], at: float
    ) -> None:
        self._seq += 1
        entry = (self._seq, run_id, row.thread_id, row.generation, kind, row.state, detail, at)
        self._log.append(entry)
        row.events.append(entry)

    def _forget_oldest(self) -> None:
        run_id = self._ended.popleft()
        self._forgotten_events += len(self._rows.pop(run_id).events)
        if self._forgotten_events * 2 > len(self._log):
            self._log = [entry for entry in self._log if self._is_live(entry)]
            self._forgotten_events = 0

    def _is_live(self, entry: _Entry) -> bool:
        # An event is live if its run is still kept and it belongs to that run's current
        # life (a run id may be reused after the run that had it was forgotten).
        row = self._rows.get(entry[1])
        return row is not None and bool(row.events) and row.events[0][0] <= entry[0]

    async def load(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        return None if row is None else row.record(run_id)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        await trio.lowlevel.checkpoint()
        if run_id is not None:
            row = self._rows.get(run_id)
            if row is None:
                return []
            start = bisect.bisect_right(row.events, seq, key=_seq_of)
            return [_event(entry) for entry in row.events[start : start + limit]]
        log = self._log
        start = bisect.bisect_right(log, seq, key=_seq_of)
        if not self._forgotten_events:
            return [_event(entry) for entry in log[start : start + limit]]
        out: list[RunEvent] = []
        for entry in log[start:]:
            if self._is_live(entry):
                out.append(_event(entry))
                if len(out) == limit:
                    break
        return out

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def _seq_of(entry: _Entry) -> int:
    return entry[0]


def _event(entry: _Entry) -> RunEvent:
    seq, run_id, thread_id, generation, kind, state, detail, at = entry
    return RunEvent(
        seq=seq,
        run_id=run_id,
        thread_id=thread_id,
        generation=generation,
        kind=kind,
        state=state,
        detail=detail,
        at=at,
    )


def _fence(row: _Row, commit: Commit) -> Rejected | None:
    state = row.state
    if type(state) is Ended:
        return Rejected(RejectReason.ENDED, state)
    expect = commit.expect
    if expect.new:
        return Rejected(RejectReason.EXISTS, state)
    if (
        (expect.generation is not None and row.generation != expect.generation)
        or (expect.state is not None and type(state) is not expect.state)
        or (
            expect.correlation_id is not None
            and not (
                type(state) is Awaiting and state.ticket.correlation_id == expect.correlation_id
            )
        )
    ):
        return Rejected(RejectReason.STALE, state)
    return None


def _discarded(messages: tuple[JsonValue, ...]) -> EventDraft:
    return EventDraft(
        EventKind.MESSAGES_DISCARDED,
        freeze_detail({"messages": list(messages)}, "discarded messages"),
    )
