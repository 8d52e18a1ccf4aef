"""A look for work that holds its runs for their starts (`PostgresStore.looking`).

A look of its own (`PostgresStore.runnable`) is a transaction: it locks the runs it finds,
reserves them for a few seconds (a row each in ``reserved``) so that other runtimes' looks
pass them over, and commits. Each run's start is then another transaction, of three round
trips: the run's row, its claim and its stored commands; its thread's lock and live
attempts; then the writes and ``COMMIT``.

A held look is one transaction for both. It locks the runs it finds, their claims and
their threads, reads what a start's transaction would read of them (`HeldLook`), and stays
open on its connection. The next batch of commits the store applies, the runtime's starts
of those runs most often, is written in that transaction (`PgTx.begin_held`: the rules run
on what the look read, as they run on what a transaction reads), whose ``COMMIT`` is the
batch's. The reservation, the look's commit and two round trips of each start are gone;
other looks pass the runs over because their rows are locked, until the starts commit.

Locks. The look takes what it holds without waiting for anyone: the rows ``FOR UPDATE SKIP
LOCKED``, the claims the same way (a run whose claim another transaction holds is left
out), the threads with ``pg_try_advisory_xact_lock`` (a run whose thread another holds is
left out). So the look waits for no transaction, and none of its locks is taken out of the
order the other transactions take theirs in while it waits for one. The batch then takes
its own locks in the usual order; a circle that closes through the look's locks runs
through the server, which detects it, and the loser runs again (the batch, without the
look, on reads of its own: `Connections.write`). Without the look whatever the connection,
the look's own included, which the pool may hand back: its rows held only under its locks,
which ended with its transaction (`PostgresStore._write` tries it once, first).

Why any batch, and why none meanwhile. The store's invariant (`PostgresStore.looking`):
while a look is held, every batch the store applies is written in the look's transaction,
and a look is taken only once no batch is being applied. A batch that ran beside a held
look on a connection of its own could wait for a lock the look holds (a start on one of its
runs' threads), while the look waits for the runtime's next batch, which waits for that
one: a circle no server sees. Under the invariant every lock the look holds is the batch's
own, and a transaction of this process that waits for one waits for a batch that runs.

The clock. The batch's lease time is the server's clock as the look read it, plus the
time since on this process's monotonic clock (`HeldLook.server_clock`): what the server's
clock reads then, but for drift over milliseconds.

Letting go. A look that no batch took by the end of the runtime's block (no run of it was
admitted) is rolled back, shielded, and its runs are free again for any look at once. A
look whose process stops or sticks before either happens is ended by the server once its
transaction has been idle for `IDLE_AT_MOST` seconds; its batch, should it come after,
runs again on a connection of its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from ..._core import RunRecord
from .._rules import ClaimRow
from .._textrows import CommandRow
from . import _reads as reads
from ._conn import Conn
from ._queries import Queries

IDLE_AT_MOST: Final = 5.0
"""Seconds a held look's transaction may wait for its batch before the server ends its
session (``idle_in_transaction_session_timeout``): a worker stopped or stuck with a look
held keeps its runs from other workers no longer than a look's reservation would."""


@final
@attrs.define(eq=False)
class HeldLook:
    """A held look's open transaction: its connection, the runs it hands out (rows and
    records, oldest first), and what it read of them under its locks: their claims (None:
    none), the live attempts on their threads (run -> root, epoch), their stored
    commands. And the server's clock (or the store's fixed clock) when it read it, with
    this process's monotonic clock then."""

    conn: Conn
    records: list[RunRecord]
    rows: list[Sequence[Any]]
    claims: dict[str, ClaimRow | None]
    threads: dict[str, dict[str, tuple[str, int]]]
    commands: dict[str, list[CommandRow]]
    server_now: float
    at: float

    def server_clock(self) -> float:
        """The server's clock now: as the look read it, plus the time since (seconds)."""
        return self.server_now + (time.monotonic() - self.at)


@final
class HeldLooks:
    """A store's held look, and the batches it applies: while a look is held, every batch
    is written in it, and a look is taken only once no batch is being applied (the
    module's docstring)."""

    def __init__(self) -> None:
        self._held: HeldLook | None = None
        # While a look is being taken: set once it is held (or found nothing to hold).
        self._holding: trio.Event | None = None
        self._applying = 0  # the batches being applied
        self._applied: trio.Event | None = None  # set once none is

    @property
    def busy(self) -> bool:
        """Whether a look is held, or being taken (another look does not hold its runs)."""
        return self._held is not None or self._holding is not None

    async def take(self, look: Callable[[], Awaitable[HeldLook | None]]) -> HeldLook | None:
        """Take ``look`` (a held look, or None) once no batch is being applied; batches
        that come meanwhile wait for it, then are written in it."""
        holding = self._holding = trio.Event()
        try:
            while self._applying:
                if self._applied is None:
                    self._applied = trio.Event()
                await self._applied.wait()
            held = self._held = await look()
            return held
        finally:
            self._holding = None
            holding.set()

    def give_up(self, held: HeldLook) -> bool:
        """Whether ``held`` is still held, no batch having taken it; from now on it is
        not, and its caller lets it go."""
        if self._held is not held:
            return False
        self._held = None
        return True

    @contextlib.asynccontextmanager
    async def applying(self) -> AsyncIterator[HeldLook | None]:
        """A batch being applied, in the block: the look it is written in, if one is held
        (it is held no more), or None. Waits for a look being taken."""
        holding = self._holding
        if holding is not None:
            await holding.wait()
        held, self._held = self._held, None
        self._applying += 1
        try:
            yield held
        finally:
            self._applying -= 1
            applied = self._applied
            if not self._applying and applied is not None:
                self._applied = None
                applied.set()


def hold(
    conn: Conn,
    r: Queries,
    names: list[str],
    now: float,
    limit: int,
    *,
    by: str,
    served: Mapping[str, Any] | None,
    thread_space: int,
    thread_key: Callable[[str], int],
    clock: Callable[[], float] | None,
    offset: float,
    sweep: bool,
) -> HeldLook | None:
    """Look for runnable runs in a transaction left open on ``conn`` (the module's
    docstring); None, and no transaction open, when there are none to hold. ``now`` is
    the runtime's clock (tickets come due by it), ``clock`` a fixed lease clock in place of
    the server's (tests), ``offset`` added to either; ``sweep`` also forgets the
    reservations of looks that did not hold theirs (`reads.runnable`) once they passed."""
    with conn.pipeline():
        conn.execute("BEGIN")
        configured = conn.execute(r.look_held, (str(round(IDLE_AT_MOST * 1000)),))
        found_clock = conn.execute(r.server_now)
    at = time.monotonic()
    (plan_mode, *_) = configured.fetchone() or ("auto",)
    (read,) = found_clock.fetchone() or (0.0,)
    server_now = float(read) if clock is None else clock()
    try:
        lease_now = server_now + offset
        found = reads.look_once(conn, r, names, now, lease_now, limit, by, served)
        if found and sweep:
            conn.execute(r.forget_reserved, (lease_now,))
        held = _take(conn, r, found, thread_space, thread_key, plan_mode) if found else None
    except BaseException:
        conn.roll_back()
        raise
    if held is None:
        conn.roll_back()
        return None
    records, rows, claims, threads, commands = held
    return HeldLook(conn, records, rows, claims, threads, commands, server_now, at)


_Taken = tuple[
    list[RunRecord],
    list[Sequence[Any]],
    dict[str, ClaimRow | None],
    dict[str, dict[str, tuple[str, int]]],
    dict[str, list[CommandRow]],
]


def _take(
    conn: Conn,
    r: Queries,
    found: list[tuple[Sequence[Any], RunRecord]],
    thread_space: int,
    thread_key: Callable[[str], int],
    plan_mode: str,
) -> _Taken | None:
    """Lock the claims and threads of the runs ``found`` (locked already) where nobody
    else holds them, and read their live attempts and stored commands, in one round trip;
    the runs whose claim and thread this transaction now holds, and what it read of them
    (None if none). The statements after it are planned in ``plan_mode`` again, the mode
    the look replaced."""
    ids = [row[0] for row, _ in found]
    threads = sorted({record.thread_id for _, record in found})
    key_of = {thread_id: thread_key(thread_id) for thread_id in threads}  # (hashed once)
    keys = sorted(set(key_of.values()))
    with conn.pipeline():
        c_claims = conn.execute(r.claims_skip_locked, (ids,))
        c_present = conn.execute(r.claims_present, (ids,))
        c_busy = conn.execute(r.try_lock_threads, (keys, thread_space))
        # After the locks, in statements of their own: each reads what the locks' last
        # holders committed.
        c_live = conn.execute(r.live, (threads,))
        c_commands = conn.execute(r.stored_commands, (ids,))
    locked = {
        run_id: ClaimRow(owner, epoch, lease_until)
        for run_id, owner, epoch, lease_until in c_claims.fetchall()
    }
    present = {run_id for (run_id,) in c_present.fetchall()}
    busy = {key for (key,) in c_busy.fetchall()}
    kept = [
        (row, record)
        for row, record in found
        if key_of[record.thread_id] not in busy
        and (record.run_id in locked or record.run_id not in present)
    ]
    if not kept:
        return None
    live: dict[str, dict[str, tuple[str, int]]] = {record.thread_id: {} for _, record in kept}
    for thread_id, run_id, root, epoch in c_live.fetchall():
        if thread_id in live:
            live[thread_id][run_id] = (root, epoch)
    kept_ids = {record.run_id for _, record in kept}
    commands: dict[str, list[CommandRow]] = {run_id: [] for run_id in kept_ids}
    for cid, run_id, *command in c_commands.fetchall():
        if run_id in kept_ids:
            commands[run_id].append(CommandRow(cid, *command))
    claims: dict[str, ClaimRow | None] = {run_id: locked.get(run_id) for run_id in kept_ids}
    # The last statement before the look waits for its batch, out of the pipeline: the
    # server times a transaction's idleness only from a statement's end outside one
    # (measured: after a pipeline's Sync a transaction idled past the limit, unended).
    conn.execute(r.look_held_done, (plan_mode,))
    return [record for _, record in kept], [row for row, _ in kept], claims, live, commands
