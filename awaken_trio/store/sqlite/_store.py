"""The SQLite store: committed truth in one file that every process on the machine shares.

Imported only when a ``sqlite://`` URL is first used (`awaken_trio.store.open_store`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TypeVar, final

import trio

from ..._core import (
    CheckpointAt,
    CommandKind,
    Commit,
    CommitResult,
    InvalidArgument,
    JsonValue,
    OverdueLook,
    Recovered,
    Rejected,
    RunEvent,
    RunFilter,
    RunRecord,
    RunState,
    StoredCommand,
    StoreError,
    StreamPage,
    WorkerInfo,
    WorkerRecord,
    WorkerState,
    safe_repr,
)
from .. import _rules as rules
from . import _reads as reads
from . import _schema as schema
from . import _streams as streams
from . import _workers as workers
from ._prune import prune
from ._session import Session, Synchronous
from ._thread import ResourceThread
from ._tx import Transaction
from ._watch import ChangeWatch, FileNotices, look_at

T = TypeVar("T")

THREAD_NAME_PREFIX = "awaken_trio sqlite"
"""Every store thread's name starts with this (so a test can see none is left)."""

_SYNCHRONOUS: tuple[Synchronous, ...] = ("full", "normal")


@final
class SQLiteStore:
    """A `DurableStore` in an SQLite file: claims with leases and epochs, stored commands,
    and a version another process's commit moves, for runtimes in any process sharing the
    file.

    ``SQLiteStore(path)`` does no I/O. The store opens on ``await store.open()``, on
    ``async with store``, or on its first use: one thread of its own opens the one
    connection (creating the file, its parent directory and the schema, or migrating an
    older schema forward) and runs every call in order. ``await store.aclose()`` closes the
    connection and ends the thread.

    The file is in WAL mode with ``synchronous`` ``"full"`` (every commit is on disk when
    it returns) or ``"normal"`` (faster; a power loss may lose the last commits, never
    corrupt the file). ``apply`` writes a whole batch in one transaction, so the runtime's
    group commit costs one disk sync per batch, not per run.

    A file that is not a store this version may open (not SQLite, another application's
    database, a schema newer than this version knows) or a path that cannot be used raises
    `StoreError` when the store opens, and the file is left exactly as it was.

    A caller that is cancelled while it waits abandons only its wait: a call already handed
    to the store's thread is carried out (a write is committed or rolled back whole).

    Leases are measured by ``lease_clock``, read inside each transaction: the machine's
    wall clock (`time.time`) by default, which every process on the machine shares. The
    runtimes' own clocks never decide a lease, so one whose clock is off can neither take
    a live claim nor miss a dead one. (Every store on the file must read the same clock;
    tests replace it to let a lease pass at once.)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        lease_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgument(f"an SQLite store's path must be a str or a path, not {path!r}")
        text = os.fspath(path)
        if not isinstance(text, str) or not text or "\x00" in text or text == ":memory:":
            raise InvalidArgument(
                f"an SQLite store needs the path of a file, not {safe_repr(text)}"
                " (for a store in memory, use 'memory://')"
            )
        if synchronous not in _SYNCHRONOUS:
            raise InvalidArgument(
                f"synchronous must be 'full' or 'normal', not {safe_repr(synchronous)}"
            )
        # Resolved now: a relative path means the working directory of the code that named
        # it, even if the working directory changes before the store opens.
        self._path = Path(os.path.abspath(text))
        self._synchronous: Synchronous = synchronous
        self._lease_clock = lease_clock
        self._thread: ResourceThread[Session] | None = None
        self._opening: trio.Event | None = None
        self._closed = False
        self._watch: ChangeWatch | None = None
        self._version = 0
        self._notices: FileNotices | None = None
        self._noticing = False

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r}, synchronous={self._synchronous!r})"

    @property
    def path(self) -> Path:
        """The store's file (absolute)."""
        return self._path

    @property
    def synchronous(self) -> Synchronous:
        return self._synchronous

    @property
    def durable(self) -> bool:
        return True

    @property
    def inline(self) -> bool:
        """Never: every call is I/O on the store's thread, so the runtime sends commits
        through its mailbox, which hands over every waiting commit as one batch."""
        return False

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> None:
        """Open the store if it is not open yet (a checkpoint either way).

        Opening runs to its end even if the caller is cancelled meanwhile (it takes at most
        the busy timeout, while another process holds the file's lock), so the store is
        never left half open.

        Raises:
            StoreError: the file or its path cannot be used, or is not a store this version
                may open (nothing was written to it); or the store was closed.
        """
        await self._opened()
        await trio.lowlevel.checkpoint()

    async def _opened(self) -> ResourceThread[Session]:
        while True:
            if self._closed:
                raise StoreError(f"the store {str(self._path)!r} is closed", outcome_unknown=False)
            thread = self._thread
            if thread is not None:
                return thread
            if self._opening is not None:
                await self._opening.wait()  # another task is opening it: see how that went
                continue
            self._opening = opening = trio.Event()
            thread = ResourceThread(
                f"{THREAD_NAME_PREFIX} {self._path}",
                partial(Session.open, self._path, self._synchronous, schema.MIGRATIONS),
            )
            try:
                with trio.CancelScope(shield=True):
                    await thread.start()
                # (If aclose() was called meanwhile, it is waiting for this to close it.)
                self._thread = thread
            finally:
                self._opening = None
                opening.set()

    async def aclose(self) -> None:
        """Close the connection after the calls already handed over, and end the thread.
        Closing twice is allowed; using a closed store raises `StoreError`."""
        self._closed = True
        while self._opening is not None:
            await self._opening.wait()
        notices, self._notices = self._notices, None
        if notices is not None:
            notices.close()
        thread, self._thread = self._thread, None
        if thread is None:
            await trio.lowlevel.checkpoint()
            return
        await thread.aclose()

    async def __aenter__(self) -> SQLiteStore:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        thread = await self._opened()
        return await thread.run(lambda session: session.read(fn))

    async def _write(self, fn: Callable[[Transaction], T]) -> T:
        thread = await self._opened()
        return await thread.run(lambda session: session.write(fn))

    # ------------------------------------------------------------------ Store

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` in one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``)."""
        if not batch:
            await self._opened()
            await trio.lowlevel.checkpoint()
            return []
        commits = list(batch)
        clock = self._lease_clock
        return await self._write(lambda tx: rules.apply_batch(tx, commits, clock()))

    async def load(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda conn: reads.load(conn, run_id))

    async def read_chunks(
        self, run_id: str, channel: str, after: int, limit: int
    ) -> StreamPage | None:
        """A page of ``run_id``'s ``channel`` after offset ``after`` (`StreamingStore`), read
        in one snapshot."""
        return await self._read(
            lambda conn: streams.read_chunks(conn, run_id, channel, after, limit)
        )

    async def stream_channels(self, run_id: str) -> list[str] | None:
        """The channels ``run_id`` has written (`StreamingStore`)."""
        return await self._read(lambda conn: streams.stream_channels(conn, run_id))

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        """The checkpoint as of the run's event ``seq`` (`ForkingStore.checkpoint_at`)."""
        return await self._read(lambda conn: reads.checkpoint_at(conn, run_id, seq))

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Delete the ended trees (`PruningStore.prune`) in one transaction."""
        return await self._write(lambda tx: prune(tx, ended_before, dry_run))

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        return await self._read(lambda conn: reads.events_after(conn, seq, run_id, limit))

    async def step_events(self, run_id: str) -> list[RunEvent]:
        """The run's ``step`` events, oldest first (`StepStore`), through their index."""
        return await self._read(lambda conn: reads.step_events(conn, run_id))

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        wanted = list(names)
        clock = self._lease_clock
        return await self._read(lambda conn: reads.runnable(conn, wanted, now, clock(), limit))

    async def overdue(self, now: float, limit: int) -> OverdueLook:
        """The root runs past a time limit (`DeadlineStore.overdue`), read from the partial
        indexes of the runs that have one, in one read transaction."""
        return await self._read(lambda conn: reads.overdue(conn, now, limit))

    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (`ListingStore.list_runs`), in one query."""
        return await self._read(
            lambda conn: reads.list_runs(conn, state, thread_id, name, limit, before)
        )

    async def count_runs(self) -> dict[str, int]:
        """Runs by state kind and end cause kind (`CountingStore.count_runs`), read from
        two partial indexes."""
        return await self._read(reads.count_runs)

    # ------------------------------------------------------------------ DurableStore

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        """`DurableStore.renew`; the owner's worker row, if it has one, is seen in the same
        transaction."""
        held = dict(held)
        clock = self._lease_clock

        def renew(tx: Transaction) -> list[str]:
            now = clock()
            lost = rules.renew(tx, owner, held, now, lease)
            tx.flush()
            workers.seen(tx.conn, owner, len(held) - len(lost), now)
            return lost

        return await self._write(renew)

    # ------------------------------------------------------------------ WorkerStore

    async def register_worker(self, worker: WorkerInfo) -> None:
        clock = self._lease_clock
        await self._write(lambda tx: workers.register(tx.conn, worker, clock()))

    async def worker_seen(self, worker_id: str, active: int) -> WorkerState | None:
        clock = self._lease_clock
        return await self._write(lambda tx: workers.seen(tx.conn, worker_id, active, clock()))

    async def worker_state(self, worker_id: str) -> WorkerState | None:
        return await self._read(lambda conn: workers.state(conn, worker_id))

    async def list_workers(self, *, ended: bool = False) -> list[WorkerRecord]:
        clock = self._lease_clock
        return await self._read(lambda conn: workers.listed(conn, ended, clock()))

    async def drain_worker(self, worker_id: str) -> WorkerRecord | None:
        clock = self._lease_clock
        return await self._write(lambda tx: workers.drain(tx.conn, worker_id, clock()))

    async def end_worker(self, worker_id: str) -> None:
        clock = self._lease_clock
        await self._write(lambda tx: workers.end(tx.conn, worker_id, clock()))

    async def forget_workers(self, age: float) -> int:
        clock = self._lease_clock
        return await self._write(lambda tx: workers.forget(tx.conn, clock() - age))

    async def release(self, owner: str, run_id: str) -> None:
        await self._write(lambda tx: rules.release(tx, owner, run_id))

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
        clock = self._lease_clock
        return await self._write(
            lambda tx: rules.recover(tx, owner, wanted, clock(), at, lease, max_recoveries, limit)
        )

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        return await self._write(
            lambda tx: rules.post_command(tx, run_id, kind, payload, reason, at)
        )

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        wanted = list(run_ids)
        return await self._read(lambda conn: reads.commands(conn, wanted, after))

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        wanted = list(run_ids)
        return await self._read(lambda conn: reads.states(conn, wanted))

    async def version(self) -> int:
        """Moves whenever another connection (another store on the file, in this process
        or another) has committed since the last call: SQLite's ``data_version``.

        Asked of SQLite only when a look at the file and its log from outside says
        something may have been written since it was last asked (`ChangeWatch`), and at
        least every `FULL_POLL_EVERY` seconds: an idle poll costs a ``stat``, not a trip
        to the store's thread.
        """
        thread = await self._opened()
        watch = self._watch
        if watch is None:
            watch = self._watch = ChangeWatch(look_at(str(self._path)))
        if not watch.due():
            await trio.lowlevel.checkpoint()
            return self._version
        try:
            self._version = await thread.run(Session.poll_version)
        except BaseException:
            watch.forget()  # (a failure is answered again, not hidden by a still file)
            raise
        return self._version

    def notices_changes(self) -> bool:
        """Whether `wait_for_change` returns as soon as another process may have
        committed (the kernel tells of writes to the file's directory), so a caller need
        not poll `version` on a timer. False where it cannot (then it only sleeps)."""
        if not self._noticing and not self._closed:
            self._noticing = True
            self._notices = FileNotices.open(str(self._path.parent))
        return self._notices is not None

    async def wait_for_change(self, at_most: float) -> bool:
        """Return when the file or its log may have been written since the last call (by
        any connection, this store's too): True; or after ``at_most`` seconds: False. A
        hint to look at `version`, never the truth."""
        notices = self._notices
        if notices is None:
            await trio.sleep(at_most)
            return False
        return await notices.wait(at_most)
