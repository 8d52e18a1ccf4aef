"""How an attempt ended: turning a body's outcome into the state to commit.

The order is fixed, and it is what makes a run's end explainable:

1. the body raised an error (not a cancellation): ``Failed``, even if a cancel or stop was
   also requested, because a real error must never be hidden behind the cancellation of
   the cleanup that raised it (the request is kept in the event detail);
2. the attempt was cancelled: the requested cause (``Cancelled`` or ``Stopped``); a value
   the body returned anyway is a late result, discarded and recorded, never committed;
3. the body paused or awaited input: ``Awaiting`` with its ticket;
4. the run's step budget ran out: ``MaxSteps``;
5. the body returned: ``NaturalEnd`` with its result, if that result is JSON.
"""

from __future__ import annotations

import enum
import traceback
from typing import Any, final

import attrs
import outcome
import trio

from ._attempt import EndRequest, StepCeiling, SuspendAttempt
from ._errors import InvalidPayload, MaxStepsReached, RunError, RuntimeClosed, StoreError
from ._json import (
    EMPTY_DICT,
    FrozenDict,
    JsonValue,
    check_payload,
    freeze_detail,
)
from ._state import (
    Awaiting,
    Ended,
    EventKind,
    Failed,
    MaxSteps,
    NaturalEnd,
    Queued,
    RunState,
    ended,
)
from ._storage import EventDraft
from ._util import safe_repr, safe_str

_INTERRUPTS = (KeyboardInterrupt, SystemExit)
_NOT_ERRORS = (trio.Cancelled, SuspendAttempt, StepCeiling, MaxStepsReached)
_MAX_MESSAGE = 4000

NATURAL_END: RunState = Ended(NaturalEnd())  # frozen, so one instance serves every run
QUEUED: RunState = Queued()


class Ending(enum.Enum):
    """What a body's exception means for its attempt."""

    INTERRUPT = "interrupt"  # KeyboardInterrupt or SystemExit: the whole runtime stops
    FAILURE = "failure"  # a real error
    SUSPEND = "suspend"  # a pause or an await_input
    CEILING = "ceiling"  # the step budget ran out
    CANCELLED = "cancelled"  # only cancellation


@final
@attrs.frozen(eq=False)
class Classified:
    """A body's exception, classified. ``error`` is the exception to report: for a failure,
    the real error with cancellations and control flow taken out of its group."""

    ending: Ending
    error: BaseException


@final
@attrs.define(eq=False)
class Verdict:
    """The state an attempt ends in, with what its terminal commit records. None: the
    attempt lost its run and commits nothing.

    Decided once and never changed, like the `Commit` it becomes; not a frozen attrs
    class for the same reason (one is built on every run's path, where a frozen instance
    costs several times as much to build): treat it as read-only.
    """

    state: RunState | None
    result: JsonValue = None
    events: tuple[EventDraft, ...] = ()
    detail: FrozenDict = EMPTY_DICT
    # A KeyboardInterrupt or SystemExit from the body: the runtime shuts down and raises it.
    interrupt: BaseException | None = None
    # The body's error a ``Failed`` end comes from: logged once its end is committed.
    error: BaseException | None = None


def error_message(exc: BaseException) -> str:
    """A `RunError`'s message, else ``str(exc)``; never raises, never huge, never empty
    (an exception with no message is named, with the one it was raised from, if any). An
    error that comes from using asyncio under Trio says so, and what to use instead."""
    text = exc.message if isinstance(exc, RunError) else safe_str(exc)
    if not text.strip():
        text = _no_message(exc)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + f"... ({len(text) - _MAX_MESSAGE} more characters)"
    if _used_asyncio(exc, text):
        text += f" ({_ASYNCIO_HINT})"
    return text


def _no_message(exc: BaseException) -> str:
    # `TimeoutError()`, `httpx.ConnectError("")`: the class is all there is to say, and
    # what it was raised from often says the rest.
    name = type(exc).__qualname__
    text = (
        f"{name} {exc.code} (no message)" if isinstance(exc, RunError) else f"{name} (no message)"
    )
    origin = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if origin is not None:
        said = safe_str(origin)
        if said.strip():
            text += f", from {type(origin).__qualname__}: {said}"
    return text


_ASYNCIO_HINT = (
    "the body used asyncio, but awaken_trio runs bodies under Trio: use trio or anyio"
    " (which runs on Trio) instead of asyncio"
)
# What asyncio says when there is no asyncio loop (asyncio.get_running_loop(), and
# everything built on it), and what Trio says when a task yields an asyncio future.
_NO_LOOP = ("no running event loop", "There is no current event loop")
_FOREIGN_YIELD = "trio.run received unrecognized yield message"


def _used_asyncio(exc: BaseException, text: str) -> bool:
    """Whether ``exc`` is what asyncio (or Trio, handed an asyncio future) raises when
    asyncio is used where no asyncio loop runs."""
    if isinstance(exc, RuntimeError):
        if text == _NO_LOOP[0] or text.startswith(_NO_LOOP[1]):
            return True
    elif isinstance(exc, TypeError):
        if text.startswith(_FOREIGN_YIELD):
            return True
    elif not isinstance(exc, AttributeError):
        return False
    # Another failure inside asyncio itself (asyncio.Event().wait() finds no loop).
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return isinstance(module, str) and module.startswith("asyncio.")


def classify(exc: BaseException) -> Classified:
    """Classify what a body raised (exception groups are looked through)."""
    if type(exc) is trio.Cancelled:
        return Classified(Ending.CANCELLED, exc)  # the common case, without walking a group
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, _INTERRUPTS):
            return Classified(Ending.INTERRUPT, leaf)
    errors = [leaf for leaf in leaves if not isinstance(leaf, _NOT_ERRORS)]
    if len(errors) == 1:
        return Classified(Ending.FAILURE, errors[0])
    if errors:
        # Several real errors: report the group, minus cancellations and control flow.
        assert isinstance(exc, BaseExceptionGroup)
        rest = exc.split(lambda e: not isinstance(e, _NOT_ERRORS))[0]
        return Classified(Ending.FAILURE, _single(rest) if rest is not None else exc)
    if any(isinstance(leaf, SuspendAttempt) for leaf in leaves):
        return Classified(Ending.SUSPEND, exc)
    if any(isinstance(leaf, StepCeiling | MaxStepsReached) for leaf in leaves):
        return Classified(Ending.CEILING, exc)
    return Classified(Ending.CANCELLED, exc)


def decide(
    result: outcome.Outcome[Any] | None,
    *,
    cancelled: EndRequest | None,
    pending: EndRequest | None,
    suspension: Awaiting | None,
    shutdown: EndRequest,
    run_id: str,
    max_steps: int | None,
    max_payload_bytes: int,
) -> Verdict:
    """The verdict on an attempt, in the order the module docstring gives.

    Args:
        result: the body's outcome, or None if the body never ran.
        cancelled: who cancelled the attempt, if its observation window saw a cancel.
        pending: the end request made of the attempt, seen in time or not.
        suspension: the ``Awaiting`` state a pause or an await decided on, if any.
        shutdown: the runtime's shutdown request, the cause a KeyboardInterrupt ends with.
    """
    ending: Ending | None = None
    if isinstance(result, outcome.Error):
        classified = classify(result.error)
        ending = classified.ending
        if ending is Ending.INTERRUPT:
            return Verdict(
                Ended(shutdown.cause), detail=shutdown.detail, interrupt=classified.error
            )
        if ending is Ending.FAILURE or (ending is Ending.CANCELLED and cancelled is None):
            return failure(classified.error, cancelled or pending)
    if cancelled is not None and cancelled.disposition == "hand_back":
        # Shutdown of a durable store: the run goes back to Queued for another runtime (a
        # descendant with its root, for the root's next attempt to take back).
        return Verdict(QUEUED, detail=cancelled.detail)
    if cancelled is not None:
        events: tuple[EventDraft, ...] = ()
        if isinstance(result, outcome.Value):
            late = {"result": _describe(result.value, max_payload_bytes), **cancelled.detail}
            events = (
                EventDraft(EventKind.LATE_RESULT_DISCARDED, freeze_detail(late, "late result")),
            )
        return Verdict(ended(cancelled.cause), events=events, detail=cancelled.detail)
    if suspension is not None and ending in (Ending.SUSPEND, None):
        # The pause or await decided at the boundary stands, even if the body caught the
        # suspension and returned: an attempt that committed to waiting ends waiting.
        return Verdict(suspension, detail=_reason_detail(suspension.ticket.reason))
    if ending is Ending.CEILING:
        return Verdict(Ended(MaxSteps()), detail=freeze_detail({"max_steps": max_steps}, "max"))
    if isinstance(result, outcome.Value):
        return natural_end(result.value, run_id, max_payload_bytes)
    # Only a suspension that is not this attempt's gets here (a context used across runs
    # is refused before it can raise one); end the run rather than leave it running.
    return internal_failure(
        run_id, f"the attempt ended with {safe_repr(result)} and nothing to commit"
    )


def natural_end(value: object, run_id: str, max_payload_bytes: int) -> Verdict:
    """``NaturalEnd`` with the body's result, if that result is JSON and fits the payload
    limit; ``Failed("invalid_result")`` if not."""
    try:
        result = check_payload(value, f"result of run {run_id!r}", max_payload_bytes)
    except InvalidPayload as exc:
        return Verdict(Ended(Failed("invalid_result", str(exc))))
    return Verdict(NATURAL_END, result=result)


def failure(error: BaseException, pending: EndRequest | None) -> Verdict:
    """``Failed`` for ``error``. A cancel or stop that was already requested is kept in the
    detail, so a host can tell an error that won over a request from one nobody asked for."""
    message = error_message(error)
    detail: dict[str, JsonValue] = {
        "error": f"{type(error).__qualname__}: {message}",
        "traceback": format_traceback(error),
    }
    if pending is not None:
        detail["pending"] = dict(pending.detail)
    return Verdict(
        Ended(Failed(RunError.error_code(error), message)),
        detail=freeze_detail(detail, "a failure detail"),
        error=error,
    )


TRACEBACK_LIMIT = 16 * 1024
"""The most characters of a failure's traceback its terminal event keeps: the innermost
ones (the end of the text, where the frame that raised is)."""


def format_traceback(error: BaseException) -> str:
    """``error``'s formatted traceback, its innermost `TRACEBACK_LIMIT` characters; never
    raises (an exception whose ``__str__`` raises, or a traceback that cannot be walked, is
    still described)."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception as exc:  # formatting user objects: anything may fail
        return f"(the traceback could not be formatted: {safe_repr(exc)})"
    if len(text) > TRACEBACK_LIMIT:
        cut = len(text) - TRACEBACK_LIMIT
        text = f"... ({cut} characters before)\n" + text[cut:]
    return text


def internal_failure(run_id: str, what: str) -> Verdict:
    """The run's end could not be decided the normal way; it still ends, ``Failed``."""
    message = f"run {run_id!r} could not be ended normally: {what}"
    return Verdict(Ended(Failed("internal_error", message)))


_REASON_DETAILS: dict[str, FrozenDict] = {}


def _reason_detail(reason: str) -> FrozenDict:
    detail = _REASON_DETAILS.get(reason)
    if detail is None:
        detail = freeze_detail({"reason": reason}, "a suspension")
        if len(_REASON_DETAILS) < 64:  # the common reasons, shared by every run
            _REASON_DETAILS[reason] = detail
    return detail


def _describe(value: object, max_payload_bytes: int) -> JsonValue:
    """A late result as its event records it: itself, or a short repr of it if it is not
    JSON or is larger than a payload may be."""
    try:
        return check_payload(value, "late result", max_payload_bytes)
    except InvalidPayload:
        return safe_repr(value)


def _single(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_leaves(inner))
        return out
    return [exc]


# ---------------------------------------------------------------- how an attempt leaves


@final
@attrs.frozen
class Committed:
    """The store holds the attempt's end: ``state`` (its ``Awaiting`` or ``Ended``, or,
    if the store refused the end because the run had moved on, the state it holds)."""

    state: RunState


@final
@attrs.frozen
class HandedBack:
    """The run went back to ``Queued`` for another runtime at shutdown (or never left it):
    not an end; whoever waits follows the store to the run's end wherever it happens."""


@final
@attrs.frozen
class Lost:
    """The attempt lost its run and committed nothing: the store holds the truth.
    ``claim_kept``: the claim is still this runtime's (the run was ended elsewhere), so it
    is released once the attempt has stopped; else it lapsed or is another's."""

    claim_kept: bool


@final
@attrs.frozen
class CommitFailed:
    """The store failed to take the attempt's end: the run keeps its last committed state,
    ``messages`` are kept for whichever commit ends it later, and waiters get ``error``."""

    error: StoreError
    messages: tuple[JsonValue, ...] = ()

    @classmethod
    def of(
        cls, error: StoreError | RuntimeClosed, messages: tuple[JsonValue, ...] = ()
    ) -> CommitFailed:
        if not isinstance(error, StoreError):
            error = StoreError(str(error), outcome_unknown=False)
        return cls(error, messages)


@final
@attrs.frozen
class Retrying:
    """The attempt failed and the run is tried again: it is committed ``Queued`` (at
    ``generation``) until ``retry_at``, still its parent's child. Not an end: whoever waits
    follows the store to the run's end, through its retries."""

    generation: int
    retry_at: float


Settlement = Committed | HandedBack | Retrying | Lost | CommitFailed
"""How an attempt leaves its supervisor (`Supervisor.settle` carries it out)."""

HANDED_BACK = HandedBack()
