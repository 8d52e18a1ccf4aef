"""The error hierarchy. Every message names the run and says what to do next."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._state import RunState


_ACRONYM_BOUNDARY: Final = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])")


class AwakenError(Exception):
    """Base class of every error awaken_trio raises on purpose."""


class InvalidArgument(AwakenError, ValueError):
    """An argument was malformed: an empty run id, an unknown command, a bad option."""


class InvalidBody(InvalidArgument, TypeError):
    """A run body was not an async callable."""


class InvalidPayload(InvalidArgument):
    """A payload was not a JSON value (the payload rules are in the concepts page of the docs)."""


class UnknownRun(AwakenError):
    """No run with that id is known to this runtime's store."""

    def __init__(self, run_id: str, detail: str = "") -> None:
        self.run_id = run_id
        super().__init__(
            detail
            or f"run {run_id!r} is unknown to this runtime's store;"
            " check the run id, or the store URL the runtime was opened with"
        )


class UnknownWorker(AwakenError):
    """No worker with that id is known to this runtime's store (never registered, or
    stopped more than a day ago and deleted)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        super().__init__(
            f"worker {worker_id!r} is unknown to this runtime's store; list the workers"
            " (runtime.list_workers(), or awaken-trio workers list) for their ids"
        )


class RunExists(AwakenError):
    """A run was started with an id that is already taken."""

    def __init__(self, run_id: str, why: str = "") -> None:
        self.run_id = run_id
        super().__init__(
            f"{why or f'run {run_id!r} already exists'}; pass a new run_id, or omit it to"
            " get a fresh one"
        )


class NotActive(AwakenError):
    """A live command found nothing controllable for the run in this process.

    Do not retry the same command blindly: read the committed state with
    `Runtime.state`; use `Runtime.cancel_run` or `Runtime.stop_run` for a queued or
    awaiting run, and take an ended run's committed state as the answer.
    """

    def __init__(self, run_id: str, why: str = "") -> None:
        self.run_id = run_id
        super().__init__(
            f"run {run_id!r} has no active attempt in this runtime"
            f"{' (' + why + ')' if why else ''}; read runtime.state({run_id!r}):"
            " use cancel_run/stop_run for a queued or awaiting run, and take an ended"
            " run's committed state as the answer"
        )


class NotAwaiting(AwakenError):
    """A resume found no live ticket: the run is not `Awaiting`. Nothing was committed."""

    def __init__(self, run_id: str, state: RunState, why: str = "") -> None:
        self.run_id = run_id
        self.state = state
        if why:
            text = f"run {run_id!r} cannot be resumed: {why}; nothing was committed"
        else:
            text = (
                f"run {run_id!r} is not awaiting (its committed state is {state!r});"
                " only an Awaiting run can be resumed, and a cancelled or stopped run never is"
            )
        super().__init__(text)


class TicketMismatch(AwakenError):
    """A resume named a correlation id that is not the live ticket's. Nothing was committed."""

    def __init__(self, run_id: str, expected: str, given: str) -> None:
        self.run_id = run_id
        self.expected = expected
        self.given = given
        super().__init__(
            f"run {run_id!r} awaits ticket {expected!r}, not {given!r};"
            " resume with the live ticket's correlation_id (or None to answer whatever"
            " ticket is live)"
        )


class TicketExpired(AwakenError):
    """A resume arrived after the ticket's deadline. Nothing was committed."""

    def __init__(self, run_id: str, correlation_id: str, deadline: float, now: float) -> None:
        self.run_id = run_id
        self.correlation_id = correlation_id
        self.deadline = deadline
        self.now = now
        super().__init__(
            f"ticket {correlation_id!r} of run {run_id!r} expired at {deadline}"
            f" (now {now}); the run is still Awaiting: end it with cancel_run or"
            " stop_run, or have its owner issue a new ticket"
        )


class RunAlreadyEnded(AwakenError):
    """The run had already ended; `.state` carries the committed terminal state."""

    def __init__(self, run_id: str, state: RunState) -> None:
        self.run_id = run_id
        self.state = state
        super().__init__(
            f"run {run_id!r} has already ended with {state!r}; that committed state is the"
            " answer, nothing was changed"
        )


class ThreadBusy(AwakenError):
    """A start or submit with ``if_busy="reject"`` found its thread busy: another run on it
    is running or queued. ``run_id`` and ``state`` are that run's (the running one, else the
    first queued one); ``thread_id`` the thread. Nothing was committed."""

    def __init__(self, thread_id: str, run_id: str, state: RunState) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.state = state
        super().__init__(
            f"thread {thread_id!r} is busy: run {run_id!r} on it is {state!r}; nothing was"
            " committed. Wait for that run, or pass if_busy='queue' to run after it or"
            " if_busy='supersede' to stop it and run instead"
        )


class RuntimeClosed(AwakenError):
    """The runtime is shutting down or closed and accepts no new attempts."""


class ContextMisuse(AwakenError, RuntimeError):
    """A `RunContext` was used outside the attempt it belongs to.

    Each body must use the ``ctx`` it was given (tasks it starts inside its attempt may share
    it); a child run has a context of its own, and a context is dead once its attempt ended.
    """


class NotInRun(AwakenError, RuntimeError):
    """`awaken_trio.current_context` was called from a task that belongs to no run.

    Only a run body, the tasks it starts inside its attempt, and the threads its sync
    steps run on have a current run; pass the body's ``ctx`` to code that runs elsewhere.
    """

    def __init__(self) -> None:
        super().__init__(
            "current_context() was called outside any run: only a run body, the tasks it"
            " starts and the threads its sync steps run on have a current run; call it from"
            " there, or pass the body's ctx to this code"
        )


class StoreError(AwakenError):
    """The store failed.

    ``outcome_unknown`` tells whether the failed write may have landed: a store that knows
    its transaction was rolled back raises with ``outcome_unknown=False`` (committed truth is
    unchanged); any other failure leaves it unknown, so read the run's committed state
    before acting on it.
    """

    def __init__(self, message: str, *, outcome_unknown: bool = True) -> None:
        self.outcome_unknown = outcome_unknown
        super().__init__(message)


class StreamGap(AwakenError):
    """A stream was read from an offset whose next chunks are no longer kept.

    ``oldest`` is the offset of the oldest chunk the channel still keeps after ``after``:
    read again from ``oldest - 1`` to take up from there (the chunks in between are gone:
    the channel was written with ``keep=False`` and its run has ended). Re-read the run's
    committed state (`Runtime.record`) for what those chunks led to.
    """

    def __init__(self, run_id: str, channel: str, after: int, oldest: int) -> None:
        self.run_id = run_id
        self.channel = channel
        self.after = after
        self.oldest = oldest
        super().__init__(
            f"stream {channel!r} of run {run_id!r} keeps no chunks from offset {after + 1}"
            f" to {oldest - 1} (its oldest kept chunk after offset {after} is {oldest});"
            f" read it from after={oldest - 1}, and the run's record for what it led to"
        )


class RunError(AwakenError):
    """Raise it (or a subclass) from a body to end the run ``Failed(code, message)``.

    ``code`` is a stable snake_case name hosts can branch on; ``message`` is for people.
    """

    def __init__(self, code: str, message: str = "") -> None:
        if not isinstance(code, str) or not _is_snake_case(code):
            raise InvalidArgument(
                f"a RunError code must be a snake_case str such as 'rate_limited', not {code!r}"
            )
        if not isinstance(message, str):
            raise InvalidArgument(f"a RunError message must be a str, not {message!r}")
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}" if message else code)

    @staticmethod
    def error_code(exc: BaseException) -> str:
        """The stable snake_case name of any error: a `RunError`'s ``code``, else its class
        name in snake_case, acronyms kept together (``ValueError`` -> ``value_error``,
        ``HTTPError`` -> ``http_error``, ``OAuth2TokenError`` -> ``o_auth2_token_error``).

        It is the ``code`` of the ``Failed`` end a body's error gives its run, and the
        ``"error"`` of the command line's and the dashboard's error objects.
        """
        if isinstance(exc, RunError):
            return exc.code
        return _ACRONYM_BOUNDARY.sub("_", type(exc).__name__).lower()


class MaxStepsReached(AwakenError):
    """Raise it from a body to end the run ``Ended(MaxSteps())``, as reaching ``max_steps``
    at a boundary does."""


def _is_snake_case(code: str) -> bool:
    return (
        bool(code)
        and code[0].isalpha()
        and all(c == "_" or c.isdigit() or ("a" <= c <= "z") for c in code)
    )
