"""RunHandle: what `start`, `resume` and `start_child` return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

from ._attempt import Completion
from ._state import RunRecord, RunState
from ._util import NoPublicConstructor

RecordReader = Callable[[str], Awaitable[RunRecord]]


@final
class RunHandle(metaclass=NoPublicConstructor):
    """One attempt of one run.

    ``wait()`` returns the committed state that ended this attempt: ``Awaiting`` or
    ``Ended``. For a queued run it is the state its attempt ends in, or ``Ended`` if the
    run was ended while it waited for its thread. If the store failed to take the
    attempt's end, ``wait()`` raises that `StoreError`.
    """

    _obtained_from = "start, resume and ctx.start_child return one"

    __slots__ = ("_completion", "_read_record", "generation", "run_id", "thread_id")

    def __init__(
        self,
        run_id: str,
        thread_id: str,
        generation: int,
        completion: Completion,
        read_record: RecordReader,
    ) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.generation = generation
        self._completion = completion
        self._read_record = read_record

    def __repr__(self) -> str:
        return (
            f"<RunHandle run_id={self.run_id!r} thread_id={self.thread_id!r}"
            f" generation={self.generation}>"
        )

    async def wait(self) -> RunState:
        """Wait for this attempt's committed end (a checkpoint)."""
        return await self._completion.wait()

    async def record(self) -> RunRecord:
        """The run's committed record, as `Runtime.record` reads it (a parent reads a
        child's result this way)."""
        return await self._read_record(self.run_id)

    @property
    def done(self) -> bool:
        """Whether this attempt's end is known (committed, or failed to commit)."""
        return self._completion.done
