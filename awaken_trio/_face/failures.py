"""How a face reports what went wrong: the exit codes, the refusals, `CommandFailed`
(a failure ready to show) and the error object of DESIGN §3.3.

The command line prints a `CommandFailed` as one line (or, with ``--json``, its
`error_json`) and exits with its code; the dashboard's API answers the same error object
with the HTTP status its code stands for. A refusal is said in the words of the face
(`awaken_trio._face.words`), never in the Python API's.
"""

from __future__ import annotations

import enum
from typing import Final, final

import attrs

from .. import (
    AwakenError,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunError,
    RunExists,
    RunState,
    Runtime,
    StoreError,
    StreamGap,
    ThreadBusy,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
)
from .._redact import redact
from ..store import state_to_json
from .words import COMMAND_LINE, Words, refusal_message


class Exit(enum.IntEnum):
    """The exit codes (DESIGN §3.3)."""

    DONE = 0
    REFUSED = 1
    """The run's committed state refused the request."""
    BAD_INPUT = 2
    """Usage errors and bad input."""
    STORE = 3
    """The store cannot be opened or read."""
    INTERNAL = 70
    """An error nobody foresaw (a bug; EX_SOFTWARE)."""
    INTERRUPTED = 130
    """Ctrl-C where it is not the normal way to stop (128 + SIGINT)."""


REFUSALS: Final = (
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    TicketMismatch,
    TicketExpired,
    InvalidPayload,
    UnknownRun,
    RunExists,
    StreamGap,
    ThreadBusy,
)
"""Errors by which a run's committed state refuses a request (exit 1). `InvalidPayload` is
an `InvalidArgument`, so it must be matched before it."""


@final
@attrs.frozen
class CommandFailed(Exception):
    """A command's failure, ready to print: ``error`` is the snake_case name of what went
    wrong, ``state`` the run's committed state (None when there is no run to speak of)."""

    code: Exit
    error: str
    message: str
    state: RunState | None = None


def failure_of(
    exc: BaseException, state: RunState | None = None, *, words: Words = COMMAND_LINE
) -> CommandFailed:
    """The `CommandFailed` an error of the library (or of the input) comes out as: a
    refusal said in the face's ``words`` (see `refusal_message`), given the run's
    committed ``state`` when it is known."""
    said = refusal_message(exc, state, words) if isinstance(exc, AwakenError) else None
    message = one_line(str(exc) if said is None else said)
    name = RunError.error_code(exc)
    if isinstance(exc, REFUSALS):
        return CommandFailed(Exit.REFUSED, name, message, state)
    if isinstance(exc, InvalidArgument):
        return CommandFailed(Exit.BAD_INPUT, name, message)
    if isinstance(exc, StoreError):
        return CommandFailed(Exit.STORE, name, message)
    return CommandFailed(Exit.INTERNAL, name, message)


def one_line(text: str) -> str:
    return redact(" ".join(text.split()))


def bad_input(message: str, error: str = "bad_input") -> CommandFailed:
    return CommandFailed(Exit.BAD_INPUT, error, one_line(message))


def error_json(failure: CommandFailed) -> dict[str, JsonValue]:
    """The error object of DESIGN §3.3: ``{"error", "message", "state"}`` (``state`` is
    None for an unknown run); the dashboard's API answers a refusal with the same."""
    state = None if failure.state is None else state_to_json(failure.state)
    return {"error": failure.error, "message": failure.message, "state": state}


async def refused(
    runtime: Runtime, exc: AwakenError, run_id: str | None, *, words: Words = COMMAND_LINE
) -> CommandFailed:
    """The failure of a refused request, with the committed state of the run it named
    (``run_id``; None when it named none) read after it."""
    state: RunState | None = getattr(exc, "state", None)
    if state is None and run_id is not None and not isinstance(exc, UnknownRun):
        try:
            state = await runtime.state(run_id)
        except (UnknownRun, InvalidArgument, StoreError):
            state = None
    return failure_of(exc, state, words=words)
