"""A serving runtime's worker row (DESIGN §3.11): registered when it starts serving,
seen with every claim renewal (the store does it in the renewal's transaction) or, while
it holds no claim, once every third of its lease; read by the serving loop for a drain
request; marked stopped when it stops serving. Rows of workers ended a day ago are deleted
by whichever serving runtime looks first, about once an hour.

The row is presence, never authority: whether an attempt may commit is its claim's epoch.
So a store that fails here is logged (logger ``awaken_trio.worker``) and tried again at
the next beat; a row deleted by hand is registered again; nothing a run holds depends on
it."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Collection, Mapping
from typing import Final, final

import trio

from .._core import (
    WORKERS_KEPT,
    BodyVersions,
    ClaimSettings,
    WorkerInfo,
    WorkerState,
    WorkerStore,
)

logger = logging.getLogger("awaken_trio.worker")

FORGET_EVERY: Final = 3600.0
"""Seconds (Trio's clock) between deletions of ended workers' rows by one runtime."""

END_PATIENCE: Final = 5.0
"""Seconds a runtime that stops serving waits for its row to be marked stopped."""


@final
class Presence:
    """This runtime's worker row, as its serving loop keeps it."""

    def __init__(
        self,
        store: WorkerStore,
        settings: ClaimSettings,
        served: Mapping[str, BodyVersions],
        concurrency: int,
    ) -> None:
        self.store = store
        self.info = WorkerInfo(
            worker_id=settings.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            bodies={name: served[name].version for name in sorted(served)},
            concurrency=concurrency,
            lease=settings.lease,
        )
        self.worker_id = settings.owner
        self._beat = settings.lease / 3
        self._look_every = settings.poll
        self._looked = -float("inf")
        self._forgot = -float("inf")
        self.registered = False
        self.draining = False

    async def register(self) -> None:
        try:
            await self.store.register_worker(self.info)
        except Exception as exc:
            logger.error(
                "worker %s: registering failed; trying again in %.2f s: %s",
                self.worker_id,
                self._beat,
                exc,
                extra={"worker_id": self.worker_id, "event": "worker_failed"},
            )
            return
        self.registered = True
        await self._forget_old()

    async def beat(self, active: Collection[str]) -> None:
        """Every third of the lease: seen, unless the claims it holds were renewed (then
        the renewal saw it); registered again if its row is gone."""
        while True:
            await trio.sleep(self._beat)
            if not self.registered:
                await self.register()
                continue
            if not active:
                with contextlib.suppress(Exception):  # logged by the next look, if it lasts
                    self._heard(await self.store.worker_seen(self.worker_id, 0))
            if trio.current_time() - self._forgot >= FORGET_EVERY:
                await self._forget_old()

    async def drain_requested(self) -> bool:
        """Whether the worker was asked to drain: its row, read at most once a poll
        interval (and stays so once it was)."""
        if self.draining:
            return True
        now = trio.current_time()
        if now - self._looked < self._look_every:
            return False
        self._looked = now
        try:
            stored = await self.store.worker_state(self.worker_id)
        except Exception as exc:
            logger.warning(
                "worker %s: reading its row failed (it keeps serving): %s",
                self.worker_id,
                exc,
                extra={"worker_id": self.worker_id},
            )
            return False
        self._heard(stored)
        return self.draining

    def _heard(self, stored: WorkerState | None) -> None:
        if stored is None and self.registered:
            logger.warning(
                "worker %s: its row is gone from the store (deleted by hand?); registering"
                " it again",
                self.worker_id,
                extra={"worker_id": self.worker_id, "event": "worker_reregistered"},
            )
            self.registered = False
        elif stored == "draining" and not self.draining:
            self.draining = True
            logger.info(
                "worker %s: draining: claiming nothing new, letting its runs finish",
                self.worker_id,
                extra={"worker_id": self.worker_id, "event": "drain"},
            )

    async def end(self) -> None:
        """Mark the row stopped (shielded, for a while at most)."""
        with trio.move_on_after(END_PATIENCE, shield=True):
            try:
                await self.store.end_worker(self.worker_id)
            except Exception as exc:
                logger.warning(
                    "worker %s: marking it stopped failed (it will read lost): %s",
                    self.worker_id,
                    exc,
                    extra={"worker_id": self.worker_id},
                )

    async def _forget_old(self) -> None:
        self._forgot = trio.current_time()
        try:
            gone = await self.store.forget_workers(WORKERS_KEPT)
        except Exception as exc:
            logger.warning("worker %s: deleting ended workers failed: %s", self.worker_id, exc)
            return
        if gone:
            logger.info("worker %s: deleted %d ended worker(s)", self.worker_id, gone)
