"""The store contract: the values the runtime commits and the protocol a store implements.

A store holds committed truth. The runtime's supervisor is its only writer: it hands the
store a batch of `Commit` values and the store applies them in one transaction, in order,
each one accepted or rejected on its own (a rejected commit changes nothing). Inside that
transaction every store enforces the same three rules:

* terminal fence: a run whose state is `Ended` accepts no further commit;
* expectation fence: a commit names what it expects to find (`Expect`: the generation,
  the kind of state, the live ticket), and is rejected when the run has moved on, so a
  stale attempt or a lost race can never overwrite newer truth;
* ticket slot: an `Awaiting` commit stores the ticket (inside the state) together with
  the messages it carries; any other commit deletes the ticket.

`awaken_trio.testing` ships these rules as a test suite any store can run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Final, Literal, Protocol, final, runtime_checkable

import attrs

from ._json import EMPTY_DICT, JsonValue
from ._state import RunEvent, RunRecord, RunState


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""A commit's ``checkpoint`` when it keeps the committed one."""


class RejectReason(enum.StrEnum):
    """Why a store refused a commit (nothing changed)."""

    ENDED = "ended"
    """The run has ended: the terminal fence."""
    EXISTS = "exists"
    """The commit creates a run whose id is taken."""
    UNKNOWN = "unknown"
    """The commit names a run the store has never seen."""
    STALE = "stale"
    """The run moved on: its generation, state or ticket is not what the commit expects."""


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
    detail: Mapping[str, JsonValue]


@final
@attrs.frozen
class NewRun:
    """The identity of a run a commit creates (with ``Expect(new=True)``)."""

    thread_id: str
    parent_run_id: str | None
    name: str | None
    input: JsonValue = None
    max_steps: int | None = None


@final
@attrs.frozen
class Commit:
    """One atomic change to one run.

    The runtime builds commits from values it has already checked and frozen (payloads
    are `FrozenDict`, `FrozenList` or scalars), so a store may keep them as they are.

    Attributes:
        run_id: the run.
        state: the state to commit.
        generation: the generation to record (the attempt's, or the upcoming one's).
        expect: the fence.
        at: the runtime clock reading stamped on the events.
        new_run: identity of a run this commit creates.
        result: the run's result (NaturalEnd commits).
        checkpoint: new progress, or `UNSET` to keep the committed one.
        steps: the run's boundary count so far, or None to keep the committed one.
        carried_messages: messages an `Awaiting` commit keeps for the next attempt.
        take_messages: hand the committed carried messages to the committer (an attempt
            start); they are cleared.
        discarded_messages: inbox messages a terminal commit throws away; the store adds
            its own carried messages and writes one ``messages_discarded`` event.
        events: extra events written before the commit's own event.
        detail: the detail of the commit's own event.
        announce: write the commit's own ``committed`` event. A commit that only records
            a body's events (``ctx.emit``) changes no state and announces nothing.
        resume_value: the value a queued resume will hand to its attempt.
    """

    run_id: str
    state: RunState
    generation: int
    expect: Expect
    at: float
    new_run: NewRun | None = None
    result: JsonValue = None
    checkpoint: JsonValue = UNSET
    steps: int | None = None
    carried_messages: tuple[JsonValue, ...] = ()
    take_messages: bool = False
    discarded_messages: tuple[JsonValue, ...] = ()
    events: tuple[EventDraft, ...] = ()
    detail: Mapping[str, JsonValue] = EMPTY_DICT
    announce: bool = True
    resume_value: JsonValue = None


@final
@attrs.frozen
class Accepted:
    """The commit landed.

    Attributes:
        state: the run's committed state now (the commit's own state).
        last_seq: the seq of the last event the commit wrote (0 if it wrote none).
        taken_messages: the carried messages the commit took (``take_messages``).
        resume_value: the value a queued resume left for the attempt this commit starts.

    A store answers with what the runtime needs, not with the whole record or the
    events (read them with `Store.load` and `Store.events_after`), so a commit never
    costs a read-back.
    """

    state: RunState
    last_seq: int
    taken_messages: tuple[JsonValue, ...] = ()
    resume_value: JsonValue = None


@final
@attrs.frozen
class Rejected:
    """The commit was fenced off; nothing changed. ``state`` is the committed state that
    fenced it (None for an unknown run)."""

    reason: RejectReason
    state: RunState | None


CommitResult = Accepted | Rejected


class Store(Protocol):
    """Committed truth for runs, their tickets and their events.

    ``apply`` is called only by the runtime's supervisor. Reads may come from any task.
    All methods are checkpoints. A store that fails raises; it raises `StoreError` with
    ``outcome_unknown=False`` when it knows the failed batch left nothing behind.
    """

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` in one transaction, in order; one result per commit."""
        ...

    async def load(self, run_id: str) -> RunRecord | None:
        """The run's record, or None if the store does not hold it."""
        ...

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        """Committed events with ``seq`` greater than ``seq``, oldest first, at most
        ``limit`` of them; an empty list means there are none yet."""
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


StoreMethod = Literal["apply", "load", "events_after", "aclose"]
STORE_METHODS: tuple[StoreMethod, ...] = ("apply", "load", "events_after", "aclose")
