"""Waiting for the end of runs whose attempts run elsewhere (`RunHandle.wait` on a run
another runtime executes), with one store read per change for every waiter of a runtime.

A waiter whose ``since`` is behind the shared cursor reads its own run's events once, when
it starts waiting, unless the ends the shared reads found reach back that far (they keep
the latest `REMEMBERED`, for every run, waited on or not): a submitter that waits on each
run it submits registers most of its waiters a little behind the cursor, which shared
reads for earlier waiters moved on meanwhile. One from the cursor on needs neither.
After that only one waiter, the leader, waits for changes (a commit here, or another
runtime's, as the store signals it); on each it reads the store's events after the shared
cursor (`Store.events_after`, every run) and hands each waiter the first ``Awaiting`` or
``Ended`` of its run. The others sleep until a shared read hands them their end, or the
lead when the leader leaves. A submitter waiting on thousands of runs then makes one read
and one wake-up per change, not one of each per run per change.

Why no waiter misses its end. A seq is *final* once it is committed and shown to every read
that starts afterwards, or never to be; a shared read shows seqs in order and only final
ones (`Store.events_after`). A seq this runtime took from a commit's answer may not be
final yet on a store whose writers do not wait for each other (`SettlingStore`);
``_settled`` is the greatest seq known final, and before a read relies on the cursor being
final, the store is asked to settle it (`_settle`). A waiter is registered before its own
read, and:

* the shared cursor starts, while nobody waits, at the greatest seq this runtime has seen,
  and then only moves forward through what shared reads return; each shared read, and each
  waiter's own read, starts only once the cursor is final;
* so every event of its run up to the cursor at registration is final before its own read,
  which sees it (a read of one run shows every event of it committed), while every event
  after that cursor is returned by a shared read made after registration, which hands it
  over because the waiter is registered; a waiter whose ``since`` is not behind the cursor
  has no event up to it to miss.

A waiter registered behind the cursor, but not behind ``_remembered_from``, needs no read of
its own: every end with a seq in (``_remembered_from``, cursor] was returned by a shared
read and is remembered (a shared read remembers each end it returns before the cursor
moves past it; one forgotten to keep the count bounded moves ``_remembered_from`` up to
its seq), so its first end up to the cursor is found there, and every end after the cursor
comes from a shared read, as above. The cursor moves otherwise only when nobody waits, to
a seq no shared read reached: what was remembered is forgotten then.

A waiter takes the first end after its ``since`` in seq order: its own read's first, or
the first remembered, or else the first a shared read handed it (shared reads go through
the log in order).
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import attrs
import trio

from ._kernel import Kernel
from ._state import Awaiting, Ended, EventKind, RunEvent, RunState
from ._storage import SettlingStore, Store, read_store

PAGE: Final = 1000
"""Events a read asks for at once; a full page is followed by another read."""

REMEMBERED: Final = 4096
"""The most ends (``Awaiting`` and ``Ended`` events) that shared reads found that a runtime
keeps for waiters yet to come, the latest ones."""


@final
@attrs.define(eq=False)
class _Waiter:
    since: int
    found: RunState | None = None
    # Set when ``found`` is, or when this waiter is to lead in place of one that left.
    wake: trio.Event = attrs.field(factory=trio.Event)


def _end_of(event: RunEvent) -> RunState | None:
    if event.kind == EventKind.COMMITTED and isinstance(event.state, Awaiting | Ended):
        return event.state
    return None


@final
class EndFollowers:
    """The waiters of one runtime on runs that run elsewhere, and the shared read."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._store: Store = kernel.store
        self._waiters: dict[str, list[_Waiter]] = {}
        # The registered waiters no shared read has handed an end yet, in the order they
        # came (a dict as an ordered set): the ones that may take the lead. Invariant: a
        # waiter is here from its registration until it is handed its end or leaves.
        self._unanswered: dict[_Waiter, None] = {}
        # Invariant: ``_cursor`` is a seq that was visible when every current waiter
        # registered, or later read by a shared read (the module's docstring).
        self._cursor = 0
        self._seen = 0  # the greatest seq this runtime knows was committed
        # Invariant: every seq up to ``_settled`` is final (the module's docstring).
        self._settled = 0
        self._settling = self._store if isinstance(self._store, SettlingStore) else None
        # Shared reads: how many were started and finished, and the one in flight.
        self._started = 0
        self._finished = 0
        self._reading: trio.Event | None = None
        # The one waiter that waits for changes and then reads for everyone; the others
        # sleep until they are handed an end or the lead. ``_local`` is the change
        # notification it waits on, taken before the last shared read started (so a
        # leader that takes over misses no change made since).
        self._leader: _Waiter | None = None
        self._local = trio.Event()
        # The ends shared reads found, by run and in seq order, and all of them in seq
        # order. Invariant: every end with a seq in (``_remembered_from``, ``_cursor``]
        # is in ``_ends``.
        self._ends: dict[str, list[tuple[int, RunState]]] = {}
        self._ends_in_order: deque[tuple[int, str]] = deque()
        self._remembered_from = 0

    async def follow_end(self, run_id: str, since: int) -> RunState:
        """The first ``Awaiting`` or ``Ended`` the store commits for ``run_id`` after event
        ``since``, whichever runtime commits it."""
        kernel = self._kernel
        waiter = _Waiter(since)
        self._seen = max(self._seen, since)
        if not self._waiters:
            if self._seen != self._cursor:
                # Past what shared reads read: the ends remembered no longer reach it.
                self._ends.clear()
                self._ends_in_order.clear()
                self._remembered_from = self._seen
            self._cursor = self._seen
            # Taken before this waiter reads, so a commit in between is not missed.
            self._local = kernel.changed_event()
        self._waiters.setdefault(run_id, []).append(waiter)
        self._unanswered[waiter] = None
        try:
            if since >= self._remembered_from:
                # Every end of its run up to the cursor is remembered (none, from the
                # cursor on: a handle on a run just submitted); after it, a shared read
                # is all it needs.
                for seq, state in self._ends.get(run_id, ()):
                    if seq > since:
                        await trio.lowlevel.checkpoint()
                        return state
                await self._refresh()
            else:
                await self._settle(self._cursor)
                found = await self._read_own(run_id, waiter)
                if found is not None:
                    return found
            while waiter.found is None:
                if self._leader is None:
                    self._leader = waiter
                if self._leader is waiter:
                    await kernel.changed(self._local)
                    self._local = kernel.changed_event()
                    await self._refresh()
                else:
                    await waiter.wake.wait()
                    waiter.wake = trio.Event()
            return waiter.found
        finally:
            waiters = self._waiters[run_id]
            waiters.remove(waiter)
            if not waiters:
                del self._waiters[run_id]
            self._unanswered.pop(waiter, None)
            if self._leader is waiter:
                self._hand_over()

    def _hand_over(self) -> None:
        """The leader leaves: the lead goes to a waiter still waiting for its end, woken to
        take it, or to nobody (the next waiter to register takes it). Only the leader
        hands over, once: when a shared read hands out thousands of ends at once, every
        one of their waiters leaves, and a search for a successor by each was quadratic.
        Invariant: while a waiter waits for its end, there is a leader or it is woken."""
        self._leader = None
        for other in self._unanswered:
            self._leader = other
            other.wake.set()
            return

    async def _settle(self, seq: int) -> None:
        """Return once every seq up to ``seq`` is final: at once if it is known to be (on a
        store that is not a `SettlingStore`, every seq it answered is)."""
        if seq <= self._settled:
            return
        if self._settling is not None:
            await read_store(self._settling.settle(seq), "the order of events")
        self._settled = max(self._settled, seq)

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
        await self._settle(self._cursor)
        while True:
            events = await read_store(self._store.events_after(self._cursor, None, PAGE), "events")
            for event in events:
                found = _end_of(event)
                if found is None:
                    continue
                self._remember(event.run_id, event.seq, found)
                for waiter in self._waiters.get(event.run_id, ()):
                    if waiter.found is None and event.seq > waiter.since:
                        waiter.found = found
                        del self._unanswered[waiter]
                        waiter.wake.set()
            if events:
                self._cursor = events[-1].seq
                # (A shared read shows final seqs alone.)
                self._settled = max(self._settled, self._cursor)
                self._seen = max(self._seen, self._cursor)
            if len(events) < PAGE:
                break

    def _remember(self, run_id: str, seq: int, end: RunState) -> None:
        """Keep an end a shared read found (before the cursor moves past it), forgetting
        the oldest beyond `REMEMBERED`."""
        self._ends.setdefault(run_id, []).append((seq, end))
        order = self._ends_in_order
        order.append((seq, run_id))
        if len(order) > REMEMBERED:
            oldest, oldest_run = order.popleft()
            kept = self._ends[oldest_run]
            del kept[0]  # its oldest: each run's ends are kept in seq order
            if not kept:
                del self._ends[oldest_run]
            self._remembered_from = oldest
