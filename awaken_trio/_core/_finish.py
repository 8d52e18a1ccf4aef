"""The finish boundary: the one place an attempt's end is committed and the attempt let go.

Every way an attempt ends (its body returns or raises, a pause or an await, a cancel, a
stop, its parent's end, shutdown, a lost claim) comes here once. The end's commit
deregisters the attempt, frees its thread, updates its parent's children and answers every
waiter, all in the commit's own step, before any ``wait()`` for the attempt returns.

It never raises: whatever fails on the way (the clock, the store, a child's commit), the
attempt is let go and every waiter is answered.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, final

import trio

from . import _commit_of as commit_of
from ._admit import with_clock_error
from ._attempt import Attempt, EndRequest, ParkedChild, RetryPlan
from ._errors import RuntimeClosed, StoreError
from ._json import EMPTY_DICT, JsonValue, fits_as_it_is, freeze_detail
from ._policy import Deadlines
from ._progress import fenced
from ._state import Awaiting, Ended, EventKind, Failed, Queued, RunState, wake_at
from ._storage import (
    Accepted,
    CommitResult,
    DescendantsEnd,
    EventDraft,
    Rejected,
    RejectReason,
)
from ._util import safe_repr
from ._verdict import (
    HANDED_BACK,
    NATURAL_END,
    QUEUED,
    CommitFailed,
    Committed,
    Lost,
    Retrying,
    Settlement,
    Verdict,
    format_traceback,
)

if TYPE_CHECKING:
    from ._kernel import Kernel

logger = logging.getLogger("awaken_trio")

_LOST_CLAIM = Lost(claim_kept=False)


@final
class FinishBoundary:
    """Commits attempts' ends over the kernel's state (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        # The commit effect, bound once: each commit's partial holds no method of its own.
        self._ended_effect = self._ended
        # Ends handed to the mailbox with no task waiting for them, not answered yet, and
        # the event `ends_answered` waits on while there are any.
        self._ends_posted = 0
        self._all_answered: trio.Event | None = None

    def finish(self, attempt: Attempt, verdict: Verdict) -> Coroutine[Any, Any, None]:
        """Commit the attempt's end, after ending its parked children (awaited: it is a
        coroutine function, one frame less on every run's path). Never raises.

        The attempt's span (tracing) ends with it, whatever the commit did.
        """
        if attempt.span is None:
            return self._finish(attempt, verdict)
        return self._finish_traced(attempt, verdict)

    def end_plainly(self, attempt: Attempt, value: object) -> bool:
        """The common end, committed in the caller's step: the body of a started attempt
        returned ``value`` and nobody asked the attempt to end (its caller checked that,
        and that it has no child). Done here, as `finish` would do it, when ``value`` is a
        result that surely fits (`fits_as_it_is`) and the attempt holds no message, no
        stream, no retry plan and no span, no message of its run is stranded, the claim
        policy needs nothing at an end (`ClaimPolicy.quiet_ends`) and the store needs no
        I/O; otherwise False, having done nothing, for `finish` to commit the end.

        Never raises: a clock or a store that fails is answered as `finish` answers it.
        """
        kernel = self._kernel
        mailbox = kernel.mailbox
        if (
            attempt.inbox is not None
            or attempt.streams is not None
            or attempt.span is not None
            or attempt.retry is not None
            or kernel.stranded
            or not kernel.claims.quiet_ends
            or not mailbox.applies_now
            or not fits_as_it_is(value, kernel.max_payload_bytes)
        ):
            return False
        attempt.phase = "sealed"
        try:
            at, detail = kernel.now(), EMPTY_DICT
        except BaseException as exc:
            at, clock_error = kernel.clock_failed(exc)
            detail = with_clock_error(EMPTY_DICT, clock_error)
        commit = commit_of.natural_end(attempt, value, at=at, detail=detail)
        try:
            result = mailbox.commit_now(commit)
            # Nothing yielded since `applies_now` said so: the commit was applied here.
            assert result is not None
            self._ended(attempt, NATURAL_END, result)
        except Exception as exc:
            self._end_failed(attempt, exc, ())
        return True

    async def _finish_traced(self, attempt: Attempt, verdict: Verdict) -> None:
        span = attempt.span
        assert span is not None
        try:
            for event in verdict.events:
                if event.kind == EventKind.LATE_RESULT_DISCARDED:
                    span.event("awaken.late_result", {})
            await self._finish(attempt, verdict)
        finally:
            span.ended(attempt.completion.state, verdict.detail)

    async def _finish(self, attempt: Attempt, verdict: Verdict) -> None:
        """`finish` itself.

        Nothing here can be interrupted: the children's commits run shielded and
        `CommitMailbox.commit` cannot be cancelled once called. A root attempt's end on a
        store with I/O is handed over with no task waiting for it (`CommitMailbox.post`),
        and its answer taken in the commit's step (`_answered`). If the store fails, the
        attempt is let go with its messages kept for whoever ends the run later. An attempt
        that lost its run (``verdict.state`` is None) commits nothing; on a durable store a
        root attempt's end drops its claim.
        """
        kernel = self._kernel
        claims = kernel.claims
        if attempt.children:
            await self._end_parked_children(attempt)
        attempt.phase = "sealed"
        # Its stream writers close with it; what they hold is written with its end (and
        # dropped if it commits none).
        streams = attempt.streams
        chunks = () if streams is None else streams.close()
        state = verdict.state
        if state is None:
            request = attempt.request
            gone = Lost(claim_kept=request is None or not request.claim_lost)
            self.settle(attempt, gone)
            if gone.claim_kept:
                await claims.after_end(attempt, _NOTHING_COMMITTED, False)
            else:
                claims.forget(attempt.run_id)  # lapsed or taken: left for recovery
            return
        if type(state) is Queued and not attempt.started:
            # Handed back at shutdown while it waited for its thread: the store holds it
            # Queued already, in its place in the queue.
            self.settle(attempt, HANDED_BACK)
            return
        # Messages the store holds (sent from anywhere) stay there: for the run's next
        # attempt, or for the messages_discarded event of its end.
        inbox = attempt.inbox
        messages = () if inbox is None or not inbox.has_messages() else tuple(inbox.unread_local())
        stranded = kernel.stranded.pop(attempt.run_id, ()) if kernel.stranded else ()
        if stranded:
            messages = (*stranded, *messages)
        try:  # (`Kernel.now_for_end`, a call less)
            at, clock_error = kernel.now(), None
        except BaseException as exc:
            at, clock_error = kernel.clock_failed(exc)
        release = claims.releases_at_end(attempt)
        plan = attempt.retry
        descendants: DescendantsEnd | None = None
        not_before = retries = None
        if plan is not None and plan.retry_at is not None and verdict.error is not None:
            # A failure the policy retries: not the run's end (the plan was made when the
            # body raised, and its children were handed back for the next attempt).
            verdict = _retried(verdict, plan)
            state = verdict.state
            not_before, retries = plan.retry_at, plan.attempt
        elif type(state) is not Queued:
            # Those an earlier attempt handed back that this one did not take back end
            # with it (rule 22), whether a release, a loss or a retry handed them back.
            descendants = claims.descendants_at_end(attempt)
            if descendants is None and plan is not None and plan.retries:
                descendants = "not_resumed"
        detail = verdict.detail
        if clock_error is not None:
            detail = with_clock_error(detail, clock_error)
        commit = commit_of.end(
            attempt,
            verdict,
            at=at,
            detail=detail,
            messages=messages,
            release=release,
            descendants=descendants,
            chunks=chunks,
            not_before=not_before,
            retries=retries,
        )
        assert state is not None
        # The span counts the messages this end discards that the runtime held; those only
        # the store holds (sent from another runtime, not yet relayed here) are added to
        # the terminal event by the store itself, and are not in this count.
        if attempt.span is not None and commit.discarded_messages:
            attempt.span.event(
                "awaken.messages_discarded", {"awaken.count": len(commit.discarded_messages)}
            )
        mailbox = kernel.mailbox
        try:
            result = mailbox.commit_now(commit)  # as in `Admissions.admit`
            if result is not None:
                self._ended(attempt, state, result)
            elif attempt.parent is None and attempt.span is None:
                # Nothing is left for the actor once its end is committed: the end is
                # handed over with no task waiting for it (as a look's starts are), and
                # its answer is taken in the commit's step (`_answered`). Not a child's:
                # its parent's end waits for it. Not a traced one's: its span ends with
                # the committed state. (`post` answers in a later step: the store needs
                # I/O, or commits wait ahead of this one.)
                mailbox.post(
                    commit,
                    functools.partial(self._answered, attempt, state, verdict, release, messages),
                )
                self._ends_posted += 1
                return
            else:
                effect = functools.partial(self._ended_effect, attempt, state)
                result = await mailbox.commit(commit, effect)
        except Exception as exc:
            self._end_failed(attempt, exc, messages)
            return
        if self._after_answer(attempt, verdict, result):
            await claims.after_end(attempt, result, release)

    def _answered(
        self,
        attempt: Attempt,
        state: RunState,
        verdict: Verdict,
        release: bool,
        messages: tuple[JsonValue, ...],
        answer: CommitResult | StoreError,
    ) -> None:
        """The answer to an end `_finish` handed over with no task waiting for it, in the
        commit's step: what the actor would have done with it. Never raises."""
        try:
            if isinstance(answer, StoreError):
                self._end_failed(attempt, answer, messages)
                return
            try:
                self._ended(attempt, state, answer)
            except Exception as exc:  # an effect's failure, as `CommitMailbox.commit` has it
                self._end_failed(attempt, exc, messages)
                return
            if self._after_answer(attempt, verdict, answer):
                self._kernel.claims.end_answered(attempt, answer, release)
        finally:
            self._ends_posted -= 1
            if not self._ends_posted and self._all_answered is not None:
                self._all_answered.set()

    def _after_answer(self, attempt: Attempt, verdict: Verdict, result: CommitResult) -> bool:
        """What follows an attempt's end answered ``result`` here: a failure's log line,
        and for an end fenced out, its claim forgotten (another runtime's now). Whether the
        claim policy is still to take the end (`ClaimPolicy.after_end`)."""
        if verdict.error is not None and type(result) is Accepted:
            plan = attempt.retry
            _log_failure(attempt, verdict.error, retry_at=None if plan is None else plan.retry_at)
        if type(result) is Rejected and result.reason is RejectReason.FENCED:
            fenced(attempt, "its end")
            self._kernel.claims.forget(attempt.run_id)  # another runtime's claim: hands off
            return False
        return True

    async def ends_answered(self) -> None:
        """Return once every end handed over with no task waiting for it (`_finish`) has
        been answered: the actors are done only then. A checkpoint."""
        while self._ends_posted:
            self._all_answered = answered = trio.Event()
            await answered.wait()
        self._all_answered = None
        await trio.lowlevel.checkpoint()

    def _end_failed(
        self, attempt: Attempt, exc: Exception, messages: tuple[JsonValue, ...]
    ) -> None:
        """The attempt's end could not be committed (the store or the runtime refused it:
        its ``messages`` are kept for whoever ends the run later), or an effect of its
        commit raised: either way it is let go, and every waiter is answered."""
        if not isinstance(exc, StoreError | RuntimeClosed):
            exc, messages = StoreError(f"ending run {attempt.run_id!r} failed: {exc!r}"), ()
        self.settle(attempt, CommitFailed.of(exc, messages))

    def _ended(self, attempt: Attempt, state: RunState, result: CommitResult) -> None:
        """The effect of an attempt's end commit (``state``): it is let go, and its waiters
        are answered."""
        if type(result) is Rejected and result.reason is RejectReason.FENCED:
            # The claim is no longer ours: another runtime holds the truth now.
            self.settle(attempt, _LOST_CLAIM)
        elif type(state) is Queued and type(result) is Accepted:
            plan = attempt.retry
            if plan is not None and plan.retry_at is not None:
                self.settle(attempt, Retrying(attempt.generation, plan.retry_at))
            else:
                # Handed back for another runtime at shutdown.
                self.settle(attempt, HANDED_BACK)
        elif type(result.state) is Ended:  # the common end: `settle` of `Committed`
            self._let_go(attempt, result.state)
            attempt.completion.set(result.state)
        else:
            assert result.state is not None
            self.settle(attempt, Committed(result.state))

    async def _end_parked_children(self, attempt: Attempt) -> None:
        assert attempt.children is not None
        request = attempt.request
        if request is not None and request.disposition != "end":
            # Handed back or lost: the awaiting children stay as the store holds them,
            # for the parent's next attempt to take back (rule 22); a run ended elsewhere
            # has had its tree ended with it.
            return
        if request is None and attempt.retry is not None and attempt.retry.retry_at is not None:
            return  # failed with a retry to come: they are handed back with it, likewise
        parked = [
            (child_id, child)
            for child_id, child in attempt.children.entries.items()
            if isinstance(child, ParkedChild)
        ]
        if not parked:
            return
        if request is not None:
            child_request = request.for_child(attempt.run_id)
        else:
            kernel = self._kernel
            child_request = kernel.shutdown_request or EndRequest.parent_ended(attempt.run_id)
        with trio.CancelScope(shield=True):
            for child_id, child in parked:
                # A store failure leaves the child waiting; it can never be resumed (or
                # retried) without its parent's attempt, and cancel_run/stop_run still end it.
                with contextlib.suppress(StoreError, RuntimeClosed):
                    await self.commit_end(child_id, child.generation, child.waiting, child_request)
                attempt.children.entries.pop(child_id, None)

    def settle(self, attempt: Attempt, how: Settlement) -> None:
        """Let the attempt go as ``how`` says, in one step: it is deregistered, its thread
        freed, its parent's child map updated, and every waiter answered (with its
        committed state, the store's truth to follow, or the store's error).

        A failed commit (`CommitFailed`) leaves the run its last committed state (an
        orphaned ``Running`` or ``Queued`` that ``cancel_run``/``stop_run`` can end later,
        discarding the kept messages with an event). On a durable store a root attempt's
        claim is then no longer renewed: nothing runs the run here any more, so its lease
        lapses and recovery takes the run up again, as for any lost owner.
        """
        kernel = self._kernel
        if type(how) is Committed:
            state = how.state
            self._let_go(attempt, state)
            if type(state) is Awaiting:
                kernel.awaiting_bodies[attempt.run_id] = attempt.body
                wake = wake_at(state.ticket)
                if wake is not None:
                    kernel.on_scheduled(wake, attempt.run_id, state.ticket.correlation_id)
                if attempt.deadline is not None:
                    # Awaiting here: the timer ends it at its deadline unless it moves on.
                    kernel.on_limits(run_id=attempt.run_id, limits=Deadlines(attempt.deadline))
            attempt.completion.set(state)
            return
        if type(how) is Retrying:
            # Its body is kept here, and this runtime tries it again when its time comes
            # (a serving runtime with its body may, too: the store's fence picks one).
            kernel.awaiting_bodies[attempt.run_id] = attempt.body
            self._let_go(attempt, None, retrying=how.generation)
            kernel.on_retry(how.retry_at, attempt.run_id, how.generation)
            if attempt.deadline is not None:
                # Queued here until then: the timer ends it at its deadline if its next
                # try has not started by then (its retry time is earlier, but its thread
                # may be busy).
                kernel.on_limits(run_id=attempt.run_id, limits=Deadlines(attempt.deadline))
            attempt.completion.defer_to_store()
            return
        if type(how) is CommitFailed:
            kernel.claims.commit_failed(attempt)
            if how.messages:
                kernel.stranded[attempt.run_id] = how.messages
            self._let_go(attempt, None)
            logger.error(
                "run %r attempt %d could not be committed: %s"
                " (the run keeps its last committed state)",
                attempt.run_id,
                attempt.generation,
                how.error,
                extra={"run_id": attempt.run_id},
            )
            attempt.completion.fail(how.error)
            return
        # Lost or handed back: no state of its own.
        self._let_go(attempt, None)
        attempt.completion.defer_to_store()

    def _let_go(
        self, attempt: Attempt, state: RunState | None, *, retrying: int | None = None
    ) -> None:
        kernel = self._kernel
        attempt.phase = "sealed"
        kernel.registry.deregister(attempt)
        kernel.free_thread(attempt)
        run_id = attempt.run_id
        if kernel.queued.get(run_id) is attempt:
            del kernel.queued[run_id]
        parent = attempt.parent
        siblings = None if parent is None or parent.children is None else parent.children.entries
        if siblings is not None and siblings.get(run_id) is attempt:
            if isinstance(state, Awaiting):
                # Still the parent's, to be ended with it.
                siblings[run_id] = ParkedChild(attempt.generation)
            elif retrying is not None:
                # Queued to retry: still the parent's, tried again under it or ended with it.
                siblings[run_id] = ParkedChild(retrying, Queued)
            else:
                del siblings[run_id]

    async def commit_end(
        self,
        run_id: str,
        generation: int,
        state: type[RunState],
        request: EndRequest,
        *,
        parent_run_id: str | None = None,
        descendants: DescendantsEnd | None = None,
    ) -> CommitResult:
        """End a run that has no attempt here (awaiting, or queued or orphaned elsewhere).

        Fenced by the generation and state kind that were read, so a run that moved on
        in the meantime is left alone (the result is then `Rejected`).
        """
        kernel = self._kernel
        stranded = kernel.stranded.pop(run_id, ()) if kernel.stranded else ()

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Accepted):
                kernel.awaiting_bodies.pop(run_id, None)
                parent = None if parent_run_id is None else kernel.registry.get(parent_run_id)
                children = None if parent is None else parent.children
                siblings = None if children is None else children.entries
                if siblings is not None and isinstance(siblings.get(run_id), ParkedChild):
                    del siblings[run_id]
            elif stranded:
                kernel.stranded[run_id] = stranded

        at, clock_error = kernel.now_for_end()
        commit = commit_of.end_elsewhere(
            run_id,
            generation,
            state,
            request,
            at=at,
            detail=with_clock_error(request.detail, clock_error),
            discarded=stranded,
            descendants=descendants,
        )
        try:
            return await kernel.mailbox.commit(commit, on_commit)
        except BaseException:
            if stranded:
                kernel.stranded[run_id] = stranded
            raise


_NOTHING_COMMITTED = Rejected(RejectReason.STALE, None)
"""What `ClaimPolicy.after_end` is told for an attempt that committed nothing (it lost its
run, with its claim still its own): the claim is released."""


def _log_failure(attempt: Attempt, error: BaseException, *, retry_at: float | None) -> None:
    """A body's error, once its run's ``Failed`` end (or its retry) is committed: never
    silent (DESIGN §3): at ERROR for an end, at INFO for a failure that is retried. The
    record carries the traceback the event stores as ``extra["traceback"]`` (the run's
    data, which an operator's log shows at any level) besides ``exc_info``."""
    extra = {"run_id": attempt.run_id, "traceback": format_traceback(error)}
    if retry_at is None:
        logger.error(
            "run %r attempt %d failed: %s",
            attempt.run_id,
            attempt.generation,
            safe_repr(error),
            exc_info=error,
            extra=extra,
        )
        return
    plan = attempt.retry
    assert plan is not None
    logger.info(
        "run %r attempt %d failed (try %d of %d), tried again in %.3gs: %s",
        attempt.run_id,
        attempt.generation,
        plan.attempt,
        plan.policy.attempts,
        plan.policy.wait(plan.attempt),
        safe_repr(error),
        exc_info=error,
        extra=extra,
    )


def _retried(failed: Verdict, plan: RetryPlan) -> Verdict:
    """The verdict on an attempt whose failure (``failed``, a ``Failed`` end) the run's
    retry policy tries again: ``Queued``, with a ``retry_scheduled`` event carrying the
    failure (its code, message and traceback), the try that failed, and ``retry_at``."""
    state = failed.state
    assert isinstance(state, Ended)
    assert isinstance(state.cause, Failed)
    assert plan.retry_at is not None
    detail = freeze_detail(
        {
            "code": state.cause.code,
            "message": state.cause.message,
            "traceback": failed.detail.get("traceback"),
            "attempt": plan.attempt,
            "retry_at": plan.retry_at,
        },
        "a retry",
    )
    return Verdict(
        QUEUED,
        events=(*failed.events, EventDraft(EventKind.RETRY_SCHEDULED, detail)),
        detail=freeze_detail({"source": "retry", "attempt": plan.attempt + 1}, "a retry"),
        error=failed.error,
    )
