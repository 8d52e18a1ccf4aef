"""Run policies a caller gives a new run: its time limits (``timeout=``, ``deadline=``,
``queue_timeout=``) and a delayed start (``not_before=``), checked once into values.

Every time here is absolute, wall-clock seconds read from the runtime's clock (the scale of
a ticket's ``deadline`` and ``wake_at``), so it means the same in every process that reads
the run, and survives recovery and resume.
"""

from __future__ import annotations

import math
from typing import Final, Literal, final

import attrs

from ._errors import InvalidArgument
from ._util import safe_repr

TimeLimit = Literal["deadline", "queue_timeout"]
"""Which of a run's time limits came (`Deadlines`): its deadline, or its queue deadline."""


@final
@attrs.frozen
class Deadlines:
    """A run's time limits, absolute (the runtime's clock).

    Attributes:
        deadline: the run ends ``Stopped("deadline")`` at this time, whatever its state
            (None: no deadline).
        queue_deadline: the run ends ``Stopped("queue_timeout")`` at this time unless its
            first attempt has started by then (None: it may wait as long as it takes).
    """

    deadline: float | None = None
    queue_deadline: float | None = None

    def within(self, parent: float | None) -> Deadlines:
        """These limits for a child of a run whose deadline is ``parent``: the child's
        deadline is the earlier of its own and its parent's."""
        if parent is None or (self.deadline is not None and self.deadline <= parent):
            return self
        return attrs.evolve(self, deadline=parent)


NO_DEADLINES: Final = Deadlines()


def _seconds(value: object, option: str, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type,operator]
        raise InvalidArgument(
            f"{what}: {option} must be a finite number of seconds >= 0 (an int or a float),"
            f" not {safe_repr(value)}"
        )
    return float(value)  # type: ignore[arg-type]


def _when(value: object, option: str, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise InvalidArgument(
            f"{what}: {option} must be a time, finite wall-clock seconds (the runtime's"
            f" clock, time.time() scale, an int or a float), not {safe_repr(value)}"
        )
    return float(value)  # type: ignore[arg-type]


def check_deadlines(
    *,
    timeout: object,
    deadline: object,
    queue_timeout: object,
    now: float,
    what: str,
) -> Deadlines:
    """The limits a caller asked for, made absolute from ``now``; `NO_DEADLINES` when none.

    Raises:
        InvalidArgument: both ``timeout`` and ``deadline``, a negative or non-finite value,
            or one that is not a number; the message names the option and what to pass.
    """
    if timeout is None and deadline is None and queue_timeout is None:
        return NO_DEADLINES
    if timeout is not None and deadline is not None:
        raise InvalidArgument(
            f"{what}: pass timeout= (seconds from now) or deadline= (a wall-clock time), not both"
        )
    limit = None
    if timeout is not None:
        limit = now + _seconds(timeout, "timeout", what)
    elif deadline is not None:
        limit = _when(deadline, "deadline", what)
    queue_limit = None
    if queue_timeout is not None:
        queue_limit = now + _seconds(queue_timeout, "queue_timeout", what)
    return Deadlines(limit, queue_limit)


def check_not_before(not_before: object, what: str) -> float | None:
    """A delayed start's time (None: start as soon as possible).

    Raises:
        InvalidArgument: not a finite number of wall-clock seconds.
    """
    if not_before is None:
        return None
    return _when(not_before, "not_before", what)


def refuse_not_before(not_before: object, what: str, *, child: bool = False) -> None:
    """`start` and its kin run the run here and now: a delayed start is `submit`'s.

    Raises:
        InvalidArgument: ``not_before`` was given.
    """
    if not_before is not None:
        later = (
            "start it when the parent's body is ready to (after an await of its own)"
            if child
            else "submit it by name with runtime.submit(name, not_before=...) to start it later"
        )
        raise InvalidArgument(f"{what} starts the run now, so it takes no not_before=; {later}")
