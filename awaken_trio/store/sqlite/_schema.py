"""The SQLite store's file: what it must look like before it is opened, its schema, and the
ordered migrations that bring an older file forward.

The schema version is ``PRAGMA user_version``; ``PRAGMA application_id`` and the
``awaken_meta`` table say the file is an awaken_trio store. A file is inspected through a
read-only connection before anything may write to it, so a file that is refused (not
SQLite, another application's database, a newer schema) keeps its exact bytes.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from ..._core import StoreError
from ._streams import create_v6 as create_streams_v6
from ._workers import create_v10 as create_workers_v10

APPLICATION: Final = "awaken_trio"
APPLICATION_ID: Final = 0x41574B4E  # "AWKN": the header field SQLite reserves for this
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_HEADER_SIZE: Final = 100

Migration = Callable[[sqlite3.Connection], None]
"""One step of the schema: it brings a file from version ``i`` to ``i + 1`` (its index in
`MIGRATIONS` is ``i``), inside the opening transaction; the version is set after it."""


def _create_v1(conn: sqlite3.Connection) -> None:
    """Everything: the application marker, runs, events, tickets, stored commands, claims.

    Payloads and states are JSON text (see ``_codec``). ``kind`` mirrors the state's
    variant so indexes need not parse JSON; ``queued_order`` is set only while a named root
    run is queued (`runnable` hands runs out oldest first, by rowid); ``attempt_epoch`` only
    while an attempt of the run may be live (a thread is busy while it equals the root's claim
    epoch).
    """
    for statement in _V1:
        conn.execute(statement)
    conn.execute("INSERT INTO awaken_meta (key, value) VALUES ('application', ?)", (APPLICATION,))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


_V1: Final = (
    "CREATE TABLE awaken_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        parent_run_id TEXT,
        root_run_id TEXT NOT NULL,
        name TEXT,
        input TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('queued', 'running', 'awaiting', 'ended')),
        state TEXT NOT NULL,
        generation INTEGER NOT NULL,
        result TEXT NOT NULL DEFAULT 'null',
        checkpoint TEXT NOT NULL DEFAULT 'null',
        steps INTEGER NOT NULL DEFAULT 0,
        max_steps INTEGER,
        carried TEXT NOT NULL DEFAULT '[]',
        carried_pause INTEGER NOT NULL DEFAULT 0,
        resume_value TEXT NOT NULL DEFAULT 'null',
        resume_ticket TEXT,
        epoch INTEGER NOT NULL DEFAULT 0,
        attempt_epoch INTEGER,
        recoveries INTEGER NOT NULL DEFAULT 0,
        queued_order INTEGER
    )""",
    "CREATE INDEX runs_queued ON runs (queued_order) WHERE queued_order IS NOT NULL",
    "CREATE INDEX runs_children ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL",
    "CREATE INDEX runs_live_on_thread ON runs (thread_id) WHERE attempt_epoch IS NOT NULL",
    """CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        detail TEXT NOT NULL,
        at REAL NOT NULL
    )""",
    "CREATE INDEX events_by_run ON events (run_id, seq)",
    """CREATE TABLE tickets (
        run_id TEXT PRIMARY KEY,
        correlation_id TEXT NOT NULL,
        wake_at REAL
    )""",
    "CREATE INDEX tickets_due ON tickets (wake_at) WHERE wake_at IS NOT NULL",
    """CREATE TABLE inbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('message', 'pause', 'wake', 'cancel')),
        payload TEXT NOT NULL,
        reason TEXT NOT NULL,
        at REAL NOT NULL
    )""",
    "CREATE INDEX inbox_by_run ON inbox (run_id, id)",
    """CREATE TABLE claims (
        run_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        lease_until REAL NOT NULL
    )""",
    "CREATE INDEX claims_by_expiry ON claims (lease_until)",
)


def _inbox_delivered_v2(conn: sqlite3.Connection) -> None:
    """Version 2: a stored message an attempt has handed to its body is marked, so an end
    of the run does not list it as discarded while an attempt that replaces a lost one is
    still handed it."""
    conn.execute("ALTER TABLE inbox ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0")


def _fork_v3(conn: sqlite3.Connection) -> None:
    """Version 3: forking. A run records where it was forked from, and every checkpoint a
    commit writes is kept with the seq of that commit's last event, so the checkpoint as of
    any event can be read back. A file from before keeps each run's current checkpoint, as
    of the run's last event (what it had before is not known), and ``history_from``, that
    event's seq: a fork at an earlier event is refused rather than started from nothing."""
    conn.execute("ALTER TABLE runs ADD COLUMN forked_from TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN history_from INTEGER")
    conn.execute(
        "UPDATE runs SET history_from ="
        " (SELECT MAX(seq) FROM events WHERE events.run_id = runs.run_id)"
    )
    conn.execute(
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            checkpoint TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID"""
    )
    conn.execute(
        """INSERT INTO checkpoints (run_id, seq, checkpoint)
        SELECT r.run_id, e.seq, r.checkpoint FROM runs r
        JOIN (SELECT run_id, MAX(seq) AS seq FROM events GROUP BY run_id) e
        ON e.run_id = r.run_id
        WHERE r.checkpoint != 'null'"""
    )


def _queue_by_age_v4(conn: sqlite3.Connection) -> None:
    """Version 4: the queued runs indexed in the order `runnable` hands them out (oldest
    first, by rowid), so its read walks the queue and stops at the batch. Before, it walked
    every run the file held in rowid order, the ended ones included, so each serving loop's
    look cost time in proportion to all the runs ever written. The key is the run's kind,
    the same (``queued``) for every entry: entries with equal keys are in rowid order.

    The index over ``queued_order`` goes: it served only to number queue places, and the
    places were never read (the order is the rowid's); ``queued_order`` is now a mark."""
    conn.execute("CREATE INDEX runs_queue_by_age ON runs (kind) WHERE queued_order IS NOT NULL")
    conn.execute("DROP INDEX runs_queued")


def _steps_v5(conn: sqlite3.Connection) -> None:
    """Version 5: journaled steps (``ctx.step``). An attempt reads its run's ``step`` events
    at its first step; a partial index holds those events alone, so the read costs the
    number of steps, not the length of the run's history."""
    conn.execute("CREATE INDEX events_steps ON events (run_id, seq) WHERE kind = 'step'")


def _times_v9(conn: sqlite3.Connection) -> None:
    """Version 9: a run's times (`RunRecord.created_at`, ``updated_at``, ``started_at``,
    ``ended_at``), the worker that held its claim last (``worker_id``), and its end cause's
    kind (``cause``, what `list_runs` filters and `count_runs` counts ended runs by).

    A run written before keeps its times as its events tell them: created at its first
    event, updated at its last, started at its first ``running`` one, ended at its last
    when it has ended (None where its events were never written); its worker is its
    current claim's owner, if it has one. ``cause`` is read from its state.

    Two partial indexes: ended runs by cause (each entry written once, when the run ends)
    and unended runs by kind, so a filter by either, newest first, reads only the runs it
    lists, and the counts read an index, never the table."""
    for column in ("created_at", "updated_at", "started_at", "ended_at"):
        conn.execute(f"ALTER TABLE runs ADD COLUMN {column} REAL")
    conn.execute("ALTER TABLE runs ADD COLUMN worker_id TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN cause TEXT")
    conn.execute(
        """UPDATE runs SET
            created_at = (SELECT MIN(e.at) FROM events e WHERE e.run_id = runs.run_id),
            updated_at = (SELECT MAX(e.at) FROM events e WHERE e.run_id = runs.run_id),
            started_at = (SELECT MIN(e.at) FROM events e WHERE e.run_id = runs.run_id
                          AND json_extract(e.state, '$.kind') = 'running'),
            ended_at = CASE WHEN kind = 'ended' THEN
                (SELECT MAX(e.at) FROM events e WHERE e.run_id = runs.run_id) END,
            worker_id = (SELECT c.owner FROM claims c WHERE c.run_id = runs.run_id),
            cause = CASE WHEN kind = 'ended' THEN json_extract(state, '$.cause.kind') END"""
    )
    conn.execute("CREATE INDEX runs_by_cause ON runs (cause) WHERE cause IS NOT NULL")
    conn.execute("CREATE INDEX runs_unended ON runs (kind) WHERE kind != 'ended'")


def _not_before_v7(conn: sqlite3.Connection) -> None:
    """Version 7: a queued run's earliest start (``not_before``: a delayed start, a run
    waiting to retry). The serving loop's walk of the queue (``runs_queue_by_age``) passes
    over a run whose time has not come. A file from before has none: every run may start
    now."""
    conn.execute("ALTER TABLE runs ADD COLUMN not_before REAL")


def _deadlines_v8(conn: sqlite3.Connection) -> None:
    """Version 8: runs' time limits. ``deadline`` (the run ends ``Stopped("deadline")``
    then) and ``queue_deadline`` (it ends ``Stopped("queue_timeout")`` then unless its first
    attempt has started), fixed when the run is created. Every serving loop turn looks for
    the root runs past one that no attempt runs: each look is a search of a partial index
    that holds those runs alone (``runs_past_deadline``: queued or awaiting roots with a
    deadline; ``runs_past_queue_deadline``: queued roots that never started with a queue
    deadline), never a scan. A file from before has no limits: its runs keep none."""
    conn.execute("ALTER TABLE runs ADD COLUMN deadline REAL")
    conn.execute("ALTER TABLE runs ADD COLUMN queue_deadline REAL")
    conn.execute(
        "CREATE INDEX runs_past_deadline ON runs (deadline) WHERE deadline IS NOT NULL"
        " AND parent_run_id IS NULL AND kind IN ('queued', 'awaiting')"
    )
    conn.execute(
        "CREATE INDEX runs_past_queue_deadline ON runs (queue_deadline)"
        " WHERE queue_deadline IS NOT NULL AND parent_run_id IS NULL AND kind = 'queued'"
        " AND generation = 0"
    )


def _run_policies_v11(conn: sqlite3.Connection) -> None:
    """Version 11: run policies. Busy threads (``if_busy=``): a start that rejects or
    supersedes on a busy thread reads the thread's runs that have not ended; a partial
    index holds those rows alone, so the read costs the runs the thread has under way, not
    its history. Body versions: the version of the body a run's first attempt ran with
    (NULL in the runs of a file from before: they were run by unversioned bodies)."""
    conn.execute("ALTER TABLE runs ADD COLUMN body_version TEXT")
    conn.execute("CREATE INDEX runs_unended_on_thread ON runs (thread_id) WHERE kind != 'ended'")


def _retries_v12(conn: sqlite3.Connection) -> None:
    """Version 12: retries. A run's retry policy (``retry=``, JSON text, fixed at its
    creation) and the retries scheduled so far. The runs of a file from before have no
    policy and no retries."""
    conn.execute("ALTER TABLE runs ADD COLUMN retry TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: Sequence[Migration] = (
    _create_v1,
    _inbox_delivered_v2,
    _fork_v3,
    _queue_by_age_v4,
    _steps_v5,
    create_streams_v6,
    _not_before_v7,
    _deadlines_v8,
    _times_v9,
    create_workers_v10,
    _run_policies_v11,
    _retries_v12,
)
"""The schema's history, oldest first: ``MIGRATIONS[i]`` takes a file from version ``i`` to
``i + 1``. Append, never edit: a released file may be at any version."""


# ---------------------------------------------------------------------------- inspecting


@attrs.frozen
class Found:
    """What a database says about itself."""

    application_id: int
    version: int
    tables: frozenset[str]
    application: str | None  # the awaken_meta marker, when the table exists


def inspect_file(path: Path) -> bool:
    """Check, without writing, that ``path`` may hold a store; False if it is absent or
    empty (a store will be created), True if it is an SQLite file to inspect further.

    Raises:
        StoreError: the path cannot be read, is not a regular file, or is not SQLite.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(
            f"cannot open the store {str(path)!r}: {exc.strerror or exc}", outcome_unknown=False
        ) from None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(
            f"cannot open the store {str(path)!r}: it is a directory; name a file",
            outcome_unknown=False,
        )
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(
            f"cannot open the store {str(path)!r}: it is not a regular file",
            outcome_unknown=False,
        )
    try:
        with path.open("rb") as file:
            header = file.read(_HEADER_SIZE)
    except OSError as exc:
        raise StoreError(
            f"cannot read the store {str(path)!r}: {exc.strerror or exc}", outcome_unknown=False
        ) from None
    if not header:
        return False
    if len(header) < _HEADER_SIZE or not header.startswith(_SQLITE_MAGIC):
        raise StoreError(
            f"{str(path)!r} is not an awaken_trio store: it is not an SQLite database"
            " (it does not start with the SQLite header); it was left unchanged",
            outcome_unknown=False,
        )
    return True


def read_found(conn: sqlite3.Connection) -> Found:
    """What the database ``conn`` is open on says about itself (reads only)."""
    (application_id,) = conn.execute("PRAGMA application_id").fetchone()
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    tables = frozenset(
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    )
    application = None
    if "awaken_meta" in tables:
        row = conn.execute("SELECT value FROM awaken_meta WHERE key = 'application'").fetchone()
        application = None if row is None else str(row[0])
    return Found(application_id, version, tables, application)


def inspect_before_opening(path: Path, latest: int, *, patience: float) -> None:
    """Check, without writing anything, that ``path`` may be opened as a store of schema
    version ``latest`` or older (absent, empty, or one this version may migrate).

    An existing file is read through a read-only connection. Even a read-only connection
    leaves ``-wal`` and ``-shm`` files next to a database in WAL mode; when there is no
    write-ahead log or rollback journal (nothing committed that the file itself does not
    hold), the file is read as immutable, which creates nothing.

    An immutable read is exact only while nobody writes the file, and another process may
    be creating the store in it at that moment (writing its header, a checkpoint copying
    the new schema in, a log appearing). So a refusal stands only if the file and its
    journals looked the same before and after the look; otherwise it is looked at again,
    for up to ``patience`` seconds. Being let through is never final: the opening checks
    again inside the write lock, before it writes anything.

    Raises:
        StoreError: the file is refused (not SQLite, another application's database, a
            newer schema, damaged) or cannot be read; nothing was written to it.
    """
    deadline = time.monotonic() + patience
    pause = 0.001
    while True:
        before = _looks(path)
        try:
            if inspect_file(path):
                found = _read_only(path, journaled=before is not None and before.journaled)
                version_to_migrate(path, found, latest)
            return
        except StoreError:
            if _looks(path) == before or time.monotonic() >= deadline:
                raise
        # Written to while we looked: what we read may be half of another's commit.
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@attrs.frozen
class _Looks:
    """What can be seen of a file without opening it: enough to tell that it was written
    while it was read (a write changes its size or time, or comes with a journal)."""

    inode: int
    size: int
    mtime_ns: int
    journaled: bool


def _looks(path: Path) -> _Looks | None:
    try:
        info = path.stat()
    except OSError:
        return None
    journaled = any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-journal"))
    return _Looks(info.st_ino, info.st_size, info.st_mtime_ns, journaled)


def _read_only(path: Path, *, journaled: bool) -> Found:
    uri = path.resolve().as_uri() + ("?mode=ro" if journaled else "?mode=ro&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise unusable(path, exc) from None
    try:
        # One read transaction: in autocommit each statement would read its own snapshot,
        # and a creator committing in between would leave tables but no marker.
        conn.execute("BEGIN")
        return read_found(conn)
    except sqlite3.Error as exc:
        raise unusable(path, exc) from None
    finally:
        conn.close()


def version_to_migrate(path: Path, found: Found, latest: int) -> int:
    """The version to migrate forward from, or `StoreError` if the file must be left as it
    is: another application's database, a damaged store, or a newer schema."""
    if found.application_id == APPLICATION_ID:
        if found.version > latest:
            raise StoreError(
                f"the store {str(path)!r} was written by a newer version of awaken_trio"
                f" (schema version {found.version}; this version knows up to {latest});"
                " upgrade awaken_trio to open it. It was left unchanged",
                outcome_unknown=False,
            )
        if found.version >= 1 and found.application != APPLICATION:
            raise StoreError(
                f"the store {str(path)!r} is damaged: it is marked as an awaken_trio store"
                " but has no awaken_meta record; it was left unchanged",
                outcome_unknown=False,
            )
        return found.version
    if found.application_id == 0 and found.version == 0 and not found.tables:
        return 0  # an empty SQLite database: the store is created in it
    owner = (
        f"application id {found.application_id:#010x}"
        if found.application_id
        else f"tables {', '.join(sorted(found.tables)[:5]) or 'none'}"
    )
    raise StoreError(
        f"{str(path)!r} is not an awaken_trio store: it is an SQLite database of another"
        f" application ({owner}); it was left unchanged",
        outcome_unknown=False,
    )


def migrate(conn: sqlite3.Connection, current: int, migrations: Sequence[Migration]) -> None:
    """Run ``migrations[current:]`` in order, each followed by its version number, inside
    the caller's transaction (a failure rolls every step back)."""
    for version in range(current, len(migrations)):
        try:
            migrations[version](conn)
        except sqlite3.Error:
            raise
        except Exception as exc:
            raise StoreError(
                f"migrating the store from schema version {version} to {version + 1} failed:"
                f" {exc!r}; it was rolled back",
                outcome_unknown=False,
            ) from exc
        conn.execute(f"PRAGMA user_version = {version + 1}")


def make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the directory {str(path.parent)!r} for the store:"
            f" {exc.strerror or exc}",
            outcome_unknown=False,
        ) from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        # SQLite would fail later, less clearly (it needs the directory for its WAL files).
        raise StoreError(
            f"cannot open the store {str(path)!r}: its directory is not writable"
            " (SQLite keeps its write-ahead log next to the file)",
            outcome_unknown=False,
        )


def unusable(path: Path, exc: sqlite3.Error) -> StoreError:
    """The `StoreError` for an SQLite failure while opening ``path``."""
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return StoreError(
            f"{str(path)!r} is not an awaken_trio store: SQLite says it is not a database"
            " (damaged or not SQLite); it was left unchanged",
            outcome_unknown=False,
        )
    return StoreError(f"cannot open the store {str(path)!r}: {exc}", outcome_unknown=False)
