"""`Expiry`: a run ends at its time limits, whatever holds it.

A running attempt meets its deadline by itself: its scope carries it as its Trio deadline
(`run_attempt`), so a hung await is interrupted too. What has no attempt running is ended
here: the runtime's one timer (`Scheduler`) calls `Expiry.expire` for the runs this runtime
holds when their time comes, and on a durable store every serving loop turn asks the store
for the runs past a limit (`DeadlineStore.overdue`) and ends them with `Expiry.end_stored`,
whether or not it has their bodies. Each end is one commit fenced by the generation and
state it read, so a run that moved on meanwhile (it started, it was resumed, it ended) is
looked at again, never ended twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._admit import Here
from ._attempt import DEADLINE, QUEUE_TIMEOUT, EndRequest
from ._policy import TimeLimit
from ._state import Awaiting, Queued, RunRecord
from ._storage import Accepted

if TYPE_CHECKING:
    from ._admit import Admissions
    from ._finish import FinishBoundary
    from ._kernel import Kernel

_LOOKS = 4
"""A run moves on only a few times (queued, running, awaiting, ended): a look that keeps
finding it moved leaves it to the next one."""


def request_of(limit: TimeLimit) -> EndRequest:
    return DEADLINE if limit == "deadline" else QUEUE_TIMEOUT


def limit_holds(record: RunRecord, limit: TimeLimit) -> bool:
    """Whether ``limit`` still ends the run as ``record`` stands: a deadline ends a run that
    no attempt runs (queued or awaiting; a running one meets it in its own scope, or, its
    owner lost, in the attempt that recovers it); a queue timeout ends a run whose first
    attempt has not started."""
    state = record.state
    if limit == "deadline":
        return isinstance(state, Queued | Awaiting)
    return isinstance(state, Queued) and record.generation == 0


@final
class Expiry:
    """Ends runs at their deadline (``Stopped("deadline")``, detail ``{"source":
    "deadline"}``) and at their queue timeout (``Stopped("queue_timeout")``)."""

    def __init__(self, kernel: Kernel, admissions: Admissions, finish: FinishBoundary) -> None:
        self._kernel = kernel
        self._admissions = admissions
        self._finish = finish

    async def expire(self, run_id: str, limit: TimeLimit) -> None:
        """The runtime's timer: ``run_id``'s ``limit`` has come. An attempt of it here is
        asked to end (a queued one that never ran, for a queue timeout); a run with none
        is ended by one commit, if the limit still applies to it."""
        for _ in range(_LOOKS):
            where = await self._admissions.locate(run_id)
            if isinstance(where, Here):
                attempt = where.attempt
                if limit == "queue_timeout" and (attempt.started or attempt.generation != 1):
                    return  # it started in time
                if attempt.phase != "sealed":
                    attempt.request_end(request_of(limit))
                return
            if not limit_holds(where.record, limit) or await self._commit(where.record, limit):
                return

    async def end_stored(self, record: RunRecord, limit: TimeLimit) -> None:
        """A serving loop found ``record`` past ``limit`` in the store: end it, unless it
        moved on (an attempt here runs it, or it started, was resumed or ended)."""
        kernel = self._kernel
        for _ in range(_LOOKS):
            here = kernel.attempt_here(record.run_id)
            if here is not None:
                await self.expire(record.run_id, limit)
                return
            if not limit_holds(record, limit) or await self._commit(record, limit):
                return
            record = await kernel.load(record.run_id)

    async def _commit(self, record: RunRecord, limit: TimeLimit) -> bool:
        """End the run as ``record`` stands; False if it moved on first."""
        result = await self._finish.commit_end(
            record.run_id,
            record.generation,
            type(record.state),
            request_of(limit),
            parent_run_id=record.parent_run_id,
            # A descendant's deadline is never later than its ancestor's: it has come too.
            descendants="deadline" if limit == "deadline" else "parent_ended",
        )
        if isinstance(result, Accepted):
            self._kernel.store_changed_elsewhere()  # its thread may be free for the next
            return True
        return False
