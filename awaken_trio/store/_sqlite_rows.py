"""Reading and writing the SQLite store's rows inside a transaction: a run's row, its
events, its claim, the stored commands it drops, and ending runs that have no attempt to end
them (a lost owner's runs, the descendants of a run ended elsewhere).

These functions run on the store's thread, inside a transaction `Session` opened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from .._core._json import JsonValue, scalar_dict
from .._core._state import CANCELLED_CAUSE, EventKind, Indeterminate, RunRecord, RunState, ended
from .._core._storage import Fence
from ._codec import (
    AWAITING,
    ENDED,
    dump_json,
    dump_state,
    load_raw,
    load_state,
)

NO_MESSAGES: Final = "[]"
NULL: Final = "null"

_ROW = (
    "SELECT thread_id, parent_run_id, root_run_id, name, kind, state, generation, carried,"
    " carried_pause, resume_value, resume_ticket, epoch, attempt_epoch, recoveries"
    " FROM runs WHERE run_id = ?"
)


@final
@attrs.define(eq=False)
class Row:
    """The columns of a run a commit reads (payload columns it does not need stay in the
    database: a commit never reads its run's input, checkpoint or result)."""

    run_id: str
    thread_id: str
    parent_run_id: str | None
    root_run_id: str
    name: str | None
    kind: str
    state_text: str
    generation: int
    carried: str
    carried_pause: bool
    resume_value: str
    resume_ticket: str | None
    epoch: int
    attempt_epoch: int | None
    recoveries: int

    @property
    def state(self) -> RunState:
        return load_state(self.state_text)

    @property
    def named_root(self) -> bool:
        """Only named root runs are ever handed out by `runnable`."""
        return self.name is not None and self.parent_run_id is None


def read_row(conn: sqlite3.Connection, run_id: str) -> Row | None:
    found = conn.execute(_ROW, (run_id,)).fetchone()
    if found is None:
        return None
    thread_id, parent, root, name, kind, state, generation, carried, pause, *rest = found
    return Row(
        run_id, thread_id, parent, root, name, kind, state, generation, carried, bool(pause), *rest
    )


RECORD_COLUMNS: Final = (
    "r.run_id, r.thread_id, r.parent_run_id, r.name, r.state, r.generation, r.result,"
    " r.checkpoint, r.input, r.steps, r.max_steps"
)


def record_of(found: tuple[Any, ...]) -> RunRecord:
    """A `RunRecord` of a row read with `RECORD_COLUMNS`; its converters freeze the
    payloads."""
    run_id, thread_id, parent, name, state, generation, result, checkpoint, input_, steps, cap = (
        found
    )
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        parent_run_id=parent,
        name=name,
        state=load_state(state),
        generation=generation,
        result=load_raw(result, "a result"),
        checkpoint=load_raw(checkpoint, "a checkpoint"),
        input=load_raw(input_, "an input"),
        steps=steps,
        max_steps=cap,
    )


def load_record(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    found = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM runs r WHERE r.run_id = ?", (run_id,)
    ).fetchone()
    return None if found is None else record_of(found)


# ---------------------------------------------------------------------------- events


def write_event(
    conn: sqlite3.Connection,
    row: Row,
    generation: int,
    kind: str,
    state_text: str,
    detail: str,
    at: float,
) -> int:
    """Write one event; its seq (one store-wide sequence, never reused)."""
    cursor = conn.execute(
        "INSERT INTO events (run_id, thread_id, generation, kind, state, detail, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (row.run_id, row.thread_id, generation, kind, state_text, detail, at),
    )
    seq = cursor.lastrowid
    assert seq is not None
    return seq


def discarded_detail(messages: list[Any]) -> str:
    return dump_json({"messages": messages})


# ---------------------------------------------------------------------------- claims


def claim_of(conn: sqlite3.Connection, run_id: str) -> tuple[str, int, float] | None:
    found = conn.execute(
        "SELECT owner, epoch, lease_until FROM claims WHERE run_id = ?", (run_id,)
    ).fetchone()
    return None if found is None else (found[0], found[1], found[2])


def fence_holds(conn: sqlite3.Connection, fence: Fence, at: float) -> bool:
    held = claim_of(conn, fence.root_run_id)
    return held is not None and held[0] == fence.owner and held[1] == fence.epoch and held[2] >= at


def put_claim(
    conn: sqlite3.Connection, run_id: str, owner: str, epoch: int, lease_until: float
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO claims (run_id, owner, epoch, lease_until) VALUES (?, ?, ?, ?)",
        (run_id, owner, epoch, lease_until),
    )


def drop_claim(conn: sqlite3.Connection, run_id: str) -> None:
    conn.execute("DELETE FROM claims WHERE run_id = ?", (run_id,))


_THREAD_BUSY: Final = (
    "SELECT 1 FROM runs o JOIN claims c ON c.run_id = o.root_run_id"
    " WHERE o.thread_id = ? AND o.attempt_epoch IS NOT NULL AND o.run_id != ?"
    " AND c.epoch = o.attempt_epoch AND c.lease_until >= ? LIMIT 1"
)


def thread_busy(conn: sqlite3.Connection, thread_id: str, run_id: str, now: float) -> bool:
    """Whether another run's attempt may be live on ``thread_id``: its attempt's epoch is
    its root's current claim, and that claim's lease has not expired."""
    return conn.execute(_THREAD_BUSY, (thread_id, run_id, now)).fetchone() is not None


# ---------------------------------------------------------------------------- commands


def drop_commands(conn: sqlite3.Connection, run_id: str) -> list[Any]:
    """Delete the run's stored commands; the payloads of its messages, oldest first (raw
    JSON values, for a discard event)."""
    found = conn.execute(
        "SELECT kind, payload FROM inbox WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    if not found:
        return []
    conn.execute("DELETE FROM inbox WHERE run_id = ?", (run_id,))
    return [load_raw(payload, "a stored message") for kind, payload in found if kind == "message"]


# ---------------------------------------------------------------------------- ending


def end_row(
    conn: sqlite3.Connection, row: Row, state: RunState, detail: Mapping[str, JsonValue], now: float
) -> None:
    """End a run that has no attempt to do it: its carried and stored messages are
    discarded in an event, its ticket and whatever a queued resume left are dropped."""
    state_text = dump_state(state)
    messages = load_raw(row.carried, "carried messages") if row.carried != NO_MESSAGES else []
    messages.extend(drop_commands(conn, row.run_id))
    conn.execute(
        "UPDATE runs SET kind = 'ended', state = ?, attempt_epoch = NULL, carried = '[]',"
        " carried_pause = 0, resume_value = 'null', resume_ticket = NULL, queued_order = NULL"
        " WHERE run_id = ?",
        (state_text, row.run_id),
    )
    if row.kind == AWAITING:
        conn.execute("DELETE FROM tickets WHERE run_id = ?", (row.run_id,))
    if messages:
        write_event(
            conn,
            row,
            row.generation,
            EventKind.MESSAGES_DISCARDED,
            state_text,
            discarded_detail(messages),
            now,
        )
    write_event(conn, row, row.generation, EventKind.COMMITTED, state_text, dump_json(detail), now)


def end_descendants(
    conn: sqlite3.Connection,
    ancestor: str,
    now: float,
    state: RunState,
    detail: Mapping[str, JsonValue],
) -> None:
    """End every unended descendant of ``ancestor``, deepest first, so every child's
    terminal commit comes before its parent's (in the memory store's order: the reverse
    of a breadth-first walk, children in the order they were created)."""
    for run_id in reversed(_descendants(conn, ancestor)):
        row = read_row(conn, run_id)
        assert row is not None
        if row.kind != ENDED:
            end_row(conn, row, state, detail, now)


def _descendants(conn: sqlite3.Connection, ancestor: str) -> list[str]:
    out: list[str] = []
    seen = {ancestor}  # parents are named at creation, so a cycle takes bogus commits
    frontier = [ancestor]
    while frontier:
        level = [
            run_id
            for parent in frontier
            for (run_id,) in conn.execute(
                "SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY rowid", (parent,)
            ).fetchall()
            if run_id not in seen
        ]
        seen.update(level)
        out.extend(level)
        frontier = level
    return out


PARENT_ENDED: Final = ended(CANCELLED_CAUSE)


def parent_detail(run_id: str) -> Mapping[str, JsonValue]:
    return scalar_dict({"source": "parent", "reason": f"parent run {run_id!r} ended"})


def owner_lost(why: str) -> RunState:
    return ended(Indeterminate(why))


def lost_detail(why: str) -> Mapping[str, JsonValue]:
    return scalar_dict({"source": "recovery", "reason": why})
