"""One follower of the store's events for the whole dashboard, fanned out to every open
page.

Each open page holds a server-sent-events stream. Rather than each stream reading the
store's whole history (`Runtime.events` starts at the first event), one task follows
``runtime.events(follow=True)`` and hands each new event to every subscriber's bounded
channel. It also keeps, per run, what its last event was (its kind and detail, in short):
the runs table's "last event" column, which the run records do not hold.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import attrs
import trio

from .. import RunEvent, Runtime
from .._face.shapes import event_summary

SUBSCRIBER_BUFFER: Final = 1000
"""Events a page's stream may fall behind by before the stream is closed (the page
reconnects and reloads what it shows, so a slow page never holds the others back)."""

ACTIVITY_KEPT: Final = 100_000
"""Runs whose first and last event the hub remembers (the least recently active go
first), so a long-lived dashboard does not grow without limit."""


@attrs.frozen
class Activity:
    """What the runs table shows of a run's events: when the first was committed (its age),
    when it first ran and when it ended (its duration), and the kind, time and seq of the
    last, and its kind and detail in short (`text`)."""

    created_at: float
    last_kind: str
    last_at: float
    last_seq: int
    last_text: str


class EventHub:
    """Follows the store's events once and fans them out (see the module's docstring).

    `run` is the hub's task, started with ``nursery.start``; `close` ends every stream (at
    shutdown, before the server waits for its open requests).
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._activity: OrderedDict[str, Activity] = OrderedDict()
        self._subscribers: set[trio.MemorySendChannel[RunEvent]] = set()
        self._seq = 0
        self._closed = False
        # Set when the hub closes (at shutdown): streams that do not go through it end too.
        self.closed = trio.Event()

    @property
    def seq(self) -> int:
        """The seq of the last event the hub has seen."""
        return self._seq

    def activity(self, run_id: str) -> Activity | None:
        return self._activity.get(run_id)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the history (so the table's columns are known before the first page is
        served), report started, then follow new events until cancelled or the runtime
        closes; then every stream ends."""
        try:
            async for event in self._runtime.events(follow=False):
                self._note(event)
            task_status.started()
            # The following stream starts again from the first event: what the history
            # read already saw is skipped by seq.
            async for event in self._runtime.events(follow=True):
                if event.seq <= self._seq:
                    continue
                self._note(event)
                self._publish(event)
        finally:
            self.close()

    def close(self) -> None:
        """End every stream, and refuse new ones (they end at once)."""
        self._closed = True
        self.closed.set()
        for channel in self._subscribers:
            channel.close()
        self._subscribers.clear()

    @contextmanager
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[RunEvent]]:
        """A channel of the events committed from now on; it ends when the hub closes, or
        when its reader falls more than `SUBSCRIBER_BUFFER` events behind."""
        send, receive = trio.open_memory_channel[RunEvent](SUBSCRIBER_BUFFER)
        if self._closed:
            send.close()
        else:
            self._subscribers.add(send)
        try:
            with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()

    def _note(self, event: RunEvent) -> None:
        self._seq = event.seq
        known = self._activity.pop(event.run_id, None)
        created = event.at if known is None else known.created_at
        self._activity[event.run_id] = Activity(
            created, event.kind, event.at, event.seq, event_summary(event.kind, event.detail)
        )
        while len(self._activity) > ACTIVITY_KEPT:
            self._activity.popitem(last=False)

    def _publish(self, event: RunEvent) -> None:
        for channel in list(self._subscribers):
            try:
                channel.send_nowait(event)
            except trio.WouldBlock:
                # Too far behind: end its stream rather than buffer without limit.
                self._subscribers.discard(channel)
                channel.close()
