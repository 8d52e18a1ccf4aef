"""The run actor: one attempt inside its cancel scope, ended at the finish boundary.

The actor never lets an exception escape into the runtime, with two deliberate
exceptions: a cancellation that came from outside the attempt (the parent ending, runtime
shutdown) is re-raised after the commit, as Trio requires; and KeyboardInterrupt or
SystemExit from a body starts runtime shutdown and is re-raised after the commit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import outcome
import trio

from ._attempt import Attempt, EndRequest
from ._classify import error_code, kind_of
from ._errors import InvalidPayload
from ._json import JsonValue, check_json
from ._state import Awaiting, Cancelled, EndCause, Ended, Failed, MaxSteps, NaturalEnd, RunState
from ._storage import EventDraft

if TYPE_CHECKING:
    from ._supervisor import Supervisor


_NATURAL_END = Ended(NaturalEnd())  # frozen, so one instance serves every run


async def run_attempt(supervisor: Supervisor, attempt: Attempt) -> None:
    """The actor task of one attempt (and, before that, of its wait for the thread)."""
    result: outcome.Outcome[Any] | None = None
    cancel_seen = False
    escaped: BaseException | None = None
    try:
        if attempt.handed_over is not None:
            await attempt.handed_over.wait()
        if attempt.gate_waiter is not None and await _wait_for_thread(attempt):
            await supervisor.begin_queued(attempt)
        if attempt.started:
            async with trio.open_nursery() as nursery:
                # The nursery's scope is the attempt's token: children started into this
                # nursery are cancelled with it, and nothing they do reaches further up.
                attempt.scope = nursery.cancel_scope
                attempt.children_nursery = nursery
                if attempt.request is not None:
                    nursery.cancel_scope.cancel(reason=attempt.request.scope_reason())
                if _effectively_cancelled():
                    cancel_seen = True  # a pre-start cancel: the body never runs
                else:
                    assert attempt.context is not None
                    result = await outcome.acapture(attempt.body, attempt.context)
                    # The observation window closes here: a cancel requested from now on
                    # is too late to change how the body ended.
                    cancel_seen = _effectively_cancelled()
                if attempt.children:
                    nursery.cancel_scope.cancel(reason=f"parent run {attempt.run_id!r} ended")
        else:
            cancel_seen = True  # cancelled while queued: the body never runs
    except BaseException as exc:  # a cancel from outside the attempt, re-raised below
        escaped = exc
        if result is None:
            cancel_seen = True
    if not attempt.started and attempt.completion.done:
        # The run was ended by someone else while queued: nothing of ours to commit.
        if escaped is not None:
            raise escaped
        return
    state, value, events, detail, interrupt = _decide(supervisor, attempt, result, cancel_seen)
    if interrupt is not None:
        supervisor.begin_shutdown()
    await supervisor.finish(attempt, state, value, events, detail)  # shielded inside
    if interrupt is not None:
        raise interrupt
    if escaped is not None:
        raise escaped


async def _wait_for_thread(attempt: Attempt) -> bool:
    """Wait in FIFO order for the attempt's thread; False if cancelled meanwhile."""
    assert attempt.gate_waiter is not None
    with trio.CancelScope() as scope:
        attempt.queue_scope = scope
        if attempt.request is not None:
            scope.cancel(reason=attempt.request.scope_reason())
        await attempt.gate_waiter.wait()
    attempt.queue_scope = None
    return not scope.cancelled_caught and not _effectively_cancelled()


def _effectively_cancelled() -> bool:
    return trio.current_effective_deadline() == -math.inf


def _decide(
    supervisor: Supervisor,
    attempt: Attempt,
    result: outcome.Outcome[Any] | None,
    cancel_seen: bool,
) -> tuple[RunState, JsonValue, list[EventDraft], dict[str, JsonValue], BaseException | None]:
    """Classify the end of an attempt (DESIGN §2.4): error, then cancel, then a pause or
    await, then the step ceiling, then the value."""
    events: list[EventDraft] = []
    kind = "none"
    if isinstance(result, outcome.Error):
        kind, exc = kind_of(result.error)
        if kind == "interrupt":
            request = supervisor.shutdown_end_request()
            return Ended(request.cause), None, events, request.detail(), exc
        if kind == "failure" or (kind == "cancelled" and not cancel_seen):
            cause = Failed(error_code(exc), str(exc))
            return Ended(cause), None, events, {"error": f"{type(exc).__qualname__}: {exc}"}, None
    if cancel_seen:
        request = _end_request(supervisor, attempt)
        if isinstance(result, outcome.Value):
            events.append(
                EventDraft(
                    "late_result_discarded",
                    {
                        "result": _describe(result.value),
                        **request.detail(),
                    },
                )
            )
        return Ended(request.cause), None, events, request.detail(), None
    if attempt.suspension is not None and kind in ("suspend", "none"):
        # The pause or await decided at the boundary stands, even if the body caught the
        # suspension and returned: an attempt that committed to waiting ends waiting.
        ticket = attempt.suspension.ticket
        return Awaiting(ticket), None, events, {"reason": ticket.reason}, None
    if kind == "ceiling":
        return Ended(MaxSteps()), None, events, {"max_steps": attempt.max_steps}, None
    if isinstance(result, outcome.Value):
        try:
            value = check_json(result.value, f"result of run {attempt.run_id!r}")
        except InvalidPayload as exc:
            return Ended(Failed("invalid_result", str(exc))), None, events, {}, None
        return _NATURAL_END, value, events, {}, None
    raise AssertionError(f"unclassifiable end of run {attempt.run_id!r}: {result!r}")


def _end_request(supervisor: Supervisor, attempt: Attempt) -> EndRequest:
    """Who cancelled this attempt: its own request, else shutdown, else an ancestor, else
    the body itself.

    The ancestor is asked before the attempt's own scope: ending an attempt cancels that
    scope to stop its children, which must not read as the body cancelling itself.
    """
    if attempt.request is not None:
        return attempt.request
    if supervisor.shutdown_request is not None:
        return supervisor.shutdown_request
    parent = attempt.parent
    if parent is not None and attempt.ancestor_cancelled():
        why = parent.request.reason if parent.request is not None else None
        return EndRequest(Cancelled(), "parent", why or f"parent run {parent.run_id!r} ended")
    if attempt.scope is not None and attempt.scope.cancel_called:
        return EndRequest(Cancelled(), "body", "the body cancelled its own scope")
    return EndRequest(Cancelled(), "scope", "an enclosing cancel scope was cancelled")


def _describe(value: object) -> JsonValue:
    try:
        return check_json(value, "late result")
    except InvalidPayload:
        return repr(value)


def cause_of(state: RunState) -> EndCause | None:
    return state.cause if isinstance(state, Ended) else None
