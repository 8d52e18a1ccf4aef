"""The store contract.

A store holds committed truth. The supervisor is its only writer: it hands the store a
batch of `Commit` values and the store applies them in one transaction, in order, each one
accepted or rejected on its own (a rejected commit changes nothing). Inside that
transaction every store enforces the same three rules:

* terminal fence: a run whose state is `Ended` accepts no further commit;
* expectation fence: a commit names what it expects to find (`Expect`: the generation,
  the kind of state, the live ticket), and is rejected when the run has moved on, so a
  stale attempt or a lost race can never overwrite newer truth;
* ticket slot: an `Awaiting` commit stores the ticket (inside the state) together with
  the messages it carries; any other commit deletes the ticket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, final, runtime_checkable

import attrs

from ._json import JsonValue
from ._state import RunEvent, RunRecord, RunState


@final
@attrs.frozen
class Expect:
    """What a commit expects to find; anything else rejects it.

    Attributes:
        new: the run must not exist yet (the commit creates it).
        generation: the run's committed generation must equal this.
        state: the committed state must be of this variant (``RunState.Queued`` ...).
        correlation_id: the live ticket's correlation id must equal this.
    """

    new: bool = False
    generation: int | None = None
    state: type[RunState] | None = None
    correlation_id: str | None = None


@final
@attrs.frozen
class EventDraft:
    """An extra event that rides a commit, written before the commit's own event."""

    kind: str
    detail: dict[str, JsonValue]


@final
@attrs.frozen
class NewRun:
    """The identity of a run a commit creates (with ``Expect(new=True)``)."""

    thread_id: str
    parent_run_id: str | None
    name: str | None
    input: JsonValue


_UNSET: JsonValue = {"__awaken_unset__": True}


@final
@attrs.frozen
class Commit:
    """One atomic change to one run.

    Attributes:
        run_id: the run.
        state: the state to commit.
        generation: the generation to record (the attempt's, or the upcoming one's).
        expect: the fence.
        at: the runtime clock reading stamped on the events.
        new_run: identity of a run this commit creates.
        result: the run's result (NaturalEnd commits).
        checkpoint: new progress, or `UNSET` to keep the committed one.
        carried_messages: messages an `Awaiting` commit keeps for the next attempt.
        take_messages: hand the committed carried messages to the committer (an attempt
            start); they are cleared.
        discarded_messages: inbox messages a terminal commit throws away; the store adds
            its own carried messages and writes one ``messages_discarded`` event.
        events: extra events written before the commit's own event.
        detail: the detail of the commit's own event.
        resume_value: the value a queued resume will hand to its attempt.
    """

    run_id: str
    state: RunState
    generation: int
    expect: Expect
    at: float
    new_run: NewRun | None = None
    result: JsonValue = None
    checkpoint: JsonValue = _UNSET
    carried_messages: tuple[JsonValue, ...] = ()
    take_messages: bool = False
    discarded_messages: tuple[JsonValue, ...] = ()
    events: tuple[EventDraft, ...] = ()
    detail: dict[str, JsonValue] = attrs.field(factory=dict)
    resume_value: JsonValue = None


UNSET = _UNSET


@final
@attrs.frozen
class Accepted:
    """The commit landed. ``taken_messages`` are the carried messages it took."""

    record: RunRecord
    events: tuple[RunEvent, ...]
    taken_messages: tuple[JsonValue, ...] = ()
    resume_value: JsonValue = None


@final
@attrs.frozen
class Rejected:
    """The commit was fenced off; nothing changed.

    ``reason`` is one of ``"ended"``, ``"exists"``, ``"unknown"``, ``"stale"``;
    ``state`` is the committed state that fenced it (None for an unknown run).
    """

    reason: str
    state: RunState | None


CommitResult = Accepted | Rejected


class Store(Protocol):
    """Committed truth for runs, their tickets and their events.

    ``apply`` is called only by the runtime's supervisor. Reads may come from any task.
    All methods are checkpoints.
    """

    @property
    def durable(self) -> bool:
        """Whether committed runs outlive the process (decides what shutdown does)."""
        ...

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` in one transaction, in order; one result per commit."""
        ...

    async def load(self, run_id: str) -> RunRecord | None:
        """The run's record, or None if the store has never seen it."""
        ...

    async def carried_messages(self, run_id: str) -> tuple[JsonValue, ...]:
        """Messages an Awaiting or Queued run carries for its next attempt."""
        ...

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        """Committed events with ``seq`` greater than ``seq``, oldest first."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class InlineStore(Store, Protocol):
    """A store whose commits need no I/O, so the supervisor may apply them synchronously
    in the committing task's own step (``inline`` says whether to)."""

    @property
    def inline(self) -> bool: ...

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` as `Store.apply` does, without yielding."""
        ...
