"""Reading the SQLite store: records, events, runnable runs, states and stored commands.

These run on the store's thread, each inside one read transaction (one snapshot). Every
payload comes back frozen.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import Final

from ..._core import (
    CAUSE_KINDS,
    CheckpointAt,
    InvalidArgument,
    Overdue,
    OverdueLook,
    RunEvent,
    RunRecord,
    RunState,
    StoredCommand,
)
from .._codec import (
    RECORD_COLUMNS,
    dump_json,
    event_of,
    load_json,
    load_raw,
    load_state,
    record_of,
)
from ._rows import load_record

_EVENT_COLUMNS: Final = "seq, run_id, thread_id, generation, kind, state, detail, at"


def load(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    return load_record(conn, run_id)


def checkpoint_at(conn: sqlite3.Connection, run_id: str, seq: int | None) -> CheckpointAt | None:
    if seq is None:
        found = conn.execute("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
        seq = found.fetchone()[0]
        if seq is None:
            return None
    elif (
        conn.execute("SELECT 1 FROM events WHERE run_id = ? AND seq = ?", (run_id, seq)).fetchone()
        is None
    ):
        return None
    (history_from,) = conn.execute(
        "SELECT history_from FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone() or (None,)
    if history_from is not None and seq < history_from:
        raise InvalidArgument(
            f"run {run_id!r} was written before this store kept the checkpoint of every"
            f" event: it can be forked as of event {history_from} or later, not {seq}"
        )
    kept = conn.execute(
        "SELECT checkpoint FROM checkpoints WHERE run_id = ? AND seq <= ?"
        " ORDER BY seq DESC LIMIT 1",
        (run_id, seq),
    ).fetchone()
    return CheckpointAt(seq, None if kept is None else load_json(kept[0], "a checkpoint"))


def events_after(
    conn: sqlite3.Connection, seq: int, run_id: str | None, limit: int
) -> list[RunEvent]:
    if run_id is None:
        found = conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, max(limit, 0)),
        )
    else:
        found = conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (run_id, seq, max(limit, 0)),
        )
    return [event_of(row) for row in found]


def step_events(conn: sqlite3.Connection, run_id: str) -> list[RunEvent]:
    """The run's ``step`` events, oldest first: the literal kind lets SQLite read them from
    the partial index ``events_steps`` (only step events are in it), never the run's whole
    history."""
    found = conn.execute(
        f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND kind = 'step' ORDER BY seq",
        (run_id,),
    )
    return [event_of(row) for row in found]


# Queued named root runs nobody holds a live claim on, whose thread no other run's live
# attempt occupies, oldest run first (a run released back to the queue keeps its place).
# Only queued runs have a queued_order, and all of them are kind 'queued': the equality
# lets SQLite read them from runs_queue_by_age in rowid order (no scan of every run, no
# sort), stopping at the limit. A run whose not_before (a delayed start, a retry's wait) is
# later than now (the runtime's clock) is passed over in the same walk.
_QUEUED: Final = f"""
    SELECT {RECORD_COLUMNS} FROM runs r
    WHERE r.queued_order IS NOT NULL AND r.kind = 'queued'
      AND (r.not_before IS NULL OR r.not_before <= :now)
      AND r.name IN (SELECT value FROM json_each(:names))
      AND NOT EXISTS (
          SELECT 1 FROM claims c WHERE c.run_id = r.run_id AND c.lease_until >= :lease_now)
      AND NOT EXISTS (
          SELECT 1 FROM runs o JOIN claims c ON c.run_id = o.root_run_id
          WHERE o.thread_id = r.thread_id AND o.attempt_epoch IS NOT NULL
            AND o.run_id != r.run_id AND c.epoch = o.attempt_epoch
            AND c.lease_until >= :lease_now)
    ORDER BY r.rowid
    LIMIT :limit
"""

# Awaiting named root runs whose scheduled ticket is due, soonest first.
_DUE: Final = f"""
    SELECT {RECORD_COLUMNS} FROM tickets t JOIN runs r ON r.run_id = t.run_id
    WHERE t.wake_at IS NOT NULL AND t.wake_at <= :now
      AND r.parent_run_id IS NULL
      AND r.name IN (SELECT value FROM json_each(:names))
    ORDER BY t.wake_at, t.rowid
    LIMIT :limit
"""


# Root runs past a time limit that no attempt runs (`DeadlineStore.overdue`), in one
# statement: the queued or awaiting roots past their deadline, then the queued roots that
# never started past their queue deadline, each part read from the partial index that holds
# its candidates alone (its conditions repeat the index's own, so SQLite may use it), from
# the earliest limit up to now, stopping at the batch; then one row with the earliest limit
# still to come (the first entry after now of each index).
_RECORD_WIDTH: Final = RECORD_COLUMNS.count(",") + 1
_PAST_DEADLINE: Final = f"""
    SELECT 'deadline', NULL, {RECORD_COLUMNS} FROM runs r
    WHERE r.deadline IS NOT NULL AND r.parent_run_id IS NULL
      AND r.kind IN ('queued', 'awaiting') AND r.deadline <= :now
    ORDER BY r.deadline LIMIT :limit
"""
_PAST_QUEUE_DEADLINE: Final = f"""
    SELECT 'queue_timeout', NULL, {RECORD_COLUMNS} FROM runs r
    WHERE r.queue_deadline IS NOT NULL AND r.parent_run_id IS NULL AND r.kind = 'queued'
      AND r.generation = 0 AND r.queue_deadline <= :now
    ORDER BY r.queue_deadline LIMIT :limit
"""
_NEXT_LIMIT: Final = """
    SELECT MIN(t) FROM (
      SELECT MIN(r.deadline) AS t FROM runs r WHERE r.deadline IS NOT NULL
        AND r.parent_run_id IS NULL AND r.kind IN ('queued', 'awaiting') AND r.deadline > :now
      UNION ALL
      SELECT MIN(r.queue_deadline) FROM runs r WHERE r.queue_deadline IS NOT NULL
        AND r.parent_run_id IS NULL AND r.kind = 'queued' AND r.generation = 0
        AND r.queue_deadline > :now)
"""
OVERDUE: Final = (
    f"SELECT * FROM ({_PAST_DEADLINE}) UNION ALL SELECT * FROM ({_PAST_QUEUE_DEADLINE})"
    f" UNION ALL SELECT 'next', ({_NEXT_LIMIT}){', NULL' * _RECORD_WIDTH}"
)


def overdue(conn: sqlite3.Connection, now: float, limit: int) -> OverdueLook:
    """``now`` is the runtime's clock (deadlines are read from it)."""
    runs: list[Overdue] = []
    seen: set[str] = set()
    next_at = None
    for kind, upcoming, *columns in conn.execute(OVERDUE, {"now": now, "limit": max(limit, 0)}):
        if kind == "next":
            next_at = upcoming
            continue
        record = record_of(columns)
        if record.run_id not in seen and len(runs) < limit:  # (past both: its deadline)
            seen.add(record.run_id)
            runs.append(Overdue(record, kind))
    return OverdueLook(tuple(runs), next_at)


def runnable(
    conn: sqlite3.Connection, names: Collection[str], now: float, lease_now: float, limit: int
) -> list[RunRecord]:
    """``now`` is the runtime's clock (scheduled tickets are due by it); ``lease_now`` the
    store's (leases)."""
    if limit <= 0 or not names:
        return []
    wanted = dump_json(list(names))
    queued = {"names": wanted, "lease_now": lease_now, "now": now, "limit": limit}
    out = [record_of(found) for found in conn.execute(_QUEUED, queued)]
    if len(out) < limit:
        params = {"names": wanted, "now": now, "limit": limit - len(out)}
        out.extend(record_of(found) for found in conn.execute(_DUE, params))
    return out


def list_runs(
    conn: sqlite3.Connection,
    state: str | None,
    thread_id: str | None,
    name: str | None,
    limit: int,
    before: str | None,
) -> list[RunRecord]:
    """Newest first, by rowid (the order runs were created in): one query that stops at
    ``limit`` matches. An end cause is read from ``runs_by_cause`` and an unended kind
    from ``runs_unended`` (their entries with one key are in rowid order: no sort), so
    either costs the runs it lists, however many others the file holds; ``ended`` and no
    filter walk the table backwards, where ended runs are most of what it holds."""
    if limit <= 0:
        return []
    clauses = []
    params: dict[str, object] = {"limit": limit}
    if state in CAUSE_KINDS:
        clauses.append("r.cause = :state")
        params["state"] = state
    elif state is not None:
        # The second term is the partial index's own condition, which lets SQLite use it.
        clauses.append(
            "r.kind = :state" if state == "ended" else "r.kind = :state AND r.kind != 'ended'"
        )
        params["state"] = state
    if thread_id is not None:
        clauses.append("r.thread_id = :thread_id")
        params["thread_id"] = thread_id
    if name is not None:
        clauses.append("r.name = :name")
        params["name"] = name
    if before is not None:
        # No row when the store does not hold ``before``: NULL compares false.
        clauses.append("r.rowid < (SELECT b.rowid FROM runs b WHERE b.run_id = :before)")
        params["before"] = before
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    found = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM runs r {where} ORDER BY r.rowid DESC LIMIT :limit",
        params,
    )
    return [record_of(row) for row in found]


def count_runs(conn: sqlite3.Connection) -> dict[str, int]:
    """Two reads of the partial indexes alone: the unended runs by kind, the ended ones by
    cause (their sum is the ended count)."""
    counts: dict[str, int] = dict(
        conn.execute("SELECT kind, COUNT(*) FROM runs WHERE kind != 'ended' GROUP BY kind")
    )
    ended = 0
    for cause, n in conn.execute(
        "SELECT cause, COUNT(*) FROM runs WHERE cause IS NOT NULL GROUP BY cause"
    ):
        counts[cause] = n
        ended += n
    counts["ended"] = ended
    return counts


def states(conn: sqlite3.Connection, run_ids: Collection[str]) -> dict[str, RunState]:
    found = conn.execute(
        "SELECT run_id, state FROM runs WHERE run_id IN (SELECT value FROM json_each(?))",
        (dump_json(list(run_ids)),),
    )
    return {run_id: load_state(state) for run_id, state in found}


def commands(conn: sqlite3.Connection, run_ids: Collection[str], after: int) -> list[StoredCommand]:
    found = conn.execute(
        "SELECT id, run_id, kind, payload, reason, at FROM inbox"
        " WHERE id > ? AND run_id IN (SELECT value FROM json_each(?)) ORDER BY id",
        (after, dump_json(list(run_ids))),
    )
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
