"""Following committed events."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, final

import trio

from ._errors import UnknownRun
from ._state import Ended, EventKind, RunEvent
from ._storage import read_store
from ._util import NoPublicConstructor

if TYPE_CHECKING:
    from ._kernel import Kernel
    from ._storage import Store


@final
class EventStream(metaclass=NoPublicConstructor):
    """An async iterator over committed `RunEvent`s (see `Runtime.events`), whichever
    runtime committed them.

    A plain class rather than an async generator, so breaking out of ``async for`` needs
    no ``aclosing`` and nothing is left suspended.
    """

    _obtained_from = "runtime.events() returns one"

    def __init__(self, kernel: Kernel, run_id: str | None, *, after: int, follow: bool) -> None:
        self._store: Store = kernel.store
        self._kernel = kernel
        self._mailbox = kernel.mailbox
        self._run_id = run_id
        self._follow = follow
        # The seq of the last event handed out: the history starts after it.
        self._seq = after
        self._buffer: deque[RunEvent] = deque()
        self._checked = run_id is None
        self._finished = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> RunEvent:
        await trio.lowlevel.checkpoint()  # every step is a checkpoint, buffered or not
        while True:
            if self._buffer:
                event = self._buffer.popleft()
                self._seq = event.seq
                if (
                    self._run_id is not None
                    and event.kind == EventKind.COMMITTED
                    and isinstance(event.state, Ended)
                ):
                    self._finished = True  # a run's story ends with its terminal event
                    self._buffer.clear()
                return event
            if self._finished:
                raise StopAsyncIteration
            if not self._checked:
                assert self._run_id is not None
                if (
                    await read_store(self._store.load(self._run_id), f"run {self._run_id!r}")
                    is None
                ):
                    raise UnknownRun(self._run_id)
                self._checked = True
            # Take the notification before reading, so a commit in between is not missed.
            changed = self._mailbox.changed_event()
            stopped = self._mailbox.stopped
            batch = await read_store(self._store.events_after(self._seq, self._run_id), "events")
            if batch:
                self._buffer.extend(batch)
                continue
            if not self._follow or stopped:
                self._finished = True
                raise StopAsyncIteration
            await self._kernel.changed(changed)
