"""Keeping claims: the lease of every root run this runtime executes is renewed every third
of the lease; a claim the store says is lost (superseded, released, expired) stops its
attempt at once, and so does every claim if the store cannot be reached for a whole lease."""

from __future__ import annotations

import contextlib
from typing import final

import trio
from trio_util import periodic

from .._core._storage import DurableStore
from .._core._supervisor import Supervisor


@final
class ClaimKeeper:
    def __init__(self, supervisor: Supervisor, store: DurableStore) -> None:
        assert supervisor.claims is not None
        self._supervisor = supervisor
        self._store = store
        self._settings = supervisor.claims
        self._last_renewed: float | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with contextlib.aclosing(periodic(self._settings.lease / 3)) as ticks:
            async for _ in ticks:
                await self.renew()

    async def renew(self) -> None:
        supervisor = self._supervisor
        held = dict(supervisor.held)
        if not held:
            return
        # How long the store was unreachable is measured on Trio's clock, here; the
        # leases themselves run on the store's clock, never on the runtime's ``clock=``.
        now = trio.current_time()
        try:
            lost = await self._store.renew(self._settings.owner, held, self._settings.lease)
        except Exception:
            # Unreachable: once a whole lease has passed since the last renewal, the claims
            # may be someone else's; stop every attempt rather than run unfenced.
            if self._last_renewed is not None and now - self._last_renewed < self._settings.lease:
                return
            lost = list(held)
        else:
            self._last_renewed = now
        for run_id in lost:
            supervisor.lose(run_id, "its claim was lost (lease expired or superseded)")
