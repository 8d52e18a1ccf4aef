"""Keeping claims: the claim book (the claims this runtime holds, and the kernel's
`ClaimPolicy` on a durable store; the kernel's own `NoClaims` serves a store without claims),
and its keeper. The lease of every root run this runtime executes is renewed every third of the
lease; a claim the store says is lost (superseded, released, expired) stops its
attempt at once, and so does every claim if the store cannot be reached for a whole lease.
The keeper also lets go of the claims that ends nobody waits for did not drop (an end
another runtime's beat, say), as the actor would have after its end.

A renewal that fails is logged (logger ``awaken_trio.worker``) and tried again at the next
tick; it never ends the keeper."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import final

import trio
from trio_util import periodic

from .._core import (
    Accepted,
    Claim,
    ClaimedAttempt,
    ClaimSettings,
    CommitResult,
    DescendantsEnd,
    DurableStore,
    Fence,
    LiveCommand,
    Rejected,
    RunRecord,
    RunState,
    ServingHost,
    StoredCommand,
    StoredCommandLoads,
    cause_kind,
    stored_form,
)

logger = logging.getLogger("awaken_trio.worker")


@final
class ClaimBook:
    """The claims this runtime holds on a durable store (root run id -> epoch), and the
    kernel's `ClaimPolicy` for that store: root attempts take claims, every commit of a
    tree is fenced by its root's, commands are stored.

    Invariant: `held` names exactly the claims the keeper renews; a run leaves it when its
    attempt here is over (`forget`, `release`, an end answered) or its claim is lost.
    """

    def __init__(self, settings: ClaimSettings, store: DurableStore) -> None:
        self.settings: ClaimSettings = settings
        self.store = store
        self.held: dict[str, int] = {}
        self.poll = settings.poll
        # A lapsed lease changes nothing in the store: waits look again every poll.
        self.idle_wait = settings.poll
        self._loads = StoredCommandLoads(store)
        # Claims whose end did not drop them, for the keeper to let go (`end_answered`).
        self._to_release: deque[str] = deque()
        self._release_wanted = trio.Event()

    # An end may drop a claim, end handed-back descendants and let the claim go.
    quiet_ends = False

    def hands_back(self, root: ClaimedAttempt) -> bool:
        # A run with no name can run nowhere else: it ends instead.
        return root.name is not None

    def start_under(self, attempt: ClaimedAttempt) -> Fence | Claim | None:
        # A root takes its run's claim, unless it comes with one (a recovery); a child
        # commits under its root's. Every attempt that starts checks its thread, a recovered
        # one included: the thread may have been taken while the run's owner was gone. The
        # claim names a lease duration: the store's clock decides when it ends.
        if attempt.parent is None and attempt.fence is None:
            return Claim(self.settings.owner, self.settings.lease)
        return attempt.fence

    def hold(self, attempt: ClaimedAttempt, epoch: int | None) -> None:
        if epoch is not None:
            attempt.fence = Fence(attempt.run_id, self.settings.owner, epoch)
        if attempt.parent is None and attempt.fence is not None:
            self.held[attempt.run_id] = attempt.fence.epoch

    def releases_at_end(self, attempt: ClaimedAttempt) -> bool:
        return attempt.parent is None and attempt.started

    def descendants_at_end(self, attempt: ClaimedAttempt) -> DescendantsEnd | None:
        # Only a later attempt can have children an earlier one handed back (rule 22).
        return "not_resumed" if attempt.generation > 1 else None

    async def after_end(
        self, attempt: ClaimedAttempt, result: CommitResult, released: bool
    ) -> None:
        if self._ended(attempt, result, released):
            await self.release(attempt.run_id)

    def end_answered(self, attempt: ClaimedAttempt, result: CommitResult, released: bool) -> None:
        if self._ended(attempt, result, released):
            # Let go by the keeper's task (`ClaimKeeper`), as `release` would here.
            self._to_release.append(attempt.run_id)
            self._release_wanted.set()

    def _ended(self, attempt: ClaimedAttempt, result: CommitResult, released: bool) -> bool:
        """``attempt``'s end was answered ``result``: it is logged and its claim no longer
        renewed; whether the claim is still to be let go (the end did not drop it)."""
        if attempt.parent is not None:
            return False  # a child lives on its root's claim
        if isinstance(result, Accepted):
            _log_end(attempt.run_id, self.settings.owner, result.state)
        self.held.pop(attempt.run_id, None)
        # Dropped by the end's own commit, or none was taken.
        return not ((released and isinstance(result, Accepted)) or attempt.fence is None)

    async def release_ended(self) -> None:
        """Let go of the claims of the ends `end_answered` did not drop, as they come
        (best effort, as `release`: a claim not let go lapses with its lease); until
        cancelled. Every release asked for before the cancel is made: the wait is woken
        at once by the ask, and a release under way is shielded."""
        while True:
            while self._to_release:
                await self.release(self._to_release.popleft())
            self._release_wanted = trio.Event()
            await self._release_wanted.wait()

    def commit_failed(self, attempt: ClaimedAttempt) -> None:
        if attempt.parent is None:
            self.held.pop(attempt.run_id, None)

    def forget(self, run_id: str) -> None:
        self.held.pop(run_id, None)

    async def release(self, run_id: str) -> None:
        self.held.pop(run_id, None)
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self.store.release(self.settings.owner, run_id)

    def others_may_run(self, record: RunRecord) -> bool:
        return record.parent_run_id is None

    async def post(self, command: LiveCommand, at: float) -> StoredCommand | Rejected | None:
        kind, payload, reason = stored_form(command)
        posted = await self.store.post_command(command.run_id, kind, payload, reason, at)
        if isinstance(posted, Rejected):
            return posted
        return StoredCommand(posted, command.run_id, kind, payload, reason, at)

    async def load_commands(self, attempt: ClaimedAttempt) -> None:
        await self._loads.load(attempt)  # with the other attempts beginning now, in one read


def _log_end(run_id: str, worker_id: str, state: RunState) -> None:
    """One line for a root attempt's committed end here: the run ended (with its cause),
    awaits (with the ticket's reason), or went back to the queue (released)."""
    if not logger.isEnabledFor(logging.INFO):
        return  # (a line a run: not even its arguments when it is not written)
    extra: dict[str, object] = {"run_id": run_id, "worker_id": worker_id}
    match state:
        case RunState.Ended(cause):
            kind = cause_kind(cause)
            logger.info(
                "run %r ended: %s", run_id, kind, extra={**extra, "event": "end", "cause": kind}
            )
        case RunState.Awaiting(ticket):
            logger.info(
                "run %r awaits: %s",
                run_id,
                ticket.reason,
                extra={**extra, "event": "await", "reason": ticket.reason},
            )
        case RunState.Queued():
            logger.info(
                "run %r released: back to the queue for another worker",
                run_id,
                extra={**extra, "event": "release"},
            )


@final
class ClaimKeeper:
    def __init__(self, host: ServingHost, book: ClaimBook) -> None:
        self._host = host
        self._book = book
        self._store = book.store
        self._settings = book.settings
        # When (Trio's clock, here) every claim held was last known to have a whole lease
        # ahead of it: the last renewal that succeeded, or the last time none was held (a
        # claim taken since then was taken with a whole lease).
        self._good_since = trio.current_time()
        self._failing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._book.release_ended)
            task_status.started()
            async with contextlib.aclosing(periodic(self._settings.lease / 3)) as ticks:
                async for _ in ticks:
                    await self.renew()

    async def renew(self) -> None:
        held = dict(self._book.held)
        # How long the store was unreachable is measured on Trio's clock, here; the
        # leases themselves run on the store's clock, never on the runtime's ``clock=``.
        now = trio.current_time()
        if not held:
            self._good_since = now
            return
        try:
            lost = await self._store.renew(self._settings.owner, held, self._settings.lease)
        except Exception as exc:
            if now - self._good_since < self._settings.lease:
                logger.error(
                    "claims: renewing %d claim(s) failed; trying again in %.2f s: %s",
                    len(held),
                    self._settings.lease / 3,
                    exc,
                    exc_info=not self._failing,  # the traceback once per outage
                )
                self._failing = True
                return
            # Unreachable for a whole lease: the claims may be someone else's by now; stop
            # every attempt rather than run unfenced.
            lost = list(held)
            for run_id in lost:
                logger.error(
                    "claims: the store was unreachable for a whole lease (%.1f s): run %r"
                    " is stopped here (its claim may be another runtime's by now)",
                    self._settings.lease,
                    run_id,
                    extra={"run_id": run_id},
                )
        else:
            if self._failing:
                logger.info("claims: renewing works again")
                self._failing = False
            self._good_since = now
        for run_id in lost:
            if self._host.lose(run_id, "its claim was lost (lease expired or superseded)"):
                logger.warning(
                    "claims: the claim on run %r was lost (lease expired or superseded):"
                    " its attempt stops here and commits nothing more",
                    run_id,
                    extra={
                        "run_id": run_id,
                        "worker_id": self._settings.owner,
                        "event": "lost_claim",
                    },
                )
            else:
                # Its attempt ended while the renewal was in flight, and its end commit
                # dropped the claim: nothing was lost.
                logger.debug("claims: run %r ended during a renewal", run_id)
