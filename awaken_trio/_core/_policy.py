"""Run policies a caller gives a new run: its time limits (``timeout=``, ``deadline=``,
``queue_timeout=``), a delayed start (``not_before=``) and its retries (``retry=``),
checked once into values.

Every time here is absolute, wall-clock seconds read from the runtime's clock (the scale of
a ticket's ``deadline`` and ``wake_at``), so it means the same in every process that reads
the run, and survives recovery and resume.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, Literal, final

import attrs

from ._errors import InvalidArgument
from ._json import JsonValue
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


def _retry_attempts(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value < 1:
        raise InvalidArgument(
            f"RetryPolicy: attempts counts every attempt, the first included: a whole number"
            f" >= 1 (1: no retry), not {safe_repr(value)}"
        )


def _retry_seconds(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    _seconds(value, attribute.name, "RetryPolicy")


def _retry_factor(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 1:  # type: ignore[arg-type,operator]
        raise InvalidArgument(
            "RetryPolicy: factor multiplies each wait by itself, a finite number >= 1"
            f" (1: every wait is backoff), not {safe_repr(value)}"
        )


def _retry_codes(value: object) -> tuple[str, ...] | None:
    """``codes`` as a tuple (a list or any iterable of strings is taken), or None."""
    if value is None:
        return None
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise InvalidArgument(
            "RetryPolicy: codes is a tuple of failure codes (e.g. ('timeout',"
            f" 'rate_limited')), or None for every code, not {safe_repr(value)}"
        )
    codes = tuple(value)
    for code in codes:
        if type(code) is not str or not code:
            raise InvalidArgument(
                f"RetryPolicy: each of codes must be a failure code, a non-empty string, not"
                f" {safe_repr(code)}"
            )
    return codes


@final
@attrs.frozen
class RetryPolicy:
    """How a run whose body fails is tried again (DESIGN §3.8): a frozen value, stored with
    the run, so whichever runtime runs the next attempt follows it.

    An attempt that ends ``Failed`` because its body raised (with a failure code in
    ``codes``, or any code when ``codes`` is None) while attempts remain is not the run's
    end: the failure is committed in a ``retry_scheduled`` event and the run waits
    ``Queued`` until the backoff has passed, then starts again (generation + 1) from its
    last checkpoint. The last failure ends it ``Failed``. A cancel, a stop, a deadline or a
    shutdown is never retried, and a run whose next try would start after its deadline
    ends with its failure.

    Attributes:
        attempts: every attempt the run may make, the first included (1: no retry).
        backoff: seconds before the first retry.
        factor: each later wait is the one before times this (>= 1).
        max_backoff: no wait is longer than this.
        codes: the failure codes (`RunError.error_code`: a `RunError`'s ``code``, else the
            exception's snake_case class name) that are retried; None: every code.

    Raises:
        InvalidArgument: ``attempts`` below 1, a negative or non-finite wait, a ``factor``
            below 1, ``codes`` not a tuple of strings.
    """

    attempts: int = attrs.field(default=3, validator=_retry_attempts)
    backoff: float = attrs.field(default=1.0, validator=_retry_seconds)
    factor: float = attrs.field(default=2.0, validator=_retry_factor)
    max_backoff: float = attrs.field(default=60.0, validator=_retry_seconds)
    codes: tuple[str, ...] | None = attrs.field(default=None, converter=_retry_codes)

    def wait(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th attempt (1-based) fails, before the next:
        ``backoff``, then times ``factor`` each time, at most ``max_backoff``."""
        try:
            return min(self.backoff * self.factor ** (failed - 1), self.max_backoff)
        except OverflowError:
            return self.max_backoff

    def retries(self, code: str, failed: int) -> bool:
        """Whether the run is tried again after its ``failed``-th attempt (1-based) failed
        with ``code``."""
        return failed < self.attempts and (self.codes is None or code in self.codes)

    def to_json(self) -> dict[str, JsonValue]:
        """The policy as the store keeps it (a JSON object; `from_json` reads it back)."""
        return {
            "attempts": self.attempts,
            "backoff": self.backoff,
            "factor": self.factor,
            "max_backoff": self.max_backoff,
            "codes": None if self.codes is None else list(self.codes),
        }

    @classmethod
    def from_json(cls, data: object) -> RetryPolicy:
        """The policy `to_json` wrote.

        Raises:
            InvalidArgument: ``data`` is not such an object.
        """
        if not isinstance(data, Mapping):
            raise InvalidArgument(
                f"a stored retry policy must be a JSON object, not {safe_repr(data)}"
            )
        return cls(
            attempts=data.get("attempts", 3),
            backoff=data.get("backoff", 1.0),
            factor=data.get("factor", 2.0),
            max_backoff=data.get("max_backoff", 60.0),
            codes=data.get("codes"),
        )


def check_retry(retry: object, what: str) -> RetryPolicy | None:
    """A caller's ``retry=`` (None: no retry).

    Raises:
        InvalidArgument: not a `RetryPolicy`.
    """
    if retry is None or type(retry) is RetryPolicy:
        return retry
    raise InvalidArgument(
        f"{what}: retry= takes a RetryPolicy (e.g. RetryPolicy(attempts=3, backoff=1.0)),"
        f" or None for no retry, not {safe_repr(retry)}"
    )
