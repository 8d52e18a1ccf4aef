"""Reading the PostgreSQL store: records, events, runnable runs, listings, states, stored
commands, checkpoints. Each runs in one read-only statement or transaction on a pooled
connection, in a worker thread. Every payload comes back frozen."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs
from psycopg import sql

from ..._core import (
    CAUSE_KINDS,
    CheckpointAt,
    Ended,
    InvalidArgument,
    Overdue,
    OverdueLook,
    RunEvent,
    RunRecord,
    RunState,
    StoredCommand,
)
from .._codec import (
    event_of,
    load_json,
    load_raw,
    load_state,
    record_of,
)
from .._textrows import TextRow
from ._conn import Conn
from ._queries import HELD_RECORD, Queries


def load(conn: Conn, r: Queries, run_id: str) -> RunRecord | None:
    found = conn.execute(r.load, (run_id,)).fetchone()
    return None if found is None else record_of(found)


def events_after(
    conn: Conn, r: Queries, seq: int, run_id: str | None, limit: int
) -> list[RunEvent]:
    """The events after ``seq``, in seq order: every run's up to the watermark, or every one
    of ``run_id``'s committed (``_order``)."""
    limit = max(limit, 0)
    if run_id is None:
        found = conn.execute(r.events, (r.space, seq, limit)).fetchall()
    else:
        found = conn.execute(r.events_of_run, (run_id, seq, limit)).fetchall()
    return [event_of(row) for row in found]


def settle(conn: Conn, r: Queries, seq: int) -> None:
    """Return once every seq up to ``seq`` is final: at or below the watermark (``_order``)."""
    conn.execute(r.settle_seq, (r.space, seq))


def step_events(conn: Conn, r: Queries, run_id: str) -> list[RunEvent]:
    return [event_of(row) for row in conn.execute(r.step_events, (run_id,)).fetchall()]


RESERVED_FOR: Final = 5.0
"""Seconds a look keeps the runs it handed out from other runtimes' looks: long enough for
the runtime to claim them, short enough that runs it does not claim (it stopped, or
found them taken) are soon handed to others."""


def runnable(
    conn: Conn,
    r: Queries,
    names: list[str],
    now: float,
    lease_now: float,
    limit: int,
    *,
    by: str,
    sweep: bool = False,
    served: Mapping[str, Any] | None = None,
) -> list[RunRecord]:
    """``now`` is the runtime's clock (scheduled tickets are due by it); ``lease_now`` the
    server's (leases, reservations). The runs found are reserved for ``by`` (its looks
    still see them; others' skip them) for `RESERVED_FOR` seconds; ``sweep`` also forgets
    the reservations that have passed."""
    if limit <= 0 or not names:
        return []
    with conn.transaction():  # the rows the queries lock stay locked to the end
        conn.execute(r.look_async)
        out: list[RunRecord] = []
        # A look that began before another committed its reservations reads them once its
        # rows are locked (`reserved_by_others`) and leaves those runs. It then looks again
        # (a statement of its own, whose snapshot sees those reservations and passes them
        # over), so runs still free are handed out now rather than at the next poll; its
        # own rows come back to it (it holds their locks) and are kept once.
        for _ in range(_PASSES):
            # (The full limit each time: the rows it kept come back first and count.)
            looked = look_once(conn, r, names, now, lease_now, limit, by, served)
            found = [record for _, record in looked]
            have = {record.run_id for record in out}
            fresh = [record for record in found if record.run_id not in have]
            if not fresh:
                break
            look = {"ids": [record.run_id for record in fresh], "lease_now": lease_now, "by": by}
            taken = {run_id for (run_id,) in conn.execute(r.reserved_by_others, look)}
            free = [record for record in fresh if record.run_id not in taken]
            out.extend(free[: limit - len(out)])
            if not taken or len(out) >= limit:
                break
        if out:
            until = lease_now + RESERVED_FOR
            ids = [record.run_id for record in out]
            conn.execute(r.reserve, {"ids": ids, "by": by, "until": until})
        if sweep:
            conn.execute(r.forget_reserved, (lease_now,))
    return out


_PASSES: Final = 3
"""The most statements a look makes to fill its limit past other looks' reservations."""


def look_once(
    conn: Conn,
    r: Queries,
    names: list[str],
    now: float,
    lease_now: float,
    limit: int,
    by: str,
    served: Mapping[str, Any] | None,
) -> list[tuple[Sequence[Any], RunRecord]]:
    """Queued runs, then due resumes, up to ``limit``, locked by this transaction: each as
    the row a write transaction reads (`TextRow`'s fields, in order), and as its record."""
    params = {"names": names, "lease_now": lease_now, "now": now, "limit": limit, "by": by}
    out = [_row_and_record(found) for found in conn.execute(r.queued, params).fetchall()]
    if len(out) < limit:
        params["limit"] = limit - len(out)
        out.extend(_row_and_record(found) for found in conn.execute(r.due, params).fetchall())
    if served is not None:
        # A run that has started takes only a body that accepts its pinned version (the
        # kernel's rule, `Kernel.named_body_for`): the others are not reserved.
        out = [pair for pair in out if _may_run(served, pair[1])]
    return out


_ROW_WIDTH: Final = len(attrs.fields(TextRow))


def _row_and_record(found: Sequence[Any]) -> tuple[Sequence[Any], RunRecord]:
    """A look's row: the run's row (``held_row_columns``), then the rest of its record."""
    return found[:_ROW_WIDTH], record_of(HELD_RECORD(found))


def _may_run(served: Mapping[str, Any], record: RunRecord) -> bool:
    if record.generation == 0:
        return True
    versions = served.get(record.name or "")
    return versions is None or bool(versions.accepts(record.body_version))


def overdue(conn: Conn, r: Queries, now: float, limit: int) -> OverdueLook:
    """``now`` is the runtime's clock (deadlines are read from it)."""
    if limit <= 0:
        return OverdueLook()
    found = conn.execute(r.past_deadline, {"now": now, "limit": limit}).fetchall()
    runs: list[Overdue] = []
    seen: set[str] = set()
    next_at = None
    for kind, upcoming, *columns in found:
        if kind == "next":
            next_at = upcoming
            continue
        record = record_of(columns)
        if record.run_id not in seen and len(runs) < limit:
            seen.add(record.run_id)
            runs.append(Overdue(record, kind))
    return OverdueLook(tuple(runs), next_at)


def list_runs(
    conn: Conn,
    r: Queries,
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
    if state in CAUSE_KINDS:
        clauses.append(sql.SQL("r.cause = %(state)s"))  # runs_by_cause
        params["state"] = state
    elif state == "ended":
        clauses.append(sql.SQL("r.kind = %(state)s"))
        params["state"] = state
    elif state is not None:
        # The partial index's own condition, so the planner may use runs_unended.
        clauses.append(sql.SQL("r.kind = %(state)s AND r.kind <> 'ended'"))
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
    query = sql.SQL(r.list_runs).format(s=r.schema, where=where)
    return [record_of(row) for row in conn.execute(query, params).fetchall()]


def count_runs(conn: Conn, r: Queries) -> dict[str, int]:
    counts: dict[str, int] = {}
    ended = 0
    for kind, n in conn.execute(r.count_runs).fetchall():
        counts[str(kind)] = int(n)
        if kind in CAUSE_KINDS:
            ended += int(n)
    counts["ended"] = ended
    return counts


def states(conn: Conn, r: Queries, run_ids: Collection[str]) -> dict[str, RunState]:
    found = conn.execute(r.states, (list(run_ids),)).fetchall()
    return {run_id: load_state(state) for run_id, state in found}


def commands(conn: Conn, r: Queries, run_ids: Collection[str], after: int) -> list[StoredCommand]:
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


def checkpoint_at(conn: Conn, r: Queries, run_id: str, seq: int | None) -> CheckpointAt | None:
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
    r: Queries,
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


def writes(conn: Conn, r: Queries) -> int:
    found = conn.execute(r.writes).fetchone()
    assert found is not None
    return int(found[0])


def server_now(conn: Conn, r: Queries) -> float:
    """The server's clock (leases are measured by it)."""
    found = conn.execute(r.server_now).fetchone()
    assert found is not None
    return float(found[0])


def any_expired(conn: Conn, r: Queries, now: float) -> bool:
    found = conn.execute(r.any_expired, (now,)).fetchone()
    return bool(found and found[0])
