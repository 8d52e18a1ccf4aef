"""The memory store: committed truth in dicts, pure Trio, for tests and embedding."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import final

import attrs
import trio

from .._core._json import JsonValue
from .._core._state import Awaiting, Ended, Queued, RunEvent, RunRecord
from .._core._storage import UNSET, Accepted, Commit, CommitResult, EventDraft, Rejected


@attrs.define(eq=False)
class _Row:
    record: RunRecord
    carried: tuple[JsonValue, ...] = ()
    resume_value: JsonValue = None
    events: list[RunEvent] = attrs.field(factory=list)


@final
@attrs.define(eq=False)
class MemoryStore:
    """Keeps everything in this process. Not durable: shutdown stops active runs.

    Applying a batch never yields in the middle, so each batch is one transaction. With
    ``inline=True`` (the default) the supervisor applies commits synchronously in the
    committing task; ``inline=False`` sends them through the supervisor's mailbox and
    group commit, as an I/O-bound store does.
    """

    inline: bool = True

    _rows: dict[str, _Row] = attrs.field(factory=dict, init=False)
    _events: list[RunEvent] = attrs.field(factory=list, init=False)
    _seq: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def durable(self) -> bool:
        return False

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await trio.lowlevel.checkpoint()
        return self.apply_now(batch)

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` synchronously (the memory store needs no I/O)."""
        return [self._apply_one(commit) for commit in batch]

    def _apply_one(self, commit: Commit) -> CommitResult:
        row = self._rows.get(commit.run_id)
        expect = commit.expect
        if row is None:
            if not expect.new or commit.new_run is None:
                return Rejected("unknown", None)
            new = commit.new_run
            row = _Row(
                RunRecord(
                    run_id=commit.run_id,
                    thread_id=new.thread_id,
                    parent_run_id=new.parent_run_id,
                    name=new.name,
                    state=commit.state,
                    generation=commit.generation,
                    input=new.input,
                )
            )
            self._rows[commit.run_id] = row
            taken: tuple[JsonValue, ...] = ()
            resume_value: JsonValue = None
        else:
            current = row.record
            if type(current.state) is Ended:
                return Rejected("ended", current.state)
            if expect.new:
                return Rejected("exists", current.state)
            if (
                (expect.generation is not None and current.generation != expect.generation)
                or (expect.state is not None and type(current.state) is not expect.state)
                or (
                    expect.correlation_id is not None
                    and not (
                        type(current.state) is Awaiting
                        and current.state.ticket.correlation_id == expect.correlation_id
                    )
                )
            ):
                return Rejected("stale", current.state)
            taken, resume_value = self._take(row, commit)
            row.record = RunRecord(
                run_id=current.run_id,
                thread_id=current.thread_id,
                parent_run_id=current.parent_run_id,
                name=current.name,
                state=commit.state,
                generation=commit.generation,
                result=commit.result if type(commit.state) is Ended else current.result,
                checkpoint=current.checkpoint if commit.checkpoint is UNSET else commit.checkpoint,
                input=current.input,
            )
        if type(commit.state) is Awaiting:
            row.carried = commit.carried_messages
        if type(commit.state) is Queued:
            row.resume_value = commit.resume_value
        events = self._write_events(row, commit, taken)
        return Accepted(row.record, events, taken if commit.take_messages else (), resume_value)

    @staticmethod
    def _take(row: _Row, commit: Commit) -> tuple[tuple[JsonValue, ...], JsonValue]:
        # The ticket lives inside the Awaiting state, so replacing the state deletes it.
        # Carried messages move to whoever takes them (an attempt start) or are discarded
        # with a terminal commit; a Queued commit keeps them for the queued attempt.
        taken: tuple[JsonValue, ...] = ()
        resume_value = row.resume_value
        if commit.take_messages or type(commit.state) is Ended:
            taken, row.carried = row.carried, ()
        if type(commit.state) is not Queued:
            row.resume_value = None
        return taken, resume_value

    def _write_events(
        self, row: _Row, commit: Commit, taken: tuple[JsonValue, ...]
    ) -> tuple[RunEvent, ...]:
        drafts = commit.events
        if type(commit.state) is Ended and (taken or commit.discarded_messages):
            drafts = (*drafts, _discarded([*taken, *commit.discarded_messages]))
        if not drafts:
            return (self._write_event(row, "committed", commit.detail, commit.at),)
        out = [self._write_event(row, d.kind, d.detail, commit.at) for d in drafts]
        out.append(self._write_event(row, "committed", commit.detail, commit.at))
        return tuple(out)

    def _write_event(
        self, row: _Row, kind: str, detail: dict[str, JsonValue], at: float
    ) -> RunEvent:
        record = row.record
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
        self._events.append(event)
        row.events.append(event)
        return event

    async def load(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        return None if row is None else row.record

    async def carried_messages(self, run_id: str) -> tuple[JsonValue, ...]:
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        return () if row is None else row.carried

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        await trio.lowlevel.checkpoint()
        if run_id is None:
            source = self._events
        else:
            row = self._rows.get(run_id)
            source = [] if row is None else row.events
        start = bisect.bisect_right(source, seq, key=lambda e: e.seq)
        return source[start : start + limit]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self._closed = True


def _discarded(messages: list[JsonValue]) -> EventDraft:
    return EventDraft("messages_discarded", {"messages": list(messages)})
