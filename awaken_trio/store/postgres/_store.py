"""The PostgreSQL store: committed truth in one database that runtimes on many machines
share.

Imported only when a ``postgresql://`` or ``postgres://`` URL is first used
(`awaken_trio.store.open_store`); it needs the ``postgres`` extra (psycopg 3 and
psycopg_pool). This module is the store's verbs: each is one read or one write
transaction (the rules, ``store/_rules.py``, over `PgTx`), run by the store's
`Connections` (``_conn``: the pool, worker threads, and the retries of a failed call), in
statements named in ``queries.sql``; ``_listen`` hears other runtimes' commits.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import TypeVar, final

import psycopg
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
    OverdueLook,
    Recovered,
    Rejected,
    RunEvent,
    RunFilter,
    RunRecord,
    RunState,
    StoredCommand,
    StreamPage,
    WorkerInfo,
    WorkerRecord,
    WorkerState,
)
from .. import _rules as rules
from .._workers import bodies_text, worker_of
from . import _held
from . import _reads as reads
from . import _streams as streams
from ._conn import Conn, Connections, LostCommit
from ._guess import Guess, GuessMissed, guess_of, missed
from ._held import HeldLook
from ._known import KnownRows
from ._listen import Listener
from ._order import Numbered
from ._queries import Queries
from ._tx import PgTx, thread_key, thread_locks, written
from ._url import parse

T = TypeVar("T")

logger = logging.getLogger("awaken_trio.store")


@final
class PostgresStore:
    """A `DurableStore` in a PostgreSQL database, for runtimes in any number of processes
    on any number of machines. Its writers do not wait for each other (`SettlingStore`).

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
    one pipeline), so the runtime's group commit costs one commit per batch. A batch that
    only creates runs (starts, submits) is one round trip: written on a guess of its reads
    that the server checks in the same transaction (``_guess``); a batch applied while a
    serving runtime's look is held (`looking`) is written in the look's transaction,
    which read what its starts need (``_held``). Transactions
    on different runs and threads run side by side, their commits too: event seqs come
    from a sequence, and readers read them only up to a watermark below which every seq is
    final (``_order``). Lease times are the server's clock, read in each
    transaction. Other runtimes learn of a commit by
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
        self._queries = queries = Queries.of(target.schema)
        self._conns = Connections(target, queries)
        self._thread_locks = thread_locks(target.schema)
        self._sender = uuid.uuid4().hex
        self._lease_offset = lease_offset
        self._lease_clock = lease_clock
        self._listener: Listener | None = None
        self._known_writes = -1
        # The writes count the last look at control read (`look_at_control`): a look may
        # skip its reads only if no write at all landed since, this store's own included
        # (an own commit moves `_known_writes` past other stores' writes it never read).
        self._looked_writes = -1
        self._reported = 0
        self._reconnects_seen = 0
        self._on_stream: Callable[[], None] | None = None
        self._looks = 0
        self._held_looks = _held.HeldLooks()
        self._known = KnownRows()  # (the rows it last wrote: ``_known``)

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
        await self._conns.opened()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Close the listener and the pool. Closing twice is allowed; using a closed store
        raises `StoreError`."""
        self._conns.closed = True  # (no listener is made from here on)
        listener, self._listener = self._listener, None
        if listener is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(listener.close)
        await self._conns.aclose()
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

    async def _read(self, fn: Callable[[Conn, Queries], T], what: str) -> T:
        return await self._conns.read(fn, what)

    def _offset(self) -> float:
        return 0.0 if self._lease_offset is None else float(self._lease_offset())

    async def _write(
        self,
        fn: Callable[[PgTx, float], T],
        what: str,
        renumber: Callable[[T, Numbered], T] | None = None,
        batch: Sequence[Commit] = (),
        guess: Guess | None = None,
        held: HeldLook | None = None,
    ) -> T:
        """Run ``fn`` (the rules) in one write transaction (retried as `Connections.write`
        says). ``renumber`` renumbers what ``fn`` answered with the seqs its commit gave
        (from the committed transaction, or the base a lost commit's token kept); the rows
        ``batch`` touches are read with ``BEGIN``, in its round trip. Given a ``guess`` of
        those reads, the transaction is first written on it, in one round trip, and run
        again with its reads if the guess was wrong (``_guess``). Given a ``held`` look, it
        is first written in the look's transaction (``_held``), and run again, if it must
        be, in one of its own."""
        offset = self._offset()
        fixed = self._lease_clock
        queries = self._queries
        locks, sender = self._thread_locks, self._sender
        outcome: list[PgTx] = []  # (the transaction that committed)
        # The look's rows hold under its locks, in its transaction: its first try alone.
        look_open = [held]  # (a later try reads, even on the look's connection, handed back)

        def attempt(conn: Conn) -> T:
            look = look_open.pop() if look_open else None
            if look is not None and conn is look.conn:
                return transaction(conn, None, look)
            if guess is not None:
                try:
                    return transaction(conn, guess)
                except GuessMissed as missed:
                    # Rolled back: nothing was written. Read, then write.
                    logger.debug("store: %s was not as guessed: %s", what, missed)
            return transaction(conn, None)

        def transaction(conn: Conn, guess: Guess | None, look: HeldLook | None = None) -> T:
            tx = PgTx(conn, queries, thread_locks=locks, sender=sender, offset=offset, clock=fixed)
            committing = False
            try:
                if look is not None:
                    now = tx.begin_held(look, batch)
                elif guess is None:
                    now = tx.begin(batch)
                else:
                    now = tx.begin_guessed(guess)
                result = fn(tx, now)
                committing = True
                pid = conn.info.backend_pid
                tx.commit()
            except BaseException as exc:
                if committing and (conn.broken or conn.closed):
                    wrote = tx.wrote
                    raise LostCommit(
                        tx.token, pid, lambda seqs, before: landed(result, wrote, seqs, before)
                    ) from exc
                if guess is not None and isinstance(exc, psycopg.Error) and missed(exc):
                    # (Raised by whichever statement's result came back with the error.)
                    tx.give_up()
                    raise GuessMissed(str(exc)) from exc
                if isinstance(exc, GuessMissed):
                    tx.give_up()
                    raise
                tx.abort()
                raise
            outcome.append(tx)
            return result if renumber is None else renumber(result, tx.numbered)

        def landed(result: T, wrote: bool, seqs: Numbered, before: int) -> T:
            self._saw_own(before, wrote)
            return result if renumber is None else renumber(result, seqs)

        result = await self._conns.write(attempt, what, held=None if held is None else held.conn)
        if outcome:  # (else a lost commit that landed: `landed` saw it)
            committed = outcome[-1]
            self._saw_own(committed.writes, committed.wrote)
            self._known.wrote(written(committed), committed.xid)
        return result

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
            await self._conns.opened()
            await trio.lowlevel.checkpoint()
            return []
        commits = list(batch)
        # Whatever it holds, a batch applied while a look is held is written in the look's
        # transaction (``_held``'s docstring says why any batch).
        async with self._held_looks.applying() as held:
            return await self._write(
                lambda tx, now: rules.apply_batch(tx, commits, now),
                f"a batch of {len(commits)} commits",
                _renumbered,
                commits,
                guess_of(commits, self._known) if held is None else None,
                held,
            )

    @contextlib.asynccontextmanager
    async def looking(
        self, names: Collection[str], now: float, limit: int
    ) -> AsyncIterator[list[RunRecord]]:
        """`runnable`, held for this runtime until the block exits, and written with the
        next batch this store applies (`LookingStore`; ``_held``'s docstring): the look's
        runs are not reserved, their rows are locked. One look is held at a time: another
        block meanwhile looks as `runnable` does."""
        looks = self._held_looks
        if looks.busy or limit <= 0 or not names:
            yield await self.runnable(names, now, limit)
            return
        served = names if isinstance(names, Mapping) else None
        look = functools.partial(
            _held.hold,
            names=list(names),
            now=now,
            limit=limit,
            by=self._sender,
            served=served,
            thread_space=self._thread_locks,
            thread_key=thread_key,
            clock=self._lease_clock,
            offset=self._offset(),
            sweep=self._looks % 64 == 0,
        )
        self._looks += 1
        held = await looks.take(functools.partial(self._conns.hold, look, "runnable runs"))
        try:
            yield [] if held is None else held.records
        finally:
            if held is not None and looks.give_up(held):
                # No batch took it: its runs are free again (shielded).
                await self._conns.let_go(held.conn)

    async def load(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda c, r: reads.load(c, r, run_id), f"run {run_id!r}")

    async def read_chunks(
        self, run_id: str, channel: str, after: int, limit: int
    ) -> StreamPage | None:
        """A page of ``run_id``'s ``channel`` after offset ``after`` (`StreamingStore`)."""
        return await self._read(
            lambda c, q: streams.read_chunks(c, q, run_id, channel, after, limit),
            f"stream {channel!r} of run {run_id!r}",
        )

    async def stream_channels(self, run_id: str) -> list[str] | None:
        """The channels ``run_id`` has written (`StreamingStore`)."""
        return await self._read(
            lambda c, q: streams.stream_channels(c, q, run_id), f"the streams of run {run_id!r}"
        )

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        return await self._read(
            lambda c, r: reads.checkpoint_at(c, r, run_id, seq), f"a checkpoint of {run_id!r}"
        )

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self._read(lambda c, r: reads.events_after(c, r, seq, run_id, limit), "events")

    async def settle(self, seq: int) -> None:
        """Return once every seq up to ``seq`` is final (`SettlingStore`): at or below the
        readers' watermark, waiting on the writers that took a smaller one (``_order``)."""
        await self._read(lambda c, q: reads.settle(c, q, seq), "the order of events")

    async def step_events(self, run_id: str) -> list[RunEvent]:
        """The run's ``step`` events, oldest first (`StepStore`), through their index."""
        return await self._read(
            lambda c, r: reads.step_events(c, r, run_id), f"the steps of {run_id!r}"
        )

    async def overdue(self, now: float, limit: int) -> OverdueLook:
        """The root runs past a time limit (`DeadlineStore.overdue`), read from the partial
        indexes of the runs that have one."""
        return await self._read(
            lambda c, r: reads.overdue(c, r, now, limit), "the runs past their time limits"
        )

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        wanted = list(names)
        # Given with their versions (`ServingHost.served`), a look reserves only the runs
        # those bodies may run: a run pinned to another version stays free for others.
        served = names if isinstance(names, Mapping) else None
        offset = self._offset()

        fixed = self._lease_clock

        def read(c: Conn, r: Queries) -> list[RunRecord]:
            lease_now = (reads.server_now(c, r) if fixed is None else fixed()) + offset
            return reads.runnable(
                c, r, wanted, now, lease_now, limit, by=by, sweep=sweep, served=served
            )

        self._looks += 1
        by, sweep = self._sender, self._looks % 64 == 0
        return await self._read(read, "runnable runs")

    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        return await self._read(
            lambda c, r: reads.list_runs(c, r, state, thread_id, name, limit, before), "runs"
        )

    async def count_runs(self) -> dict[str, int]:
        """Runs by state kind and end cause kind (`CountingStore.count_runs`)."""
        return await self._read(reads.count_runs, "the counts of runs")

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Delete the ended trees (`PruningStore.prune`) in one transaction."""

        def run(tx: PgTx, now: float) -> int:
            count = tx.prune(ended_before, dry_run=dry_run)
            if count and not dry_run:
                tx.wrote = True
            return count

        return await self._write(run, "a prune")

    # ------------------------------------------------------------------ DurableStore

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        """`DurableStore.renew`; the owner's worker row, if it has one, is seen in the same
        transaction (one more statement in its pipeline, on that row alone)."""
        claims = dict(held)

        def renew(tx: PgTx, now: float) -> list[str]:
            lost = rules.renew(tx, owner, claims, now, lease)
            active = len(claims) - len(lost)
            tx.conn.execute(tx.q.worker_seen, {"now": now, "active": active, "worker_id": owner})
            return lost

        return await self._write(renew, "a renewal")

    # ------------------------------------------------------------------ WorkerStore
    # Each is one statement by key on the worker's row (or the workers' indexes), safe to
    # repeat: run as the reads are, on a connection in autocommit.

    def _now(self, c: Conn, r: Queries) -> float:
        fixed = self._lease_clock
        return (reads.server_now(c, r) if fixed is None else fixed()) + self._offset()

    async def register_worker(self, worker: WorkerInfo) -> None:
        def run(c: Conn, r: Queries) -> None:
            c.execute(
                r.register_worker,
                {
                    "worker_id": worker.worker_id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "now": self._now(c, r),
                    "bodies": bodies_text(worker.bodies),
                    "concurrency": worker.concurrency,
                    "lease": worker.lease,
                },
            )

        await self._read(run, f"the registration of worker {worker.worker_id!r}")

    async def worker_seen(self, worker_id: str, active: int) -> WorkerState | None:
        def run(c: Conn, r: Queries) -> WorkerState | None:
            params = {"now": self._now(c, r), "active": active, "worker_id": worker_id}
            found = c.execute(r.worker_seen, params).fetchone()
            return None if found is None else found[0]

        return await self._read(run, f"worker {worker_id!r}")

    async def worker_state(self, worker_id: str) -> WorkerState | None:
        def run(c: Conn, r: Queries) -> WorkerState | None:
            found = c.execute(r.worker_state, (worker_id,)).fetchone()
            return None if found is None else found[0]

        return await self._read(run, f"worker {worker_id!r}")

    async def list_workers(self, *, ended: bool = False) -> list[WorkerRecord]:
        def run(c: Conn, r: Queries) -> list[WorkerRecord]:
            now = self._now(c, r)
            found = c.execute(r.list_workers if ended else r.list_live_workers).fetchall()
            return [worker_of(row, now) for row in found]

        return await self._read(run, "the workers")

    async def drain_worker(self, worker_id: str) -> WorkerRecord | None:
        def run(c: Conn, r: Queries) -> WorkerRecord | None:
            now = self._now(c, r)
            found = c.execute(r.drain_worker, (worker_id,)).fetchone()
            return None if found is None else worker_of(found, now)

        return await self._read(run, f"worker {worker_id!r}")

    async def end_worker(self, worker_id: str) -> None:
        def run(c: Conn, r: Queries) -> None:
            c.execute(r.end_worker, {"now": self._now(c, r), "worker_id": worker_id})

        await self._read(run, f"worker {worker_id!r}")

    async def forget_workers(self, age: float) -> int:
        def run(c: Conn, r: Queries) -> int:
            return c.execute(r.forget_workers, (self._now(c, r) - age,)).rowcount

        return await self._read(run, "the ended workers")

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
        wanted = rules.names_held(names)
        fixed, offset = self._lease_clock, self._offset()

        def any_expired(c: Conn, r: Queries) -> bool:
            now = (reads.server_now(c, r) if fixed is None else fixed()) + offset
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

        def read(c: Conn, r: Queries) -> reads.Look:
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
        if self._conns.closed:
            return False
        if self._listener is None:
            t = self._target
            self._listener = Listener(t.conninfo, self._queries, self._sender, t.shown)
            self._listener.on_stream = self._on_stream
        return True

    def notice_streams(self, wake: Callable[[], None] | None) -> None:
        """Have ``wake`` called (from the listener's thread, so it must be thread-safe)
        whenever the listener hears that another runtime's commit wrote stream chunks,
        whatever the relay is waiting for; None stops it. Heard only while a wait
        (`wait_for_change`, `wait_for_control`) reads the notices."""
        self._on_stream = wake
        if self._listener is not None:
            self._listener.on_stream = wake

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
        if listener is None or self._conns.closed:
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


def _renumbered(results: list[CommitResult], numbered: Numbered) -> list[CommitResult]:
    """``results`` with the seqs their transaction's commit gave (its own, or those a lost
    commit's token kept): the rules number a transaction's events from 1.

    Numbered in place: the rules made these answers for this transaction alone, and
    nobody holds them before they are returned (a transaction run again makes its own).
    A copy of each cost 1.2 µs a commit, in place 0.07."""
    for result in results:
        if type(result) is Accepted and result.last_seq:
            result.last_seq = numbered.seq(result.last_seq)
    return results
