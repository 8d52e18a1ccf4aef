"""Rule 22: a child run its parent's run already has is taken back, not refused.

An earlier attempt of the parent started the child, and it was handed back with that
attempt (or it ended): the parent's next attempt that starts a child of the same run id
and input takes that run back (`take_back`), whatever became of it meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._admission import Admission
from ._attempt import Attempt, ParkedChild
from ._attempts import stored_attempt
from ._errors import NotActive, RunExists
from ._json import freeze_detail
from ._policy import Deadlines
from ._progress import refused
from ._spec import RunSpec
from ._state import Awaiting, Ended, Queued, wake_at
from ._storage import Accepted, Expect, RejectReason, read_store

if TYPE_CHECKING:
    from ._admit import Admissions
    from ._handle import RunHandle
    from ._handles import Handles
    from ._kernel import Kernel

_DETAIL_TAKEN_BACK = freeze_detail({"source": "taken_back"}, "detail")


async def take_back(
    admissions: Admissions, kernel: Kernel, handles: Handles, spec: RunSpec, parent: Attempt
) -> RunHandle:
    """Rule 22: ``parent``'s run already has a child of ``spec.run_id`` (an earlier
    attempt of the parent started it, and it was handed back with that attempt, or it
    ended): a child of this run with the same input is taken back rather than refused.
    An ended one answers its end, an awaiting one keeps its ticket (and is ended with
    this attempt, as its own parked children are), a queued one starts its next
    attempt here, under ``parent``; one this attempt already runs is that attempt.

    Raises:
        RunExists: the id is not a child of this run, or it was started with another
            input, or another attempt of it runs.
        NotActive: ``parent``'s attempt has begun to end.
    """
    run_id = spec.run_id
    # A run moves on only a few times (queued, then running or ended), so a look that
    # keeps finding it moved means something else is wrong: it is refused then.
    for _ in range(4):
        here = kernel.attempt_here(run_id)
        if here is not None:
            if here.parent is parent:
                return handles.handle(here)
            raise RunExists(run_id, f"another attempt of run {run_id!r} runs here")
        record = await read_store(kernel.store.load(run_id), f"run {run_id!r}")
        if record is None or record.parent_run_id != parent.run_id:
            raise RunExists(
                run_id,
                f"run {run_id!r} exists and is not a child of run {parent.run_id!r}:"
                " give the child a run id of its own",
            )
        if record.input != spec.input:
            raise RunExists(
                run_id,
                f"run {run_id!r} is a child of run {parent.run_id!r} started with another"
                " input; a child is taken back only with the input it was started with",
            )
        state = record.state
        if isinstance(state, Ended):
            return handles.settled(record)
        if isinstance(state, Awaiting):
            if parent.phase != "running":
                raise refusal_of_child(parent, run_id)
            # This attempt's now: resumed through it, ended with it.
            parent.add_child(run_id, ParkedChild(record.generation))
            kernel.awaiting_bodies[run_id] = spec.body
            wake = wake_at(state.ticket)
            if wake is not None:
                kernel.on_scheduled(wake, run_id, state.ticket.correlation_id)
            if record.deadline is not None:
                kernel.on_limits(run_id=run_id, limits=Deadlines(record.deadline))
            return handles.settled(record)
        if isinstance(state, Queued):
            attempt = stored_attempt(kernel, record, spec.body, parent=parent)
            result = await admissions.admit(
                Admission(
                    attempt=attempt,
                    expect=Expect(generation=record.generation, state=Queued),
                    detail=_DETAIL_TAKEN_BACK,
                    # The answer a resume left for it, if it had one.
                    take_handover=True,
                )
            )
            if isinstance(result, Accepted):
                return handles.handle(attempt)
            if result.reason is RejectReason.FENCED:
                await refused(kernel, parent, result, "taking back a child")
            continue  # it moved on meanwhile (ended elsewhere): look again
        break
    raise RunExists(
        run_id,
        f"run {run_id!r} is a child of run {parent.run_id!r} that another attempt runs;"
        " it can be taken back once that attempt has stopped",
    )


def refusal_of_child(parent: Attempt, run_id: str) -> NotActive:
    return NotActive(
        parent.run_id,
        f"its attempt {parent.generation} has begun to end, so run {run_id!r}"
        " cannot be started or resumed as its child",
    )
