"""The handles the kernel gives out: on an attempt here, on a run that runs wherever a runtime
picks it up, and on a run whose state is already known."""

from __future__ import annotations

from typing import final

from ._attempt import Attempt, Completion
from ._follow import EndFollowers
from ._handle import RunHandle
from ._kernel import Kernel
from ._state import RunRecord, RunState


@final
class Handles:
    """Makes `RunHandle`s over one kernel; every handle shares its reader and follower."""

    def __init__(self, kernel: Kernel) -> None:
        self._followers = EndFollowers(kernel)
        # Bound once: every handle shares them instead of holding two method objects.
        self._read_record = kernel.load
        self._follow = self.follow_end

    def handle(self, attempt: Attempt) -> RunHandle:
        """A handle on an attempt admitted here (one per run: built by its own
        ``__init__``, as `_create` is a call more)."""
        handle = object.__new__(RunHandle)
        RunHandle.__init__(
            handle,
            attempt.run_id,
            attempt.thread_id,
            attempt.generation,
            attempt.completion,
            self._read_record,
            self._follow,
            attempt.start_seq,
        )
        return handle

    def remote(self, run_id: str, thread_id: str, generation: int, since: int) -> RunHandle:
        """A handle on a run whose attempt runs wherever a runtime picks it up: it follows
        the store from event ``since``."""
        return RunHandle._create(
            run_id, thread_id, generation, None, self._read_record, self._follow, since
        )

    def settled(self, record: RunRecord) -> RunHandle:
        """A handle on a run that has no attempt here, whose ``wait()`` answers the state
        ``record`` holds (an ``Awaiting`` or ``Ended`` child taken back by its parent)."""
        return RunHandle._create(
            record.run_id,
            record.thread_id,
            record.generation,
            Completion(state=record.state, done=True),
            self._read_record,
            self._follow,
            0,
        )

    async def follow_end(self, run_id: str, since: int) -> RunState:
        """The first ``Awaiting`` or ``Ended`` the store commits for the run after event
        ``since``, whichever runtime commits it (`EndFollowers`: one read per change for
        every waiter)."""
        return await self._followers.follow_end(run_id, since)
