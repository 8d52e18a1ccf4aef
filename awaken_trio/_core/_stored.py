"""Commands stored for runs before their attempts began, read for attempts that begin
together in one store read.

A serving runtime claims runnable runs in batches, and each attempt it starts must first
take the commands stored for its run while it was queued (`Supervisor.load_commands`). The
package's stores hand them over with the start itself (`Accepted.commands`, read in the
start's own transaction); a store that leaves them to the runtime (None) is read here. The
attempts that begin in one pass of the scheduler join one load: the first waits a
checkpoint for the others, then reads the commands of every run in the load with one
`DurableStore.commands` call. One load reads at a time; attempts that arrive meanwhile form
the next.
"""

from __future__ import annotations

import contextlib
from typing import final

import attrs
import trio

from ._claims import ClaimedAttempt
from ._storage import DurableStore


@final
@attrs.define(eq=False)
class _Load:
    attempts: list[ClaimedAttempt] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    read: bool = False  # the read was made (its commands handed over, or it failed)


@final
class StoredCommandLoads:
    """The loads of one runtime's durable store."""

    def __init__(self, store: DurableStore) -> None:
        self._store = store
        self._gathering: _Load | None = None  # the next load, taking attempts
        self._reading: trio.Event | None = None  # set when the load being read is done

    async def load(self, attempt: ClaimedAttempt) -> None:
        """Hand ``attempt`` the commands stored for its run. A store error is dropped: the
        relay delivers stored commands to a running attempt anyway."""
        while True:
            load = self._gathering
            if load is not None:
                load.attempts.append(attempt)
                await load.done.wait()
            else:
                load = self._gathering = _Load([attempt])
                try:
                    await self._read(load)
                finally:
                    if self._gathering is load:  # cancelled before it was read
                        self._gathering = None
                    load.done.set()
            if load.read:
                return
            # The attempt that was to read this load was cancelled first: read again.

    async def _read(self, load: _Load) -> None:
        while self._reading is not None:
            await self._reading.wait()
        await trio.lowlevel.checkpoint()  # the attempts beginning in this pass join
        self._gathering = None
        self._reading = load.done
        try:
            by_run = {a.run_id: a for a in load.attempts}
            with contextlib.suppress(Exception):
                for command in await self._store.commands(list(by_run)):
                    by_run[command.run_id].load_stored(
                        command.id, command.kind, command.payload, command.reason
                    )
            load.read = True
        finally:
            self._reading = None
