"""Retries here: a run whose attempt failed in this runtime, with a retry to come, is tried
again here when its ``retry_at`` comes (the timer calls `Retries.retry`).

A failed attempt's end commits the run ``Queued`` (generation unchanged, ``not_before`` its
``retry_at``) and leaves its body here, as an awaiting run's is left for its resume. When
the time comes the next attempt (generation + 1) is admitted from the run's record, fenced
by the generation and the ``Queued`` state the retry was committed in: a run cancelled,
stopped, ended at its deadline or started by another runtime meanwhile (a serving runtime
with its body: a root on a durable store is anyone's to run) is left alone, and whichever
admission commits first is the one attempt that runs.

A child is tried again under its parent's attempt, which keeps it as a parked child until
then (and ends it with itself if it ends first). A child whose parent's attempt is no longer
here is left as the store holds it: the parent's end has ended it, or the parent's next
attempt takes it back (rule 22).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from ._admission import Admission
from ._attempt import ParkedChild
from ._attempts import stored_attempt
from ._json import freeze_detail
from ._state import Queued
from ._storage import Expect

if TYPE_CHECKING:
    from ._admit import Admissions
    from ._kernel import Kernel

_DETAIL_RETRY: Final = freeze_detail({"source": "retry"}, "detail")


@final
class Retries:
    """Tries runs that failed here again (see the module docstring)."""

    def __init__(self, kernel: Kernel, admissions: Admissions) -> None:
        self._kernel = kernel
        self._admissions = admissions

    async def retry(self, run_id: str, generation: int) -> None:
        """Start the next attempt of ``run_id`` if it still waits ``Queued`` at
        ``generation`` to retry, and its body (and a child's parent) is here.

        Raises:
            StoreError: the store failed (the run stays ``Queued``: a serving runtime with
                its body, or this one's own serving loop, may still start it).
            RuntimeClosed: the runtime is shutting down.
        """
        kernel = self._kernel
        body = kernel.awaiting_bodies.get(run_id)
        if body is None or kernel.attempt_here(run_id) is not None:
            return  # ended, or started here meanwhile (its admission took the body)
        record = await kernel.load(run_id)
        if type(record.state) is not Queued or record.generation != generation:
            # Ended, or moved on elsewhere: nothing of its next try is this runtime's.
            if kernel.attempt_here(run_id) is None:
                kernel.awaiting_bodies.pop(run_id, None)
            return
        parent = None
        if record.parent_run_id is not None:
            parent = kernel.registry.get(record.parent_run_id)
            children = None if parent is None else parent.children
            entry = None if children is None else children.entries.get(run_id)
            if parent is None or parent.phase != "running" or not isinstance(entry, ParkedChild):
                # Its parent's attempt is over: it ended the child, or hands it to its
                # next attempt to take back.
                kernel.awaiting_bodies.pop(run_id, None)
                return
        admissions = self._admissions
        attempt = stored_attempt(kernel, record, body, parent=parent)
        await admissions.admit(
            Admission(
                attempt=attempt,
                expect=Expect(generation=generation, state=Queued),
                detail=_DETAIL_RETRY,
                # The answer a resume left for it, if it had one.
                take_handover=True,
            )
        )
