"""The SQLite connection as the store's thread holds it: opening (checked, then migrated),
transactions with the store's error rules, and the version other connections move.

Everything here runs on the store's own thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, TypeVar, final

import attrs

from ..._core import StoreError
from ._cache import RunCache
from ._schema import (
    Migration,
    inspect_before_opening,
    make_parent,
    migrate,
    read_found,
    unusable,
    version_to_migrate,
)
from ._tx import Transaction

T = TypeVar("T")

_log = logging.getLogger("awaken_trio.store")


@final
@attrs.frozen
class FileIdentity:
    """Which file a path names: its device and inode."""

    device: int
    inode: int


def _identity_of_text(path: str) -> FileIdentity:
    info = os.stat(path)
    return FileIdentity(info.st_dev, info.st_ino)


def _identity_of(path: Path) -> FileIdentity:
    """The identity of the file just opened at ``path`` (`StoreError` if it is gone)."""
    try:
        return _identity_of_text(str(path))
    except OSError as exc:
        raise StoreError(
            f"cannot open the store {str(path)!r}: {exc.strerror or exc}", outcome_unknown=False
        ) from None


Synchronous = Literal["full", "normal"]

BUSY_TIMEOUT = 5.0
"""Seconds a statement waits for another connection's lock before failing: long enough for
another process's group commit, short enough that a wedged process is reported."""


@final
class Session:
    """The open connection, its transactions, the cache its write transactions read
    through, and the store's version counter."""

    def __init__(self, path: Path, conn: sqlite3.Connection, identity: FileIdentity) -> None:
        self.path = path
        self.conn = conn
        self.cache = RunCache()
        self.version = 0
        (self._data_version,) = conn.execute("PRAGMA data_version").fetchone()
        self._text = str(path)
        self._identity = identity
        self._gone: str | None = None  # why the file can no longer be used, once it is so

    @classmethod
    def open(cls, path: Path, synchronous: Synchronous, migrations: Sequence[Migration]) -> Session:
        """Open the store at ``path``, creating or migrating its schema; `StoreError`, with
        the file untouched, if it is not a store this version may open."""
        inspect_before_opening(path, len(migrations), patience=BUSY_TIMEOUT)
        make_parent(path)
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT, isolation_level=None, cached_statements=256
            )
        except sqlite3.Error as exc:
            raise unusable(path, exc) from None
        try:
            _prepare(conn, path, synchronous, migrations)
            identity = _identity_of(path)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, identity)

    def close(self) -> None:
        self.conn.close()

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one read transaction (one snapshot of the file)."""
        self.check_file()
        conn = self.conn
        self._rollback()  # (nothing is ever left open, unless a ROLLBACK itself failed)
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")  # a read transaction: this only ends the snapshot
        except sqlite3.Error as exc:
            self._rollback()
            raise StoreError(
                f"reading the store {str(self.path)!r} failed: {exc}", outcome_unknown=False
            ) from exc

    def write(self, fn: Callable[[Transaction], T]) -> T:
        """Run ``fn`` in one write transaction: ``BEGIN IMMEDIATE`` (the write lock first,
        so no other writer slips in between our reads and writes), the writes ``fn``
        queued, ``COMMIT``.

        A failure before ``COMMIT`` rolls back and raises `StoreError` with
        ``outcome_unknown=False``; a failure of ``COMMIT`` itself leaves the outcome unknown
        (the transaction may have reached the disk). Either way the cache is dropped: it
        may hold what the transaction did in memory.
        """
        conn = self.conn
        self._rollback()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(
                f"the store {str(self.path)!r} could not begin a transaction: {exc}",
                outcome_unknown=False,
            ) from exc
        try:
            tx = Transaction(conn, self.cache)
            result = fn(tx)
            tx.end()
        except BaseException as exc:
            self.cache.clear()
            self._rollback()
            if isinstance(exc, StoreError) or not isinstance(exc, Exception):
                raise
            # Rolled back: whatever went wrong, nothing of the transaction landed.
            raise StoreError(
                f"a transaction on the store {str(self.path)!r} failed and was rolled"
                f" back: {exc!r}",
                outcome_unknown=False,
            ) from exc
        try:
            # The last moment a commit can still be refused whole: one that would land in
            # a file nobody else sees any more is rolled back instead.
            self.check_file()
        except StoreError:
            self.cache.clear()
            self._rollback()
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self.cache.clear()
            self._rollback()
            raise StoreError(
                f"committing to the store {str(self.path)!r} failed: {exc}; whether the"
                " transaction landed is unknown",
                outcome_unknown=True,
            ) from exc
        return result

    def poll_version(self) -> int:
        """The store's version: moved by every commit another connection made since the
        last poll (SQLite's ``data_version``). This runtime's own commits do not move it:
        it knows of them already, and a runtime alone on its file never has to look."""
        self.check_file()
        try:
            (data_version,) = self.conn.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(
                f"reading the store {str(self.path)!r} failed: {exc}", outcome_unknown=False
            ) from exc
        if data_version != self._data_version:
            self._data_version = data_version
            self.version += 1
        return self.version

    def check_file(self) -> None:
        """`StoreError` if the path no longer names the file this connection has open
        (it was deleted, or another file was put in its place), now or ever before.

        The connection would go on reading and writing the old file, which no other
        process sees: commits would be reported done and be lost to everyone else, and a
        store opened on the path would not know the runs. One ``stat`` of the path, so it
        is done before every transaction and every poll of the version.
        """
        if self._gone is not None:
            raise StoreError(self._gone, outcome_unknown=False)
        try:
            found = _identity_of_text(self._text)
        except FileNotFoundError:
            what = "deleted"
        except OSError:
            return  # cannot tell (the directory is unreadable): SQLite's errors will speak
        else:
            if found == self._identity:
                return
            what = "replaced by another file"
        self._gone = (
            f"the store file {self._text!r} was {what} while this store had it open; nothing"
            " more is read from or committed to the old file, which no other process sees."
            " Close this runtime (or store) and open the store again to use the file now at"
            " that path (put the right file back there first if it was removed or replaced"
            " by mistake)"
        )
        _log.error("%s", self._gone)
        raise StoreError(self._gone, outcome_unknown=False)

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            # A ROLLBACK that fails finds SQLite has rolled back itself (as a failed COMMIT
            # of an I/O error does): nothing is left open either way.
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")


def _prepare(
    conn: sqlite3.Connection, path: Path, synchronous: Synchronous, migrations: Sequence[Migration]
) -> None:
    try:
        mode = _enter_wal(conn)
        if str(mode).lower() != "wal":
            raise StoreError(
                f"the store {str(path)!r} cannot use SQLite's write-ahead log (journal mode"
                f" stays {mode!r}); put it on a local file system",
                outcome_unknown=False,
            )
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        try:
            conn.execute("SELECT json_valid('[]')").fetchone()
        except sqlite3.OperationalError:
            raise StoreError(
                f"this SQLite ({sqlite3.sqlite_version}) has no JSON functions; the store"
                " needs SQLite 3.38 or one built with JSON1",
                outcome_unknown=False,
            ) from None
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Again, inside the write lock: another process may have created or migrated
            # the file since it was inspected.
            current = version_to_migrate(path, read_found(conn), len(migrations))
            migrate(conn, current, migrations)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise unusable(path, exc) from None


def _enter_wal(conn: sqlite3.Connection) -> str:
    """Put the file in WAL mode (a no-op once it is); the journal mode it is in then.

    Changing the mode takes the file's exclusive lock without SQLite's busy handler, so
    it fails at once with ``SQLITE_BUSY`` while another process opens or creates the
    same file: it is tried again here, for up to the busy timeout, as any statement is.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT
    pause = 0.001
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
