"""The PostgreSQL store's schema: its tables in a PostgreSQL schema of their own (``awaken``
by default), the ordered migrations that bring an older one forward, and the opening check
that refuses a newer one.

The version is the ``version`` row of ``<schema>.meta``. Opening takes
``pg_advisory_xact_lock`` on a key derived from the schema's name before it looks, so two
runtimes opening a fresh database at once migrate it once: the second waits for the
first's transaction, then finds the schema current. A schema of a newer version, or a
PostgreSQL schema of that name holding tables that are not a store's, is refused with
`StoreError` before anything is written (the transaction is rolled back).

Values are kept as the SQLite store keeps them (JSON text, see ``_codec``; times as
``double precision`` seconds). A lease's end is seconds of the server's clock
(``extract(epoch FROM clock_timestamp())``), read inside the transaction that uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import psycopg
from psycopg import sql

from ..._core import StoreError
from ._guess import to_v15 as guess_v15
from ._guess import to_v16 as guess_v16
from ._guess import to_v17 as guess_v17
from ._order import to_v8 as order_v8
from ._streams import to_v5 as streams_v5

APPLICATION: Final = "awaken_trio"

Migration = Callable[[psycopg.Connection[tuple[object, ...]], sql.Identifier], None]
"""One step: from version ``i`` to ``i + 1`` (its index in `MIGRATIONS`), inside the opening
transaction; the version row is set after it."""

_V1: Final = (
    "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
    # The last event seq handed out, the last place given in the queue, and a count of
    # write transactions (`PostgresStore.version`); version 2 changed its use (`_V2`).
    """CREATE TABLE {s}.counters (
        id integer PRIMARY KEY CHECK (id = 1),
        last_seq bigint NOT NULL,
        last_queued bigint NOT NULL,
        writes bigint NOT NULL
    )""",
    "INSERT INTO {s}.counters VALUES (1, 0, 0, 0)",
    """CREATE TABLE {s}.runs (
        run_id text PRIMARY KEY,
        created bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        thread_id text NOT NULL,
        parent_run_id text,
        root_run_id text NOT NULL,
        name text,
        input text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('queued', 'running', 'awaiting', 'ended')),
        state text NOT NULL,
        generation bigint NOT NULL,
        result text NOT NULL DEFAULT 'null',
        checkpoint text NOT NULL DEFAULT 'null',
        steps bigint NOT NULL DEFAULT 0,
        max_steps bigint,
        carried text NOT NULL DEFAULT '[]',
        carried_pause boolean NOT NULL DEFAULT false,
        resume_value text NOT NULL DEFAULT 'null',
        resume_ticket text,
        epoch bigint NOT NULL DEFAULT 0,
        attempt_epoch bigint,
        recoveries bigint NOT NULL DEFAULT 0,
        queued_order bigint,
        forked_from text,
        history_from bigint
    )""",
    "CREATE INDEX runs_queued ON {s}.runs (queued_order) WHERE queued_order IS NOT NULL",
    "CREATE INDEX runs_children ON {s}.runs (parent_run_id, created)"
    " WHERE parent_run_id IS NOT NULL",
    "CREATE INDEX runs_live_on_thread ON {s}.runs (thread_id) WHERE attempt_epoch IS NOT NULL",
    "CREATE INDEX runs_by_thread ON {s}.runs (thread_id, created)",
    """CREATE TABLE {s}.events (
        seq bigint PRIMARY KEY,
        run_id text NOT NULL,
        thread_id text NOT NULL,
        generation bigint NOT NULL,
        kind text NOT NULL,
        state text NOT NULL,
        detail text NOT NULL,
        at double precision NOT NULL
    )""",
    "CREATE INDEX events_by_run ON {s}.events (run_id, seq)",
    """CREATE TABLE {s}.tickets (
        run_id text PRIMARY KEY,
        put_order bigint GENERATED ALWAYS AS IDENTITY,
        correlation_id text NOT NULL,
        wake_at double precision
    )""",
    "CREATE INDEX tickets_due ON {s}.tickets (wake_at, put_order) WHERE wake_at IS NOT NULL",
    """CREATE TABLE {s}.inbox (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('message', 'pause', 'wake', 'cancel')),
        payload text NOT NULL,
        reason text NOT NULL,
        at double precision NOT NULL,
        delivered boolean NOT NULL DEFAULT false
    )""",
    "CREATE INDEX inbox_by_run ON {s}.inbox (run_id, id)",
    """CREATE TABLE {s}.claims (
        run_id text PRIMARY KEY,
        owner text NOT NULL,
        epoch bigint NOT NULL,
        lease_until double precision NOT NULL
    )""",
    "CREATE INDEX claims_by_expiry ON {s}.claims (lease_until, run_id)",
    """CREATE TABLE {s}.checkpoints (
        run_id text NOT NULL,
        seq bigint NOT NULL,
        checkpoint text NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    # The token of every write transaction that committed, so a commit whose answer was
    # lost (the connection broke during COMMIT) can be looked up instead of applied again.
    """CREATE TABLE {s}.written (
        token uuid PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX written_by_age ON {s}.written (at)",
)


def _create_v1(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V1:
        conn.execute(sql.SQL(statement).format(s=schema))
    conn.execute(
        sql.SQL("INSERT INTO {s}.meta (key, value) VALUES ('application', %s)").format(s=schema),
        (APPLICATION,),
    )


_V2: Final = (
    # Version 2: write transactions no longer all take the counters row first (see
    # ``_tx.py``). A queued run's place comes from a sequence, taken by the statement
    # that queues it; the row keeps the last event seq and the count of writes, and is
    # taken only by a transaction's commit.
    "CREATE SEQUENCE {s}.queue_places",
    "SELECT setval('{s}.queue_places', last_queued + 1, false) FROM {s}.counters",
    "ALTER TABLE {s}.counters DROP COLUMN last_queued",
    # Where a committed transaction's events start (the seq before its first) and the
    # writes count it made: what a commit whose answer was lost answered.
    "ALTER TABLE {s}.written ADD COLUMN seq_base bigint NOT NULL DEFAULT 0",
    "ALTER TABLE {s}.written ADD COLUMN writes bigint NOT NULL DEFAULT 0",
)


def _to_v2(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V2:
        conn.execute(sql.SQL(statement).format(s=schema))


_V3: Final = (
    # Version 3: the serving loop's read of queued runs (oldest first, a batch at most)
    # can walk an index of the queued runs in that order and stop once it has the batch.
    # Before, the planner had the index over every run's creation order (which walks past
    # the ended runs too) or the queued runs unordered (which sorts the whole queue): a
    # long history with a long queue made each look cost time in proportion to one of
    # them. Nothing else read the old index.
    "CREATE INDEX runs_queue_by_age ON {s}.runs (created) WHERE queued_order IS NOT NULL",
    "DROP INDEX {s}.runs_queued",
)


def _to_v3(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V3:
        conn.execute(sql.SQL(statement).format(s=schema))


_V4: Final = (
    # Version 4: journaled steps (``ctx.step``). An attempt reads its run's ``step`` events
    # at its first step; a partial index holds those events alone, so the read costs the
    # number of steps, not the length of the run's history.
    "CREATE INDEX events_steps ON {s}.events (run_id, seq) WHERE kind = 'step'",
)


def _to_v4(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V4:
        conn.execute(sql.SQL(statement).format(s=schema))


_V6: Final = (
    # Version 6: a queued run's earliest start (not_before: a delayed start, a run waiting
    # to retry). The serving loop's walk of the queue (runs_queue_by_age) passes over a
    # run whose time has not come. A schema from before has none: every run may start now.
    "ALTER TABLE {s}.runs ADD COLUMN not_before float8",
)


def _to_v6(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V6:
        conn.execute(sql.SQL(statement).format(s=schema))


_V7: Final = (
    # Version 7: runs' time limits, fixed when a run is created: deadline (it ends
    # Stopped("deadline") then) and queue_deadline (it ends Stopped("queue_timeout") then
    # unless its first attempt has started). Every serving loop turn looks for the root
    # runs past one that no attempt runs, through a partial index holding those runs alone.
    # A schema from before has no limits: its runs keep none.
    "ALTER TABLE {s}.runs ADD COLUMN deadline float8",
    "ALTER TABLE {s}.runs ADD COLUMN queue_deadline float8",
    "CREATE INDEX runs_past_deadline ON {s}.runs (deadline) WHERE deadline IS NOT NULL"
    " AND parent_run_id IS NULL AND kind IN ('queued', 'awaiting')",
    "CREATE INDEX runs_past_queue_deadline ON {s}.runs (queue_deadline)"
    " WHERE queue_deadline IS NOT NULL AND parent_run_id IS NULL AND kind = 'queued'"
    " AND generation = 0",
)


def _to_v7(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V7:
        conn.execute(sql.SQL(statement).format(s=schema))


_V9: Final = (
    # Version 9: a look for work takes the runs it hands out out of the queue for a few
    # seconds (``reserve`` in queries.sql): other runtimes' looks skip them, so four
    # workers looking at once are handed different runs, not the same ones to race for.
    """CREATE TABLE {s}.reserved (
        run_id text PRIMARY KEY,
        by text NOT NULL,
        until double precision NOT NULL
    )""",
)


def _to_v9(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V9:
        conn.execute(sql.SQL(statement).format(s=schema))


_V10: Final = (
    # Version 10: a run's times (created, last updated, first running, ended: the runtime's
    # clock, as events' ``at``), the worker that held its claim last, and its end cause's
    # kind. A run written before keeps the times its events tell (None where it has none),
    # its current claim's owner as its worker, and the cause its state names.
    "ALTER TABLE {s}.runs ADD COLUMN created_at float8, ADD COLUMN updated_at float8,"
    " ADD COLUMN started_at float8, ADD COLUMN ended_at float8, ADD COLUMN worker_id text,"
    " ADD COLUMN cause text",
    """UPDATE {s}.runs r SET
        created_at = e.first_at,
        updated_at = e.last_at,
        started_at = e.started_at,
        ended_at = CASE WHEN r.kind = 'ended' THEN e.last_at END
    FROM (SELECT run_id, min(at) AS first_at, max(at) AS last_at,
                 min(at) FILTER (WHERE state::jsonb->>'kind' = 'running') AS started_at
          FROM {s}.events GROUP BY run_id) e
    WHERE e.run_id = r.run_id""",
    "UPDATE {s}.runs r SET worker_id = c.owner FROM {s}.claims c WHERE c.run_id = r.run_id",
    "UPDATE {s}.runs SET cause = state::jsonb->'cause'->>'kind' WHERE kind = 'ended'",
    # Ended runs by cause (an entry written once, when the run ends) and unended runs by
    # kind, each newest first: a filter by either reads only the runs it lists, and the
    # counts read the indexes.
    "CREATE INDEX runs_by_cause ON {s}.runs (cause, created) WHERE cause IS NOT NULL",
    "CREATE INDEX runs_unended ON {s}.runs (kind, created) WHERE kind <> 'ended'",
)


def _to_v10(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V10:
        conn.execute(sql.SQL(statement).format(s=schema))


_V11: Final = (
    # Version 11: the workers (DESIGN §3.11), a row per serving runtime; its times are the
    # server's clock, as leases are, and its own lease decides when it reads lost.
    """CREATE TABLE {s}.workers (
        worker_id text PRIMARY KEY,
        host text NOT NULL,
        pid bigint NOT NULL,
        state text NOT NULL CHECK (state IN ('serving', 'draining', 'stopped')),
        started_at float8 NOT NULL,
        last_seen float8 NOT NULL,
        bodies text NOT NULL,
        concurrency bigint NOT NULL,
        active bigint NOT NULL DEFAULT 0,
        lease float8 NOT NULL
    )""",
    "CREATE INDEX workers_live ON {s}.workers (started_at) WHERE state <> 'stopped'",
    "CREATE INDEX workers_by_seen ON {s}.workers (last_seen)",
)


def _to_v11(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V11:
        conn.execute(sql.SQL(statement).format(s=schema))


_V12: Final = (
    # Version 12: run policies. Busy threads (``if_busy=``): a start that rejects or
    # supersedes on a busy thread reads the thread's runs that have not ended; a partial
    # index holds those rows alone, so the read costs the runs the thread has under way,
    # not its history. Body versions: the version of the body a run's first attempt ran
    # with (NULL in the runs from before: they were run by unversioned bodies).
    "ALTER TABLE {s}.runs ADD COLUMN body_version text",
    "CREATE INDEX runs_unended_on_thread ON {s}.runs (thread_id, created) WHERE kind <> 'ended'",
)


def _to_v12(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V12:
        conn.execute(sql.SQL(statement).format(s=schema))


_V13: Final = (
    # Version 13: a look's reservation holds for the run's generation as it was handed
    # out, so a run claimed since (whose generation moved on) is free to the next look
    # once it is runnable again (a durable sleep that came due, say), whoever reserved it.
    # Reservations from before hold for generation 0 and pass within seconds.
    "ALTER TABLE {s}.reserved ADD COLUMN generation bigint NOT NULL DEFAULT 0",
)


def _to_v13(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V13:
        conn.execute(sql.SQL(statement).format(s=schema))


_V14: Final = (
    # Version 14: retries. A run's retry policy (``retry=``, JSON text, fixed at its
    # creation) and the retries scheduled so far. Runs from before have no policy and no
    # retries.
    "ALTER TABLE {s}.runs ADD COLUMN retry text",
    "ALTER TABLE {s}.runs ADD COLUMN retries bigint NOT NULL DEFAULT 0",
)


def _to_v14(conn: psycopg.Connection[tuple[object, ...]], schema: sql.Identifier) -> None:
    for statement in _V14:
        conn.execute(sql.SQL(statement).format(s=schema))


MIGRATIONS: Sequence[Migration] = (
    _create_v1,
    _to_v2,
    _to_v3,
    _to_v4,
    streams_v5,
    _to_v6,
    _to_v7,
    order_v8,
    _to_v9,
    _to_v10,
    _to_v11,
    _to_v12,
    _to_v13,
    _to_v14,
    guess_v15,
    guess_v16,
    guess_v17,
)
"""The schema's history, oldest first: ``MIGRATIONS[i]`` takes a schema from version ``i``
to ``i + 1``. Append, never edit."""

LATEST: Final = len(MIGRATIONS)


def lock_key(schema: str) -> int:
    """The advisory lock key of a schema's migrations (a stable 63-bit hash of its name)."""
    import hashlib

    digest = hashlib.blake2b(f"awaken_trio:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def open_schema(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    where: str,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Bring ``schema`` to the latest version in one transaction under the advisory lock;
    the version it was at. ``where`` names the database as it may be shown (no password).

    Raises:
        StoreError: a newer version, or a schema of that name that is not a store's;
            nothing was written.
    """
    latest = len(migrations)
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        current = 0
        if exists is not None:
            current = _version(conn, schema, where)
        if current > latest:
            raise StoreError(
                f"the store in schema {schema!r} of {where} was written by a newer version of"
                f" awaken_trio (schema version {current}; this version knows up to {latest});"
                " upgrade awaken_trio to open it. It was left unchanged",
                outcome_unknown=False,
            )
        if current == latest:
            return current
        if exists is None:
            conn.execute(sql.SQL("CREATE SCHEMA {s}").format(s=ident))
        for version in range(current, latest):
            migrations[version](conn, ident)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.meta (key, value) VALUES ('version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ).format(s=ident),
                (str(version + 1),),
            )
        return current


def _version(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> int:
    tables = {
        str(name)
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        )
    }
    if not tables:
        return 0  # an empty schema (made by hand for the store): created in it
    if "meta" not in tables:
        raise StoreError(
            f"schema {schema!r} of {where} is not an awaken_trio store: it holds other tables"
            f" ({', '.join(sorted(tables)[:5])}); name another with '?schema='."
            " It was left unchanged",
            outcome_unknown=False,
        )
    found: dict[str, object] = {
        str(key): value
        for key, value in conn.execute(
            sql.SQL("SELECT key, value FROM {s}.meta").format(s=sql.Identifier(schema))
        )
    }
    if found.get("application") != APPLICATION or "version" not in found:
        raise StoreError(
            f"schema {schema!r} of {where} is not an awaken_trio store (its meta table has no"
            " awaken_trio marker); it was left unchanged",
            outcome_unknown=False,
        )
    try:
        return int(str(found["version"]))
    except ValueError:
        raise StoreError(
            f"the store in schema {schema!r} of {where} is damaged: its version is"
            f" {found['version']!r}; it was left unchanged",
            outcome_unknown=False,
        ) from None
