"""Control from other processes: the store is polled for changes (its version), and what
other runtimes did is relayed to the attempts here: commands sent to them (messages, pause,
wake, cancel), and ends committed elsewhere (``cancel_run``/``stop_run`` from another
process), which stop the attempt at once. The stored state is the truth; the poll only
hastens it, and is bounded by ``poll`` seconds. A store that notices its own changes (SQLite,
through the kernel's notices of writes to its file) is looked at when one may have come,
and not on a timer while nothing is written. A look that fails is logged (logger
``awaken_trio.worker``, once per outage) and tried again; it never ends the relay."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Collection, Iterable
from typing import Final, Protocol, final, runtime_checkable

import trio
from trio_util import periodic

from .._core import (
    ClaimSettings,
    ControlLook,
    DurableStore,
    Ended,
    HeardEnd,
    ServingHost,
    StoredCommand,
    Watched,
)

logger = logging.getLogger("awaken_trio.worker")

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


@runtime_checkable
class NoticesStreams(Protocol):
    """A store that hears another runtime's stream writes as they commit (PostgreSQL, by
    its NOTIFY payload), so readers of streams here need not wait for a look at the
    store."""

    def notice_streams(self, wake: Callable[[], None] | None) -> None: ...


@runtime_checkable
class NoticesControl(Protocol):
    """A store that can tell a commit that controls a run (a command stored, a run ended
    while its attempt runs) from other commits (PostgreSQL, by its NOTIFY payload)."""

    async def wait_for_control(self, at_most: float) -> bool: ...


@runtime_checkable
class HearsEnds(Protocol):
    """A store whose notices name the runs another runtime ended while their attempt is
    live (PostgreSQL, in the NOTIFY sent after its transaction's COMMIT), so their attempts
    stop without waiting for a look at the store."""

    def heard_ends(self) -> list[HeardEnd]: ...


@runtime_checkable
class LooksAtControl(Protocol):
    """A store that reads a whole look in one call (PostgreSQL: one round trip), where a
    store without it takes three (`DurableStore.version`, ``commands``, ``states``)."""

    async def look_at_control(
        self,
        run_ids: Collection[str],
        after: int,
        running: Collection[str],
        *,
        anyway: bool,
    ) -> ControlLook: ...


@final
class StoreRelay:
    def __init__(self, host: ServingHost, store: DurableStore, settings: ClaimSettings) -> None:
        self._host = host
        self._store = store
        self._poll = settings.poll
        self._version: int | None = None
        # The highest command id read so far. Every read covers every attempt here, so a
        # command of an attempt the relay already knew with a lower id was in an earlier
        # read (ids grow in the order commands are stored); an attempt it did not know yet
        # is read from the start instead (`Watched.fresh`).
        self._last_command = 0
        self._failing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        store = self._store
        if not isinstance(store, NoticesStreams):
            task_status.started()
            await self._watch()
            return
        store.notice_streams(self._wake_readers())
        try:
            task_status.started()
            await self._watch()
        finally:
            store.notice_streams(None)

    def _wake_readers(self) -> Callable[[], None]:
        """A thread-safe callback that wakes this runtime's stream readers."""
        token = trio.lowlevel.current_trio_token()
        wake = self._host.streams_written_elsewhere

        def heard() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(wake)

        return heard

    async def _watch(self) -> None:
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
                    self._stop_heard()
                    await self._follow_up()
                else:
                    await self._look()
        async with contextlib.aclosing(periodic(self._poll)) as ticks:
            async for _ in ticks:
                await self._look()

    async def _follow_up(self) -> None:
        """Look now and, until a look shows a change, again a few times within some
        milliseconds; then rest a poll interval (what comes meanwhile waits for the next
        look), or less, on a store that can tell, when a run is controlled meanwhile (a
        command stored, a run ended elsewhere): a cancel does not wait for the rest."""
        store = self._store
        while True:
            for pause in FOLLOW_UPS:
                if await self._look():
                    break
                await trio.sleep(pause)
            if not isinstance(store, NoticesControl):
                await trio.sleep(self._poll)
                return
            if not await store.wait_for_control(self._poll):
                return
            # A run was controlled during the rest: look again at once.
            self._stop_heard()

    def _stop_heard(self) -> None:
        """Stop the attempts whose end a notice announced (`HearsEnds`), before the look
        that would find it: a cancel from another process costs no read here."""
        store = self._store
        if isinstance(store, HearsEnds):
            for end in store.heard_ends():
                self._host.heard_end(end)

    async def _look(self) -> bool:
        """`poll`, with a failure logged (once per outage) instead of raised."""
        try:
            changed = await self.poll()
        except Exception as exc:  # an unreachable store: look again later
            if not self._failing:
                logger.error(
                    "relay: looking at the store failed; trying again: %s", exc, exc_info=exc
                )
            self._failing = True
            return False
        if self._failing:
            logger.info("relay: looking at the store works again")
        self._failing = False
        return changed

    async def poll(self) -> bool:
        """Relay what changed in the store since the last poll; whether anything did.
        An attempt the relay has not read yet is read from its first stored command, even
        when the store's version has not moved (its command may have come before)."""
        host = self._host
        store = self._store
        if isinstance(store, LooksAtControl):
            watched = host.watched()
            fresh = watched.fresh
            look = await store.look_at_control(
                watched.run_ids,
                0 if fresh else self._last_command,
                watched.running(),
                anyway=fresh,
            )
            return self._relay(look, watched)
        version = await store.version()
        # Attempts waiting here for their thread are read too: a cancel ends them at once.
        watched = host.watched()
        if not self._moved(version, watched):
            return False
        run_ids = watched.run_ids
        if not run_ids:
            return True
        after = 0 if watched.fresh else self._last_command
        self._apply(await store.commands(run_ids, after), watched)
        active = watched.running()
        if not active:
            return True
        for run_id, state in (await store.states(active)).items():
            if isinstance(state, Ended):
                # Ended by another runtime while its attempt runs here.
                host.ended_elsewhere(run_id, state)
        return True

    def _relay(self, look: ControlLook, watched: Watched) -> bool:
        """Relay a look read in one call (`LooksAtControl`)."""
        # Read even with the version unmoved: a write may have landed between the reads.
        if not self._moved(look.version, watched) and not (look.commands or look.ended):
            return False
        if watched.run_ids:
            self._apply(look.commands, watched)
        for run_id, state in look.ended.items():
            self._host.ended_elsewhere(run_id, state)  # ended elsewhere, running here
        return True

    def _moved(self, version: int, watched: Watched) -> bool:
        """Whether there is anything to read: the version moved (and everything that waits
        on the store is woken), or an attempt's commands were never read."""
        if version != self._version:
            self._version = version
            self._host.store_changed_elsewhere()
            return True
        return watched.fresh

    def _apply(self, commands: Iterable[StoredCommand], watched: Watched) -> None:
        host = self._host
        for command in commands:
            self._last_command = max(self._last_command, command.id)
            host.apply_stored(command)
        watched.mark_relayed()
