"""The memory store: committed truth in dicts, pure Trio, for tests and embedding."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import final

import attrs
import trio

from .._core import (
    UNSET,
    Accepted,
    Awaiting,
    CheckpointAt,
    CommandKind,
    Commit,
    CommitResult,
    Ended,
    EventDraft,
    EventKind,
    Fence,
    InvalidArgument,
    JsonValue,
    Queued,
    Recovered,
    Rejected,
    RejectReason,
    ResumeTicket,
    RunEvent,
    Running,
    RunRecord,
    RunState,
    StateKind,
    StoredCommand,
    wake_at,
)
from ._codec import state_kind
from ._rules import (
    LAPSED,
    OWNER_LOST,
    PARENT_ENDED,
    ClaimRow,
    discarded_detail,
    lost_detail,
    owner_lost,
    parent_detail,
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
    root_run_id: str
    name: str | None
    input: JsonValue
    max_steps: int | None
    state: RunState
    generation: int
    result: JsonValue = None
    checkpoint: JsonValue = None
    steps: int = 0
    # The messages an Awaiting commit carried, and the resume the run's current or next
    # attempt answers (kept until the run awaits or ends).
    carried: tuple[JsonValue, ...] = ()
    carried_pause: bool = False
    resume_value: JsonValue = None
    resume_ticket: ResumeTicket | None = None
    # Claims (shared stores): the last epoch granted, the epoch of the attempt live on the
    # run (None when none is), and how many times its owner was lost.
    epoch: int = 0
    attempt_epoch: int | None = None
    recoveries: int = 0
    # The order runs were created in: queued runs start oldest first.
    created: int = 0
    events: list[_Entry] = attrs.field(factory=list)
    forked_from: JsonValue = None
    # The run's checkpoints, each with the seq of the last event its commit wrote (the
    # store's last seq when it wrote none), in seq order: the checkpoint as of an event is
    # the last one at or before it (`checkpoint_at`). Forgotten with the run.
    history: list[tuple[int, JsonValue]] = attrs.field(factory=list)

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
            forked_from=self.forked_from,
        )


@final
@attrs.define(eq=False)
class MemoryStore:
    """Keeps everything in this process.

    Applying a batch never yields in the middle, so each batch is one transaction. With
    ``inline=True`` (the default) the supervisor applies commits synchronously in the
    committing task; ``inline=False`` sends them through the supervisor's mailbox and
    group commit, as an I/O-bound store does.

    By default the store belongs to one runtime: leaving that runtime stops its runs. With
    ``shared=True`` it is a store several runtimes in this process share, with everything
    a durable store has (claims with leases and epochs, recovery of a lost owner's runs,
    stored commands): leaving a runtime releases its claims, and its named runs are picked
    up by another. That makes failover testable in one process, on Trio's virtual clock.
    Leases are measured by ``lease_clock`` (Trio's clock, `trio.current_time`, by default),
    read by the store itself, never by the runtimes' own clocks.

    So that a long-lived process does not grow without limit, the store keeps at most
    ``max_ended_runs`` ended runs (10,000 by default): when one more run ends, the run that
    ended longest ago is forgotten, its record and its events with it (reading it then
    raises `UnknownRun`). Runs that have not ended are never forgotten.
    """

    inline: bool = True
    max_ended_runs: int = attrs.field(default=10_000, kw_only=True)
    shared: bool = attrs.field(default=False, kw_only=True)
    lease_clock: Callable[[], float] = attrs.field(default=trio.current_time, kw_only=True)

    _rows: dict[str, _Row] = attrs.field(factory=dict, init=False)
    # Ended runs, oldest end first: the eviction queue.
    _ended: deque[str] = attrs.field(factory=deque, init=False)
    # Every event in seq order. Events of forgotten runs stay until they are more than half
    # of it; readers skip them.
    _log: list[_Entry] = attrs.field(factory=list, init=False)
    _forgotten_events: int = attrs.field(default=0, init=False)
    _seq: int = attrs.field(default=0, init=False)
    # Indexes for `runnable`: queued root runs in the order they were queued, awaiting ones
    # with a scheduled ticket, and the runs holding each thread.
    _queued: dict[str, None] = attrs.field(factory=dict, init=False)
    _scheduled: dict[str, float] = attrs.field(factory=dict, init=False)
    _on_thread: dict[str, set[str]] = attrs.field(factory=dict, init=False)
    _claims: dict[str, ClaimRow] = attrs.field(factory=dict, init=False)
    _commands: dict[int, StoredCommand] = attrs.field(factory=dict, init=False)
    # Stored messages an attempt has handed to its body (`Commit.delivered`): kept for an
    # attempt that replaces it, never listed as discarded. Invariant: a subset of the keys
    # of ``_commands``.
    _delivered: set[int] = attrs.field(factory=set, init=False)
    _command_id: int = attrs.field(default=0, init=False)
    _version: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        if type(self.max_ended_runs) is not int or self.max_ended_runs < 1:
            raise InvalidArgument(
                f"max_ended_runs must be a positive int, not {self.max_ended_runs!r}"
            )

    @property
    def durable(self) -> bool:
        return self.shared

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        await trio.lowlevel.checkpoint()
        return self.apply_now(batch)

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` synchronously (the memory store needs no I/O)."""
        if not self.shared:
            return [self._apply_one(commit, 0.0) for commit in batch]
        self._version += 1
        now = self.lease_clock()  # one reading for the whole transaction
        return [self._apply_one(commit, now) for commit in batch]

    # ------------------------------------------------------------------ commits

    def _apply_one(self, commit: Commit, now: float) -> CommitResult:
        """Apply one commit; ``now`` is the store's clock (leases)."""
        run_id = commit.run_id
        row = self._rows.get(run_id)
        state = commit.state
        kind = type(state)
        taken = _NO_MESSAGES
        taken_pause = False
        resume_value: JsonValue = None
        resume_ticket: ResumeTicket | None = None
        if row is None:
            new = commit.new_run
            if not commit.expect.new or new is None:
                return Rejected(RejectReason.UNKNOWN, None)
            if commit.thread_guard and self._thread_busy(new.thread_id, run_id, now):
                return Rejected(RejectReason.THREAD_BUSY, None)
            if commit.fence is not None and not self._fence_holds(commit.fence, now):
                return Rejected(RejectReason.FENCED, None)
            row = _Row(
                thread_id=new.thread_id,
                parent_run_id=new.parent_run_id,
                root_run_id=new.root_run_id or run_id,
                name=new.name,
                input=new.input,
                max_steps=new.max_steps,
                state=state,
                generation=commit.generation,
                created=self._seq,
                checkpoint=new.checkpoint,
                forked_from=new.forked_from,
            )
            self._rows[run_id] = row
            if self.shared:
                self._on_thread.setdefault(row.thread_id, set()).add(run_id)
        else:
            rejected = self._fence(row, commit, now)
            if rejected is not None:
                return rejected
            if commit.end_descendants:
                self._end_descendants(run_id, commit.at, PARENT_ENDED, parent_detail(run_id))
            # The ticket lives inside the Awaiting state, so replacing the state deletes it.
            # Carried messages (and a carried pause) move to whoever takes them (an attempt
            # start) or are dropped by a terminal commit; a Queued commit keeps them for
            # the queued attempt.
            if (row.carried or row.carried_pause) and (commit.take_messages or kind is Ended):
                taken, row.carried = row.carried, _NO_MESSAGES
                taken_pause, row.carried_pause = commit.take_messages and row.carried_pause, False
            if row.name is not None:
                self._unindex(run_id)
            row.state = state
            row.generation = commit.generation
            if commit.checkpoint is not UNSET:
                row.checkpoint = commit.checkpoint
            if commit.steps is not None:
                row.steps = commit.steps
        epoch = self._claim_effects(run_id, row, commit, kind, now) if self.shared else None
        # The resume (an answered ticket and its value) stays with the run until it next
        # awaits or ends, so every attempt that starts meanwhile, a recovered or released
        # one's successor included, is handed the answer the attempt it replaces had.
        if kind is Awaiting:
            row.carried = commit.carried_messages
            row.carried_pause = commit.carried_pause
            row.resume_value = row.resume_ticket = None
        elif kind is Ended:
            row.result = commit.result
            row.resume_value = row.resume_ticket = None
            if self._commands:
                stored = self._drop_commands(run_id)
                if stored:
                    commit = attrs.evolve(
                        commit, discarded_messages=(*commit.discarded_messages, *stored)
                    )
        elif commit.resume_ticket is not None or commit.resume_value is not None:
            # Queued or Running on an answer: a queued resume, or the attempt it starts.
            row.resume_value = commit.resume_value
            row.resume_ticket = commit.resume_ticket
        if commit.take_messages:
            resume_value, resume_ticket = row.resume_value, row.resume_ticket
        if row.name is not None and row.parent_run_id is None:
            self._index(run_id, row)
        last_seq = self._write_events(run_id, row, commit, taken)
        if commit.checkpoint is not UNSET or (
            commit.new_run is not None and row.checkpoint is not None
        ):
            row.history.append((last_seq or self._seq, row.checkpoint))
        if kind is Ended:
            self._ended.append(run_id)
            if len(self._ended) > self.max_ended_runs:
                self._forget_oldest()
        if commit.take_messages or epoch is not None:
            handed = taken if commit.take_messages else _NO_MESSAGES
            return Accepted(
                state, last_seq, handed, resume_value, resume_ticket, epoch, taken_pause
            )
        return Accepted(state, last_seq)

    def _claim_effects(
        self, run_id: str, row: _Row, commit: Commit, kind: type, now: float
    ) -> int | None:
        """What an accepted commit does to claims (shared stores): take one at the next
        epoch, mark the attempt live, drop one, delete the commands it consumed."""
        epoch = None
        if commit.claim is not None:
            row.epoch = epoch = row.epoch + 1
            self._claims[run_id] = ClaimRow(commit.claim.owner, epoch, now + commit.claim.lease)
        if kind is Running:
            fence = commit.fence
            if epoch is not None:
                row.attempt_epoch = epoch
            else:
                row.attempt_epoch = None if fence is None else fence.epoch
        elif commit.fence is not None or commit.release:
            # The attempt itself ended: its thread is free. An end committed by another
            # runtime leaves the mark: the attempt may still be running until its owner
            # releases the claim or the lease lapses.
            row.attempt_epoch = None
        if commit.release:
            self._claims.pop(run_id, None)
        for command_id in commit.consumed:
            self._commands.pop(command_id, None)
            self._delivered.discard(command_id)
        for command_id in commit.delivered:
            if command_id in self._commands:
                self._delivered.add(command_id)
        return epoch

    def _fence(self, row: _Row, commit: Commit, now: float) -> Rejected | None:
        state = row.state
        if type(state) is Ended:
            return Rejected(RejectReason.ENDED, state)
        expect = commit.expect
        if expect.new:
            return Rejected(RejectReason.EXISTS, state)
        if commit.fence is not None and not self._fence_holds(commit.fence, now):
            return Rejected(RejectReason.FENCED, state)
        if commit.claim is not None:
            held = self._claims.get(commit.run_id)
            if held is not None and held.owner != commit.claim.owner and held.lease_until >= now:
                return Rejected(RejectReason.FENCED, state)
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
        if commit.thread_guard and self._thread_busy(row.thread_id, commit.run_id, now):
            return Rejected(RejectReason.THREAD_BUSY, state)
        return None

    def _fence_holds(self, fence: Fence, now: float) -> bool:
        held = self._claims.get(fence.root_run_id)
        return (
            held is not None
            and held.owner == fence.owner
            and held.epoch == fence.epoch
            and held.lease_until >= now
        )

    def _live(self, row: _Row, now: float) -> bool:
        """Whether an attempt of the run may still be running somewhere."""
        if not self.shared:
            return type(row.state) is Running
        if row.attempt_epoch is None:
            return False
        held = self._claims.get(row.root_run_id)
        return held is not None and held.epoch == row.attempt_epoch and held.lease_until >= now

    def _thread_busy(self, thread_id: str, run_id: str, now: float) -> bool:
        for other in self._on_thread.get(thread_id, ()):
            if other != run_id and self._live(self._rows[other], now):
                return True
        return False

    def _index(self, run_id: str, row: _Row) -> None:
        # Only named root runs are ever runnable by a serving runtime.
        kind = type(row.state)
        if kind is Queued:
            self._queued[run_id] = None
        elif kind is Awaiting:
            ticket = row.state.ticket  # type: ignore[attr-defined]
            when = wake_at(ticket)
            if when is not None:
                self._scheduled[run_id] = when

    def _unindex(self, run_id: str) -> None:
        self._queued.pop(run_id, None)
        self._scheduled.pop(run_id, None)

    def _drop_commands(self, run_id: str) -> list[JsonValue]:
        """Delete the run's stored commands; the messages no attempt received, oldest
        first (for a discard event)."""
        dropped = [c for c in self._commands.values() if c.run_id == run_id]
        discarded = []
        for command in dropped:
            del self._commands[command.id]
            if command.id in self._delivered:
                self._delivered.discard(command.id)
            elif command.kind == "message":
                discarded.append(command.payload)
        return discarded

    # ------------------------------------------------------------------ events

    def _write_events(
        self, run_id: str, row: _Row, commit: Commit, taken: tuple[JsonValue, ...]
    ) -> int:
        drafts = commit.events
        if type(commit.state) is Ended and (taken or commit.discarded_messages):
            drafts = (
                *drafts,
                EventDraft(
                    EventKind.MESSAGES_DISCARDED,
                    discarded_detail((*taken, *commit.discarded_messages)),
                ),
            )
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
        self._forget(self._ended.popleft())

    def _forget(self, run_id: str) -> None:
        """Drop an ended run's row and events (its ``_ended`` entry is the caller's)."""
        row = self._rows.pop(run_id)
        self._forgotten_events += len(row.events)
        on_thread = self._on_thread.get(row.thread_id)
        if on_thread is not None:
            on_thread.discard(run_id)
            if not on_thread:
                del self._on_thread[row.thread_id]
        if self._forgotten_events * 2 > len(self._log):
            self._log = [entry for entry in self._log if self._is_live(entry)]
            self._forgotten_events = 0

    def _is_live(self, entry: _Entry) -> bool:
        # An event is live if its run is still kept and it belongs to that run's current
        # life (a run id may be reused after the run that had it was forgotten).
        row = self._rows.get(entry[1])
        return row is not None and bool(row.events) and row.events[0][0] <= entry[0]

    # ------------------------------------------------------------------ reads

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

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is None or not row.events:
            return None
        if seq is None:
            seq = row.events[-1][0]
        else:
            at = bisect.bisect_left(row.events, seq, key=_seq_of)
            if at == len(row.events) or row.events[at][0] != seq:
                return None
        before = bisect.bisect_right(row.history, seq, key=_history_seq)
        return CheckpointAt(seq, row.history[before - 1][1] if before else None)

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        await trio.lowlevel.checkpoint()
        trees: dict[str, list[str]] = {}
        for run_id, row in self._rows.items():
            trees.setdefault(row.root_run_id, []).append(run_id)
        doomed: list[str] = []
        for run_id in self._ended:
            row = self._rows[run_id]
            if row.parent_run_id is not None or row.events[-1][7] > ended_before:
                continue
            tree = trees[run_id]
            if all(type(self._rows[member].state) is Ended for member in tree):
                doomed.extend(tree)
        if dry_run or not doomed:
            return len(doomed)
        self._version += 1
        gone = set(doomed)
        self._ended = deque(run_id for run_id in self._ended if run_id not in gone)
        for run_id in doomed:
            self._forget(run_id)
            self._claims.pop(run_id, None)
        for command_id in [c.id for c in self._commands.values() if c.run_id in gone]:
            del self._commands[command_id]
            self._delivered.discard(command_id)
        return len(doomed)

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        await trio.lowlevel.checkpoint()
        out: list[RunRecord] = []
        rows = self._rows
        # Leases by the store's clock; ``now`` (the runtime's) is for scheduled tickets.
        lease_now = self.lease_clock() if self.shared else 0.0
        for run_id in sorted(self._queued, key=lambda r: rows[r].created):
            if len(out) >= limit:
                return out
            row = self._rows[run_id]
            if row.name not in names:
                continue
            held = self._claims.get(run_id)
            if held is not None and held.lease_until >= lease_now:
                continue
            # A store of one runtime leaves threads to that runtime's own thread gate.
            if not (self.shared and self._thread_busy(row.thread_id, run_id, lease_now)):
                out.append(row.record(run_id))
        for run_id, due in sorted(self._scheduled.items(), key=lambda item: item[1]):
            if len(out) >= limit or due > now:
                break
            row = self._rows[run_id]
            if row.name in names:
                out.append(row.record(run_id))
        return out

    async def list_runs(
        self,
        *,
        state: StateKind | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (`ListingStore.list_runs`): the rows are kept in the order
        they were created, so this walks them backwards, from ``before`` if given."""
        await trio.lowlevel.checkpoint()
        out: list[RunRecord] = []
        if limit <= 0 or (before is not None and before not in self._rows):
            return out
        skipping = before is not None
        for run_id in reversed(self._rows):
            if skipping:
                skipping = run_id != before
                continue
            row = self._rows[run_id]
            if (
                (state is None or state_kind(row.state) == state)
                and (thread_id is None or row.thread_id == thread_id)
                and (name is None or row.name == name)
            ):
                out.append(row.record(run_id))
                if len(out) == limit:
                    break
        return out

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    # ------------------------------------------------------------------ claims

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        await trio.lowlevel.checkpoint()
        self._version += 1
        now = self.lease_clock()
        lease_until = now + lease
        lost: list[str] = []
        for run_id, epoch in held.items():
            claim = self._claims.get(run_id)
            if (
                claim is None
                or claim.owner != owner
                or claim.epoch != epoch
                or claim.lease_until < now
            ):
                lost.append(run_id)
            else:
                self._claims[run_id] = ClaimRow(owner, epoch, lease_until)
        return lost

    async def release(self, owner: str, run_id: str) -> None:
        await trio.lowlevel.checkpoint()
        claim = self._claims.get(run_id)
        if claim is not None and claim.owner == owner:
            row = self._rows.get(run_id)
            if row is not None and type(row.state) is Running:
                # Given up by an attempt that never committed its end: its owner is lost,
                # so the claim stays, lapsed, where recovery finds the run.
                self._claims[run_id] = ClaimRow(owner, claim.epoch, LAPSED)
            else:
                del self._claims[run_id]
            self._version += 1

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        await trio.lowlevel.checkpoint()
        now = self.lease_clock()
        lease_until = now + lease
        # Lost longest ago first; a run left for a runtime that has its body does not count
        # toward the limit, so runs this runtime cannot take never hide the ones it can.
        expired = sorted(
            (c.lease_until, run_id) for run_id, c in self._claims.items() if c.lease_until < now
        )
        recovered: list[Recovered] = []
        dealt = 0
        for _, run_id in expired:
            if dealt >= limit:
                break
            root = self._rows.get(run_id)
            if root is None:
                del self._claims[run_id]
                dealt += 1
                continue
            if type(root.state) is Running and root.name is not None:
                losses = root.recoveries + 1
                if losses <= max_recoveries and root.name not in names:
                    continue  # left for a runtime that has the body
            dealt += 1
            self._version += 1
            self._end_descendants(run_id, at, owner_lost(OWNER_LOST), lost_detail(OWNER_LOST))
            if type(root.state) is not Running:
                del self._claims[run_id]  # a stale claim: nothing to recover
                continue
            losses = root.recoveries + 1
            root.recoveries = losses
            if root.name is None or losses > max_recoveries:
                why = OWNER_LOST if root.name is None else f"owner lost {losses} times"
                del self._claims[run_id]
                self._end_lost(run_id, root, why, at)
                continue
            root.epoch += 1
            self._claims[run_id] = ClaimRow(owner, root.epoch, lease_until)
            recovered.append(Recovered(root.record(run_id), root.epoch))
        return recovered

    def _end_descendants(
        self, ancestor: str, now: float, state: RunState, detail: Mapping[str, JsonValue]
    ) -> None:
        # Deepest first, so every child's terminal commit comes before its parent's.
        for run_id in reversed(self._descendants(ancestor)):
            row = self._rows[run_id]
            if type(row.state) is not Ended:
                self._end_row(run_id, row, state, detail, now)

    def _descendants(self, ancestor: str) -> list[str]:
        """Descendants of ``ancestor`` in breadth-first order."""
        children: dict[str, list[str]] = {}
        for run_id, row in self._rows.items():
            if row.parent_run_id is not None:
                children.setdefault(row.parent_run_id, []).append(run_id)
        out: list[str] = []
        frontier = [ancestor]
        while frontier:
            level = [c for parent in frontier for c in children.get(parent, ())]
            out.extend(level)
            frontier = level
        return out

    def _end_lost(self, run_id: str, row: _Row, why: str, now: float) -> None:
        self._end_row(run_id, row, owner_lost(why), lost_detail(why), now)

    def _end_row(
        self,
        run_id: str,
        row: _Row,
        state: RunState,
        detail: Mapping[str, JsonValue],
        now: float,
    ) -> None:
        """End a run that has no attempt to do it (an owner lost, a parent ended elsewhere)."""
        self._unindex(run_id)
        row.state = state
        row.attempt_epoch = None
        taken, row.carried = row.carried, _NO_MESSAGES
        row.carried_pause = False
        row.resume_value = row.resume_ticket = None
        stored = self._drop_commands(run_id) if self._commands else []
        messages = (*taken, *stored)
        if messages:
            self._write_event(
                run_id, row, EventKind.MESSAGES_DISCARDED, discarded_detail(messages), now
            )
        self._write_event(run_id, row, EventKind.COMMITTED, detail, now)
        self._ended.append(run_id)
        if len(self._ended) > self.max_ended_runs:
            self._forget_oldest()

    # ------------------------------------------------------------------ commands

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        await trio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is None:
            return Rejected(RejectReason.UNKNOWN, None)
        kind_ = type(row.state)
        if kind_ is not Running and kind_ is not Queued:
            # A queued run's command waits for its next attempt; an awaiting run has no
            # attempt to take one until it is resumed.
            reason_ = RejectReason.ENDED if kind_ is Ended else RejectReason.STALE
            return Rejected(reason_, row.state)
        self._command_id += 1
        self._commands[self._command_id] = StoredCommand(
            self._command_id, run_id, kind, payload, reason, at
        )
        self._version += 1
        return self._command_id

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        await trio.lowlevel.checkpoint()
        wanted = set(run_ids)
        return [c for i, c in self._commands.items() if i > after and c.run_id in wanted]

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        await trio.lowlevel.checkpoint()
        rows = self._rows
        return {run_id: rows[run_id].state for run_id in run_ids if run_id in rows}

    async def version(self) -> int:
        await trio.lowlevel.checkpoint()
        return self._version


def _seq_of(entry: _Entry) -> int:
    return entry[0]


def _history_seq(entry: tuple[int, JsonValue]) -> int:
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
