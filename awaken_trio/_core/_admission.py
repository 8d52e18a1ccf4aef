"""`Admission`: what the supervisor is asked to do when it admits an attempt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, final

import attrs

from ._json import FrozenDict
from ._storage import Expect, Fence, NewRun

if TYPE_CHECKING:
    from ._attempt import Attempt


@final
@attrs.frozen(kw_only=True)
class Admission:
    """One admission of an attempt, decided by its caller and carried out by
    `Supervisor.admit`: a new run (`Runtime.start`, a child, a fork), a resume, or a run
    found in the store by a serving loop.

    Attributes:
        attempt: the attempt to admit (not yet registered).
        expect: the fence of its commit (a new run, the awaited ticket, the queued or
            lost generation).
        detail: the detail of the commit's event.
        new_run: the identity of the run the commit creates, if it creates one.
        fence: the claim a recovery took for the run (durable stores).
        take_handover: take the resume value and ticket the store keeps for the run.
        when_busy_elsewhere: a thread busy in another runtime makes the run wait
            ``Queued`` here (``"queue"``), or refuses the admission (``"refuse"``: a
            serving loop leaves the run for whoever frees the thread).
    """

    attempt: Attempt
    expect: Expect
    detail: FrozenDict
    new_run: NewRun | None = None
    fence: Fence | None = None
    take_handover: bool = False
    when_busy_elsewhere: Literal["queue", "refuse"] = "queue"
