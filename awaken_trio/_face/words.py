"""How a refusal is said to a person, in the words of the face they use.

The library's errors speak the Python API (``read runtime.state('x')``, ``use
cancel_run/stop_run``, ``RunState.Queued()``), which a user of the command line or the
dashboard never calls. A refusal is said again here from what it carries (the run, its
committed state, the ticket) and what the face offers instead: ``runs cancel ID`` on the
command line, the cancel control on the dashboard.
"""

from __future__ import annotations

from typing import Final

import attrs

from .. import (
    AwakenError,
    InvalidPayload,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunExists,
    RunState,
    ThreadBusy,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
)
from .shapes import describe_cause, describe_state, format_time


@attrs.frozen
class Words:
    """What a face tells a person to do next (``{run_id}`` and ``{expected}`` are filled
    in)."""

    end: str
    """How to end a queued or awaiting run."""
    resume: str
    """How to answer an awaiting run's ticket."""
    ticket: str
    """How to answer the live ticket (``{expected}``: its correlation id)."""
    look: str
    """Where to see a run's committed state and events."""
    find: str
    """What to check when a run is not in the store."""
    new_run_id: str
    """How to start a run under another id."""
    busy: str
    """What to do about the run that keeps a thread busy (``{run_id}``)."""


COMMAND_LINE: Final = Words(
    end="end it with `runs cancel {run_id}` or `runs stop {run_id} --reason R`",
    resume="answer it with `runs resume {run_id} --value JSON`",
    ticket="pass --correlation-id {expected}, or leave --correlation-id out to answer the"
    " live ticket",
    look="see it with `runs show {run_id}`",
    find="check the run id (`runs list` lists them) and --store",
    new_run_id="give another --run-id, or leave --run-id out for a fresh one",
    busy="wait for it (`runs show {run_id}`), or submit with --if-busy queue to run after"
    " it, or --if-busy supersede to stop it and run instead",
)
DASHBOARD: Final = Words(
    end="end it with cancel or stop",
    resume="answer it with resume",
    ticket="give correlation id {expected}, or leave it empty to answer the live ticket",
    look="see its committed state and events on its page",
    find="check the run id",
    new_run_id="give another run id",
    busy="wait for it, or end it with cancel or stop",
)


def refusal_message(exc: AwakenError, state: RunState | None, words: Words) -> str | None:
    """The refusal ``exc`` in ``words``, given the run's committed state read after it
    (None when it is not known); None for an error this does not say again (its own
    message speaks no API)."""
    run_id = str(getattr(exc, "run_id", ""))

    def fill(text: str, **more: str) -> str:
        return text.format(run_id=run_id, **more)

    not_here = f"run {run_id!r} is not in this store; {fill(words.find)}"
    match exc:
        case UnknownRun():
            return not_here
        case RunAlreadyEnded():
            return _ended(run_id, exc.state)
        case NotActive():
            return _not_active(run_id, state, words, not_here)
        case NotAwaiting():
            now = exc.state if state is None else state
            if isinstance(now, RunState.Ended):
                return (
                    f"run {run_id!r} has ended ({describe_cause(now.cause)}), and an ended"
                    " run is never resumed; nothing was changed"
                )
            if isinstance(now, RunState.Awaiting):
                return None  # refused for a reason of its own, which its message says
            return (
                f"run {run_id!r} is not awaiting input (it is {describe_state(now)}): only"
                f" an awaiting run can be resumed; {fill(words.look)}"
            )
        case TicketMismatch():
            return (
                f"run {run_id!r} awaits ticket {exc.expected!r}, not {exc.given!r};"
                f" {fill(words.ticket, expected=exc.expected)}"
            )
        case TicketExpired():
            return (
                f"ticket {exc.correlation_id!r} of run {run_id!r} expired at"
                f" {format_time(exc.deadline)}, and the run is still awaiting:"
                f" {fill(words.end)}"
            )
        case RunExists():
            return f"run {run_id!r} already exists; {fill(words.new_run_id)}"
        case ThreadBusy():
            return (
                f"thread {exc.thread_id!r} is busy: run {run_id!r} on it is"
                f" {describe_state(exc.state)}; nothing was committed. {fill(words.busy)}"
            )
        case InvalidPayload():
            return None
    return None


def _ended(run_id: str, state: RunState) -> str:
    cause = describe_cause(state.cause) if isinstance(state, RunState.Ended) else "ended"
    return (
        f"run {run_id!r} has already ended ({cause}); that committed state is the answer,"
        " nothing was changed"
    )


def _not_active(run_id: str, state: RunState | None, words: Words, not_here: str) -> str:
    """A live command (pause, wake, message) that no attempt of the run could take."""
    nothing = "no attempt of it runs to take this"

    def fill(text: str) -> str:
        return text.format(run_id=run_id)

    match state:
        case None:
            return not_here
        case RunState.Ended():
            return _ended(run_id, state)
        case RunState.Awaiting(ticket):
            return (
                f"run {run_id!r} is awaiting {ticket.reason}: {nothing};"
                f" {fill(words.resume)}, or {fill(words.end)}"
            )
        case RunState.Queued():
            return f"run {run_id!r} is queued: {nothing} yet; {fill(words.end)}"
    return (
        f"run {run_id!r} is {describe_state(state)}, but the attempt this was sent to had"
        f" ended; {fill(words.look)} before sending it again"
    )
