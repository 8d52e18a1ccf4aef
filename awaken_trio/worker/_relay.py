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
        version = await self._store.version()
        if version == self._version:
            return
        self._version = version
        self._supervisor.store_changed_elsewhere()
        registry = self._supervisor.registry
        active = [a.run_id for a in registry.all() if not a.sealed]
        if not active:
            return
        for command in await self._store.commands(active, self._last_command):
            self._last_command = max(self._last_command, command.id)
            attempt = registry.get(command.run_id)
            if attempt is not None and not attempt.sealed:
                attempt.apply_stored(command.id, command.kind, command.payload, command.reason)
        for run_id, state in (await self._store.states(active)).items():
            attempt = registry.get(run_id)
            if isinstance(state, Ended) and attempt is not None and not attempt.sealed:
                # Ended by another runtime while its attempt runs here: the attempt stops
                # at once and commits nothing (the store holds the truth); then it lets
                # its claim go, which frees the run's thread.
                why = f"the run was ended elsewhere: {state!r}"
                attempt.request_end(lost(why, claim_lost=False))
