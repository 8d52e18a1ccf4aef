"""RunHandle: what `start`, `resume` and `start_child` return."""

from __future__ import annotations

from typing import final

import attrs

from ._attempt import Completion
from ._state import RunState


@final
@attrs.frozen(eq=False)
class RunHandle:
    """One attempt of one run.

    ``wait()`` returns the committed state that ended this attempt: ``Awaiting`` or
    ``Ended``. For a queued run it is the state its attempt ends in, or ``Ended`` if the
    run was ended while it waited for its thread. If the store failed to take the
    attempt's end, ``wait()`` raises that `StoreError`.
    """

    run_id: str
    thread_id: str
    generation: int
    _completion: Completion = attrs.field(repr=False, alias="completion")

    async def wait(self) -> RunState:
        """Wait for this attempt's committed end (a checkpoint)."""
        return await self._completion.wait()

    @property
    def done(self) -> bool:
        """Whether this attempt's end is known (committed, or failed to commit)."""
        return self._completion.done
