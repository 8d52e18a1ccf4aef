"""Keeping claims: the claim book (the claims this runtime holds, kept for the supervisor
through the kernel's `Claims` port, with `NoClaims` for a store without claims), and its
keeper. The lease of every root run this runtime executes is renewed every third of the
lease; a claim the store says is lost (superseded, released, expired) stops its
attempt at once, and so does every claim if the store cannot be reached for a whole lease.

A renewal that fails is logged (logger ``awaken_trio.worker``) and tried again at the next
tick; it never ends the keeper."""

from __future__ import annotations

import contextlib
import logging
from typing import final

import trio
from trio_util import periodic

from .._core import ClaimSettings, DurableStore, ServingHost

logger = logging.getLogger("awaken_trio.worker")


@final
class ClaimBook:
    """The claims this runtime holds on a durable store: root run id -> epoch.

    Invariant: `held` names exactly the claims the keeper renews; a run leaves it when its
    attempt here is over (`forget`, `release`) or its claim is lost.
    """

    def __init__(self, settings: ClaimSettings, store: DurableStore) -> None:
        self.settings: ClaimSettings = settings
        self.store = store
        self.held: dict[str, int] = {}

    def hold(self, run_id: str, epoch: int) -> None:
        self.held[run_id] = epoch

    def forget(self, run_id: str) -> None:
        self.held.pop(run_id, None)

    async def release(self, run_id: str) -> None:
        self.held.pop(run_id, None)
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self.store.release(self.settings.owner, run_id)


@final
class NoClaims:
    """The claim book of a store without claims: nothing is ever held."""

    settings: None = None

    def hold(self, run_id: str, epoch: int) -> None:
        pass

    def forget(self, run_id: str) -> None:
        pass

    async def release(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()


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
                    extra={"run_id": run_id},
                )
            else:
                # Its attempt ended while the renewal was in flight, and its end commit
                # dropped the claim: nothing was lost.
                logger.debug("claims: run %r ended during a renewal", run_id)
