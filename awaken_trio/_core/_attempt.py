"""One attempt of a run: its cancel scope (the token), its inbox, its children and who asked
it to end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, final

import attrs
import trio

from ._errors import StoreError
from ._inbox import Inbox, TakenMessages
from ._json import FrozenDict, JsonValue, scalar_dict
from ._policy import RetryPolicy
from ._state import (
    CANCELLED_CAUSE,
    Awaiting,
    EndCause,
    Indeterminate,
    Queued,
    ResumeTicket,
    RunState,
    Stopped,
)
from ._storage import UNSET, CommandKind, Fence

if TYPE_CHECKING:
    from ._context import RunContext
    from ._journal import Journal
    from ._observe import AttemptSpan
    from ._registry import GateWaiter
    from ._streams import StreamOutbox

Body = Callable[["RunContext"], Awaitable[Any]]

EndSource = Literal[
    "deliver",
    "send",
    "cancel_run",
    "stop_run",
    "parent",
    "shutdown",
    "body",
    "scope",
    "lost",
    "deadline",
    "queue_timeout",
    "retry",
]
"""Who asked an attempt to end: a live cancel (here, or sent from anywhere), the committed
paths, the parent ending, runtime shutdown, the body cancelling its own scope, an enclosing
scope nobody named, the attempt losing its run (its claim, or an end made elsewhere), the
run's own time limits (its deadline, its queue timeout), or its parent failing with a
retry to come (the child is handed back with it)."""

Disposition = Literal["end", "hand_back", "lost"]
"""What the attempt commits when it stops: its end (``Ended(cause)``), a hand-back (a named
root run of a durable store goes back to ``Queued`` for another runtime, at shutdown, and
its unended descendants with it: DESIGN rule 22), or nothing at all (the attempt has lost
its run: its claim was superseded or expired, or the run was ended elsewhere; the store
already holds the truth)."""


class OwnershipVerifier(Protocol):
    """Says whether this process still owns an attempt (a durable claim is still current).

    ``deliver_to_current_attempt`` asks it right before delivering. Return False when the
    claim is lost; raise when the authority cannot be reached. Both fail closed.
    """

    async def verify_current(self) -> bool:
        """True while this runtime's claim on the attempt is still current."""
        ...


@final
@attrs.frozen
class EndRequest:
    """Who asked an attempt to end, and as what. The first request wins."""

    cause: EndCause
    source: EndSource
    reason: str | None = None
    disposition: Disposition = "end"
    # With the "lost" disposition: the attempt's claim is not its own any more.
    claim_lost: bool = False
    # `detail`, once made (a shared request makes it once).
    _detail: FrozenDict | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def detail(self) -> FrozenDict:
        """The terminal event's detail: source and reason (made when the end is committed,
        not when the request is, so a cancel costs nothing it does not need)."""
        detail = self._detail
        if detail is None:
            if self.source in _TIME_LIMITS:
                detail = scalar_dict({"source": self.source})
            else:
                detail = scalar_dict({"source": self.source, "reason": self.reason})
            object.__setattr__(self, "_detail", detail)  # (a cache of its own fields)
        return detail

    def scope_reason(self) -> str:
        return f"{self.source}: {self.reason or type(self.cause).__name__}"

    @classmethod
    def parent_ended(cls, parent_run_id: str, why: str | None = None) -> EndRequest:
        """How a child ends because its parent run ended (``why``, when the parent's end
        had a reason of its own): cancelled, its source the parent. The stores end a
        descendant of a run ended elsewhere with this request's detail."""
        reason = f"parent run {parent_run_id!r} ended"
        return cls(CANCELLED_CAUSE, "parent", reason if why is None else f"{reason}: {why}")

    def for_child(self, parent_run_id: str) -> EndRequest:
        """What this request means for a child of the attempt it ends: a hand-back hands
        the child back with its parent (rule 22: the parent's next attempt takes it back),
        shutdown stops the child, a lost run loses its children too, anything else cancels
        the child, its source being the parent."""
        if self.disposition == "hand_back":
            return self if self.source == "retry" else HANDED_BACK_WITH_PARENT
        if self.source == "shutdown" or self.source == "deadline" or self.disposition == "lost":
            # (A child's deadline is never later than its parent's: it has passed too.)
            return self
        why = self.reason or f"{self.source} of its parent"
        return EndRequest.parent_ended(parent_run_id, why)


_TIME_LIMITS: Final = frozenset(("deadline", "queue_timeout"))

DEADLINE = EndRequest(Stopped("deadline"), "deadline")
"""How a run ends at its deadline (detail ``{"source": "deadline"}``), in any state: its
running attempt's scope deadline, or the runtime that finds it queued or awaiting."""

QUEUE_TIMEOUT = EndRequest(Stopped("queue_timeout"), "queue_timeout")
"""How a run ends when its first attempt has not started within its ``queue_timeout``."""

SHUTDOWN = EndRequest(Stopped("runtime shutdown"), "shutdown", "runtime shutdown")
"""Why every attempt ends when its runtime closes."""

HAND_BACK = EndRequest(
    Stopped("runtime shutdown"), "shutdown", "released for another runtime", disposition="hand_back"
)
"""Why a named root run of a durable store leaves its runtime at shutdown: back to
``Queued``, for another runtime to run from its checkpoint."""

HANDED_BACK_WITH_PARENT = EndRequest(
    Stopped("runtime shutdown"), "shutdown", "handed back with its parent", disposition="hand_back"
)
"""Why a descendant of a run handed back at shutdown leaves with it: a running one goes
back to ``Queued`` with its checkpoint, a queued or awaiting one stays as the store holds it,
and the parent's next attempt takes it back by starting it again under its run id."""

RETRIED_WITH_PARENT = EndRequest(
    Stopped("parent retried"), "retry", "handed back with its parent", disposition="hand_back"
)
"""Why a descendant of a run whose attempt failed with a retry to come leaves with that
attempt: as at a hand-back (rule 22), a running one goes back to ``Queued`` with its
checkpoint, a queued or awaiting one stays as the store holds it, and the parent's next
attempt takes it back by starting it again under its run id."""

NOT_RESUMED = EndRequest(Stopped("not resumed by parent"), "parent", "not resumed by parent")
"""How a child an earlier attempt of its parent handed back ends when the parent's later
attempt ends without having taken it back (rule 22)."""


@final
@attrs.frozen
class BodyPin:
    """The body version an attempt pins on its run (DESIGN §3.8)."""

    version: str | None


def lost(why: str, *, claim_lost: bool) -> EndRequest:
    """The attempt has lost its run (``why``): it stops and commits nothing. With
    ``claim_lost`` its claim is no longer its own to release (it lapsed, or another runtime
    holds it): the claim is left for recovery; otherwise (the run was ended elsewhere) the
    attempt releases it once it has stopped, which frees the run's thread."""
    return EndRequest(Indeterminate(why), "lost", why, disposition="lost", claim_lost=claim_lost)


@final
@attrs.frozen
class ParkedChild:
    """A child of an attempt that is committed ``Awaiting``, or ``Queued`` to retry (it has
    no attempt of its own): it is ended with its parent, fenced by the generation and the
    state it waits in."""

    generation: int
    waiting: type[Awaiting] | type[Queued] = Awaiting


@final
@attrs.frozen
class RetryPlan:
    """A run's retry policy as one of its attempts carries it: the policy, the retries
    scheduled before this attempt, and, once its body failed in a way the policy retries,
    when the run is tried again (``retry_at``, the runtime's clock)."""

    policy: RetryPolicy
    retries: int = 0
    retry_at: float | None = None

    @property
    def attempt(self) -> int:
        """This attempt's number among the run's tries (1-based; recoveries and resumes
        continue a try, they do not start one)."""
        return self.retries + 1


@final
@attrs.define(eq=False)
class Children:
    """An attempt's children: those not yet ended, and the admissions under way. Made on
    the attempt's first child (most runs have none).

    Invariant: ``entries`` maps each child run id to its attempt, or to a `ParkedChild`
    for one committed ``Awaiting``; ``admitting`` counts reservations of a place in the
    attempt's nursery whose actor is not spawned yet, and the nursery stays open while it
    is not zero.
    """

    entries: dict[str, Attempt | ParkedChild] = attrs.field(factory=dict)
    admitting: int = 0
    admitted: trio.Event | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def running(self) -> list[Attempt]:
        return [child for child in self.entries.values() if isinstance(child, Attempt)]


class SuspendAttempt(BaseException):
    """Raised inside a body to end its attempt at a pause or an await.

    A BaseException, like ``trio.Cancelled``, so ``except Exception`` in a body does not
    swallow it.
    """


class StepCeiling(BaseException):
    """Raised at the boundary that would take the run past its ``max_steps``."""


@final
@attrs.define(eq=False)
class Completion:
    """The committed state that ended one attempt (``Awaiting`` or ``Ended``).

    If the store failed to take the attempt's end, there is no such state: waiting raises
    that `StoreError`, and the run keeps its last committed state until it is ended by the
    committed path (``cancel_run``/``stop_run``). An attempt that lost its run, or handed it back
    it at shutdown, ends with no state of its own: waiting returns None, and whoever waits
    reads the store's truth instead. The first task that waits before the end is known is
    parked directly (most attempts have exactly one waiter: no event, no closure); an event
    for further waiters is made only when there are some.
    """

    state: RunState | None = None
    error: StoreError | None = None
    done: bool = False
    _waiter: trio.lowlevel.Task | None = attrs.field(default=None, init=False)
    _event: trio.Event | None = attrs.field(default=None, init=False)

    def set(self, state: RunState) -> None:
        if not self.done:
            self.state = state
            self._settle()

    def fail(self, error: StoreError) -> None:
        if not self.done:
            self.error = error
            self._settle()

    def defer_to_store(self) -> None:
        """The attempt ended without a state of its own (lost, or handed back): whoever
        waits follows the store's truth instead."""
        if not self.done:
            self._settle()

    def _settle(self) -> None:
        self.done = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter)
        if self._event is not None:
            self._event.set()

    def answer(self) -> RunState | None:
        """What a waiter is answered once the completion is done: its state, or the
        store's error."""
        if self.error is not None:
            raise self.error
        return self.state

    async def wait(self) -> RunState | None:
        if self.done:
            await trio.lowlevel.checkpoint()
        elif self._waiter is None:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._stop_waiting)
        else:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        return self.answer()

    def _stop_waiting(self, _: object) -> trio.lowlevel.Abort:
        # The parked waiter was cancelled: it leaves, and the end no longer wakes it.
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED


Phase = Literal["admitting", "queued", "waiting_elsewhere", "running", "ending", "sealed"]
"""Where an attempt is in its life; it only moves forward (down this list), and any phase
may go straight to ``"sealed"``.

Invariant, phase by phase:

- ``"admitting"``: built, its admission's commit not answered yet; in neither the registry
  nor the queue; ``scope`` and ``queue_scope`` are None; its completion is not done.
- ``"queued"``: committed ``Queued`` behind a thread busy here: in `Supervisor.queued`,
  ``gate_waiter`` set and ``queued_generation`` the generation the store holds; not
  ``started``. Its actor waits in ``queue_scope``.
- ``"waiting_elsewhere"``: committed ``Queued`` because another runtime holds its thread
  (durable stores): in `Supervisor.queued`, holding its place on the thread here; its
  actor retries whenever the store changes.
- ``"running"``: committed ``Running`` (``started``): registered, holding its thread, its
  body running in ``scope`` (once the actor entered it); children may be admitted.
- ``"ending"``: the body's outcome is known: children are refused, the admissions under
  way still spawn, and the end is about to be classified and committed; still registered.
- ``"sealed"``: its end is being committed, or it was let go: no control reaches it, it is
  in neither the registry nor the queue once the end's step has run, and its completion is
  (or is about to be) done. ``started`` still says whether it ran.
"""


@final
@attrs.define(eq=False)
class Attempt:
    """Process-local state of one attempt of one run (its lifecycle: `Phase`)."""

    # What a live command touches comes first, so a delivery to a cold attempt reads as
    # few cache lines as possible.
    phase: Phase = attrs.field(default="admitting", init=False)
    pause_requested: bool = attrs.field(default=False, init=False)
    wake_pending: bool = attrs.field(default=False, init=False)
    # Messages and stored commands; made on the first (most runs get none).
    inbox: Inbox | None = attrs.field(default=None, init=False)

    run_id: str
    thread_id: str
    generation: int
    parent: Attempt | None
    body: Body
    input: JsonValue
    checkpoint: JsonValue
    resume_value: JsonValue
    max_steps: int | None = None
    # Boundaries the run has passed, in all its attempts so far (the budget max_steps caps).
    steps: int = 0
    # The ticket this attempt answers (a resume), or None for a first attempt.
    ticket: ResumeTicket | None = None
    verifier: OwnershipVerifier | None = None
    # The run's name, if its body is registered under one (what lets it be recovered).
    name: str | None = None
    # The top of the run's tree, and (durable stores) the claim every commit of the tree is
    # made under: the root's, shared by its children.
    root_run_id: str = ""
    fence: Fence | None = None
    # The run's deadline (wall-clock seconds, the runtime's clock): the attempt's scope
    # gets it as its Trio deadline, so the body is interrupted there even in a hung await.
    deadline: float | None = None
    # How the run is tried again if this attempt's body fails (None: it is not).
    retry: RetryPlan | None = None
    # The generation the store holds while this attempt waits for its thread.
    queued_generation: int | None = None
    gate_waiter: GateWaiter | None = None

    # While queued for its thread, the attempt waits inside this scope instead.
    queue_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    completion: Completion = attrs.field(factory=Completion, init=False)
    request: EndRequest | None = attrs.field(default=None, init=False)
    # It committed ``Running`` (its body ran or runs): a fact of its history, kept once it
    # is sealed (its end commit is fenced by it).
    started: bool = attrs.field(default=False, init=False)
    suspension: Awaiting | None = attrs.field(default=None, init=False)
    # Progress to commit together with the suspension (``await_input(progress=...)``).
    suspension_checkpoint: JsonValue = attrs.field(default=UNSET, init=False)
    # Children not yet ended, and admissions under way (made on the first child).
    children: Children | None = attrs.field(default=None, init=False)
    # The attempt's own nursery, once its actor entered it: its scope is the token (`scope`).
    children_nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    # The seq of the event that admitted the attempt: its end is what follows.
    start_seq: int = attrs.field(default=0, init=False)
    # Whether commands may have been stored for the run before this attempt registered
    # (while it was queued, or for an earlier attempt): false only when the attempt's own
    # admission created the run ``Running``, so nothing could be stored before it.
    commands_before: bool = attrs.field(default=True, init=False)
    # Durable stores: the relay of other runtimes' commands has read this attempt's.
    relayed: bool = attrs.field(default=False, init=False)
    # What the runtime's observer keeps for this attempt once it started (tracing on).
    span: AttemptSpan | None = attrs.field(default=None, init=False)
    # The body version its first Running commit pins on a run that never started (a
    # submitted run a serving runtime starts); None: nothing to pin.
    pin: BodyPin | None = attrs.field(default=None, init=False)
    # The chunks its stream writers sent; made on the first ``ctx.stream()``.
    streams: StreamOutbox | None = attrs.field(default=None, init=False)
    # The run's journaled steps as this attempt sees them (made at its first ctx.step).
    journal: Journal | None = attrs.field(default=None, init=False)

    @property
    def scope(self) -> trio.CancelScope | None:
        """The token: the cancel scope of the attempt's own nursery (children live inside
        it). It exists once the actor runs; a request that comes earlier is honoured on
        entry. (Read from the nursery: one field less on every parked run.)"""
        nursery = self.children_nursery
        return None if nursery is None else nursery.cancel_scope

    def request_end(self, request: EndRequest) -> None:
        """Cancel the attempt's scope as ``request`` says. The first request wins: a later
        one changes neither the cause nor the source. Running children are told at once,
        so each records its own cause (the parent, or shutdown) before anyone else's."""
        if self.request is None:
            self.request = request
            if self.span is not None:
                self.span.event(
                    "awaken.cancel_requested",
                    {"awaken.cancel_source": request.source, "awaken.reason": request.reason},
                )
            if self.children:
                for child in self.children.running():
                    child.request_end(request.for_child(self.run_id))
        scope = self.scope or self.queue_scope
        if scope is not None:
            scope.cancel(reason=self.request.scope_reason())

    def counts_toward_concurrency(self) -> bool:
        """Whether a serving loop still counts this attempt: not once it ended, nor once
        it lost its claim (it may still be unwinding, but the run is another runtime's)."""
        request = self.request
        return not (self.completion.done or (request is not None and request.claim_lost))

    @property
    def cancel_called(self) -> bool:
        """Whether the attempt's own token has been cancelled (or a cancel is pending)."""
        return self.request is not None or (self.scope is not None and self.scope.cancel_called)

    def _inbox(self) -> Inbox:
        inbox = self.inbox
        if inbox is None:
            inbox = self.inbox = Inbox()
        return inbox

    def notify(self) -> None:
        """Release a body waiting at ``boundary(wait=True)``."""
        if self.inbox is not None:
            self.inbox.notify()

    def add_message(self, payload: JsonValue, command_id: int | None = None) -> None:
        self._inbox().add(payload, command_id)

    def carry(self, messages: tuple[JsonValue, ...]) -> None:
        """Messages an earlier attempt accepted and did not read, handed over at start."""
        if messages:
            self._inbox().carried = messages

    def apply_stored(
        self, command_id: int, kind: CommandKind, payload: JsonValue, reason: str | None
    ) -> None:
        """Apply a command stored for the run (sent from anywhere), once. A message is
        consumed once a boundary returns it, a pause once it is honoured, a wake at once;
        a cancel ends the run, and its end drops every command left. An attempt that has
        not started yet (it waits for its thread) takes only a cancel here: the rest it
        loads, in send order, when it starts."""
        if not self.started and kind != "cancel":
            return
        inbox = self._inbox()
        if not inbox.first_application(command_id):
            return
        if kind == "cancel":
            self.request_end(EndRequest(CANCELLED_CAUSE, "send", reason))
            return
        if kind == "pause":
            self.pause_requested = True
            inbox.pause_stored(command_id)
        elif kind == "wake":
            self.wake_pending = True
            inbox.consume(command_id)
        else:
            inbox.add(payload, command_id)
        inbox.notify()

    def load_stored(
        self, command_id: int, kind: CommandKind, payload: JsonValue, reason: str | None
    ) -> None:
        """Apply a command stored before this attempt began: as `apply_stored`, except
        that a wake is dropped (no attempt was there to wake; this one has not waited)."""
        if kind != "wake":
            self.apply_stored(command_id, kind, payload, reason)
        elif (inbox := self._inbox()).first_application(command_id):
            inbox.consume(command_id)

    def pause_honoured(self) -> None:
        """The pause took effect: the stored pauses are done with."""
        if self.inbox is not None:
            self.inbox.pause_honoured()

    def consume(self, command_id: int) -> None:
        """The stored command is done with: the attempt's next commit deletes it."""
        self._inbox().consume(command_id)

    def take_consumed(self) -> tuple[int, ...]:
        return () if self.inbox is None else self.inbox.take_consumed()

    def add_child(self, run_id: str, child: Attempt | ParkedChild) -> None:
        if self.children is None:
            self.children = Children()
        self.children.entries[run_id] = child

    def has_messages(self) -> bool:
        return self.inbox is not None and self.inbox.has_messages()

    def has_news(self) -> bool:
        return self.wake_pending or self.pause_requested or self.has_messages()

    async def wait_for_news(self) -> None:
        inbox = self._inbox()
        if inbox.waiting:
            raise trio.BusyResourceError(
                f"another task of run {self.run_id!r} is already waiting in"
                " boundary(wait=True); only one task may wait for its messages"
            )
        inbox.waiting = True
        try:
            while not self.has_news():
                inbox.signal = signal = trio.Event()
                await signal.wait()
        finally:
            inbox.waiting = False

    def holds_stored_messages(self) -> bool:
        """Whether a message not yet read is one the store holds (sent with ``send``)."""
        return self.inbox is not None and self.inbox.holds_stored_messages()

    def take_messages(self) -> TakenMessages:
        """Take the messages not yet read, carried ones first; the inbox is left empty.
        Those the store holds are received once their consumption is committed (else
        `put_back`)."""
        if self.inbox is None:
            return _NOTHING_TAKEN
        return self.inbox.take()

    def put_back(self, taken: TakenMessages) -> None:
        """Give back messages `take_messages` took and could not hand over: they come
        before anything that arrived since."""
        self._inbox().put_back(taken)

    def drain(self) -> list[JsonValue]:
        """The messages not yet read, carried ones first, when the store holds none of
        them (else `take_messages`); the inbox is left empty."""
        return [] if self.inbox is None else self.inbox.drain()

    def unread_local(self) -> list[JsonValue]:
        """The messages not yet read that the store does not hold (carried ones, and those
        delivered in this process), in order; the inbox is left empty. Stored ones stay in
        the store, for the run's next attempt or its ``messages_discarded`` event."""
        return [] if self.inbox is None else self.inbox.unread_local()

    def cancel_reaches(self, closing: bool) -> bool:
        """Whether a cancellation reaches this attempt's scope: its own, an ancestor
        attempt's, or (``closing``) the runtime's. Those are the only scopes an attempt
        lives in, so this is Trio's effective cancellation, read without walking Trio's
        cancel status."""
        nursery = self.children_nursery  # (`scope`, read without a call)
        return (
            (nursery is not None and nursery.cancel_scope.cancel_called)
            or closing
            or (self.parent is not None and self.ancestor_cancelled())
        )

    def deadline_passed(self) -> bool:
        """Whether the attempt's own scope was cancelled by the run's deadline."""
        scope = self.scope
        return (
            self.deadline is not None
            and scope is not None
            and scope.cancel_called
            and trio.current_time() >= scope.deadline
        )

    def ancestor_cancelled(self) -> bool:
        parent = self.parent
        while parent is not None:
            if parent.cancel_called:
                return True
            parent = parent.parent
        return False

    # ------------------------------------------------------------------ children admissions

    def admit_child(self) -> trio.Nursery | None:
        """Reserve a place for a child's actor in this attempt's nursery, or None once the
        attempt has begun to end. Every reservation is followed by `child_admitted`."""
        if self.phase != "running" or self.children_nursery is None:
            return None
        if self.children is None:
            self.children = Children()
        self.children.admitting += 1
        return self.children_nursery

    def child_admitted(self) -> None:
        children = self.children
        assert children is not None
        children.admitting -= 1
        if children.admitting == 0 and children.admitted is not None:
            children.admitted.set()

    def close_children(self) -> bool:
        """Refuse new children; True if admissions under way must still spawn their actors
        (then `wait_for_admissions` before the nursery closes)."""
        self.phase = "ending"
        return self.children is not None and self.children.admitting > 0

    async def wait_for_admissions(self) -> None:
        """Wait (shielded) until admissions under way have spawned their actors, so none is
        committed without an actor behind it."""
        children = self.children
        assert children is not None
        children.admitted = admitted = trio.Event()
        with trio.CancelScope(shield=True):
            while children.admitting:
                await admitted.wait()


_NOTHING_TAKEN = TakenMessages((), (), None)
