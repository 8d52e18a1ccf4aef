"""Scheduled resumes (``ctx.sleep``): a run this runtime ran that committed a
``scheduled_action`` ticket is resumed here when it is due, while the runtime stays open; a
serving runtime with its body picks it up otherwise. Only one resume wins: the ticket fences
it, and a run cancelled or stopped before it is due is never resumed."""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Awaitable, Callable
from typing import final

import trio

from ._errors import AwakenError

Resume = Callable[[str, str], Awaitable[object]]
Clock = Callable[[], float]
Nudge = Callable[[], None]

_ELIGIBLE = ""
"""The run id of an entry that only wakes the serving loops (`Scheduler.eligible_at`)."""


def _no_nudge() -> None:
    return None


@final
class Scheduler:
    """The runtime's one timer: the due times of the scheduled resumes committed here, and
    of the delayed starts submitted here, and the task that acts on each when its time
    comes (`run`, a kernel service). However many runs wait, it sleeps until the earliest
    time alone: no task or timer of its own per run."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._due: list[tuple[float, str, str]] = []
        self._changed = trio.Event()

    def schedule(self, wake_at: float, run_id: str, correlation_id: str) -> None:
        heapq.heappush(self._due, (wake_at, run_id, correlation_id))
        self._changed.set()

    def eligible_at(self, when: float) -> None:
        """A queued run may start at ``when`` (a delayed start, a retry's wait): the
        serving loops here look at the store again then."""
        heapq.heappush(self._due, (when, _ELIGIBLE, ""))
        self._changed.set()

    def __len__(self) -> int:
        return len(self._due)

    async def run(
        self,
        resume: Resume,
        nudge: Nudge = _no_nudge,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Resume each run with ``resume(run_id, correlation_id)`` once it is due; call
        ``nudge()`` once a delayed start's time has come."""
        task_status.started()
        while True:
            self._changed = trio.Event()
            if not self._due:
                await self._changed.wait()
                continue
            wake_at, run_id, correlation_id = self._due[0]
            try:
                delay = wake_at - self._clock()
            except Exception:
                delay = 1.0  # a failing clock: look again soon
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._changed.wait()
                continue
            heapq.heappop(self._due)
            if run_id == _ELIGIBLE:
                nudge()
                continue
            # Resumed, cancelled or stopped meanwhile: the ticket decided, nothing to do.
            with contextlib.suppress(AwakenError):
                await resume(run_id, correlation_id)
