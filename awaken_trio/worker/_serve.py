"""The serving loop: claim runs whose body is registered here and run them, at most
``concurrency`` root attempts at once (children do not count; nor do attempts that lost
their claim, which stop at once).

Each pass, on a durable store, first deals with runs whose owner was lost (the store ends
what can never run again and claims the rest for a new attempt here), then ends the runs
past their deadline or queue timeout that no attempt runs (whatever their bodies: one
indexed read of the store, `DeadlineStore.overdue`), then takes runnable runs: queued ones
on a free thread, and awaiting ones whose scheduled resume is due. Passes run when
something committed here, when the store changed elsewhere, when an attempt ends, and,
while nothing changes, after a wait that grows from ``poll`` seconds to a second (a lease
that lapses changes nothing in the store; see ``_cadence``).

A store that fails (a write lock held past the busy timeout, a full disk, a server that
went away) does not end serving: the failure is logged (logger ``awaken_trio.worker``), the
loop backs off (from ``poll``, doubling, to at most `MAX_BACKOFF` seconds; back to ``poll``
after a pass that succeeds) and looks again. A run it could not admit is left as the store
holds it, for a later pass or another runtime; the attempts whose claims could not be
renewed meanwhile are stopped by the claim keeper, as the lease rules say.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar, final

import trio

from .._core import (
    AwakenError,
    Backoff,
    DeadlineStore,
    DurableStore,
    Fence,
    LookingStore,
    RunRecord,
    RunState,
    RuntimeClosed,
    ServedRun,
    ServingHost,
    Started,
    Store,
    StoreError,
    WorkerStore,
)
from ._cadence import serve_backoff
from ._presence import Presence

T = TypeVar("T")

logger = logging.getLogger("awaken_trio.worker")

MAX_BACKOFF = 5.0
"""The longest a serving loop waits before looking again at a store that keeps failing."""


async def serve(
    host: ServingHost,
    concurrency: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, or, on a store that keeps worker rows, until this worker was
    asked to drain and its runs have finished (`presence`)."""
    store, claims = host.store, host.claims
    if claims is None or not isinstance(store, WorkerStore) or not store.durable:
        await _serve(host, concurrency, None, task_status)
        return
    presence = Presence(store, claims, host.served(), concurrency)
    active: dict[str, ServedRun] = {}
    await presence.register()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(presence.beat, active)
            await _serve(host, concurrency, presence, task_status, active)
            nursery.cancel_scope.cancel()
        logger.info(
            "worker %s: drained, stopped serving",
            presence.worker_id,
            extra={"worker_id": presence.worker_id, "event": "drained"},
        )
    finally:
        await presence.end()


async def _serve(
    host: ServingHost,
    concurrency: int,
    presence: Presence | None,
    task_status: trio.TaskStatus[None],
    active: dict[str, ServedRun] | None = None,
) -> None:
    """The loop; returns when drained (only with a ``presence``)."""
    if active is None:
        active = {}
    started = False
    failures = 0  # failed passes in a row
    idle_looks = 0  # looks in a row that found nothing changed
    claims = host.claims
    idle = serve_backoff(host.poll_interval, None if claims is None else claims.lease)
    failing = Backoff(host.poll_interval, MAX_BACKOFF)
    while True:
        # Take the notifications before looking, so a change in between is not missed.
        local = host.changed_event()
        for run_id in [r for r, run in active.items() if not run.counts_toward_concurrency()]:
            del active[run_id]
        next_limit: float | None = None
        try:
            if presence is not None and await presence.drain_requested():
                if not active:
                    if not started:
                        task_status.started()
                    return
                failed = False  # claims nothing new: waits for its runs to finish
            else:
                failed, next_limit = await _one_pass(host, concurrency, active)
        except RuntimeClosed:
            return
        except StoreError as exc:
            logger.error("serving: the store failed: %s", exc, exc_info=exc)
            failed = True
        if not started:
            task_status.started()  # serving, even while the store fails: it is retried
            started = True
        if failed:
            delay = failing.wait(failures)
            failures += 1
            logger.info("serving: looking again in %.2f s (failure %d in a row)", delay, failures)
            await trio.sleep(delay)
            continue
        failures = 0
        interval = idle.wait(idle_looks)
        if next_limit is not None:
            # A run's time limit comes before the next idle look: look then.
            interval = min(interval, max(next_limit - host.now(), 0.0))
        if await host.changed(local, interval=interval):
            idle_looks = 0
        else:
            idle_looks += 1  # nothing changed: look less often, until something does


async def _one_pass(
    host: ServingHost, concurrency: int, active: dict[str, ServedRun]
) -> tuple[bool, float | None]:
    """One look at the store: recover, end the runs past their time limits, then admit
    what is runnable. Whether an admission or an end failed on the store (each failure is
    logged with its run id), and when the next time limit the store knows of comes; a
    failed look itself raises `StoreError`."""
    names = host.names()
    if not names:
        await trio.lowlevel.checkpoint()
        return False, None
    failed = False
    store = host.store
    claims = host.claims
    if claims is not None and isinstance(store, DurableStore):
        # Which leases have expired is the store's to say, by its clock; ours only dates
        # the events recovery writes.
        at = host.now()
        free = concurrency - len(active)
        # (The names with their versions: a run pinned to a version no body here runs is
        # left for a runtime whose body does.)
        lost = store.recover(
            claims.owner, host.served(), at, claims.lease, claims.max_recoveries, max(free, 0)
        )
        for recovered in await _from_store(lost, "recovering the runs of lost owners"):
            run_id = recovered.record.run_id
            logger.info(
                "serving: recovering run %r: its owner was lost",
                run_id,
                extra={"run_id": run_id, "worker_id": claims.owner, "event": "recovery"},
            )
            fence = Fence(run_id, claims.owner, recovered.epoch)
            # Its claim, if the admission fails on the store, lapses: it is recovered again.
            failed |= not await _admit(host, recovered.record, active, fence)
    next_limit = None
    if isinstance(store, DeadlineStore):
        ended_failed, next_limit = await _end_overdue(host, store)
        failed |= ended_failed
    free = concurrency - len(active)
    if free <= 0:
        return failed, next_limit
    async with _runnable(host, store, free) as runnable:
        # Admitted side by side, so their commits share transactions (one fsync for all;
        # on a store that holds its looks, the look's own): each handed to the mailbox
        # with no task of its own, then every answer waited for at once.
        starts = _Starts(host, active)
        threads: set[str] = set()
        try:
            for record in runnable:
                if record.thread_id in threads or host.thread_taken(record.thread_id):
                    continue  # its thread is taken: its turn comes, oldest first, when it frees
                threads.add(record.thread_id)
                starts.post(record)
        finally:
            # A commit handed over lands whatever happens to the loop (as a commit awaited
            # would), and the look is let go only once its starts have.
            with trio.CancelScope(shield=True):
                await starts.answered()
    return failed or starts.failed, next_limit


@final
class _Starts:
    """The starts of the runs one look found (`ServingHost.post_stored`), and their
    answers: each run started joins ``active`` and its claim is logged; a start the store
    failed is logged with its run id, and left as the store holds it."""

    def __init__(self, host: ServingHost, active: dict[str, ServedRun]) -> None:
        self._host = host
        self._active = active
        self._pending = 0
        self._all = trio.Event()
        self.failed = False
        """Whether the store failed a start."""

    def post(self, record: RunRecord) -> None:
        """Start ``record``'s run (raises `RuntimeClosed` once the runtime is closing)."""
        self._pending += 1
        try:
            self._host.post_stored(record, functools.partial(self._answer, record))
        except BaseException:
            self._pending -= 1
            raise

    async def answered(self) -> None:
        """Return once every start posted has its answer."""
        await trio.lowlevel.checkpoint()
        while self._pending:
            # (A fresh event: one an answer given at once set may have others to come.)
            self._all = trio.Event()
            await self._all.wait()

    def _answer(self, record: RunRecord, started: Started) -> None:
        self._pending -= 1
        if not self._pending:
            self._all.set()
        if isinstance(started, Exception):
            self.failed = True
            _log_not_started(record, started)
        elif started is not None:
            self._active[started.run_id] = started
            _log_claim(self._host, record)


@contextlib.asynccontextmanager
async def _runnable(host: ServingHost, store: Store, free: int) -> AsyncIterator[list[RunRecord]]:
    """Up to ``free`` runnable runs, for the block: held for this runtime until it exits
    on a store that holds its looks (`LookingStore`), which writes their starts in the
    look's own transaction."""
    # The names with their versions (a mapping is a collection of its names): a store
    # that hands out runs for a while (PostgreSQL's looks hold or reserve them) leaves a
    # run pinned to a version no body here accepts for a runtime whose body does.
    served, now = host.served(), host.now()
    if not isinstance(store, LookingStore):
        yield await _from_store(store.runnable(served, now, free), "finding runnable runs")
        return
    async with contextlib.AsyncExitStack() as stack:
        look = stack.enter_async_context(store.looking(served, now, free))
        yield await _from_store(look, "finding runnable runs")


OVERDUE_BATCH = 64
"""The most runs past a time limit one pass ends (the next pass takes the rest)."""


async def _end_overdue(host: ServingHost, store: DeadlineStore) -> tuple[bool, float | None]:
    """End the runs past a time limit that no attempt runs, whatever their bodies (one
    indexed read of the store); whether an end failed on the store (logged; the run is
    found again at a later pass), and when the next limit comes (None: none known)."""
    look = await _from_store(
        store.overdue(host.now(), OVERDUE_BATCH), "finding runs past their time limits"
    )
    failed = False
    for found in look.runs:
        run_id = found.record.run_id
        try:
            await host.end_overdue(found)
        except StoreError as exc:
            logger.error(
                "serving: run %r could not be ended at its %s: %s",
                run_id,
                found.limit.replace("_", " "),
                exc,
                exc_info=exc,
                extra={"run_id": run_id},
            )
            failed = True
    if len(look.runs) >= OVERDUE_BATCH:
        return failed, host.now()  # more to end: look again at once
    return failed, look.next_at


async def _admit(
    host: ServingHost, record: RunRecord, active: dict[str, ServedRun], fence: Fence | None
) -> bool:
    """Admit one stored run; False if the store failed (logged, and left for later: the
    run is as the store holds it, for the next pass or another runtime)."""
    try:
        run = await host.start_stored(record, fence=fence)
    except StoreError as exc:
        _log_not_started(record, exc)
        return False
    if run is not None:
        active[run.run_id] = run
        _log_claim(host, record)
    return True


def _log_not_started(record: RunRecord, exc: Exception) -> None:
    logger.error(
        "serving: run %r could not be started: %s",
        record.run_id,
        exc,
        exc_info=exc,
        extra={"run_id": record.run_id},
    )


def _log_claim(host: ServingHost, record: RunRecord) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return  # (a line a run: not even its arguments when it is not written)
    claims = host.claims
    logger.info(
        "serving: claimed run %r (%s, attempt %d)",
        record.run_id,
        record.name,
        record.generation + (not isinstance(record.state, RunState.Running)),
        extra={
            "run_id": record.run_id,
            "worker_id": None if claims is None else claims.owner,
            "event": "claim",
        },
    )


async def _from_store(call: Awaitable[T], what: str) -> T:
    """A store call of the serving loop; whatever it raises but a cancellation or our own
    error is the store failing (`StoreError`)."""
    try:
        return await call
    except (AwakenError, trio.Cancelled):
        raise
    except Exception as exc:
        raise StoreError(f"{what} failed: {exc!r}", outcome_unknown=False) from exc
