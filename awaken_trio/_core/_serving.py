"""The serving host: what durable serving (``awaken_trio.worker``) gets of the kernel.

The worker is handed this object and nothing else of the supervisor: it claims and starts
runs found in the store through it, applies commands stored elsewhere to the attempts here,
learns of ends committed elsewhere, and loses claims. Everything it does goes through the
kernel's admissions and state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, final

import trio

from . import _commit_of as commit_of
from ._admission import Admission
from ._attempt import BodyPin, lost
from ._attempts import stored_attempt
from ._errors import RuntimeClosed, StoreError
from ._host import ClaimSettings, HeardEnd, ServedRun, Started, Watched
from ._json import freeze_detail
from ._state import Awaiting, Ended, Queued, Running, RunRecord
from ._storage import Expect, Fence, Overdue, Rejected, RejectReason, Store, StoredCommand
from ._versions import BodyVersions

if TYPE_CHECKING:
    from ._admit import Admissions, Answer
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
        admission = self._admission(record, fence)
        if admission is None:
            await self._give_back(record.run_id, fence)
            return None
        attempt = admission.attempt
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

    def post_stored(self, record: RunRecord, done: Callable[[Started], None]) -> None:
        """`start_stored` for a run a look found (no fence to give back), without a task
        of its own: sync, and ``done`` is called with the attempt, None, or what the store
        or the commit's effect raised, in the commit's step (`Admissions.admit_posted`)."""
        admission = self._admission(record, None)
        if admission is None:
            done(None)
            return
        attempt = admission.attempt

        def answered(answer: Answer) -> None:
            if isinstance(answer, Exception):
                done(answer)
            elif isinstance(answer, Rejected) or not attempt.started:
                done(None)
            else:
                done(attempt)

        self._admissions.admit_posted(admission, answered)

    def _admission(self, record: RunRecord, fence: Fence | None) -> Admission | None:
        """The admission of a stored root run's next attempt; None if no body here runs
        it."""
        kernel = self._kernel
        body = kernel.body_for_record(record)
        if body is None:
            return None
        state = record.state
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
        attempt = stored_attempt(kernel, record, body, ticket=ticket)
        if record.generation == 0 and kernel.versions:
            # Its first attempt: the version of the body that runs it is pinned on it.
            attempt.pin = BodyPin(kernel.versions_of(record.name or "").version)
        return Admission(
            attempt=attempt,
            expect=expect,
            detail=detail,
            fence=fence,
            # A queued run, or a recovered one, is handed the answer the store keeps for it
            # (a scheduled resume answers its own ticket, with None).
            take_handover=ticket is None,
            when_busy_elsewhere="refuse",
        )

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
