"""The memory store: committed truth in dicts, pure Trio, for tests and embedding."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import final

import attrs
import trio

from .._core._errors import InvalidArgument
from .._core._json import FrozenDict, JsonValue, freeze_detail
from .._core._state import Awaiting, Ended, EventKind, Queued, RunEvent, RunRecord
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


@final
@attrs.define(eq=False)
class _Pending:
    """What a run holds for its next attempt besides its record: the messages an
    ``Awaiting`` commit carried and the value a queued resume hands over (rare, so kept
    apart from the record)."""

    carried: tuple[JsonValue, ...] = ()
    resume_value: JsonValue = None


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

    _records: dict[str, RunRecord] = attrs.field(factory=dict, init=False)
    _events_of: dict[str, list[RunEvent]] = attrs.field(factory=dict, init=False)
    _pending: dict[str, _Pending] = attrs.field(factory=dict, init=False)
    # Ended runs, oldest end first (dicts keep insertion order): the eviction queue.
    _ended: dict[str, None] = attrs.field(factory=dict, init=False)
    # Every event in seq order. Events of forgotten runs stay until they are more than half
    # of it; readers skip them.
    _log: list[RunEvent] = attrs.field(factory=list, init=False)
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
        return [self._apply_one(commit) for commit in batch]

    def _apply_one(self, commit: Commit) -> CommitResult:
        run_id = commit.run_id
        current = self._records.get(run_id)
        expect = commit.expect
        state = commit.state
        ended = type(state) is Ended
        taken = _NO_MESSAGES
        resume_value: JsonValue = None
        if current is None:
            new = commit.new_run
            if not expect.new or new is None:
                return Rejected(RejectReason.UNKNOWN, None)
            record = RunRecord(
                run_id=run_id,
                thread_id=new.thread_id,
                parent_run_id=new.parent_run_id,
                name=new.name,
                state=state,
                generation=commit.generation,
                input=new.input,
                max_steps=new.max_steps,
            )
            events: list[RunEvent] = []
            self._events_of[run_id] = events
        else:
            rejected = _fence(current, commit)
            if rejected is not None:
                return rejected
            pending = self._pending.get(run_id)
            if pending is not None:
                taken, resume_value = self._take(run_id, pending, commit)
            record = RunRecord(
                run_id=run_id,
                thread_id=current.thread_id,
                parent_run_id=current.parent_run_id,
                name=current.name,
                state=state,
                generation=commit.generation,
                result=commit.result if ended else current.result,
                checkpoint=current.checkpoint if commit.checkpoint is UNSET else commit.checkpoint,
                input=current.input,
                steps=current.steps if commit.steps is None else commit.steps,
                max_steps=current.max_steps,
            )
            events = self._events_of[run_id]
        self._records[run_id] = record
        if type(state) is Awaiting and commit.carried_messages:
            self._pending.setdefault(run_id, _Pending()).carried = commit.carried_messages
        elif type(state) is Queued and commit.resume_value is not None:
            self._pending.setdefault(run_id, _Pending()).resume_value = commit.resume_value
        written = self._write_events(record, events, commit, taken)
        if ended:
            self._ended[run_id] = None
            if len(self._ended) > self.max_ended_runs:
                self._forget_oldest()
        return Accepted(record, written, taken if commit.take_messages else (), resume_value)

    def _take(
        self, run_id: str, pending: _Pending, commit: Commit
    ) -> tuple[tuple[JsonValue, ...], JsonValue]:
        # The ticket lives inside the Awaiting state, so replacing the state deletes it.
        # Carried messages move to whoever takes them (an attempt start) or are discarded
        # with a terminal commit; a Queued commit keeps them for the queued attempt.
        taken = _NO_MESSAGES
        if commit.take_messages or type(commit.state) is Ended:
            taken, pending.carried = pending.carried, ()
        resume_value = pending.resume_value
        if type(commit.state) is not Queued:
            pending.resume_value = None
        if not pending.carried and pending.resume_value is None:
            del self._pending[run_id]
        return taken, resume_value

    def _write_events(
        self,
        record: RunRecord,
        events: list[RunEvent],
        commit: Commit,
        taken: tuple[JsonValue, ...],
    ) -> tuple[RunEvent, ...]:
        drafts = commit.events
        if type(commit.state) is Ended and (taken or commit.discarded_messages):
            drafts = (*drafts, _discarded((*taken, *commit.discarded_messages)))
        if not drafts:
            if not commit.announce:
                return ()
            return (
                self._write_event(record, events, EventKind.COMMITTED, commit.detail, commit.at),
            )
        written = [self._write_event(record, events, d.kind, d.detail, commit.at) for d in drafts]
        if commit.announce:
            written.append(
                self._write_event(record, events, EventKind.COMMITTED, commit.detail, commit.at)
            )
        return tuple(written)

    def _write_event(
        self,
        record: RunRecord,
        events: list[RunEvent],
        kind: str,
        detail: FrozenDict,
        at: float,
    ) -> RunEvent:
        self._seq += 1
        event = RunEvent(
            seq=self._seq,
            run_id=record.run_id,
            thread_id=record.thread_id,
            generation=record.generation,
            kind=kind,
            state=record.state,
            detail=detail,
            at=at,
        )
        self._log.append(event)
        events.append(event)
        return event

    def _forget_oldest(self) -> None:
        run_id = next(iter(self._ended))
        del self._ended[run_id]
        del self._records[run_id]
        self._pending.pop(run_id, None)
        self._forgotten_events += len(self._events_of.pop(run_id))
        if self._forgotten_events * 2 > len(self._log):
            self._log = [e for e in self._log if self._is_live(e)]
            self._forgotten_events = 0

    def _is_live(self, event: RunEvent) -> bool:
        # An event is live if its run is still kept and it belongs to that run's current
        # life (a run id may be reused after the run that had it was forgotten).
        events = self._events_of.get(event.run_id)
        return events is not None and events[0].seq <= event.seq

    async def load(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        return self._records.get(run_id)

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        await trio.lowlevel.checkpoint()
        if run_id is not None:
            source = self._events_of.get(run_id, [])
            start = bisect.bisect_right(source, seq, key=lambda e: e.seq)
            return source[start : start + limit]
        log = self._log
        start = bisect.bisect_right(log, seq, key=lambda e: e.seq)
        if not self._forgotten_events:
            return log[start : start + limit]
        out: list[RunEvent] = []
        for event in log[start:]:
            if self._is_live(event):
                out.append(event)
                if len(out) == limit:
                    break
        return out

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def _fence(current: RunRecord, commit: Commit) -> Rejected | None:
    state = current.state
    if type(state) is Ended:
        return Rejected(RejectReason.ENDED, state)
    expect = commit.expect
    if expect.new:
        return Rejected(RejectReason.EXISTS, state)
    if (
        (expect.generation is not None and current.generation != expect.generation)
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
