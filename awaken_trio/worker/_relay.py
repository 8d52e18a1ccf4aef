"""Control from other processes: the store is polled for changes (its version), and what
other runtimes did is relayed to the attempts here: commands sent to them (messages, pause,
wake, cancel), and ends committed elsewhere (``cancel_run``/``stop_run`` from another
process), which stop the attempt at once. The stored state is the truth; the poll only
hastens it, and is bounded by ``poll`` seconds. A poll that fails is logged (logger
``awaken_trio.worker``, once per outage) and tried again a ``poll`` later; it never ends
the relay."""

from __future__ import annotations

import contextlib
import logging
from typing import final

import trio
from trio_util import periodic

from .._core._attempt import lost
from .._core._state import Ended
from .._core._storage import DurableStore
from .._core._supervisor import Supervisor

logger = logging.getLogger("awaken_trio.worker")


@final
class StoreRelay:
    def __init__(self, supervisor: Supervisor, store: DurableStore) -> None:
        assert supervisor.claims is not None
        self._supervisor = supervisor
        self._store = store
        self._poll = supervisor.claims.poll
        self._version: int | None = None
        # The highest command id read so far. Every read covers every attempt here, so a
        # command of an attempt the relay already knew with a lower id was in an earlier
        # read (ids grow in the order commands are stored); an attempt it did not know yet
        # is read from the start instead (`Attempt.relayed`).
        self._last_command = 0
        self._failing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with contextlib.aclosing(periodic(self._poll)) as ticks:
            async for _ in ticks:
                try:
                    await self.poll()
                except Exception as exc:  # an unreachable store: poll again next tick
                    if not self._failing:
                        logger.warning(
                            "relay: polling the store failed; trying again every %.2f s: %s",
                            self._poll,
                            exc,
                            exc_info=exc,
                        )
                    self._failing = True
                else:
                    if self._failing:
                        logger.info("relay: polling the store works again")
                    self._failing = False

    async def poll(self) -> None:
        supervisor = self._supervisor
        version = await self._store.version()
        registry = supervisor.registry
        # Attempts waiting here for their thread are read too: a cancel ends them at once.
        attempts = [a for a in (*registry.all(), *supervisor.queued.values()) if not a.sealed]
        fresh = any(not a.relayed for a in attempts)
        if version == self._version and not fresh:
            return
        if version != self._version:
            self._version = version
            supervisor.store_changed_elsewhere()
        if not attempts:
            return
        after = 0 if fresh else self._last_command
        for command in await self._store.commands([a.run_id for a in attempts], after):
            self._last_command = max(self._last_command, command.id)
            attempt = registry.get(command.run_id) or supervisor.queued.get(command.run_id)
            if attempt is not None and not attempt.sealed:
                attempt.apply_stored(command.id, command.kind, command.payload, command.reason)
        for attempt in attempts:
            attempt.relayed = True
        active = [a.run_id for a in attempts if a.started]
        if not active:
            return
        for run_id, state in (await self._store.states(active)).items():
            attempt = registry.get(run_id)
            if isinstance(state, Ended) and attempt is not None and not attempt.sealed:
                # Ended by another runtime while its attempt runs here: the attempt stops
                # at once and commits nothing (the store holds the truth); then it lets
                # its claim go, which frees the run's thread.
                why = f"the run was ended elsewhere: {state!r}"
                attempt.request_end(lost(why, claim_lost=False))
