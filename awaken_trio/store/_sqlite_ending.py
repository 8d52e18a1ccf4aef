"""Ending runs that have no attempt to end them, inside a write transaction: the
descendants of a run ended elsewhere, and the runs of a lost owner."""

from __future__ import annotations

from collections.abc import Mapping

from .._core import (
    EventKind,
    JsonValue,
    RunState,
)
from ._codec import AWAITING, ENDED, dump_json, dump_state, load_raw
from ._rules import discarded_detail
from ._sqlite_rows import NO_MESSAGES, NULL, Row
from ._sqlite_tx import Transaction


def end_row(
    tx: Transaction, row: Row, state: RunState, detail: Mapping[str, JsonValue], now: float
) -> None:
    """End a run that has no attempt to do it: its carried and stored messages are
    discarded in an event, its ticket and whatever a queued resume left are dropped."""
    state_text = dump_state(state)
    messages = load_raw(row.carried, "carried messages") if row.carried != NO_MESSAGES else []
    messages.extend(tx.drop_commands(row.run_id))
    was_awaiting = row.kind == AWAITING
    row.kind, row.state_text = ENDED, state_text
    row.carried, row.carried_pause, row.resume_value, row.resume_ticket = (
        NO_MESSAGES,
        False,
        NULL,
        None,
    )
    tx.set_attempt(row, None)
    tx.update_run(row)
    if was_awaiting:
        tx.set_ticket(row.run_id, None)
    if messages:
        tx.event(
            row,
            row.generation,
            EventKind.MESSAGES_DISCARDED,
            state_text,
            dump_json(discarded_detail(messages)),
            now,
        )
    tx.event(row, row.generation, EventKind.COMMITTED, state_text, dump_json(detail), now)


def end_descendants(
    tx: Transaction,
    ancestor: str,
    now: float,
    state: RunState,
    detail: Mapping[str, JsonValue],
) -> None:
    """End every unended descendant of ``ancestor``, deepest first, so every child's
    terminal commit comes before its parent's (in the memory store's order: the reverse
    of a breadth-first walk, children in the order they were created)."""
    for run_id in reversed(_descendants(tx, ancestor)):
        row = tx.row(run_id)
        assert row is not None
        if row.kind != ENDED:
            end_row(tx, row, state, detail, now)


def _descendants(tx: Transaction, ancestor: str) -> list[str]:
    out: list[str] = []
    seen = {ancestor}  # parents are named at creation, so a cycle takes bogus commits
    frontier = [ancestor]
    while frontier:
        level = [
            run_id for parent in frontier for run_id in tx.children(parent) if run_id not in seen
        ]
        seen.update(level)
        out.extend(level)
        frontier = level
    return out
