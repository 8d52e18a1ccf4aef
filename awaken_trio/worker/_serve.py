"""The serving loop: claim runs whose body is registered here and run them, at most
``concurrency`` root attempts at once (children do not count; nor do attempts that lost
their claim, which stop at once).

Each pass, on a durable store, first deals with runs whose owner was lost (the store ends
what can never run again and claims the rest for a new attempt here), then takes runnable
runs: queued ones on a free thread, and awaiting ones whose scheduled resume is due. Passes
run when something committed here, when the store changed elsewhere, when an attempt ends,
and, while nothing changes, after a wait that grows from ``poll`` seconds to a second
(a lease that lapses changes nothing in the store; see ``_cadence``).

A store that fails (a write lock held past the busy timeout, a full disk, a server that
went away) does not end serving: the failure is logged (logger ``awaken_trio.worker``), the
loop backs off (from ``poll``, doubling, to at most `MAX_BACKOFF` seconds; back to ``poll``
after a pass that succeeds) and looks again. A run it could not admit is left as the store
holds it, for a later pass or another runtime; the attempts whose claims could not be
renewed meanwhile are stopped by the claim keeper, as the lease rules say.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable
from typing import TypeVar

import trio

from .._core import (
    Attempt,
    Awaiting,
    AwakenError,
    Commit,
    Expect,
    Fence,
    Queued,
    Rejected,
    RejectReason,
    Running,
    RunRecord,
    RuntimeClosed,
    StoreError,
    Supervisor,
    freeze_detail,
)
from ._cadence import serve_backoff

_SERVED = freeze_detail({"source": "serve"}, "detail")
_SCHEDULED = freeze_detail({"source": "scheduled"}, "detail")
_RECOVERED = freeze_detail({"source": "recovery"}, "detail")

T = TypeVar("T")

logger = logging.getLogger("awaken_trio.worker")

MAX_BACKOFF = 5.0
"""The longest a serving loop waits before looking again at a store that keeps failing."""


async def serve(
    supervisor: Supervisor,
    concurrency: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    active: dict[str, Attempt] = {}
    started = False
    failures = 0
    claims = supervisor.claims
    backoff = serve_backoff(supervisor.poll_interval, None if claims is None else claims.lease)
    while True:
        # Take the notifications before looking, so a change in between is not missed.
        local = supervisor.mailbox.changed_event()
        for run_id in [r for r, attempt in active.items() if _over(attempt)]:
            del active[run_id]
        try:
            failed = await _one_pass(supervisor, concurrency, active)
        except RuntimeClosed:
            return
        except StoreError as exc:
            logger.error("serving: the store failed: %s", exc, exc_info=exc)
            failed = True
        if not started:
            task_status.started()  # serving, even while the store fails: it is retried
            started = True
        if failed:
            failures += 1
            delay = min(supervisor.poll_interval * 2 ** (failures - 1), MAX_BACKOFF)
            logger.info("serving: looking again in %.2f s (failure %d in a row)", delay, failures)
            await trio.sleep(delay)
            continue
        failures = 0
        if await supervisor.changed(local, interval=backoff.interval):
            backoff.reset()
        else:
            backoff.idle()  # nothing changed: look less often, until something does


async def _one_pass(supervisor: Supervisor, concurrency: int, active: dict[str, Attempt]) -> bool:
    """One look at the store: recover, then admit what is runnable. Whether an admission
    failed on the store (each failure is logged with its run id); a failed look itself
    raises `StoreError`."""
    names = list(supervisor.named)
    if not names:
        await trio.lowlevel.checkpoint()
        return False
    failed = False
    store = supervisor.durable_store
    claims = supervisor.claims
    if claims is not None and store is not None:
        # Which leases have expired is the store's to say, by its clock; ours only dates
        # the events recovery writes.
        at = supervisor.now()
        free = concurrency - len(active)
        lost = store.recover(
            claims.owner, names, at, claims.lease, claims.max_recoveries, max(free, 0)
        )
        for recovered in await _from_store(lost, "recovering the runs of lost owners"):
            run_id = recovered.record.run_id
            logger.info(
                "serving: recovering run %r: its owner was lost",
                run_id,
                extra={"run_id": run_id},
            )
            fence = Fence(run_id, claims.owner, recovered.epoch)
            # Its claim, if the admission fails on the store, lapses: it is recovered again.
            failed |= not await _admit(supervisor, recovered.record, active, fence)
    free = concurrency - len(active)
    if free <= 0:
        return failed
    found = supervisor.store.runnable(names, supervisor.now(), free)
    runnable = await _from_store(found, "finding runnable runs")
    # Admitted side by side, so their commits share transactions (one fsync for all).
    threads: set[str] = set()
    admitted: list[bool] = []
    async with trio.open_nursery() as nursery:
        for record in runnable:
            if record.thread_id in threads or supervisor.gate.holder(record.thread_id):
                continue  # its thread is taken: its turn comes, oldest first, when it frees
            threads.add(record.thread_id)
            nursery.start_soon(_admit_into, supervisor, record, active, admitted)
    return failed or not all(admitted)


async def _admit_into(
    supervisor: Supervisor, record: RunRecord, active: dict[str, Attempt], admitted: list[bool]
) -> None:
    admitted.append(await _admit(supervisor, record, active, None))


async def _admit(
    supervisor: Supervisor, record: RunRecord, active: dict[str, Attempt], fence: Fence | None
) -> bool:
    """Admit one stored run; False if the store failed (logged, and left for later: the
    run is as the store holds it, for the next pass or another runtime)."""
    try:
        attempt = await admit_stored(supervisor, record, fence=fence)
    except StoreError as exc:
        logger.error(
            "serving: run %r could not be started: %s",
            record.run_id,
            exc,
            exc_info=exc,
            extra={"run_id": record.run_id},
        )
        return False
    if attempt is not None:
        active[attempt.run_id] = attempt
    return True


async def _from_store(call: Awaitable[T], what: str) -> T:
    """A store call of the serving loop; whatever it raises but a cancellation or our own
    error is the store failing (`StoreError`)."""
    try:
        return await call
    except (AwakenError, trio.Cancelled):
        raise
    except Exception as exc:
        raise StoreError(f"{what} failed: {exc!r}", outcome_unknown=False) from exc


def _over(attempt: Attempt) -> bool:
    """Whether the attempt no longer counts toward concurrency: it ended, or it lost its
    claim (it may still be unwinding, but the run is another runtime's to execute)."""
    request = attempt.request
    return attempt.completion.done or (request is not None and request.claim_lost)


async def admit_stored(
    supervisor: Supervisor, record: RunRecord, *, fence: Fence | None = None
) -> Attempt | None:
    """Start an attempt of a root run found in the store (serving): queued, due for its
    scheduled resume, or recovered from a lost owner (``fence``: the claim recovery
    took for it). None if it is not this runtime's to start after all: no body here,
    another runtime took it first, or its thread is busy elsewhere."""
    body = supervisor.body_for(record.run_id, record.name)
    state = record.state
    if body is None:
        await _drop_recovered(supervisor, record.run_id, fence)
        return None
    ticket = None
    if fence is not None:
        expect = Expect(generation=record.generation, state=Running)
        detail = _RECOVERED
    elif isinstance(state, Awaiting):
        ticket = state.ticket
        expect = Expect(
            generation=record.generation,
            state=Awaiting,
            correlation_id=ticket.correlation_id,
        )
        detail = _SCHEDULED
    else:
        expect = Expect(generation=record.generation, state=Queued)
        detail = _SERVED
    attempt = supervisor.new_attempt(
        record.run_id,
        record.thread_id,
        record.generation + 1,
        None,
        body,
        record.max_steps,
        record.steps,
        record.input,
        record.checkpoint,
        None,
        ticket,
        name=record.name,
    )
    result = await supervisor.admit(
        attempt,
        expect,
        None,
        detail,
        fence=fence,
        # A queued run, or a recovered one, is handed the answer the store keeps for it
        # (a scheduled resume answers its own ticket, with None).
        take_handover=ticket is None,
        queue_if_busy=False,
    )
    if isinstance(result, Rejected) or not attempt.started:
        if (
            fence is not None
            and isinstance(result, Rejected)
            and result.reason is RejectReason.THREAD_BUSY
        ):
            await _queue_recovered(supervisor, record, fence)
        else:
            await _drop_recovered(supervisor, record.run_id, fence)
        return None
    return attempt


async def _queue_recovered(supervisor: Supervisor, record: RunRecord, fence: Fence) -> None:
    """A run recovered onto a thread another run's attempt holds: it waits ``Queued``
    (its claim released) and runs, generation + 1, when the thread frees."""
    with trio.CancelScope(shield=True), contextlib.suppress(StoreError, RuntimeClosed):
        await supervisor.mailbox.commit(
            Commit(
                run_id=record.run_id,
                state=Queued(),
                generation=record.generation,
                expect=Expect(generation=record.generation, state=Running),
                at=supervisor.now_for_end()[0],
                detail=_RECOVERED,
                fence=fence,
                release=True,
            )
        )


async def _drop_recovered(supervisor: Supervisor, run_id: str, fence: Fence | None) -> None:
    # A claim recovery took for a run that cannot start here goes back at once.
    store = supervisor.durable_store
    if fence is None or supervisor.claims is None or store is None:
        return
    with trio.CancelScope(shield=True), contextlib.suppress(Exception):
        await store.release(supervisor.claims.owner, run_id)
