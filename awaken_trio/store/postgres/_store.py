"""The PostgreSQL store: committed truth in one database that runtimes on many machines
share.

Imported only when a ``postgresql://`` or ``postgres://`` URL is first used
(`awaken_trio.store.open_store`); it needs the ``postgres`` extra (psycopg 3 and
psycopg_pool). psycopg's async connections do not run under Trio, so every call runs a
sync pooled connection in a Trio worker thread (reads at most ``pool_size`` at once, writes
at most `WRITERS` more, and one more connection listens).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Final, TypeVar, cast, final

import attrs
import psycopg
import psycopg_pool
import trio

from ..._core import (
    Accepted,
    CheckpointAt,
    CommandKind,
    Commit,
    CommitResult,
    ControlLook,
    HeardEnd,
    JsonValue,
    Recovered,
    Rejected,
    RunEvent,
    RunRecord,
    RunState,
    StateKind,
    StoredCommand,
    StoreError,
)
from .. import _rules as rules
from . import _reads as reads
from ._listen import Listener, scrub
from ._reads import CLIENT_ENCODING, StoreConnection
from ._schema import open_schema
from ._tx import PgTx, Statements, thread_locks, was_written
from ._url import parse

T = TypeVar("T")
Conn = StoreConnection

logger = logging.getLogger("awaken_trio.store")

CONNECT_TIMEOUT: Final = 10.0
"""Seconds a call waits for a pooled connection (the server down, or every one busy)."""
WRITERS: Final = 2
"""Connections kept for writes, beyond the ``pool_size`` that reads share."""
RETRIES: Final = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
"""The pauses before a write transaction whose connection broke is tried again (nothing of
it was committed, or it was looked up and found not committed)."""
ROLLED_BACK_RETRIES: Final = 20
"""How many times a write transaction the server rolled back to break a deadlock is run
again (at once: the other transaction has its locks and goes on)."""
GONE_WITHIN: Final = 10.0
"""Seconds a commit whose answer was lost waits for its server process to end."""


_ROLLED_BACK: Final = (
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.TransactionRollback,
    psycopg.errors.UniqueViolation,
)
"""What the server raises when it rolled a transaction back to let others go on (SQLSTATE
class 40), or when another transaction inserted the same key first (a run created by two
runtimes at once: neither could lock a row that did not exist yet). Nothing of it was
written, and run again it reads what the other committed (the rules then refuse it)."""


class _Unknown(Exception):
    """A write's COMMIT was sent and its answer lost: whether it landed is to be read."""


@final
class PostgresStore:
    """A `DurableStore` in a PostgreSQL database, for runtimes in any number of processes
    on any number of machines.

    ``PostgresStore(url)`` does no I/O. The store opens on ``await store.open()``, on
    ``async with store``, or on its first use: it opens a pool of connections and creates
    or migrates its schema (its tables live in the PostgreSQL schema ``schema``, default
    ``awaken``), under an advisory lock, so runtimes opening a fresh database at once
    create it once. A schema written by a newer version raises `StoreError`, and nothing is
    written. ``await store.aclose()`` closes the pool.

    ``url`` is a libpq URL (``postgresql://`` or ``postgres://``, libpq's own options such
    as ``?sslmode=require`` pass through) or keyword string; ``?schema=`` and
    ``?pool_size=`` (or the keywords) are the store's. The password is never shown: not in
    errors, logs or `repr`.

    ``apply`` is one transaction per batch (two round trips: the clock and the rows the
    batch touches, ``... WHERE run_id = ANY(%b) FOR UPDATE``; every write and the commit in
    one pipeline), so the runtime's group commit costs one commit per batch. Transactions
    on different runs and threads run side by side; only their commits are serialised, to
    keep event seqs in order (``_postgres_tx``). Lease times
    are the server's clock, read in each transaction. Other runtimes learn of a commit by
    ``LISTEN``/``NOTIFY`` (`wait_for_change`), and look anyway now and then.

    A connection that breaks is made again; a write whose answer was lost in a broken
    connection is looked up by its token, never applied twice. A caller cancelled while its
    query runs has the query cancelled on the server.

    ``lease_offset`` and ``lease_clock`` are for tests only: seconds added to the server's
    clock on every reading (a test lets leases pass without waiting), or a clock read in
    place of the server's (a test compares stores on one clock).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        lease_offset: Callable[[], float] | None = None,
        lease_clock: Callable[[], float] | None = None,
    ) -> None:
        self._target = target = parse(url, schema=schema, pool_size=pool_size)
        self._statements = Statements.of(target.schema)
        self._thread_locks = thread_locks(target.schema)
        self._reads = reads.Reads.of(target.schema)
        self._channel = f"awaken_trio.{target.schema}"
        self._sender = uuid.uuid4().hex
        self._lease_offset = lease_offset
        self._lease_clock = lease_clock
        # Reads use at most ``pool_size`` connections at once, and writes (the runtime's
        # commits, renewals, recoveries, commands) up to `WRITERS` more of their own, so a
        # commit never queues behind reads; the pool holds both.
        self._readers = trio.CapacityLimiter(target.pool_size)
        self._writers = trio.CapacityLimiter(WRITERS)
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._opening: trio.Event | None = None
        self._closed = False
        self._listener: Listener | None = None
        self._known_writes = -1
        # The writes count the last look at control read (`look_at_control`): a look may
        # skip its reads only if no write at all landed since, this store's own included
        # (an own commit moves `_known_writes` past other stores' writes it never read).
        self._looked_writes = -1
        self._reported = 0
        self._reconnects_seen = 0

    def __repr__(self) -> str:
        t = self._target
        return f"PostgresStore({t.shown!r}, schema={t.schema!r}, pool_size={t.pool_size})"

    @property
    def schema(self) -> str:
        return self._target.schema

    @property
    def pool_size(self) -> int:
        return self._target.pool_size

    @property
    def durable(self) -> bool:
        return True

    @property
    def inline(self) -> bool:
        return False

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> None:
        """Open the pool and bring the schema up to date, if not yet (a checkpoint either
        way).

        Raises:
            StoreError: the server cannot be reached, refuses the login, or holds a schema
                this version may not open (nothing was written); or the store was closed.
        """
        await self._opened()
        await trio.lowlevel.checkpoint()

    async def _opened(self) -> psycopg_pool.ConnectionPool[Conn]:
        while True:
            if self._closed:
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
            raise StoreError(
                f"cannot connect to the PostgreSQL store {where!r}: {self._scrub(exc)}",
                outcome_unknown=False,
            ) from None
        try:
            open_schema(first, t.schema, where)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the PostgreSQL store {where!r}: {self._scrub(exc)}",
                outcome_unknown=False,
            ) from None
        finally:
            first.close()
        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            t.conninfo,
            connection_class=StoreConnection,
            min_size=1,
            max_size=t.pool_size + WRITERS,
            kwargs={
                "autocommit": True,
                "prepare_threshold": 0,
                "client_encoding": CLIENT_ENCODING,
            },
            configure=_configure,
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

    async def aclose(self) -> None:
        """Close the listener and the pool. Closing twice is allowed; using a closed store
        raises `StoreError`."""
        self._closed = True
        while self._opening is not None:
            await self._opening.wait()
        listener, self._listener = self._listener, None
        pool, self._pool = self._pool, None
        with trio.CancelScope(shield=True):
            if listener is not None:
                await trio.to_thread.run_sync(listener.close)
            if pool is not None:
                await trio.to_thread.run_sync(lambda: pool.close(timeout=5.0))
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ calls

    def _scrub(self, exc: BaseException) -> str:
        return scrub(exc, self._target.conninfo)

    async def _call(self, fn: Callable[[Conn], T], *, write: bool = False) -> T:
        """Run ``fn`` on a pooled connection in a worker thread. A caller cancelled
        meanwhile stops waiting, and the query running for it is cancelled on the server
        (the thread then rolls back and gives the connection back)."""
        pool = await self._opened()
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

    async def _read(self, fn: Callable[[Conn, reads.Reads], T], what: str) -> T:
        r = self._reads

        def read(conn: Conn) -> T:
            return fn(conn, r)

        try:
            try:
                return await self._call(read)
            except psycopg.OperationalError as exc:
                # A pooled connection the server dropped (a restart, a terminated
                # backend) fails once; the pool replaces it, and a read is safe to repeat.
                logger.info("store: reading %s failed, reading again: %s", what, self._scrub(exc))
                return await self._call(read)
        except psycopg_pool.PoolTimeout:
            raise StoreError(
                f"the PostgreSQL store {self._target.shown!r} could not be reached to read"
                f" {what} within {CONNECT_TIMEOUT:g}s",
                outcome_unknown=False,
            ) from None
        except psycopg.Error as exc:
            raise StoreError(
                f"the PostgreSQL store failed to read {what}: {self._scrub(exc)}",
                outcome_unknown=False,
            ) from None

    def _offset(self) -> float:
        return 0.0 if self._lease_offset is None else float(self._lease_offset())

    async def _write(
        self,
        fn: Callable[[PgTx, float], T],
        what: str,
        settle: Callable[[T, PgTx | int], T] | None = None,
        batch: Sequence[Commit] = (),
    ) -> T:
        """Run ``fn`` (the rules) in one write transaction; retried on a fresh connection
        when the connection broke before the commit or the commit was looked up and found
        not to have landed, and at once when the server rolled it back to break a
        deadlock. ``settle`` renumbers what ``fn`` answered with the seqs its commit gave
        (from the committed transaction, or the base a lost commit's token kept); the rows
        ``batch`` touches are read with ``BEGIN``, in its round trip."""
        offset = self._offset()
        fixed = self._lease_clock
        statements = self._statements
        locks, channel, sender = self._thread_locks, self._channel, self._sender
        outcome: list[tuple[int, bool]] = []  # (writes before, whether it wrote)

        def attempt(conn: Conn) -> T:
            tx = PgTx(
                conn,
                statements,
                thread_locks=locks,
                channel=channel,
                sender=sender,
                offset=offset,
                clock=fixed,
            )
            committing = False
            try:
                now = tx.begin(batch)
                result = fn(tx, now)
                committing = True
                pid = conn.info.backend_pid
                tx.commit()
            except BaseException as exc:
                if committing and (conn.broken or conn.closed):
                    raise _Unknown(tx.token, pid, result, tx.wrote) from exc
                tx.abort()
                raise
            outcome.append((tx.writes, tx.wrote))
            return result if settle is None else settle(result, tx)

        pauses = iter((*RETRIES, None))
        rolled_back = 0
        while True:
            try:
                result = await self._call(attempt, write=True)
            except _Unknown as unknown:
                token, pid, result, wrote = unknown.args
                try:
                    landed = await self._call(
                        partial(_look_up, statements=statements, token=token, pid=pid)
                    )
                except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                    raise StoreError(
                        f"the PostgreSQL store lost its connection while committing {what},"
                        f" and could not learn whether the commit landed: {self._scrub(exc)}",
                        outcome_unknown=True,
                    ) from None
                if landed is not None:
                    logger.info("store: a commit whose answer was lost had landed (%s)", what)
                    base, before = landed
                    self._saw_own(before, wrote)
                    result = cast("T", result)
                    return result if settle is None else settle(result, base)
                error: BaseException = unknown
            except _ROLLED_BACK as exc:
                # A deadlock, a serialisation failure or a key inserted first by another
                # transaction: the whole transaction was rolled back, so running it again
                # is safe.
                rolled_back += 1
                if rolled_back > ROLLED_BACK_RETRIES:
                    logger.error("store: writing %s failed: %s", what, self._scrub(exc))
                    raise StoreError(
                        f"the PostgreSQL store rolled {what} back {rolled_back} times in a"
                        f" row: {self._scrub(exc)}; nothing was written",
                        outcome_unknown=False,
                    ) from None
                logger.debug("store: %s was rolled back, running it again: %s", what, exc)
                await trio.lowlevel.checkpoint()
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
                logger.error("store: writing %s failed: %s", what, self._scrub(exc))
                raise StoreError(
                    f"the PostgreSQL store refused {what}: {self._scrub(exc)}; nothing was written",
                    outcome_unknown=False,
                ) from None
            else:
                self._saw_own(*outcome[-1])
                return result
            pause = next(pauses)
            if pause is None:
                logger.error("store: writing %s failed: %s", what, self._scrub(error))
                raise StoreError(
                    f"the PostgreSQL store failed to write {what}: {self._scrub(error)};"
                    " nothing was written",
                    outcome_unknown=False,
                ) from None
            logger.info(
                "store: connection lost while writing %s; trying again in %gs: %s",
                what,
                pause,
                self._scrub(error),
            )
            await trio.sleep(pause)
        raise AssertionError("unreachable")

    def _saw_own(self, before: int, wrote: bool) -> None:
        """Our own write moved the writes counter from ``before``: the version moves only
        if someone else wrote since we last looked."""
        if not wrote:
            return
        if self._known_writes != before and self._known_writes >= 0:
            self._reported += 1
        self._known_writes = max(self._known_writes, before + 1)

    # ------------------------------------------------------------------ Store

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if not batch:
            await self._opened()
            await trio.lowlevel.checkpoint()
            return []
        commits = list(batch)

        return await self._write(
            lambda tx, now: rules.apply_batch(tx, commits, now),
            f"a batch of {len(commits)} commits",
            _settle,
            commits,
        )

    async def load(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda c, r: reads.load(c, r, run_id), f"run {run_id!r}")

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        return await self._read(
            lambda c, r: reads.checkpoint_at(c, r, run_id, seq), f"a checkpoint of {run_id!r}"
        )

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self._read(lambda c, r: reads.events_after(c, r, seq, run_id, limit), "events")

    async def step_events(self, run_id: str) -> list[RunEvent]:
        """The run's ``step`` events, oldest first (`StepStore`), through their index."""
        return await self._read(
            lambda c, r: reads.step_events(c, r, run_id), f"the steps of {run_id!r}"
        )

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        wanted = list(names)
        offset = self._offset()

        fixed = self._lease_clock

        def read(c: Conn, r: reads.Reads) -> list[RunRecord]:
            lease_now = (_server_now(c) if fixed is None else fixed()) + offset
            return reads.runnable(c, r, wanted, now, lease_now, limit)

        return await self._read(read, "runnable runs")

    async def list_runs(
        self,
        *,
        state: StateKind | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        return await self._read(
            lambda c, r: reads.list_runs(c, r, state, thread_id, name, limit, before), "runs"
        )

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Delete the ended trees (`PruningStore.prune`) in one transaction."""
        schema = self._reads.schema

        def run(tx: PgTx, now: float) -> int:
            count = _prune(tx.conn, schema, ended_before, dry_run)
            if count and not dry_run:
                tx.wrote = True
            return count

        return await self._write(run, "a prune")

    # ------------------------------------------------------------------ DurableStore

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        claims = dict(held)
        return await self._write(
            lambda tx, now: rules.renew(tx, owner, claims, now, lease), "a renewal"
        )

    async def release(self, owner: str, run_id: str) -> None:
        await self._write(lambda tx, now: rules.release(tx, owner, run_id), "a release")

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        wanted = frozenset(names)
        fixed, offset = self._lease_clock, self._offset()

        def any_expired(c: Conn, r: reads.Reads) -> bool:
            now = (_server_now(c) if fixed is None else fixed()) + offset
            return reads.any_expired(c, r, now)

        # Most passes find nothing to recover: a read says so without a write transaction.
        # (A claim that expires just after is found next pass.)
        if not await self._read(any_expired, "expired claims"):
            return []
        return await self._write(
            lambda tx, now: rules.recover(tx, owner, wanted, now, at, lease, max_recoveries, limit),
            "a recovery",
        )

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        return await self._write(
            lambda tx, now: rules.post_command(tx, run_id, kind, payload, reason, at),
            f"a {kind} command",
        )

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        wanted = list(run_ids)
        return await self._read(lambda c, r: reads.commands(c, r, wanted, after), "commands")

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        wanted = list(run_ids)
        return await self._read(lambda c, r: reads.states(c, r, wanted), "states")

    async def version(self) -> int:
        """Moves whenever another connection (another runtime) has committed a write since
        the last call, and after the listener's connection was made again (what it missed
        is then read again)."""
        return self._versioned(await self._read(reads.writes, "the store's version"))

    def _versioned(self, writes: int) -> int:
        """The version, once the writes count read is ``writes``."""
        if writes > self._known_writes:
            if self._known_writes >= 0:
                self._reported += 1
            self._known_writes = writes
        listener = self._listener
        if listener is not None and listener.reconnects != self._reconnects_seen:
            self._reconnects_seen = listener.reconnects
            self._reported += 1
        return self._reported

    async def look_at_control(
        self,
        run_ids: Collection[str],
        after: int,
        running: Collection[str],
        *,
        anyway: bool,
    ) -> ControlLook:
        """The relay's look (`ControlLook`) in one round trip: the writes count, and the
        commands and ended runs, which the server reads only if a write landed since the
        last look read the count (or ``anyway``, or the listener connected again, when
        what was sent meanwhile was not heard)."""
        listener = self._listener
        if listener is not None and listener.reconnects != self._reconnects_seen:
            anyway = True
        known, ids, live = self._looked_writes, list(run_ids), list(running)

        def read(c: Conn, r: reads.Reads) -> reads.Look:
            return reads.look(
                c, r, known=known, anyway=anyway, run_ids=ids, after=after, running=live
            )

        found = await self._read(read, "the runs' control")
        # The count read first, before the reads it guards: a write landing between them
        # is read now or, at the latest, by the next look (the count it reads differs).
        # Runs not asked about this time are asked about ``anyway`` (a fresh attempt).
        self._looked_writes = found.writes
        return ControlLook(
            version=self._versioned(found.writes), commands=found.commands, ended=found.ended
        )

    # ------------------------------------------------------------------ notices

    def notices_changes(self) -> bool:
        """True: `wait_for_change` returns as soon as another runtime commits (a NOTIFY on
        the store's channel), so the runtime need not poll on a timer."""
        if self._closed:
            return False
        if self._listener is None:
            t = self._target
            self._listener = Listener(t.conninfo, self._channel, self._sender, t.shown)
        return True

    def heard_ends(self) -> list[HeardEnd]:
        """The ends other runtimes committed against attempts still marked live, as their
        transactions' NOTIFY announced them, since the last call (non-blocking). A notice
        is delivered only once its transaction has committed, so these are as true as a
        read of the store: the relay stops their attempts before it reads."""
        listener = self._listener
        return [] if listener is None else listener.take_heard()

    async def wait_for_change(self, at_most: float) -> bool:
        """Return when another runtime may have committed (True), or after ``at_most``
        seconds (False); True too after the listener's connection was made again. A hint
        to look at `version`, never the truth."""
        return await self._wait(at_most, control=False)

    async def wait_for_control(self, at_most: float) -> bool:
        """As `wait_for_change`, for a commit that controls a run only (it stored a
        cancel, pause, message or wake, or ended a run whose attempt is live): other
        commits are kept for the next `wait_for_change`, which returns at once."""
        return await self._wait(at_most, control=True)

    async def _wait(self, at_most: float, *, control: bool) -> bool:
        listener = self._listener
        if listener is None or self._closed:
            await trio.sleep(at_most)
            return False
        abandoned = threading.Event()
        try:
            return await trio.to_thread.run_sync(
                lambda: listener.wait(at_most, abandoned, control=control),
                abandon_on_cancel=True,
            )
        except trio.Cancelled:
            abandoned.set()
            raise


def _configure(conn: Conn) -> None:
    """Every pooled connection, once: no JIT compilation. The store's statements are short
    (by key, or a batch's rows), but the planner's cost of one can pass the JIT thresholds
    when it misjudges a table's size, and compiling then took a second (measured: 1.1 s of
    JIT for a 40 ms look for work, with PostgreSQL's default ``jit = on``)."""
    conn.execute(b"SET jit = off")


def _server_now(conn: Conn) -> float:
    found = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
    assert found is not None
    return float(found[0])


def _settle(results: list[CommitResult], tx: PgTx | int) -> list[CommitResult]:
    """``results`` with the seqs their transaction's commit gave (``tx``'s base, or the
    base a lost commit's token kept): the rules number a transaction's events from 1."""
    base = tx if isinstance(tx, int) else tx.base
    return [
        attrs.evolve(r, last_seq=base + r.last_seq) if isinstance(r, Accepted) and r.last_seq else r
        for r in results
    ]


def _look_up(
    conn: Conn, statements: Statements, token: uuid.UUID, pid: int
) -> tuple[int, int] | None:
    """After a commit whose answer was lost: end the server process that ran it, if it is
    still there (it may still be committing, or about to), and wait until it has gone, so
    its outcome is final; then whether ``token`` landed (its base and writes count)."""
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + GONE_WITHIN
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
        if time.monotonic() > deadline:
            raise psycopg.OperationalError(
                f"the server process of the lost commit was still running after {GONE_WITHIN:g}s"
            )
        time.sleep(0.01)
    return was_written(conn, statements, token)


def _prune(conn: Conn, schema: Any, ended_before: float, dry_run: bool) -> int:
    from psycopg import sql

    doomed = sql.SQL(
        "SELECT m.run_id FROM {s}.runs m WHERE m.root_run_id IN ("
        " SELECT r.run_id FROM {s}.runs r"
        " WHERE r.parent_run_id IS NULL AND r.kind = 'ended'"
        " AND (SELECT e.at FROM {s}.events e WHERE e.run_id = r.run_id"
        "      ORDER BY e.seq DESC LIMIT 1) <= %s"
        " AND NOT EXISTS (SELECT 1 FROM {s}.runs o WHERE o.root_run_id = r.run_id"
        "      AND o.kind <> 'ended'))"
    ).format(s=schema)
    ids = [r for (r,) in conn.execute(doomed, (ended_before,)).fetchall()]
    if ids and not dry_run:
        for table in ("events", "tickets", "inbox", "claims", "checkpoints", "runs"):
            conn.execute(
                sql.SQL("DELETE FROM {s}.{t} WHERE run_id = ANY(%b)").format(
                    s=schema, t=sql.Identifier(table)
                ),
                (ids,),
            )
    return len(ids)
