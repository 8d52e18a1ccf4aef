"""Applying a batch of commits to the SQLite store: every rule of the store protocol,
inside the one transaction the batch is (see ``awaken_trio._core._storage``).

Each commit is checked against every fence before it writes anything, so a rejected commit
needs no savepoint: it changes nothing, and the commits after it in the batch go on. The
checks read the transaction's view of the file (``_sqlite_tx``): the store's cache, read
ahead for the whole batch, and what the commits before it did; their writes are queued and
reach SQLite together at the end of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core import (
    UNSET,
    Accepted,
    Awaiting,
    Commit,
    CommitResult,
    EventKind,
    JsonValue,
    NewRun,
    Rejected,
    RejectReason,
    ResumeTicket,
)
from ._codec import (
    AWAITING,
    CARRIED_WRAPPING,
    ENDED,
    RUNNING,
    dump_json,
    dump_shared,
    dump_state,
    dump_ticket,
    kind_of_variant,
    load_json,
    load_raw,
    load_ticket,
    load_wrapped,
    state_kind,
)
from ._rules import PARENT_ENDED, ClaimRow, discarded_detail, parent_detail
from ._sqlite_ending import end_descendants
from ._sqlite_rows import NO_MESSAGES, NULL, Row
from ._sqlite_tx import Transaction

_NO_MESSAGES: tuple[JsonValue, ...] = ()


def apply_batch(tx: Transaction, batch: Sequence[Commit], now: float) -> list[CommitResult]:
    """Apply ``batch`` in order inside ``tx``; one result per commit. ``now`` is the
    store's clock, read inside the transaction: leases are measured by it."""
    tx.prefetch(batch)
    return [_apply_one(tx, commit, now) for commit in batch]


def _apply_one(tx: Transaction, commit: Commit, now: float) -> CommitResult:
    row = tx.row(commit.run_id)
    if row is None:
        new = commit.new_run
        if not commit.expect.new or new is None:
            return Rejected(RejectReason.UNKNOWN, None)
        if commit.thread_guard and tx.thread_busy(new.thread_id, commit.run_id, now):
            return Rejected(RejectReason.THREAD_BUSY, None)
        if commit.fence is not None and not tx.fence_holds(commit.fence, now):
            return Rejected(RejectReason.FENCED, None)
        return _create(tx, commit, new, now)
    rejected = _fence(tx, row, commit, now)
    if rejected is not None:
        return rejected
    return _update(tx, row, commit, now)


def _fence(tx: Transaction, row: Row, commit: Commit, now: float) -> Rejected | None:
    """The first fence the commit fails, in the order every store checks them."""
    if row.kind == ENDED:
        return Rejected(RejectReason.ENDED, row.state)
    expect = commit.expect
    if expect.new:
        return Rejected(RejectReason.EXISTS, row.state)
    if commit.fence is not None and not tx.fence_holds(commit.fence, now):
        return Rejected(RejectReason.FENCED, row.state)
    if commit.claim is not None:
        held = tx.claim(commit.run_id)
        if held is not None and held.owner != commit.claim.owner and held.lease_until >= now:
            return Rejected(RejectReason.FENCED, row.state)
    if (
        (expect.generation is not None and row.generation != expect.generation)
        or (expect.state is not None and kind_of_variant(expect.state) != row.kind)
        or (expect.correlation_id is not None and not _ticket_is(row, expect.correlation_id))
    ):
        return Rejected(RejectReason.STALE, row.state)
    if commit.thread_guard and tx.thread_busy(row.thread_id, commit.run_id, now):
        return Rejected(RejectReason.THREAD_BUSY, row.state)
    return None


def _ticket_is(row: Row, correlation_id: str) -> bool:
    state = row.state
    return isinstance(state, Awaiting) and state.ticket.correlation_id == correlation_id


def _create(tx: Transaction, commit: Commit, new: NewRun, now: float) -> Accepted:
    run_id = commit.run_id
    state = commit.state
    kind = state_kind(state)
    state_text = dump_state(state)
    row = Row(
        run_id=run_id,
        thread_id=new.thread_id,
        parent_run_id=new.parent_run_id,
        root_run_id=new.root_run_id or run_id,
        name=new.name,
        kind=kind,
        state_text=state_text,
        generation=commit.generation,
        carried=NO_MESSAGES,
        carried_pause=False,
        resume_value=NULL,
        resume_ticket=None,
        epoch=0,
        attempt_epoch=None,
        recoveries=0,
    )
    # A creating commit keeps the new run's steps 0, as the memory store does, and its
    # checkpoint None unless the run is a fork, which starts from its source's.
    epoch = _claim_effects(tx, row, commit, kind, now)
    discarded: Sequence[Any] = ()
    result = NULL
    if kind == AWAITING:
        row.carried = dump_json(list(commit.carried_messages))
        row.carried_pause = commit.carried_pause
    elif kind == ENDED:
        result = dump_json(commit.result)
        discarded = tx.drop_commands(run_id)
    elif _answers(commit):
        row.resume_value = dump_json(commit.resume_value)
        row.resume_ticket = _ticket_text(commit.resume_ticket)
    tx.insert_run(row, dump_json(new.input), result, new.max_steps)
    if kind == AWAITING:
        tx.set_ticket(run_id, state.ticket)  # type: ignore[attr-defined]
    last_seq = _write_events(tx, row, commit, state_text, (), discarded)
    if new.forked_from is not None:
        checkpoint = dump_json(new.checkpoint)
        tx.fork(run_id, checkpoint, dump_json(new.forked_from))
        if new.checkpoint is not None:
            tx.keep_checkpoint(run_id, last_seq or tx.last_seq, checkpoint)
    if commit.take_messages or epoch is not None:
        value, ticket = _resume_of(row) if commit.take_messages else (None, None)
        return Accepted(state, last_seq, _NO_MESSAGES, value, ticket, epoch, False)
    return Accepted(state, last_seq)


def _update(tx: Transaction, row: Row, commit: Commit, now: float) -> Accepted:
    run_id = commit.run_id
    state = commit.state
    kind = state_kind(state)
    state_text = dump_state(state)
    if commit.end_descendants:
        end_descendants(tx, run_id, commit.at, PARENT_ENDED, parent_detail(run_id))
    # Carried messages (and a carried pause) move to whoever takes them (an attempt start)
    # or are dropped by a terminal commit; a Queued commit keeps them for the queued
    # attempt.
    taken_text = NO_MESSAGES
    taken_pause = False
    if (row.carried != NO_MESSAGES or row.carried_pause) and (
        commit.take_messages or kind == ENDED
    ):
        taken_text, row.carried = row.carried, NO_MESSAGES
        taken_pause, row.carried_pause = commit.take_messages and row.carried_pause, False
    was_awaiting = row.kind == AWAITING
    row.kind, row.state_text, row.generation = kind, state_text, commit.generation
    epoch = _claim_effects(tx, row, commit, kind, now)
    set_result = kind == ENDED
    discarded: Sequence[Any] = ()
    # The resume (an answered ticket and its value) stays with the run until it next
    # awaits or ends, so every attempt that starts meanwhile, a recovered or released
    # one's successor included, is handed the answer the attempt it replaces had.
    if kind == AWAITING:
        row.carried = dump_json(list(commit.carried_messages))
        row.carried_pause = commit.carried_pause
        row.resume_value, row.resume_ticket = NULL, None
    elif set_result:
        discarded = tx.drop_commands(run_id)
        row.resume_value, row.resume_ticket = NULL, None
    elif _answers(commit):
        row.resume_value = dump_json(commit.resume_value)
        row.resume_ticket = _ticket_text(commit.resume_ticket)
    checkpoint = None if commit.checkpoint is UNSET else dump_json(commit.checkpoint)
    tx.update_run(
        row,
        checkpoint=checkpoint,
        steps=commit.steps,
        result=dump_json(commit.result) if set_result else None,
    )
    # The ticket slot: only an Awaiting run has one, and any other commit deletes it.
    if kind == AWAITING:
        tx.set_ticket(run_id, state.ticket)  # type: ignore[attr-defined]
    elif was_awaiting:
        tx.set_ticket(run_id, None)
    taken: Sequence[Any] = (
        () if taken_text == NO_MESSAGES else load_raw(taken_text, "carried messages")
    )
    last_seq = _write_events(tx, row, commit, state_text, taken, discarded)
    if checkpoint is not None:
        tx.keep_checkpoint(run_id, last_seq or tx.last_seq, checkpoint)
    if commit.take_messages or epoch is not None:
        handed = (
            tuple(load_wrapped(taken_text, "carried messages", CARRIED_WRAPPING))
            if commit.take_messages and taken
            else _NO_MESSAGES
        )
        value, ticket = _resume_of(row) if commit.take_messages else (None, None)
        return Accepted(state, last_seq, handed, value, ticket, epoch, taken_pause)
    return Accepted(state, last_seq)


def _answers(commit: Commit) -> bool:
    """Whether a ``Queued`` or ``Running`` commit carries an answered ticket: a queued
    resume, or the attempt it starts."""
    return commit.resume_ticket is not None or commit.resume_value is not None


def _resume_of(row: Row) -> tuple[JsonValue, ResumeTicket | None]:
    """The resume the run holds, for the attempt a commit starts."""
    if row.resume_value == NULL and row.resume_ticket is None:
        return None, None
    ticket = None if row.resume_ticket is None else load_ticket(row.resume_ticket)
    return load_json(row.resume_value, "a resume value"), ticket


def _claim_effects(tx: Transaction, row: Row, commit: Commit, kind: str, now: float) -> int | None:
    """What an accepted commit does to claims: take one at the next epoch, mark the
    attempt live (or not), drop one, delete the commands it consumed."""
    epoch = None
    claim = commit.claim
    if claim is not None:
        row.epoch = epoch = row.epoch + 1
        tx.set_claim(row.run_id, ClaimRow(claim.owner, epoch, now + claim.lease))
    if kind == RUNNING:
        fence = commit.fence
        if epoch is not None:
            tx.set_attempt(row, epoch)
        else:
            tx.set_attempt(row, None if fence is None else fence.epoch)
    elif commit.fence is not None or commit.release:
        # The attempt itself ended: its thread is free. An end committed by another runtime
        # leaves the mark: the attempt may still be running until its owner releases the
        # claim or the lease lapses.
        tx.set_attempt(row, None)
    if commit.release:
        tx.set_claim(row.run_id, None)
    if commit.consumed:
        tx.consume(commit.consumed)
    if commit.delivered:
        tx.deliver(commit.delivered)
    return epoch


def _ticket_text(ticket: ResumeTicket | None) -> str | None:
    return None if ticket is None else dump_ticket(ticket)


def _write_events(
    tx: Transaction,
    row: Row,
    commit: Commit,
    state_text: str,
    taken: Sequence[Any],
    stored: Sequence[Any],
) -> int:
    """Queue the commit's events: its drafts, then (a terminal commit that threw messages
    away) one ``messages_discarded`` event, then its own ``committed`` event unless it does
    not announce; the last seq written, or 0."""
    generation, at = commit.generation, commit.at
    last_seq = 0
    for draft in commit.events:
        last_seq = tx.event(row, generation, draft.kind, state_text, dump_shared(draft.detail), at)
    if row.kind == ENDED and (taken or commit.discarded_messages or stored):
        messages = [*taken, *commit.discarded_messages, *stored]
        detail = dump_json(discarded_detail(messages))
        last_seq = tx.event(row, generation, EventKind.MESSAGES_DISCARDED, state_text, detail, at)
    if commit.announce:
        last_seq = tx.event(
            row, generation, EventKind.COMMITTED, state_text, dump_shared(commit.detail), at
        )
    return last_seq
