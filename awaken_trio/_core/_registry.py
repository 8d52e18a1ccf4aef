"""The active-attempt registry and the thread gate.

Both are plain dicts changed only by synchronous code, so no await can interleave a
half-done update. Entries are removed as soon as they are unused: the maps hold one entry
per active attempt or busy thread, never one per run ever seen.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, final

import attrs
import trio

if TYPE_CHECKING:
    from ._attempt import Attempt


@final
@attrs.define(eq=False)
class AttemptRegistry:
    """Maps a run id, and a thread id, to the run's current attempt.

    Generation-aware: registering a replacement attempt overwrites the entry, and an
    attempt's removal only removes the entry if it is still that attempt's generation.
    """

    _by_run: dict[str, Attempt] = attrs.field(factory=dict, init=False)
    _by_thread: dict[str, Attempt] = attrs.field(factory=dict, init=False)

    def register(self, attempt: Attempt) -> None:
        self._by_run[attempt.run_id] = attempt
        self._by_thread[attempt.thread_id] = attempt

    def deregister(self, attempt: Attempt) -> bool:
        """Remove ``attempt`` if it is still the current generation; True if removed."""
        current = self._by_run.get(attempt.run_id)
        if current is None or current.generation != attempt.generation:
            return False
        del self._by_run[attempt.run_id]
        if self._by_thread.get(attempt.thread_id) is current:
            del self._by_thread[attempt.thread_id]
        return True

    def get(self, run_id: str) -> Attempt | None:
        return self._by_run.get(run_id)

    def on_thread(self, thread_id: str) -> Attempt | None:
        return self._by_thread.get(thread_id)

    def all(self) -> list[Attempt]:
        return list(self._by_run.values())

    def __len__(self) -> int:
        return len(self._by_run)


@final
@attrs.define(eq=False)
class GateWaiter:
    """A place in a thread's FIFO queue; ``granted`` once the thread is handed over."""

    thread_id: str
    holder: object
    granted: bool = False
    _event: trio.Event = attrs.field(factory=trio.Event, init=False)

    async def wait(self) -> None:
        await self._event.wait()

    def _grant(self) -> None:
        self.granted = True
        self._event.set()


@final
@attrs.define(eq=False)
class ThreadGate:
    """One holder per thread id; later arrivals wait in FIFO order.

    Freeing a thread hands it straight to the first waiter, so no later arrival can jump
    the queue, and the entries disappear when the last holder leaves with nobody waiting.
    """

    # The holder of each busy thread, and the queue of each thread that has waiters (most
    # never have one, so a busy thread costs one dict entry and no object of its own).
    _holders: dict[str, object] = attrs.field(factory=dict, init=False)
    _waiters: dict[str, deque[GateWaiter]] = attrs.field(factory=dict, init=False)

    def try_acquire(self, thread_id: str, holder: object) -> bool:
        if thread_id in self._holders:
            return False
        self._holders[thread_id] = holder
        return True

    def enqueue(self, thread_id: str, holder: object) -> GateWaiter:
        """Queue ``holder`` behind the thread's current holder (the thread must be busy)."""
        assert thread_id in self._holders
        waiter = GateWaiter(thread_id, holder)
        waiters = self._waiters.get(thread_id)
        if waiters is None:
            waiters = self._waiters[thread_id] = deque()
        waiters.append(waiter)
        return waiter

    def free(self, thread_id: str, holder: object) -> None:
        """Free the thread if ``holder`` holds it; a no-op otherwise."""
        if self._holders.get(thread_id, self) is not holder:
            return
        waiters = self._waiters.get(thread_id)
        if waiters:
            waiter = waiters.popleft()
            if not waiters:
                del self._waiters[thread_id]
            self._holders[thread_id] = waiter.holder
            waiter._grant()
        else:
            del self._holders[thread_id]

    def withdraw(self, waiter: GateWaiter) -> None:
        """Leave the queue; a waiter already handed the thread passes it on."""
        if waiter.granted:
            self.free(waiter.thread_id, waiter.holder)
            return
        waiters = self._waiters.get(waiter.thread_id)
        if waiters and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[waiter.thread_id]

    def holder(self, thread_id: str) -> object | None:
        return self._holders.get(thread_id)

    def __len__(self) -> int:
        return len(self._holders)
