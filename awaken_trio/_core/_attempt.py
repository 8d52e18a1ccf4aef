"""One attempt of a run: its cancel scope (the token), its inbox and its end request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs
import trio

from ._errors import StoreError
from ._json import JsonValue
from ._state import EndCause, ResumeTicket, RunState

if TYPE_CHECKING:
    from ._context import RunContext
    from ._registry import GateWaiter

Body = Callable[["RunContext"], Awaitable[Any]]


class OwnershipVerifier(Protocol):
    """Says whether this process still owns an attempt (a durable claim is still current).

    ``deliver_to_current_attempt`` asks it right before delivering. Return False when the
    claim is lost; raise when the authority cannot be reached. Both fail closed.
    """

    async def verify_current(self) -> bool: ...


@final
@attrs.frozen
class EndRequest:
    """Who asked an attempt to end, and as what. The first request wins."""

    cause: EndCause
    source: str
    reason: str | None = None

    def detail(self) -> dict[str, JsonValue]:
        return {"source": self.source, "reason": self.reason}

    def scope_reason(self) -> str:
        return f"{self.source}: {self.reason or type(self.cause).__name__}"


@final
@attrs.frozen
class Suspension:
    """The attempt ends by committing ``Awaiting(ticket)`` (a pause or ``await_input``)."""

    ticket: ResumeTicket


class SuspendAttempt(BaseException):
    """Raised inside a body to end its attempt at a pause or an await.

    A BaseException, like ``trio.Cancelled``, so ``except Exception`` in a body does not
    swallow it.
    """


class StepCeiling(BaseException):
    """Raised at the boundary that reaches the run's ``max_steps``."""


@final
@attrs.define(eq=False)
class Completion:
    """The committed state that ended one attempt (``Awaiting`` or ``Ended``).

    If the store failed to take the attempt's end, there is no such state: waiting raises
    that `StoreError`, and the run keeps its last committed state until it is ended by the
    committed path (``cancel_run``/``stop_run``).
    """

    state: RunState | None = None
    error: StoreError | None = None
    _event: trio.Event = attrs.field(factory=trio.Event, init=False)

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, state: RunState) -> None:
        if not self.done:
            self.state = state
            self._event.set()

    def fail(self, error: StoreError) -> None:
        if not self.done:
            self.error = error
            self._event.set()

    async def wait(self) -> RunState:
        await self._event.wait()
        if self.error is not None:
            raise self.error
        assert self.state is not None
        return self.state


@final
@attrs.define(eq=False)
class Attempt:
    """Process-local state of one attempt of one run."""

    # What a live command touches comes first, so a delivery to a cold attempt reads as
    # few cache lines as possible.
    sealed: bool = attrs.field(default=False, init=False)
    pause_requested: bool = attrs.field(default=False, init=False)
    wake_pending: bool = attrs.field(default=False, init=False)
    inbox: list[JsonValue] = attrs.field(factory=list, init=False)
    _signal: trio.Event | None = attrs.field(default=None, init=False)

    run_id: str
    thread_id: str
    generation: int
    parent: Attempt | None
    body: Body
    input: JsonValue
    checkpoint: JsonValue
    resume_value: JsonValue
    max_steps: int | None = None
    verifier: OwnershipVerifier | None = None
    # The generation the store holds while this attempt waits for its thread.
    queued_generation: int | None = None
    gate_waiter: GateWaiter | None = None
    # Set once the caller that admitted the attempt has its answer. An actor spawned from
    # the mailbox task waits for it, so a cancel delivered before that caller next yields
    # still finds the body unstarted.
    handed_over: trio.Event | None = None

    # The token: the cancel scope of the attempt's own nursery (children live inside it).
    # It exists once the actor runs; a request that comes earlier is honoured on entry.
    scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # While queued for its thread, the attempt waits inside this scope instead.
    queue_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    completion: Completion = attrs.field(factory=Completion, init=False)
    request: EndRequest | None = attrs.field(default=None, init=False)
    started: bool = attrs.field(default=False, init=False)
    suspension: Suspension | None = attrs.field(default=None, init=False)
    steps: int = attrs.field(default=0, init=False)
    carried: list[JsonValue] = attrs.field(factory=list, init=False)
    children: dict[str, Attempt | None] = attrs.field(factory=dict, init=False)
    children_nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    context: RunContext | None = attrs.field(default=None, init=False)

    def request_end(self, request: EndRequest) -> None:
        """Cancel the attempt's scope as ``request`` says; a later request changes nothing."""
        if self.request is None:
            self.request = request
        scope = self.scope or self.queue_scope
        if scope is not None:
            scope.cancel(reason=self.request.scope_reason())

    @property
    def cancel_called(self) -> bool:
        """Whether the attempt's own token has been cancelled (or a cancel is pending)."""
        return self.request is not None or (self.scope is not None and self.scope.cancel_called)

    def notify(self) -> None:
        """Release a body waiting at ``boundary(wait=True)``."""
        if self._signal is not None:
            self._signal.set()
            self._signal = None

    def has_news(self) -> bool:
        return bool(self.inbox or self.carried or self.wake_pending or self.pause_requested)

    async def wait_for_news(self) -> None:
        while not self.has_news():
            self._signal = signal = trio.Event()
            await signal.wait()

    def drain(self) -> list[JsonValue]:
        messages = self.carried
        self.carried = []
        if self.inbox:
            messages.extend(self.inbox)
            self.inbox.clear()
        return messages

    def ancestor_cancelled(self) -> bool:
        parent = self.parent
        while parent is not None:
            if parent.cancel_called:
                return True
            parent = parent.parent
        return False
