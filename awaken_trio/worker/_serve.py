"""The serving loop: claim runs whose body is registered here and run them, at most
``concurrency`` root attempts at once (children do not count; nor do attempts that lost
their claim, which stop at once).

Each pass, on a durable store, first deals with runs whose owner was lost (the store ends
what can never run again and claims the rest for a new attempt here), then takes runnable
runs: queued ones on a free thread, and awaiting ones whose scheduled resume is due. Passes
run when something committed here, when the store changed elsewhere, when an attempt ends,
and at least every ``poll`` seconds (a lease that lapses changes nothing in the store).
"""

from __future__ import annotations

import trio

from .._core._attempt import Attempt
from .._core._errors import RuntimeClosed
from .._core._state import RunRecord
from .._core._storage import Fence
from .._core._supervisor import Supervisor


async def serve(
    supervisor: Supervisor,
    concurrency: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    active: dict[str, Attempt] = {}
    started = False
    while True:
        # Take the notifications before looking, so a change in between is not missed.
        local = supervisor.mailbox.changed_event()
        for run_id in [r for r, attempt in active.items() if _over(attempt)]:
            del active[run_id]
        try:
            await _one_pass(supervisor, concurrency, active)
        except RuntimeClosed:
            return
        if not started:
            task_status.started()
            started = True
        with trio.move_on_after(supervisor.poll_interval):
            await supervisor.changed(local)


async def _one_pass(supervisor: Supervisor, concurrency: int, active: dict[str, Attempt]) -> None:
    names = list(supervisor.named)
    if not names:
        await trio.lowlevel.checkpoint()
        return
    store = supervisor.durable_store
    claims = supervisor.claims
    if claims is not None and store is not None:
        now = supervisor.now()
        free = concurrency - len(active)
        for recovered in await store.recover(
            claims.owner, names, now, now + claims.lease, claims.max_recoveries, max(free, 0)
        ):
            fence = Fence(recovered.record.run_id, claims.owner, recovered.epoch)
            attempt = await supervisor.admit_stored(recovered.record, fence=fence)
            if attempt is not None:
                active[attempt.run_id] = attempt
    free = concurrency - len(active)
    if free <= 0:
        return
    runnable = await supervisor.store.runnable(names, supervisor.now(), free)
    # Admitted side by side, so their commits share transactions (one fsync for all).
    threads: set[str] = set()
    async with trio.open_nursery() as nursery:
        for record in runnable:
            if record.thread_id in threads or supervisor.gate.holder(record.thread_id):
                continue  # its thread is taken: its turn comes, oldest first, when it frees
            threads.add(record.thread_id)
            nursery.start_soon(_admit, supervisor, record, active)


async def _admit(supervisor: Supervisor, record: RunRecord, active: dict[str, Attempt]) -> None:
    attempt = await supervisor.admit_stored(record)
    if attempt is not None:
        active[attempt.run_id] = attempt


def _over(attempt: Attempt) -> bool:
    """Whether the attempt no longer counts toward concurrency: it ended, or it lost its
    claim (it may still be unwinding, but the run is another runtime's to execute)."""
    request = attempt.request
    return attempt.completion.done or (request is not None and request.claim_lost)
