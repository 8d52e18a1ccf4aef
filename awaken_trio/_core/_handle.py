"""RunHandle: what `start`, `resume` and `start_child` return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import trio

from ._attempt import Completion
from ._state import RunRecord, RunState
from ._util import NoPublicConstructor

RecordReader = Callable[[str], Awaitable[RunRecord]]
# Reads the store until the run commits an Awaiting or Ended state after the given seq.
EndFollower = Callable[[str, int], Awaitable[RunState]]


@final
class RunHandle(metaclass=NoPublicConstructor):
    """One attempt of one run.

    ``wait()`` returns the committed state that ended this attempt: ``Awaiting`` or
    ``Ended``. For a queued run it is the state its attempt ends in, or ``Ended`` if the
    run was ended while it waited for its thread. A handle from a repeated ``submit``
    waits for the first of them committed after it was made (a run that had already
    ended: its end). If the store failed to take the
    attempt's end, ``wait()`` raises that `StoreError`. Whoever commits that state (this
    runtime, or on a durable store any other): an attempt that lost its run or released
    it is not an end, and waiting goes on until the store holds one.
    """

    _obtained_from = "start, resume, submit and ctx.start_child return one"

    __slots__ = (
        "_completion",
        "_follow",
        "_read_record",
        "_since",
        "generation",
        "run_id",
        "thread_id",
    )

    def __init__(
        self,
        run_id: str,
        thread_id: str,
        generation: int,
        completion: Completion | None,
        read_record: RecordReader,
        follow: EndFollower,
        since: int,
    ) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.generation = generation
        self._completion = completion
        self._read_record = read_record
        self._follow = follow
        self._since = since

    def __repr__(self) -> str:
        return (
            f"<RunHandle run_id={self.run_id!r} thread_id={self.thread_id!r}"
            f" generation={self.generation}>"
        )

    async def wait(self) -> RunState:
        """Wait for this attempt's committed end (a checkpoint)."""
        completion = self._completion
        if completion is not None:
            if completion.done:  # (the common wait, answered here: a frame less)
                await trio.lowlevel.checkpoint()
                state = completion.answer()
            else:
                state = await completion.wait()
            if state is not None:
                return state
        return await self._follow(self.run_id, self._since)

    async def record(self) -> RunRecord:
        """The run's committed record, as `Runtime.record` reads it (a parent reads a
        child's result this way)."""
        return await self._read_record(self.run_id)

    @property
    def done(self) -> bool:
        """Whether this attempt's end is known here (committed, or failed to commit)."""
        completion = self._completion
        return completion is not None and completion.done and completion.state is not None
