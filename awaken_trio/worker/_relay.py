"""Control from other processes: the store is polled for changes (its version), and what
other runtimes did is relayed to the attempts here: commands sent to them (messages, pause,
wake, cancel), and ends committed elsewhere (``cancel_run``/``stop_run`` from another
process), which stop the attempt at once. The stored state is the truth; the poll only
hastens it, and is bounded by ``poll`` seconds. A store that notices its own changes (SQLite,
through the kernel's notices of writes to its file) is looked at when one may have come,
and not on a timer while nothing is written."""

from __future__ import annotations

import contextlib
import math
from typing import Final, Protocol, final, runtime_checkable

import trio
from trio_util import periodic

from .._core._attempt import lost
from .._core._state import Ended
from .._core._storage import DurableStore
from .._core._supervisor import Supervisor

_LOOK_ANYWAY: Final = 1.0
"""Seconds: a store that notices changes is still looked at this often (a notice is a hint,
and a hint may be missed)."""


_FOLLOW_FOR: Final = 1.0
"""Seconds after a notice during which the relay also looks every poll interval, notice or
not (a commit can take that long to show, on a busy disk, after its last write)."""

FOLLOW_UPS: Final = (0.002, 0.004, 0.008, 0.016, 0.032)
"""Seconds between the looks that follow a notice at once, until one sees the change: a
commit shows milliseconds after its first write (it is synced and published after it)."""


@runtime_checkable
class NoticesChanges(Protocol):
    """A store that can tell when it may have changed, so the relay need not poll it on a
    timer (the SQLite store, through the kernel's file notices)."""

    def notices_changes(self) -> bool: ...

    async def wait_for_change(self, at_most: float) -> bool: ...


@final
class StoreRelay:
    def __init__(self, supervisor: Supervisor, store: DurableStore) -> None:
        assert supervisor.claims is not None
        self._supervisor = supervisor
        self._store = store
        self._poll = supervisor.claims.poll
        self._version: int | None = None
        self._last_command = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        store = self._store
        if isinstance(store, NoticesChanges) and store.notices_changes():
            # Told of every write: look as soon as one may have come from elsewhere; for
            # a while after one, also every poll interval; while nothing is written, sleep
            # (looking once in a while, as a notice is only a hint).
            noticed_at = -math.inf
            while True:
                recent = trio.current_time() - noticed_at < _FOLLOW_FOR
                if await store.wait_for_change(self._poll if recent else _LOOK_ANYWAY):
                    noticed_at = trio.current_time()
                    await self._follow_up()
                else:
                    await self._look()
        async with contextlib.aclosing(periodic(self._poll)) as ticks:
            async for _ in ticks:
                with contextlib.suppress(Exception):  # an unreachable store: poll again
                    await self.poll()

    async def _follow_up(self) -> None:
        """Look now and, until a look shows a change, again a few times within some
        milliseconds; then rest a poll interval (what comes meanwhile waits for the next
        look)."""
        for pause in FOLLOW_UPS:
            if await self._look():
                break
            await trio.sleep(pause)
        await trio.sleep(self._poll)

    async def _look(self) -> bool:
        with contextlib.suppress(Exception):  # an unreachable store: look again
            return await self.poll()
        return False

    async def poll(self) -> bool:
        """Relay what changed in the store since the last poll; whether anything did."""
        version = await self._store.version()
        if version == self._version:
            return False
        self._version = version
        self._supervisor.store_changed.set()
        registry = self._supervisor.registry
        active = [a.run_id for a in registry.all() if not a.sealed]
        if not active:
            return True
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
        return True
