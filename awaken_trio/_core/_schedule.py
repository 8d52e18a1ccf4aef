"""The runtime's one timer: scheduled resumes (``ctx.sleep``), delayed starts, retries, and
the time limits of the runs this runtime holds.

A run this runtime ran that committed a ``scheduled_action`` ticket is resumed here when it
is due, while the runtime stays open; a serving runtime with its body picks it up
otherwise. Only one resume wins: the ticket fences it, and a run cancelled or stopped
before it is due is never resumed. A delayed start submitted here wakes the serving loops
here at its time. A run that failed here and waits to retry is tried again here at its
``retry_at``, while the runtime stays open (a serving runtime with its body may take it
first: the store's fence lets one start it). A run with a deadline or a queue timeout
that this runtime holds (started, submitted, queued or awaiting here) is ended when its
time comes, if it has not ended (a running attempt's own scope deadline usually comes
first).

However many runs wait, one task sleeps until the earliest time alone: no task or timer of
its own per run.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Literal, final

import trio

from ._errors import AwakenError
from ._policy import Deadlines, TimeLimit

Resume = Callable[[str, str], Awaitable[object]]
Clock = Callable[[], float]
Nudge = Callable[[], None]
Expire = Callable[[str, TimeLimit], Awaitable[object]]
Retry = Callable[[str, int], Awaitable[object]]

Action = Literal["resume", "eligible", "deadline", "queue_timeout", "retry"]
"""What a due entry does: resume a run, wake the serving loops, end a run at a limit, try
a failed run again."""


def _no_nudge() -> None:
    return None


async def _no_expiry(run_id: str, limit: TimeLimit) -> None:
    await trio.lowlevel.checkpoint()


async def _no_retry(run_id: str, generation: int) -> None:
    await trio.lowlevel.checkpoint()


@final
class Scheduler:
    """The due times of what this runtime waits for, and the task that acts on each when
    its time comes (`run`, a kernel service)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # (time, order, action, run id, correlation id): the order keeps entries of one
        # time in the order they were made, and the heap from comparing the rest.
        self._due: list[tuple[float, int, Action, str, str]] = []
        self._order = itertools.count()
        self._changed = trio.Event()

    def _push(
        self, when: float, action: Action, run_id: str = "", correlation_id: str = ""
    ) -> None:
        heapq.heappush(self._due, (when, next(self._order), action, run_id, correlation_id))
        self._changed.set()

    def schedule(self, wake_at: float, run_id: str, correlation_id: str) -> None:
        """Resume ``run_id`` at ``wake_at`` if ticket ``correlation_id`` is still live."""
        self._push(wake_at, "resume", run_id, correlation_id)

    def eligible_at(self, when: float) -> None:
        """A queued run may start at ``when`` (a delayed start, a retry's wait): the
        serving loops here look at the store again then."""
        self._push(when, "eligible")

    def retry_at(self, when: float, run_id: str, generation: int) -> None:
        """Try ``run_id`` again at ``when`` if it still waits ``Queued`` at ``generation``
        to retry (the serving loops here look at the store again then, too)."""
        self._push(when, "retry", run_id, str(generation))

    def limits(self, *, run_id: str, limits: Deadlines) -> None:
        """End ``run_id`` at its deadline, and at its queue deadline unless its first
        attempt has started by then, unless it has ended."""
        if limits.deadline is not None:
            self._push(limits.deadline, "deadline", run_id)
        if limits.queue_deadline is not None:
            self._push(limits.queue_deadline, "queue_timeout", run_id)

    def __len__(self) -> int:
        return len(self._due)

    async def run(
        self,
        resume: Resume,
        nudge: Nudge = _no_nudge,
        expire: Expire = _no_expiry,
        retry: Retry = _no_retry,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Act on each entry once it is due: ``resume(run_id, correlation_id)``,
        ``nudge()`` for a delayed start, ``expire(run_id, limit)`` at a run's limit,
        ``retry(run_id, generation)`` (and ``nudge()``) for a run waiting to retry."""
        task_status.started()
        while True:
            self._changed = trio.Event()
            if not self._due:
                await self._changed.wait()
                continue
            when, _, action, run_id, correlation_id = self._due[0]
            try:
                delay = when - self._clock()
            except Exception:
                delay = 1.0  # a failing clock: look again soon
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._changed.wait()
                continue
            heapq.heappop(self._due)
            if action == "eligible":
                nudge()
                continue
            # Resumed, ended or moved on meanwhile: the store decided, nothing to do.
            with contextlib.suppress(AwakenError):
                if action == "resume":
                    await resume(run_id, correlation_id)
                elif action == "retry":
                    nudge()
                    await retry(run_id, int(correlation_id))
                else:
                    await expire(run_id, action)
