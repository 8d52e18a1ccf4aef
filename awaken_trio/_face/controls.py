"""The controls: which runtime call each one makes, what it takes, and in which committed
states it is offered.

One table for every face: ``awaken-trio runs cancel|stop|pause|wake|message|resume``, the
dashboard's ``POST /api/runs/{id}/{control}`` and its buttons, and the clients'
``cancel_run``, ``stop_run`` and ``resume`` all make their call through `CONTROLS`, so
they cannot disagree on what a control does. The runtime checks the arguments (and the
run's committed state) itself; a face checks only what its own input is made of (the
dashboard: a JSON body, `Argument`).

`unavailable` says, for a run's committed state, why a control would be refused: the
dashboard shows only the controls a run's state allows and says why the others are not
offered. It is a courtesy read from a state that may be stale by the time the control is
sent; the runtime's answer to the call stays the authority.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, final, get_args

import attrs

from .. import JsonValue, LiveCommand, RunState, Runtime
from ..store import StateKind
from .shapes import describe_cause, state_word

ControlName = Literal["cancel", "stop", "pause", "wake", "message", "resume"]

ArgumentKind = Literal["text", "reason", "json"]
"""``text`` a string; ``reason`` a non-empty string (why a run is stopped); ``json`` any
JSON value."""

Arguments = Mapping[str, JsonValue]
Call = Callable[[Runtime, str, Arguments], Awaitable[RunState | None]]


@final
@attrs.frozen
class Argument:
    """One argument a control takes: what it is made of, and whether it must be given."""

    kind: ArgumentKind
    required: bool = False


@final
@attrs.frozen
class ControlSpec:
    """A control: its runtime call (given the run id and the arguments by name; it answers
    the committed state it made, or None when the state must be read after it), its
    arguments, the committed state kinds it is offered in, and whether it ends the run (a
    face asks before it does)."""

    call: Call
    arguments: Mapping[str, Argument]
    offered: frozenset[StateKind]
    ends_run: bool = False


def _given(arguments: Arguments, key: str) -> Any:
    """An argument as it was given (None when it was not): the runtime call it is passed
    to checks it, and refuses a value of the wrong type with `InvalidArgument`."""
    return arguments.get(key)


async def _cancel(runtime: Runtime, run_id: str, arguments: Arguments) -> RunState:
    return await runtime.cancel_run(run_id, reason=_given(arguments, "reason"))


async def _stop(runtime: Runtime, run_id: str, arguments: Arguments) -> RunState:
    return await runtime.stop_run(run_id, _given(arguments, "reason"))


async def _pause(runtime: Runtime, run_id: str, arguments: Arguments) -> None:
    await runtime.send(LiveCommand.Pause(run_id))


async def _wake(runtime: Runtime, run_id: str, arguments: Arguments) -> None:
    await runtime.send(LiveCommand.Wake(run_id, _given(arguments, "reason") or ""))


async def _message(runtime: Runtime, run_id: str, arguments: Arguments) -> None:
    await runtime.send(LiveCommand.Message(run_id, arguments.get("payload")))


async def _resume(runtime: Runtime, run_id: str, arguments: Arguments) -> None:
    correlation_id = _given(arguments, "correlation_id")
    await runtime.resume(run_id, arguments.get("value"), correlation_id=correlation_id)


_LIVE: Final[frozenset[StateKind]] = frozenset({"queued", "running", "awaiting"})

CONTROLS: Final[Mapping[ControlName, ControlSpec]] = {
    "cancel": ControlSpec(_cancel, {"reason": Argument("text")}, _LIVE, ends_run=True),
    "stop": ControlSpec(_stop, {"reason": Argument("reason", required=True)}, _LIVE, ends_run=True),
    "pause": ControlSpec(_pause, {}, frozenset({"queued", "running"})),
    "wake": ControlSpec(_wake, {"reason": Argument("text")}, frozenset({"running"})),
    "message": ControlSpec(
        _message, {"payload": Argument("json", required=True)}, frozenset({"queued", "running"})
    ),
    "resume": ControlSpec(
        _resume,
        {"value": Argument("json"), "correlation_id": Argument("text")},
        frozenset({"awaiting"}),
    ),
}


CONTROL_NAMES: Final[tuple[ControlName, ...]] = get_args(ControlName)


def control_named(name: str) -> ControlName | None:
    """``name`` as a control's name (a path segment, a button's), or None if none is."""
    for known in CONTROL_NAMES:
        if known == name:
            return known
    return None


async def control(
    runtime: Runtime, name: ControlName, run_id: str, arguments: Arguments
) -> RunState:
    """Make control ``name``'s call on run ``run_id``; answer the committed state it made
    (read after it, for a control whose call answers none)."""
    state = await CONTROLS[name].call(runtime, run_id, arguments)
    return await runtime.state(run_id) if state is None else state


def none_offered(state: RunState) -> str | None:
    """Why no control at all is offered for a run in committed ``state`` (an ended run),
    or None when one is."""
    if any(unavailable(name, state) is None for name in CONTROL_NAMES):
        return None
    assert isinstance(state, RunState.Ended), "every live state allows cancel and stop"
    return f"the run has ended ({describe_cause(state.cause)}): no control can change it"


def unavailable(name: ControlName, state: RunState) -> str | None:
    """Why control ``name`` would be refused for a run in committed ``state`` (a short
    sentence for people), or None when the state allows it."""
    kind = state_word(state)
    if kind in CONTROLS[name].offered:
        return None
    match state:
        case RunState.Ended(cause):
            return f"the run has ended ({describe_cause(cause)}): nothing is left to {name}"
        case RunState.Awaiting(ticket):
            waiting = f"the run is awaiting {ticket.reason}"
            if name == "pause":
                return f"{waiting}: it is paused already; resume answers its ticket"
            return f"{waiting}: resume answers its ticket (with a value)"
    if name == "resume":
        return f"the run is {kind}: only an awaiting run has a ticket to answer"
    return f"the run is {kind}: it has no attempt running to {name}"
