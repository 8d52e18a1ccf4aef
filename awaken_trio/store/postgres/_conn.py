"""The PostgreSQL store's connections: the pool, a call on one of its connections in a Trio
worker thread (`Connections.call`), and what is done when a call fails (`Retry`).

psycopg's async connections do not run under Trio, so every call runs a sync pooled
connection in a worker thread: reads at most ``pool_size`` at once, writes at most
`WRITERS` more of their own, so a commit never queues behind reads, and a held look one
more (`hold`). With the listener's own (``_listen``), a store holds at most
``pool_size + BEYOND_POOL_SIZE`` connections.

A call that fails is answered by one of three policies, one value (`Retry`):

* a connection that broke (the server restarted, a backend was terminated): a read is read
  again at once on a fresh connection; a write transaction, of which nothing was
  committed, is run again on a fresh connection after a wait (`Retry.broken`), and given
  up after its tries;
* a transaction the server rolled back to let another go on (a deadlock, a serialisation
  failure, a key another transaction inserted first): nothing of it was written, and run
  again it reads what the other committed; again at once (`Retry.rolled_back`);
* a commit whose answer was lost (the connection broke after ``COMMIT`` was sent): its
  server process is ended and waited for (`Retry.lost_within`), then the transaction's
  token is looked up: if it landed, the write answers what it did (`LostCommit.landed`);
  if not, it is a broken connection as above. A write is never applied twice.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar, cast, final

import attrs
import psycopg
import psycopg_pool
import trio

from ..._core import Backoff, StoreError
from ._listen import scrub
from ._order import Numbered
from ._queries import Queries
from ._schema import open_schema
from ._url import Target

T = TypeVar("T")

logger = logging.getLogger("awaken_trio.store")

CONNECT_TIMEOUT: Final = 10.0
"""Seconds a call waits for a pooled connection (the server down, or every one busy)."""
WRITERS: Final = 2
"""Connections kept for writes, beyond the ``pool_size`` that reads share."""
BEYOND_POOL_SIZE: Final = WRITERS + 2
"""The most connections a store holds beyond its ``pool_size``: its writers', a held
look's and its listener's."""
_NO_SLOT: Final = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for",
)
"""What the server says refusing a connection for want of a slot: none left at all, only
the superusers' left, or a role's or a database's limit reached (SQLSTATE 53300, which a
connection refused at its start does not carry in psycopg)."""
CLIENT_ENCODING: Final = "utf8"
"""The pooled connections' encoding, which the statements are composed in (as bytes)."""

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

    def roll_back(self) -> None:
        """Roll the transaction back and keep the statements prepared on the connection.
        (psycopg's own ROLLBACK deallocates them all, in case the transaction dropped what
        they name; the store's write transactions drop nothing, and statements a failed
        pipeline skipped were never taken for prepared.) Blocking: run on a worker
        thread, as every call of the store is."""
        result = self.pgconn.exec_(b"ROLLBACK")
        if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
            message = (result.error_message or self.pgconn.error_message).decode(errors="replace")
            raise psycopg.OperationalError(f"ROLLBACK failed: {message.strip()}")

    def reclaim(self) -> None:
        """Take back every cursor lent since the last call (their results are no longer
        anyone's), keeping at most as many as a transaction uses."""
        spare = self._spare
        spare.extend(self._lent[: _SPARE_CURSORS - len(spare)])
        self._lent.clear()


Conn = StoreConnection


_AFTER_BROKEN: Final = Backoff(0.0625, 2.0, tries=6)
_AFTER_ROLLBACK: Final = Backoff(0.0, 0.0, tries=20)


@final
@attrs.frozen
class Retry:
    """What a failed call is answered with (the module's docstring): the waits before a
    write whose connection broke runs again, and its tries; the runs again of a
    transaction the server rolled back; how long a lost commit's server process may take
    to end before the commit is looked up."""

    broken: Backoff = _AFTER_BROKEN
    rolled_back: Backoff = _AFTER_ROLLBACK
    lost_within: float = 10.0


RETRY: Final = Retry()

ROLLED_BACK: Final = (
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.TransactionRollback,
    psycopg.errors.UniqueViolation,
)
"""What the server raises when it rolled a transaction back to let others go on (SQLSTATE
class 40), or when another transaction inserted the same key first (a run created by two
runtimes at once: neither could lock a row that did not exist yet). Nothing of it was
written, and run again it reads what the other committed (the rules then refuse it)."""


class LostCommit(Exception):
    """A write transaction's ``COMMIT`` was sent and its answer lost: whether it landed is
    to be looked up (by ``token``, once server process ``pid`` has ended). ``landed`` is
    what the write answers if it did, given the seqs its events were given and the
    store's count of writes before it."""

    def __init__(self, token: uuid.UUID, pid: int, landed: Callable[[Numbered, int], Any]) -> None:
        super().__init__(token, pid)
        self.token = token
        self.pid = pid
        self.landed = landed


@final
class Connections:
    """The store's pool, opened on first use, and the calls made on it."""

    def __init__(self, target: Target, queries: Queries, retry: Retry = RETRY) -> None:
        self._target = target
        self._queries = queries
        self.retry = retry
        self._readers = trio.CapacityLimiter(target.pool_size)
        self._writers = trio.CapacityLimiter(WRITERS)
        # A held look's connection (`hold`) is called on in a thread of its own: a call
        # waiting for one of the writers' threads may wait for the locks the look holds.
        self._holder = trio.CapacityLimiter(1)
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._opening: trio.Event | None = None
        self.closed = False
        """Whether the store was closed: a call raises `StoreError`."""

    def scrub(self, exc: BaseException) -> str:
        """An error's text without the password."""
        return scrub(exc, self._target.conninfo)

    # ------------------------------------------------------------------ lifetime

    async def opened(self) -> psycopg_pool.ConnectionPool[Conn]:
        """The pool, opened (and the schema brought up to date) by the first call."""
        while True:
            if self.closed:
                raise StoreError(
                    f"the store {self._target.shown!r} is closed", outcome_unknown=False
                )
            if self._pool is not None:
                return self._pool
            if self._opening is not None:
                await self._opening.wait()
                continue
            self._opening = opening = trio.Event()
            try:
                with trio.CancelScope(shield=True):
                    self._pool = await trio.to_thread.run_sync(self._open_pool)
            finally:
                self._opening = None
                opening.set()

    def _open_pool(self) -> psycopg_pool.ConnectionPool[Conn]:
        t = self._target
        where = t.shown
        try:
            first = psycopg.connect(
                t.conninfo, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT)
            )
        except psycopg.Error as exc:
            said = self.scrub(exc)
            raise StoreError(
                f"cannot connect to the PostgreSQL store {where!r}: {said}{self._no_slot(said)}",
                outcome_unknown=False,
            ) from None
        try:
            open_schema(first, t.schema, where)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the PostgreSQL store {where!r}: {self.scrub(exc)}",
                outcome_unknown=False,
            ) from None
        finally:
            first.close()
        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            t.conninfo,
            connection_class=StoreConnection,
            min_size=1,
            # (One more for a held look: `hold`.)
            max_size=t.pool_size + WRITERS + 1,
            kwargs={
                "autocommit": True,
                "prepare_threshold": 0,
                "client_encoding": CLIENT_ENCODING,
            },
            configure=self._configure,
            # No check on every checkout (a round trip each): a broken connection fails
            # its call, which is retried (writes) or answered as a store error (reads),
            # and the pool replaces it.
            open=False,
            name=f"awaken_trio {t.schema}",
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except psycopg_pool.PoolTimeout:
            pool.close()
            raise StoreError(
                f"cannot connect to the PostgreSQL store {where!r}: no connection within"
                f" {CONNECT_TIMEOUT:g}s",
                outcome_unknown=False,
            ) from None
        return pool

    def _no_slot(self, said: str) -> str:
        """What to do, when the server refused a connection for want of a slot (``said``
        is its refusal); else nothing."""
        if not any(words in said for words in _NO_SLOT):
            return ""
        most = self._target.pool_size + BEYOND_POOL_SIZE
        return (
            "; the server has no connection left for this store: raise its max_connections"
            " (or the role's or the database's connection limit), lower ?pool_size= (a"
            f" runtime holds at most pool_size + {BEYOND_POOL_SIZE} connections, {most} here),"
            " or put a pooler in session mode in front of it"
        )

    def _configure(self, conn: Conn) -> None:
        """Every pooled connection, once (``queries.sql`` says why)."""
        conn.execute(self._queries.configure)

    async def aclose(self) -> None:
        """Close the pool (once a pool being opened is open). Calls made after raise
        `StoreError`."""
        self.closed = True
        while self._opening is not None:
            await self._opening.wait()
        pool, self._pool = self._pool, None
        if pool is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: pool.close(timeout=5.0))

    # ------------------------------------------------------------------ calls

    async def call(self, fn: Callable[[Conn], T], *, write: bool = False) -> T:
        """Run ``fn`` on a pooled connection in a worker thread. A caller cancelled
        meanwhile stops waiting, and the query running for it is cancelled on the server
        (the thread then rolls back and gives the connection back)."""
        pool = await self.opened()
        lock = threading.Lock()
        holder: list[Conn] = []

        def work() -> T:
            with pool.connection(timeout=CONNECT_TIMEOUT) as conn:
                with lock:
                    holder.append(conn)
                try:
                    return fn(conn)
                finally:
                    conn.reclaim()
                    with lock:
                        holder.clear()

        try:
            return await trio.to_thread.run_sync(
                work,
                abandon_on_cancel=True,
                limiter=self._writers if write else self._readers,
            )
        except trio.Cancelled:

            def cancel() -> None:
                with lock:
                    if holder:
                        holder[0].cancel_safe(timeout=2.0)

            with trio.CancelScope(shield=True), trio.move_on_after(3.0):
                await trio.to_thread.run_sync(cancel)
            raise

    async def hold(self, fn: Callable[[Conn, Queries], T | None], what: str) -> T | None:
        """Run ``fn`` (a read that leaves a transaction open on its connection and answers
        what holds it, or answers None and leaves none) on a pooled connection in a worker
        thread, and keep the connection out of the pool if it answered: it is the
        caller's until it calls on it (`call_held`) or lets it go (`let_go`). Never
        abandoned: a caller cancelled meanwhile still gets the answer, to let go of. Once
        more on a fresh connection if its connection broke, as `read`. `StoreError` if it
        fails (rolled back, the connection back in the pool)."""
        pool = await self.opened()
        queries = self._queries

        def work() -> T | None:
            conn = pool.getconn(timeout=CONNECT_TIMEOUT)
            try:
                found = fn(conn, queries)
            except BaseException:
                _put_back(pool, conn)
                raise
            if found is None:
                _put_back(pool, conn)
            return found

        return await self._read_once_more(
            partial(trio.to_thread.run_sync, work, limiter=self._holder), what
        )

    async def let_go(self, conn: Conn) -> None:
        """Roll back the transaction `hold` left open on ``conn`` and put it back in the
        pool (shielded: a held connection is never lost). Nothing of it is raised: a
        connection that fails to roll back is closed, and the pool makes another."""
        pool = self._pool
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(
                lambda: _put_back(pool, conn) if pool is not None else conn.close(),
                limiter=self._holder,
            )

    async def call_held(self, conn: Conn, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` on ``conn``, which `hold` kept out of the pool, in a worker thread,
        and put the connection back in the pool after (rolled back first, should ``fn``
        have left its transaction open). As `call` when cancelled."""
        pool = self._pool
        lock = threading.Lock()
        running = [True]

        def work() -> T:
            try:
                return fn(conn)
            finally:
                with lock:
                    running[0] = False
                if pool is not None:
                    _put_back(pool, conn)
                else:
                    conn.close()

        try:
            return await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=self._holder)
        except trio.Cancelled:

            def cancel() -> None:
                with lock:
                    if running[0]:
                        conn.cancel_safe(timeout=2.0)

            with trio.CancelScope(shield=True), trio.move_on_after(3.0):
                await trio.to_thread.run_sync(cancel)
            raise

    async def read(self, fn: Callable[[Conn, Queries], T], what: str) -> T:
        """Run ``fn`` (a read, safe to repeat) with the store's statements; once more on a
        fresh connection if its connection broke. `StoreError` if it fails."""
        queries = self._queries

        def read(conn: Conn) -> T:
            return fn(conn, queries)

        return await self._read_once_more(partial(self.call, read), what)

    async def _read_once_more(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call``, a read of ``what``; once more if its connection broke. `StoreError`
        if it fails."""
        try:
            try:
                return await call()
            except psycopg.OperationalError as exc:
                # A pooled connection the server dropped (a restart, a terminated
                # backend) fails once; the pool replaces it, and a read is safe to repeat.
                logger.info("store: reading %s failed, reading again: %s", what, self.scrub(exc))
                return await call()
        except psycopg_pool.PoolTimeout:
            raise StoreError(
                f"the PostgreSQL store {self._target.shown!r} could not be reached to read"
                f" {what} within {CONNECT_TIMEOUT:g}s",
                outcome_unknown=False,
            ) from None
        except psycopg.Error as exc:
            raise StoreError(
                f"the PostgreSQL store failed to read {what}: {self.scrub(exc)}",
                outcome_unknown=False,
            ) from None

    async def write(
        self, attempt: Callable[[Conn], T], what: str, *, held: Conn | None = None
    ) -> T:
        """Run ``attempt`` (one whole write transaction, which raises `LostCommit` when
        its commit's answer was lost) on a writers' connection, by the `Retry` policies
        (the module's docstring); first on ``held``, a connection `hold` kept (its
        transaction open), if given: run again, it runs on a connection of its own. Either
        way ``held`` is back in the pool once this returns. `StoreError` if it fails:
        ``outcome_unknown`` only when a lost commit could not be looked up."""
        retry = self.retry
        broken = rolled_back = 0
        while True:
            try:
                if held is not None:
                    conn, held = held, None
                    return await self.call_held(conn, attempt)
                return await self.call(attempt, write=True)
            except LostCommit as lost:
                try:
                    landed = await self.call(partial(self._look_up, token=lost.token, pid=lost.pid))
                except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                    raise StoreError(
                        f"the PostgreSQL store lost its connection while committing {what},"
                        f" and could not learn whether the commit landed: {self.scrub(exc)}",
                        outcome_unknown=True,
                    ) from None
                if landed is not None:
                    logger.info("store: a commit whose answer was lost had landed (%s)", what)
                    return cast("T", lost.landed(*landed))
                error: BaseException = lost
            except ROLLED_BACK as exc:
                # A deadlock, a serialisation failure or a key inserted first by another
                # transaction: the whole transaction was rolled back, so running it again
                # is safe.
                if retry.rolled_back.spent(rolled_back):
                    logger.error("store: writing %s failed: %s", what, self.scrub(exc))
                    raise StoreError(
                        f"the PostgreSQL store rolled {what} back {rolled_back + 1} times in"
                        f" a row: {self.scrub(exc)}; nothing was written",
                        outcome_unknown=False,
                    ) from None
                logger.debug("store: %s was rolled back, running it again: %s", what, exc)
                await trio.sleep(retry.rolled_back.wait(rolled_back))
                rolled_back += 1
                continue
            except psycopg_pool.PoolTimeout:
                raise StoreError(
                    f"the PostgreSQL store {self._target.shown!r} could not be reached to"
                    f" write {what} within {CONNECT_TIMEOUT:g}s; nothing was written",
                    outcome_unknown=False,
                ) from None
            except psycopg.OperationalError as exc:
                error = exc
            except psycopg.Error as exc:
                logger.error("store: writing %s failed: %s", what, self.scrub(exc))
                raise StoreError(
                    f"the PostgreSQL store refused {what}: {self.scrub(exc)}; nothing was written",
                    outcome_unknown=False,
                ) from None
            if retry.broken.spent(broken):
                logger.error("store: writing %s failed: %s", what, self.scrub(error))
                raise StoreError(
                    f"the PostgreSQL store failed to write {what}: {self.scrub(error)};"
                    " nothing was written",
                    outcome_unknown=False,
                ) from None
            pause = retry.broken.wait(broken)
            broken += 1
            logger.info(
                "store: connection lost while writing %s; trying again in %gs: %s",
                what,
                pause,
                self.scrub(error),
            )
            await trio.sleep(pause)

    def _look_up(self, conn: Conn, token: uuid.UUID, pid: int) -> tuple[Numbered, int] | None:
        """After a commit whose answer was lost: end the server process that ran it, if it
        is still there (it may still be committing, or about to), and wait until it has
        gone, so its outcome is final; then whether ``token`` landed (its events' seqs and
        the writes count before it)."""
        q = self._queries
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute(q.terminate, (pid,))
        within = self.retry.lost_within
        deadline = time.monotonic() + within
        while conn.execute(q.still_running, (pid,)).fetchone():
            if time.monotonic() > deadline:
                raise psycopg.OperationalError(
                    f"the server process of the lost commit was still running after {within:g}s"
                )
            time.sleep(0.01)
        found = conn.execute(q.was_written, (token,)).fetchone()
        if found is None:
            return None
        seqs, base, writes = tuple(int(s) for s in found[0]), int(found[1]), int(found[2])
        return Numbered(seqs, base), writes - 1


def _put_back(pool: psycopg_pool.ConnectionPool[Conn], conn: Conn) -> None:
    """Put a connection taken with ``getconn`` back in the pool, its transaction rolled
    back if one is open (a connection that fails to is closed: the pool replaces it)."""
    conn.reclaim()
    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        try:
            conn.roll_back()
        except psycopg.Error:
            conn.close()
    pool.putconn(conn)
