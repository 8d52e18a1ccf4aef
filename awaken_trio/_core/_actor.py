"""The run actor: one attempt inside its cancel scope, ended at the finish boundary.

The actor captures its body's outcome and always reaches the finish boundary, whatever the
body, the clock or the store does. The one exception it lets through is a cancellation
that came from outside the attempt (runtime shutdown, or the parent's attempt ending),
re-raised after the commit as Trio requires. A KeyboardInterrupt or SystemExit from the
body is not a run error: the runtime shuts down and raises it when it closes.

The actor's own code is protected from KeyboardInterrupt (a Ctrl-C that arrives while it
runs is delivered to the main task instead), so no signal can land between a commit and
its bookkeeping; only the body itself runs unprotected.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs
import outcome
import trio

from ._attempt import DEADLINE, RETRIED_WITH_PARENT, SHUTDOWN, Attempt, Body, EndRequest
from ._context import RunContext, current_run
from ._errors import RunError
from ._json import fits_as_it_is
from ._state import CANCELLED_CAUSE, ended
from ._util import safe_repr
from ._verdict import (
    NATURAL_END,
    Ending,
    Verdict,
    classify,
    decide,
    internal_failure,
    natural_end,
)

if TYPE_CHECKING:
    from ._host import AttemptHost


@trio.lowlevel.disable_ki_protection
async def _capture_body(body: Body, ctx: RunContext) -> outcome.Outcome[Any]:
    """Run the body and capture how it ended (as ``outcome.acapture`` does, in one frame
    less). The body is user code: a Ctrl-C may land in it, like in any Trio task."""
    try:
        return outcome.Value(await body(ctx))
    except BaseException as exc:  # everything is the body's outcome; the actor classifies it
        return outcome.Error(exc)


@trio.lowlevel.enable_ki_protection
async def run_attempt(host: AttemptHost, attempt: Attempt) -> None:
    """The actor task of one attempt (and, before that, of its wait for the thread)."""
    result: outcome.Outcome[Any] | None = None
    cancel_seen = False
    escaped: BaseException | None = None
    # The end was committed inside the attempt's nursery (it had no child to wait for).
    concluded = False
    try:
        if (
            attempt.gate_waiter is not None or attempt.phase == "waiting_elsewhere"
        ) and await _wait_for_thread(attempt):
            # A thread busy in another runtime (durable stores) is retried whenever the
            # store changes, until it frees or the attempt is ended meanwhile.
            while not await host.begin_queued(attempt) and await _wait_for_store(host, attempt):
                pass
        if attempt.started:
            if attempt.fence is not None and attempt.commands_before:
                await host.load_commands(attempt)
            async with trio.open_nursery() as nursery:
                # The nursery's scope is the attempt's token: children started into this
                # nursery are cancelled with it, and nothing they do reaches further up.
                attempt.children_nursery = nursery
                if attempt.deadline is not None and attempt.request is None:
                    _set_deadline(host, attempt, nursery.cancel_scope)
                if attempt.request is not None:
                    # A pre-start cancel: the body never runs. (The scope was entered just
                    # now, so this request is the only way it can be cancelled yet.)
                    nursery.cancel_scope.cancel(reason=attempt.request.scope_reason())
                    cancel_seen = True
                elif host.closing or (attempt.parent is not None and attempt.ancestor_cancelled()):
                    cancel_seen = True
                else:
                    # (Built by its own __init__: `_create` is a call more, on every run.)
                    ctx = object.__new__(RunContext)
                    RunContext.__init__(ctx, host, attempt)
                    # Set, not reset later by its token: a parked run keeps no token.
                    current_run.set(ctx)
                    result = await _capture_body(attempt.body, ctx)
                    # The task's context must not keep the attempt: the attempt holds the
                    # scope that holds this task, and that cycle would outlive the run
                    # until a full garbage collection.
                    current_run.set(None)
                    # The observation window closes here: a cancel requested from now on
                    # is too late to change how the body ended.
                    cancel_seen = attempt.cancel_reaches(host.closing)
                    if cancel_seen and attempt.request is None and attempt.deadline_passed():
                        # Its own deadline cancelled it: that is its end, and its
                        # children's (theirs is never later).
                        attempt.request_end(DEADLINE)
                    elif attempt.retry is not None and type(result) is outcome.Error:
                        # Decided before its children are ended: a failure with a retry
                        # to come hands them back with it, for its next attempt.
                        _plan_retry(host, attempt, result.error, cancel_seen)
                if attempt.close_children():
                    await attempt.wait_for_admissions()
                if attempt.children:
                    _end_children(host, attempt)
                else:
                    # No child is left, and none can come (children are refused now):
                    # the nursery's exit has nothing to wait for but is a schedule point
                    # of its own, so the end is committed before it and its waiters are
                    # answered one scheduler pass sooner.
                    concluded = True
                    if not (
                        type(result) is outcome.Value
                        and not cancel_seen
                        and attempt.request is None
                        and attempt.suspension is None
                        and host.end_plainly(attempt, result.value)
                    ):
                        await host.finish(attempt, _conclusion(host, attempt, result, cancel_seen))
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
    if not concluded:
        await host.finish(attempt, _conclusion(host, attempt, result, cancel_seen))
    if escaped is not None and not isinstance(escaped, KeyboardInterrupt | SystemExit):
        raise escaped
    if escaped is not None:
        host.interrupted(escaped)


def _conclusion(
    host: AttemptHost,
    attempt: Attempt,
    result: outcome.Outcome[Any] | None,
    cancel_seen: bool,
) -> Verdict:
    """How the attempt ended, for the finish boundary to commit (`AttemptHost.finish`:
    shielded inside, never raises, so the end is committed once, whether inside the
    attempt's nursery or after it). Never raises either."""
    try:
        if (
            type(result) is outcome.Value
            and not cancel_seen
            and attempt.request is None
            and attempt.suspension is None
            and fits_as_it_is(result.value, host.max_payload_bytes)
        ):
            return Verdict(NATURAL_END, result.value)  # the common end (as `_verdict` has it)
        verdict = _verdict(host, attempt, result, cancel_seen)
    except Exception as exc:
        verdict = internal_failure(attempt.run_id, f"classifying its end raised {safe_repr(exc)}")
    if verdict.interrupt is not None:
        host.interrupted(verdict.interrupt)
    return verdict


def _set_deadline(host: AttemptHost, attempt: Attempt, scope: trio.CancelScope) -> None:
    """Give the attempt's scope the run's deadline as its Trio deadline (so a hung await is
    interrupted there too; no task or timer of its own): the wall-clock time left, from
    now on Trio's clock. A deadline already past ends the attempt before its body runs."""
    assert attempt.deadline is not None
    try:
        left = attempt.deadline - host.now()
    except Exception:  # a failing clock: the timer, or the next attempt, will tell
        return
    if left <= 0:
        attempt.request_end(DEADLINE)
    else:
        scope.deadline = trio.current_time() + left


def _end_children(host: AttemptHost, attempt: Attempt) -> None:
    # Each running child is told why before its scope is cancelled, so it records its
    # parent (or shutdown) as its cause rather than whatever reaches it next.
    request = attempt.request or host.shutdown_request
    if request is not None:
        child_request = request.for_child(attempt.run_id)
    elif attempt.retry is not None and attempt.retry.retry_at is not None:
        child_request = RETRIED_WITH_PARENT
    else:
        child_request = EndRequest.parent_ended(attempt.run_id)
    assert attempt.children is not None
    for child in attempt.children.running():
        child.request_end(child_request)
    assert attempt.scope is not None
    attempt.scope.cancel(reason=f"parent run {attempt.run_id!r} ended")


def _plan_retry(
    host: AttemptHost, attempt: Attempt, error: BaseException, cancel_seen: bool
) -> None:
    """Decide whether the run is tried again after its body raised ``error``: a failure
    (not a cancel, a suspension or an interrupt, and nobody asked the attempt to end) with
    a code the policy retries and tries left, whose next try can start before the run's
    deadline. The attempt's plan then says when; its end commits the retry."""
    plan = attempt.retry
    assert plan is not None
    if cancel_seen or attempt.request is not None or host.closing:
        return
    try:
        classified = classify(error)
        if classified.ending is not Ending.FAILURE:
            return
        if not plan.policy.retries(RunError.error_code(classified.error), plan.attempt):
            return
        retry_at = host.now() + plan.policy.wait(plan.attempt)
    except Exception:  # a failing clock (or error): no retry, so the failure is the end
        return
    if attempt.deadline is not None and retry_at >= attempt.deadline:
        return  # it would be ended at its deadline before its next try
    attempt.retry = attrs.evolve(plan, retry_at=retry_at)


async def _wait_for_thread(attempt: Attempt) -> bool:
    """Wait in FIFO order for the attempt's thread here; False if cancelled meanwhile."""
    with trio.CancelScope() as scope:
        attempt.queue_scope = scope
        if attempt.request is not None:
            scope.cancel(reason=attempt.request.scope_reason())
        if attempt.gate_waiter is not None:
            await attempt.gate_waiter.wait()
        else:
            await trio.lowlevel.checkpoint()
    attempt.queue_scope = None
    return not scope.cancelled_caught and trio.current_effective_deadline() != -math.inf


async def _wait_for_store(host: AttemptHost, attempt: Attempt) -> bool:
    """Wait until the store may have changed; False if the attempt was ended meanwhile."""
    if attempt.completion.done:
        return False
    with trio.CancelScope() as scope:
        attempt.queue_scope = scope
        if attempt.request is not None:
            scope.cancel(reason=attempt.request.scope_reason())
        # Bounded: a claim that lapses (its owner died) changes nothing in the store.
        with trio.move_on_after(host.poll_interval):
            await host.store_changed.wait()
    attempt.queue_scope = None
    return not scope.cancelled_caught and trio.current_effective_deadline() != -math.inf


def _verdict(
    host: AttemptHost,
    attempt: Attempt,
    result: outcome.Outcome[Any] | None,
    cancel_seen: bool,
) -> Verdict:
    request = attempt.request
    if request is not None and request.disposition == "lost":
        return Verdict(None)  # the run is lost to this attempt: nothing to commit
    if type(result) is outcome.Value and not cancel_seen and attempt.suspension is None:
        # The common end, decided at once (what `decide` concludes for it).
        if fits_as_it_is(result.value, host.max_payload_bytes):
            return Verdict(NATURAL_END, result.value)  # (positional: cheaper, on every run's path)
        return natural_end(result.value, attempt.run_id, host.max_payload_bytes)
    if (
        request is not None
        and cancel_seen
        and request.disposition == "end"
        and type(result) is outcome.Error
        and type(result.error) is trio.Cancelled
    ):
        # The common cancel, decided at once (what `decide` concludes for it: the request
        # made of the attempt is the cause, and the body's `Cancelled` adds nothing).
        return Verdict(ended(request.cause), None, (), request.detail)
    return decide(
        result,
        cancelled=_end_request(host, attempt) if cancel_seen else None,
        pending=attempt.request,
        suspension=attempt.suspension,
        shutdown=SHUTDOWN,
        run_id=attempt.run_id,
        max_steps=attempt.max_steps,
        max_payload_bytes=host.max_payload_bytes,
    )


def _end_request(host: AttemptHost, attempt: Attempt) -> EndRequest:
    """Who cancelled this attempt: its own request (the first one made, which includes
    its parent's and shutdown's, told to it when they happened), else an ancestor, else the
    body itself, else an enclosing scope nobody named.

    The ancestor is asked before the attempt's own scope: ending an attempt cancels that
    scope to stop its children, which must not read as the body cancelling itself.
    """
    if attempt.request is not None:
        return attempt.request
    if host.shutdown_request is not None:
        return host.shutdown_request
    if attempt.deadline_passed():
        # Before its parent: a child's deadline is the earlier of its own and its
        # parent's, so at their common deadline both scopes expire, and it ends by its own.
        return DEADLINE
    parent = attempt.parent
    if parent is not None and attempt.ancestor_cancelled():
        if parent.request is not None:
            return parent.request.for_child(parent.run_id)
        if parent.deadline_passed():
            return DEADLINE  # (the parent's deadline is never earlier than its child's)
        return EndRequest.parent_ended(parent.run_id)
    if attempt.scope is not None and attempt.scope.cancel_called:
        return EndRequest(CANCELLED_CAUSE, "body", "the body cancelled its own scope")
    return EndRequest(CANCELLED_CAUSE, "scope", "an enclosing cancel scope was cancelled")
