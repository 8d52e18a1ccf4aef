"""Waiting on runs that run elsewhere (`EndFollowers`) on a store whose writers do not wait
for each other (`SettlingStore`): a seq taken from a commit's answer may be above what a
read of every run shows yet, with a smaller seq still to commit. The followers settle it
before they read from it, so an end committed below it still reaches its waiter.

The store here is a model of that store: a read of every run stops below the first seq not
final; a read of one run shows every event of it committed; ``settle`` waits until every
seq up to the one asked is final."""

from __future__ import annotations

from typing import cast

import trio
import trio.testing

from awaken_trio import EndCause, RunEvent, RunState
from awaken_trio._core import SettlingStore
from awaken_trio._core._follow import EndFollowers
from awaken_trio._core._kernel import Kernel
from awaken_trio._core._state import EventKind
from tests.wrapped_stores import WrappedStore

CANCELLED = RunState.Ended(EndCause.Cancelled())


class WatermarkStore(WrappedStore):
    """Events by seq, each committed or not yet; a seq taken but not committed holds every
    read of all runs below it. (Its other methods are the memory store's, unused.)"""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[int, RunEvent] = {}
        self.taken: set[int] = set()  # seqs taken whose transactions have not ended
        self.final = trio.Event()  # set (and replaced) whenever a taken seq ends
        self.settles: list[int] = []
        self.reads: list[tuple[int, str | None]] = []

    def take(self, seq: int) -> None:
        self.taken.add(seq)

    def commit(self, event: RunEvent, *, final: bool = True) -> None:
        self.events[event.seq] = event
        if final:
            self.end(event.seq)

    def end(self, seq: int) -> None:
        self.taken.discard(seq)
        self.final.set()
        self.final = trio.Event()

    def watermark(self) -> int:
        last = max([*self.events, *self.taken, 0])
        return min([seq - 1 for seq in self.taken] + [last])

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        await trio.lowlevel.checkpoint()
        self.reads.append((seq, run_id))
        top = self.watermark() if run_id is None else max([*self.events, 0])
        found = [
            event
            for s, event in sorted(self.events.items())
            if seq < s <= top and (run_id is None or event.run_id == run_id)
        ]
        return found[:limit]

    async def settle(self, seq: int) -> None:
        self.settles.append(seq)
        while self.watermark() < seq:
            await self.final.wait()
        await trio.lowlevel.checkpoint()


class Changes:
    """What `EndFollowers` needs of a kernel: a store, and a change notification."""

    def __init__(self, store: WatermarkStore) -> None:
        self.store = store
        self._event = trio.Event()

    def changed_event(self) -> trio.Event:
        return self._event

    async def changed(self, local: trio.Event, *, interval: float | None = None) -> bool:
        await local.wait()
        return True

    def publish(self) -> None:
        self._event.set()
        self._event = trio.Event()


def _event(seq: int, run_id: str, state: RunState) -> RunEvent:
    return RunEvent(seq, run_id, f"thread-{run_id}", 1, EventKind.COMMITTED, state, {}, 0.0)


def test_the_model_is_a_settling_store() -> None:
    assert isinstance(WatermarkStore(), SettlingStore)


async def test_an_end_committed_below_a_seq_followed_from_reaches_its_waiter() -> None:
    """Run "x" was queued at seq 1; its end took seq 2 and has not committed; this runtime's
    commit on "z" was answered with seq 3. A waiter on "z" from seq 3 and one on "x" from
    seq 1 both wait for seq 3 to settle; once "x"'s end commits, its waiter has it, and
    "z"'s waiter has its own end later."""
    store = WatermarkStore()
    changes = Changes(store)
    followers = EndFollowers(cast("Kernel", changes))
    store.commit(_event(1, "x", RunState.Queued()))
    store.take(2)  # "x"'s end, in flight
    store.commit(_event(3, "z", RunState.Queued()))  # answered: above the watermark
    assert store.watermark() == 1
    found: dict[str, RunState] = {}

    async def wait(run_id: str, since: int) -> None:
        found[run_id] = await followers.follow_end(run_id, since)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "z", 3)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(wait, "x", 1)
            await trio.testing.wait_all_tasks_blocked()
            # Both wait for seq 3 to settle; neither read past it from below it.
            assert store.settles == [3, 3]
            assert (3, None) not in store.reads
            assert found == {}
            store.commit(_event(2, "x", CANCELLED))
            changes.publish()
            await trio.testing.wait_all_tasks_blocked()
            assert found == {"x": CANCELLED}
            store.commit(_event(4, "z", CANCELLED))
            changes.publish()
    assert found == {"x": CANCELLED, "z": CANCELLED}


async def test_a_seq_known_final_is_not_settled_again() -> None:
    """Once a shared read went past a seq, waiters from it need no settle."""
    store = WatermarkStore()
    changes = Changes(store)
    followers = EndFollowers(cast("Kernel", changes))
    store.commit(_event(1, "x", RunState.Queued()))
    store.commit(_event(2, "x", CANCELLED))
    with trio.fail_after(10):
        assert await followers.follow_end("x", 1) == CANCELLED
        settles = list(store.settles)
        store.commit(_event(3, "y", RunState.Queued()))
        store.commit(_event(4, "y", CANCELLED))
        assert await followers.follow_end("y", 2) == CANCELLED
    assert store.settles == settles
