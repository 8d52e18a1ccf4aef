"""The serving host: what durable serving (``awaken_trio.worker``) gets of the kernel.

The worker is handed this object and nothing else of the supervisor: it claims and starts
runs found in the store through it, applies commands stored elsewhere to the attempts here,
learns of ends committed elsewhere, and loses claims. Everything it does goes through the
kernel's admissions and state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, final

import trio

from . import _commit_of as commit_of
from ._admission import Admission
from ._attempt import BodyPin, lost
from ._attempts import stored_attempt
from ._errors import RuntimeClosed, StoreError
from ._host import ClaimSettings, HeardEnd, ServedRun, Watched
from ._json import freeze_detail
from ._state import Awaiting, Ended, Queued, Running, RunRecord
from ._storage import Expect, Fence, Overdue, Rejected, RejectReason, Store, StoredCommand
from ._versions import BodyVersions

if TYPE_CHECKING:
    from ._admit import Admissions
    from ._expire import Expiry
    from ._kernel import Kernel

_DETAIL_SERVED = freeze_detail({"source": "serve"}, "detail")
_DETAIL_SCHEDULED = freeze_detail({"source": "scheduled"}, "detail")
_DETAIL_RECOVERED = freeze_detail({"source": "recovery"}, "detail")


@final
class Serving:
    """`ServingHost` over the kernel (see the module docstring)."""

    def __init__(self, kernel: Kernel, admissions: Admissions, expiry: Expiry) -> None:
        self._kernel = kernel
        self._admissions = admissions
        self._expiry = expiry
        self.store: Store = kernel.store
        self.claims: ClaimSettings | None = kernel.claims.settings
        self.now = kernel.now
        self.changed_event = kernel.changed_event
        self.changed = kernel.changed
        self.store_changed_elsewhere = kernel.store_changed_elsewhere
        self.streams_written_elsewhere = kernel.streams_written_elsewhere
        self.lose = kernel.lose

    @property
    def poll_interval(self) -> float:
        return self._kernel.claims.poll

    def names(self) -> list[str]:
        return list(self._kernel.named)

    def served(self) -> Mapping[str, BodyVersions]:
        kernel = self._kernel
        return {name: kernel.versions_of(name) for name in kernel.named}

    def thread_taken(self, thread_id: str) -> bool:
        return self._kernel.gate.holder(thread_id) is not None

    def watched(self) -> Watched:
        kernel = self._kernel
        return Watched(
            tuple(
                a for a in (*kernel.registry.all(), *kernel.queued.values()) if a.phase != "sealed"
            )
        )

    async def end_overdue(self, found: Overdue) -> None:
        await self._expiry.end_stored(found.record, found.limit)

    def apply_stored(self, command: StoredCommand) -> None:
        attempt = self._kernel.attempt_here(command.run_id)
        if attempt is not None:
            attempt.apply_stored(command.id, command.kind, command.payload, command.reason)

    def ended_elsewhere(self, run_id: str, state: Ended) -> None:
        attempt = self._kernel.registry.get(run_id)
        if attempt is not None and attempt.phase != "sealed":
            # The store holds the truth: the attempt commits nothing; then it lets its
            # claim go, which frees the run's thread.
            attempt.request_end(lost(f"the run was ended elsewhere: {state!r}", claim_lost=False))

    def heard_end(self, end: HeardEnd) -> None:
        attempt = self._kernel.registry.get(end.run_id)
        # The end was committed against the attempt whose claim epoch the run was marked
        # live with; an attempt here under another claim, or admitted after the end's
        # commit (a later run of the same id), is not the one it ended.
        if (
            attempt is not None
            and attempt.fence is not None
            and attempt.fence.epoch == end.epoch
            and attempt.start_seq <= end.after_seq
        ):
            self.ended_elsewhere(end.run_id, end.state)

    async def start_stored(self, record: RunRecord, *, fence: Fence | None) -> ServedRun | None:
        """Start an attempt of a root run found in the store (serving): queued, due for its
        scheduled resume, or recovered from a lost owner (``fence``: the claim recovery
        took for it). None if it is not this runtime's to start after all: no body here,
        another runtime took it first, or its thread is busy elsewhere."""
        kernel = self._kernel
        body = kernel.body_for_record(record)
        state = record.state
        if body is None:
            await self._give_back(record.run_id, fence)
            return None
        ticket = None
        if fence is not None:
            expect = Expect(generation=record.generation, state=Running)
            detail = _DETAIL_RECOVERED
        elif isinstance(state, Awaiting):
            ticket = state.ticket
            expect = commit_of.expect_awaiting(record.generation, ticket)
            detail = _DETAIL_SCHEDULED
        else:
            expect = Expect(generation=record.generation, state=Queued)
            detail = _DETAIL_SERVED
        attempt = stored_attempt(self._kernel, record, body, ticket=ticket)
        if record.generation == 0 and kernel.versions:
            # Its first attempt: the version of the body that runs it is pinned on it.
            attempt.pin = BodyPin(kernel.versions_of(record.name or "").version)
        admission = Admission(
            attempt=attempt,
            expect=expect,
            detail=detail,
            fence=fence,
            # A queued run, or a recovered one, is handed the answer the store keeps for it
            # (a scheduled resume answers its own ticket, with None).
            take_handover=ticket is None,
            when_busy_elsewhere="refuse",
        )
        result = await self._admissions.admit(admission)
        if isinstance(result, Rejected) or not attempt.started:
            if (
                fence is not None
                and isinstance(result, Rejected)
                and result.reason is RejectReason.THREAD_BUSY
            ):
                await self._queue_recovered(record, fence)
            else:
                await self._give_back(record.run_id, fence)
            return None
        return attempt

    async def _queue_recovered(self, record: RunRecord, fence: Fence) -> None:
        """A run recovered onto a thread another run's attempt holds: it waits ``Queued``
        (its claim released) and runs, generation + 1, when the thread frees."""
        kernel = self._kernel
        commit = commit_of.queue_recovered(
            record.run_id,
            record.generation,
            fence,
            at=kernel.now_for_end()[0],
            detail=_DETAIL_RECOVERED,
        )
        with trio.CancelScope(shield=True), contextlib.suppress(StoreError, RuntimeClosed):
            await kernel.mailbox.commit(commit)

    async def _give_back(self, run_id: str, fence: Fence | None) -> None:
        # A claim recovery took for a run that cannot start here goes back at once.
        if fence is not None:
            await self._kernel.claims.release(run_id)
