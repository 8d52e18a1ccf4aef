"""Reading the PostgreSQL store: records, events, runnable runs, listings, states, stored
commands, checkpoints. Each runs in one read-only statement or transaction on a pooled
connection, in a worker thread. Every payload comes back frozen."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final, final

import attrs
import psycopg
from psycopg import sql

from ..._core import (
    CheckpointAt,
    Ended,
    InvalidArgument,
    RunEvent,
    RunRecord,
    RunState,
    StoredCommand,
)
from .._codec import RECORD_COLUMNS as RECORD_COLUMNS
from .._codec import (
    event_of,
    load_json,
    load_raw,
    load_state,
    record_of,
)

Cursor = psycopg.Cursor[tuple[Any, ...]]

# More than the statements of the largest transaction; a call that polls (waiting out a
# server process) lends one a poll, and those are let go.
_SPARE_CURSORS: Final = 32


class StoreConnection(psycopg.Connection[tuple[Any, ...]]):
    """A pooled connection that keeps the cursors it made, for its next calls.

    A new cursor costs about as much CPU as the statement it runs (its transformer, and
    the dumper and loader lookups it caches, start empty each time), and a transaction
    runs a dozen statements. So `execute` lends a cursor the connection made before.

    Invariant: a cursor `execute` returned is its caller's until `reclaim`, which the
    store calls once the call that checked the connection out of the pool is over; every
    `execute` of one call gets a cursor of its own, so results queued in a pipeline are
    never overwritten by a later statement's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spare: list[Cursor] = []
        self._lent: list[Cursor] = []

    def execute(  # type: ignore[override]  # (psycopg's overloads add template strings)
        self,
        query: psycopg.abc.QueryNoTemplate,
        params: psycopg.abc.Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool = False,
    ) -> Cursor:
        """`psycopg.Connection.execute` on a cursor lent until `reclaim`."""
        spare = self._spare
        cur = spare.pop() if spare else self.cursor()
        self._lent.append(cur)
        cur.format = psycopg.pq.Format.BINARY if binary else psycopg.pq.Format.TEXT
        return cur.execute(query, params, prepare=prepare)

    def reclaim(self) -> None:
        """Take back every cursor lent since the last call (their results are no longer
        anyone's), keeping at most as many as a transaction uses."""
        spare = self._spare
        spare.extend(self._lent[: _SPARE_CURSORS - len(spare)])
        self._lent.clear()


Conn = StoreConnection


_EVENT_COLUMNS: Final = "seq, run_id, thread_id, generation, kind, state, detail, at"


CLIENT_ENCODING: Final = "utf8"
"""The pooled connections' encoding, which the statements are composed in (as bytes)."""


@final
@attrs.frozen
class Reads:
    """The read statements of one store's schema, composed once."""

    load: bytes
    events: bytes
    events_of_run: bytes
    step_events: bytes
    queued: bytes
    due: bytes
    states: bytes
    commands: bytes
    last_event: bytes
    event_exists: bytes
    history_from: bytes
    checkpoint: bytes
    writes: bytes
    look_commands: bytes
    look_ended: bytes
    expired: bytes
    schema: sql.Identifier

    @classmethod
    def of(cls, schema: str) -> Reads:
        s = sql.Identifier(schema)

        def q(text: str) -> bytes:
            # Bytes once, not a `sql.Composed` turned into bytes on every execute: the
            # pool's connections speak UTF-8 (`CLIENT_ENCODING`).
            return sql.SQL(text).format(s=s).as_bytes(None)

        return cls(
            load=q(f"SELECT {RECORD_COLUMNS} FROM {{s}}.runs r WHERE r.run_id = %s"),
            events=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events WHERE seq > %s ORDER BY seq LIMIT %s"
            ),
            events_of_run=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events WHERE run_id = %s AND seq > %s"
                " ORDER BY seq LIMIT %s"
            ),
            # The literal kind lets the planner read them from the partial index
            # events_steps (only step events are in it).
            step_events=q(
                f"SELECT {_EVENT_COLUMNS} FROM {{s}}.events WHERE run_id = %s"
                " AND kind = 'step' ORDER BY seq"
            ),
            # Queued named root runs nobody holds a live claim on, whose thread no other
            # run's live attempt occupies, oldest run first (the order they were created).
            # A run another transaction has locked (most often another worker claiming it
            # now) is skipped, so workers looking at once are handed different runs.
            queued=q(
                f"SELECT {RECORD_COLUMNS} FROM {{s}}.runs r"
                " WHERE r.queued_order IS NOT NULL AND r.name = ANY(%(names)b)"
                " AND NOT EXISTS (SELECT 1 FROM {s}.claims c WHERE c.run_id = r.run_id"
                "   AND c.lease_until >= %(lease_now)s)"
                # (OFFSET 0: asked of each candidate, through the index of live attempts
                # by thread, not made into a join that reads every run to find them.)
                " AND NOT EXISTS (SELECT 1 FROM {s}.runs o JOIN {s}.claims c"
                "   ON c.run_id = o.root_run_id"
                "   WHERE o.thread_id = r.thread_id AND o.attempt_epoch IS NOT NULL"
                "   AND o.run_id <> r.run_id AND c.epoch = o.attempt_epoch"
                "   AND c.lease_until >= %(lease_now)s OFFSET 0)"
                " ORDER BY r.created LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED"
            ),
            due=q(
                f"SELECT {RECORD_COLUMNS} FROM {{s}}.tickets t JOIN {{s}}.runs r"
                " ON r.run_id = t.run_id"
                " WHERE t.wake_at IS NOT NULL AND t.wake_at <= %(now)s"
                " AND r.parent_run_id IS NULL AND r.name = ANY(%(names)b)"
                " ORDER BY t.wake_at, t.put_order LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED"
            ),
            # By key, one index probe per key (as `_postgres_tx.Statements` reads rows: why there).
            states=q(
                "SELECT x.* FROM unnest(%b::text[]) AS k(id) CROSS JOIN LATERAL"
                " (SELECT run_id, state FROM {s}.runs WHERE run_id = k.id OFFSET 0) x"
            ),
            commands=q(
                "SELECT id, run_id, kind, payload, reason, at FROM {s}.inbox"
                " WHERE id > %s AND run_id = ANY(%b) ORDER BY id"
            ),
            last_event=q("SELECT max(seq) FROM {s}.events WHERE run_id = %s"),
            event_exists=q("SELECT 1 FROM {s}.events WHERE run_id = %s AND seq = %s"),
            history_from=q("SELECT history_from FROM {s}.runs WHERE run_id = %s"),
            checkpoint=q(
                "SELECT checkpoint FROM {s}.checkpoints WHERE run_id = %s AND seq <= %s"
                " ORDER BY seq DESC LIMIT 1"
            ),
            writes=q("SELECT writes FROM {s}.counters WHERE id = 1"),
            # A look's reads, skipped by the server when no write landed since the last
            # (the count the store last knew) unless asked to read anyway.
            look_commands=q(
                "SELECT id, run_id, kind, payload, reason, at FROM {s}.inbox"
                " WHERE (%(anyway)s OR (SELECT writes FROM {s}.counters WHERE id = 1)"
                " <> %(known)s) AND id > %(after)s AND run_id = ANY(%(ids)b) ORDER BY id"
            ),
            look_ended=q(
                "SELECT x.* FROM unnest(%(running)b::text[]) AS k(id) CROSS JOIN LATERAL"
                " (SELECT run_id, state FROM {s}.runs WHERE run_id = k.id"
                " AND kind = 'ended' OFFSET 0) x"
                " WHERE %(anyway)s OR (SELECT writes FROM {s}.counters WHERE id = 1)"
                " <> %(known)s"
            ),
            expired=q("SELECT EXISTS (SELECT 1 FROM {s}.claims WHERE lease_until < %s)"),
            schema=s,
        )


def load(conn: Conn, r: Reads, run_id: str) -> RunRecord | None:
    found = conn.execute(r.load, (run_id,)).fetchone()
    return None if found is None else record_of(found)


def events_after(conn: Conn, r: Reads, seq: int, run_id: str | None, limit: int) -> list[RunEvent]:
    limit = max(limit, 0)
    if run_id is None:
        found = conn.execute(r.events, (seq, limit)).fetchall()
    else:
        found = conn.execute(r.events_of_run, (run_id, seq, limit)).fetchall()
    return [event_of(row) for row in found]


def step_events(conn: Conn, r: Reads, run_id: str) -> list[RunEvent]:
    return [event_of(row) for row in conn.execute(r.step_events, (run_id,)).fetchall()]


def runnable(
    conn: Conn, r: Reads, names: list[str], now: float, lease_now: float, limit: int
) -> list[RunRecord]:
    """``now`` is the runtime's clock (scheduled tickets are due by it); ``lease_now`` the
    server's (leases)."""
    if limit <= 0 or not names:
        return []
    with conn.transaction():  # one snapshot for both queries
        params = {"names": names, "lease_now": lease_now, "limit": limit}
        out = [record_of(found) for found in conn.execute(r.queued, params).fetchall()]
        if len(out) < limit:
            due = {"names": names, "now": now, "limit": limit - len(out)}
            out.extend(record_of(found) for found in conn.execute(r.due, due).fetchall())
    return out


def list_runs(
    conn: Conn,
    r: Reads,
    state: str | None,
    thread_id: str | None,
    name: str | None,
    limit: int,
    before: str | None,
) -> list[RunRecord]:
    if limit <= 0:
        return []
    clauses: list[sql.Composable] = []
    params: dict[str, object] = {"limit": limit}
    if state is not None:
        clauses.append(sql.SQL("r.kind = %(state)s"))
        params["state"] = state
    if thread_id is not None:
        clauses.append(sql.SQL("r.thread_id = %(thread_id)s"))
        params["thread_id"] = thread_id
    if name is not None:
        clauses.append(sql.SQL("r.name = %(name)s"))
        params["name"] = name
    if before is not None:
        # No row when the store does not hold ``before``: NULL compares false.
        clauses.append(
            sql.SQL(
                "r.created < (SELECT b.created FROM {s}.runs b WHERE b.run_id = %(before)s)"
            ).format(s=r.schema)
        )
        params["before"] = before
    where = sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
    query = sql.SQL(
        "SELECT " + RECORD_COLUMNS + " FROM {s}.runs r {where}"
        " ORDER BY r.created DESC LIMIT %(limit)s"
    ).format(s=r.schema, where=where)
    return [record_of(row) for row in conn.execute(query, params).fetchall()]


def states(conn: Conn, r: Reads, run_ids: Collection[str]) -> dict[str, RunState]:
    found = conn.execute(r.states, (list(run_ids),)).fetchall()
    return {run_id: load_state(state) for run_id, state in found}


def commands(conn: Conn, r: Reads, run_ids: Collection[str], after: int) -> list[StoredCommand]:
    return _commands_of(conn.execute(r.commands, (after, list(run_ids))).fetchall())


def _commands_of(found: Iterable[Sequence[Any]]) -> list[StoredCommand]:
    return [
        StoredCommand(
            id=command_id,
            run_id=run_id,
            kind=kind,
            payload=load_json(payload, "a stored command's payload"),
            reason=load_raw(reason, "a stored command's reason"),
            at=at,
        )
        for command_id, run_id, kind, payload, reason, at in found
    ]


def checkpoint_at(conn: Conn, r: Reads, run_id: str, seq: int | None) -> CheckpointAt | None:
    with conn.transaction():
        if seq is None:
            found = conn.execute(r.last_event, (run_id,)).fetchone()
            seq = None if found is None else found[0]
            if seq is None:
                return None
        elif conn.execute(r.event_exists, (run_id, seq)).fetchone() is None:
            return None
        row = conn.execute(r.history_from, (run_id,)).fetchone()
        history_from = None if row is None else row[0]
        if history_from is not None and seq < history_from:
            raise InvalidArgument(
                f"run {run_id!r} was written before this store kept the checkpoint of every"
                f" event: it can be forked as of event {history_from} or later, not {seq}"
            )
        kept = conn.execute(r.checkpoint, (run_id, seq)).fetchone()
    return CheckpointAt(seq, None if kept is None else load_json(kept[0], "a checkpoint"))


@final
@attrs.frozen
class Look:
    """What `look` read: the writes count, the commands and the ended runs."""

    writes: int
    commands: tuple[StoredCommand, ...]
    ended: dict[str, Ended]


def look(
    conn: Conn,
    r: Reads,
    *,
    known: int,
    anyway: bool,
    run_ids: list[str],
    after: int,
    running: list[str],
) -> Look:
    """The writes count, and the commands stored for ``run_ids`` after ``after`` and which
    of ``running`` have ended (read only if a write landed since ``known``, or ``anyway``),
    in one round trip."""
    params = {"anyway": anyway, "known": known, "after": after, "ids": run_ids}
    with conn.pipeline():
        c_writes = conn.execute(r.writes)
        c_commands = conn.execute(r.look_commands, params) if run_ids else None
        c_ended = (
            conn.execute(r.look_ended, {"anyway": anyway, "known": known, "running": running})
            if running
            else None
        )
    found = c_writes.fetchone()
    assert found is not None
    commands = () if c_commands is None else tuple(_commands_of(c_commands.fetchall()))
    ended: dict[str, Ended] = {}
    if c_ended is not None:
        for run_id, text in c_ended.fetchall():
            state = load_state(text)
            assert isinstance(state, Ended)
            ended[run_id] = state
    return Look(int(found[0]), commands, ended)


def writes(conn: Conn, r: Reads) -> int:
    found = conn.execute(r.writes).fetchone()
    assert found is not None
    return int(found[0])


def any_expired(conn: Conn, r: Reads, now: float) -> bool:
    found = conn.execute(r.expired, (now,)).fetchone()
    return bool(found and found[0])
