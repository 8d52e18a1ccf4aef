"""Waiting for the end of runs whose attempts run elsewhere (`RunHandle.wait` on a run
another runtime executes), with one store read per change for every waiter of a runtime.

A waiter whose ``since`` is behind the shared cursor reads its own run's events once,
when it starts waiting (one from the cursor on, a handle on a run just submitted, needs
not: it starts with a shared read). After that, a change
(a commit here, or another runtime's, as the store signals it) wakes every waiter; the first
to look reads the store's events after a shared cursor (`Store.events_after`, every run) and
hands each waiter the first ``Awaiting`` or ``Ended`` of its run, while the others wait for
that read instead of reading their own run again. A submitter waiting on thousands of runs
then makes one read per change, not one per run per change.

Why no waiter misses its end. Seqs become visible in order (a store never shows a seq after
a greater one; DESIGN §3.1), so at any moment every seq up to the greatest visible one is
visible. A waiter is registered before its own read, and:

* the shared cursor is only ever a seq that was visible when a waiter registered (it starts,
  while nobody waits, at the greatest seq this runtime has seen, and then only moves forward
  through what shared reads return);
* so every event of its run up to the cursor at registration was visible then, and its own
  read (later) sees it, while every event after that cursor is returned by a shared read
  made after registration, which hands it over because the waiter is registered; a
  waiter whose ``since`` is not behind the cursor has no event up to it to miss.

A waiter takes the first end after its ``since`` in seq order: its own read's first, or else
the first a shared read handed it (shared reads go through the log in order).
"""

from __future__ import annotations

from typing import Final, final

import attrs
import trio

from ._state import Awaiting, Ended, EventKind, RunEvent, RunState
from ._storage import Store, read_store
from ._supervisor import Supervisor

PAGE: Final = 1000
"""Events a read asks for at once; a full page is followed by another read."""


@final
@attrs.define(eq=False)
class _Waiter:
    since: int
    found: RunState | None = None
    asleep: bool = False


def _end_of(event: RunEvent) -> RunState | None:
    if event.kind == EventKind.COMMITTED and isinstance(event.state, Awaiting | Ended):
        return event.state
    return None


@final
class EndFollowers:
    """The waiters of one runtime on runs that run elsewhere, and the shared read."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._store: Store = supervisor.store
        self._waiters: dict[str, list[_Waiter]] = {}
        # Invariant: ``_cursor`` is a seq that was visible when every current waiter
        # registered, or later read by a shared read (the module's docstring).
        self._cursor = 0
        self._seen = 0  # the greatest seq this runtime knows was visible
        # Shared reads: how many were started and finished, and the one in flight.
        self._started = 0
        self._finished = 0
        self._reading: trio.Event | None = None

    async def follow_end(self, run_id: str, since: int) -> RunState:
        """The first ``Awaiting`` or ``Ended`` the store commits for ``run_id`` after event
        ``since``, whichever runtime commits it."""
        supervisor = self._supervisor
        waiter = _Waiter(since)
        self._seen = max(self._seen, since)
        if not self._waiters:
            self._cursor = self._seen
        self._waiters.setdefault(run_id, []).append(waiter)
        try:
            # Take the notifications before reading, so a commit in between is not missed.
            local = supervisor.changed_event()
            # A waiter from the shared cursor on (a handle on a run just submitted) needs
            # no read of its own: every event after it is one a shared read returns.
            shared_only = since >= self._cursor
            if not shared_only:
                found = await self._read_own(run_id, waiter)
                if found is not None:
                    return found
            while waiter.found is None:
                if not shared_only:
                    waiter.asleep = True
                    try:
                        await supervisor.changed(local)
                    finally:
                        waiter.asleep = False
                    local = supervisor.changed_event()
                    if waiter.found is not None:
                        break
                shared_only = False
                await self._refresh()
            return waiter.found
        finally:
            waiters = self._waiters[run_id]
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[run_id]

    async def _read_own(self, run_id: str, waiter: _Waiter) -> RunState | None:
        """Read the waiter's run from its ``since``: its first end, if it has one."""
        while True:
            events = await read_store(
                self._store.events_after(waiter.since, run_id, PAGE),
                f"the events of run {run_id!r}",
            )
            for event in events:
                found = _end_of(event)
                if found is not None:
                    return found
            if events:
                waiter.since = events[-1].seq
                self._seen = max(self._seen, waiter.since)
            if len(events) < PAGE:
                return None

    async def _refresh(self) -> None:
        """Return after a shared read that started after this call did: the one this task
        makes, or one another waiter started meanwhile. A read in flight may have started
        before the change that woke the caller, so it is waited for, then one more."""
        wanted = self._started + 1
        while self._finished < wanted:
            reading = self._reading
            if reading is not None:
                await reading.wait()
                continue
            self._started += 1
            number = self._started
            self._reading = done = trio.Event()
            try:
                await self._read_shared()
                self._finished = max(self._finished, number)
            finally:
                # A read that failed or was cancelled finishes nothing: a waiter still
                # wanting one starts it.
                self._reading = None
                done.set()

    async def _read_shared(self) -> None:
        woken = False
        while True:
            events = await read_store(self._store.events_after(self._cursor, None, PAGE), "events")
            for event in events:
                found = _end_of(event)
                if found is None:
                    continue
                for waiter in self._waiters.get(event.run_id, ()):
                    if waiter.found is None and event.seq > waiter.since:
                        waiter.found = found
                        woken = woken or waiter.asleep
            if events:
                self._cursor = events[-1].seq
                self._seen = max(self._seen, self._cursor)
            if len(events) < PAGE:
                break
        if woken:
            # A waiter that slept through this read (it was made on another's timeout, not
            # on a change every waiter saw) is woken to take what it was handed.
            self._supervisor.mailbox.publish()
