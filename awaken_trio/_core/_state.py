"""Committed values: run states, end causes, tickets, records and events.

All are frozen attrs classes that compare by value and support ``match``::

    match state:
        case RunState.Ended(EndCause.Stopped(reason)):
            ...

The variants of `RunState` and `EndCause` are subclasses reachable as class attributes
(``RunState.Running``), so the family name reads as a type and as a namespace alike.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final, Literal, final

import attrs

from ._json import FrozenDict, JsonValue, check_json, freeze_detail
from ._policy import RetryPolicy


def _payload(value: object) -> JsonValue:
    return check_json(value, "a payload")


def _detail(value: object) -> FrozenDict:
    return freeze_detail(value, "an event detail")


def _is_str(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str:
        raise TypeError(f"{attribute.name} must be a str, not {value!r}")


def _variant_name(cls: type, family: str) -> None:
    # Make reprs and tracebacks read `RunState.Running(generation=1)`.
    cls.__qualname__ = f"{family}.{cls.__name__}"


@attrs.frozen
class EndCause:
    """Why a run ended. One of the variants below; never instantiated itself."""

    NaturalEnd: ClassVar[type[NaturalEnd]]
    MaxSteps: ClassVar[type[MaxSteps]]
    Cancelled: ClassVar[type[Cancelled]]
    Stopped: ClassVar[type[Stopped]]
    Failed: ClassVar[type[Failed]]
    Indeterminate: ClassVar[type[Indeterminate]]

    def __attrs_pre_init__(self) -> None:
        if type(self) is EndCause:
            raise TypeError(
                "EndCause is a family; build one of its variants, e.g. EndCause.Cancelled()"
            )


@final
@attrs.frozen
class NaturalEnd(EndCause):
    """The body returned a value."""


@final
@attrs.frozen
class MaxSteps(EndCause):
    """The run reached its step ceiling."""


@final
@attrs.frozen
class Cancelled(EndCause):
    """An external request to stop the work: live cancel, cancel_run, or the parent ending."""


@final
@attrs.frozen
class Stopped(EndCause):
    """The host ended the run for a reason it owns: budget, policy, shutdown."""

    reason: str = attrs.field(validator=_is_str)


@final
@attrs.frozen
class Failed(EndCause):
    """The body raised. ``code`` is a stable snake_case name hosts branch on: a
    `RunError`'s code, else the exception class in snake_case."""

    code: str = attrs.field(validator=_is_str)
    message: str = attrs.field(validator=_is_str)


@final
@attrs.frozen
class Indeterminate(EndCause):
    """The outcome cannot be known (for example, a lost remote execution)."""

    reason: str = attrs.field(validator=_is_str)


for _cls in (NaturalEnd, MaxSteps, Cancelled, Stopped, Failed, Indeterminate):
    _variant_name(_cls, "EndCause")
    setattr(EndCause, _cls.__name__, _cls)


@final
@attrs.frozen
class ResumeTicket:
    """The one live ticket of an `Awaiting` run; a resume must answer it.

    ``deadline`` is absolute wall-clock seconds (the runtime's ``clock`` scale), or None
    for a ticket that never expires. ``accepts`` is a JSON Schema the resume value must
    match, or None for any JSON value.
    """

    correlation_id: str
    run_id: str
    thread_id: str
    reason: str
    payload: JsonValue = attrs.field(default=None, converter=_payload)
    deadline: float | None = None
    accepts: JsonValue = attrs.field(default=None, converter=_payload)


def wake_at(ticket: ResumeTicket) -> float | None:
    """When a ``scheduled_action`` ticket (``ctx.sleep``) is due: its ``payload["wake_at"]``
    (the runtime's clock), or None for any other ticket. The supervisor schedules the
    resume by it and every store finds due tickets by it."""
    if ticket.reason != "scheduled_action":
        return None
    payload = ticket.payload
    if isinstance(payload, Mapping):
        when = payload.get("wake_at")
        if isinstance(when, int | float) and not isinstance(when, bool):
            return float(when)
    return None


@attrs.frozen
class RunState:
    """Committed lifecycle state of a run. One of the variants below."""

    Queued: ClassVar[type[Queued]]
    Running: ClassVar[type[Running]]
    Awaiting: ClassVar[type[Awaiting]]
    Ended: ClassVar[type[Ended]]

    def __attrs_pre_init__(self) -> None:
        if type(self) is RunState:
            raise TypeError(
                "RunState is a family; build one of its variants, e.g. RunState.Queued()"
            )

    @property
    def is_ended(self) -> bool:
        """True for `RunState.Ended`, the only absorbing state."""
        return False


@final
@attrs.frozen
class Queued(RunState):
    """Committed, waiting for its thread to free."""


@final
@attrs.frozen
class Running(RunState):
    """An attempt (``generation``: 1 for the first, +1 per resume) is executing."""

    generation: int


@final
@attrs.frozen
class Awaiting(RunState):
    """Waiting on exactly one ticket; `Runtime.resume` answers it with a new attempt."""

    ticket: ResumeTicket


@final
@attrs.frozen
class Ended(RunState):
    """Terminal and absorbing: the store rejects every later commit for the run."""

    cause: EndCause

    @property
    def is_ended(self) -> bool:
        return True


for _state_cls in (Queued, Running, Awaiting, Ended):
    _variant_name(_state_cls, "RunState")
    setattr(RunState, _state_cls.__name__, _state_cls)


@final
@attrs.frozen
class RunRecord:
    """What the store holds about one run."""

    run_id: str
    thread_id: str
    parent_run_id: str | None
    name: str | None
    state: RunState
    generation: int
    result: JsonValue = attrs.field(default=None, converter=_payload)
    checkpoint: JsonValue = attrs.field(default=None, converter=_payload)
    input: JsonValue = attrs.field(default=None, converter=_payload)
    steps: int = 0
    max_steps: int | None = None
    # Where a forked run (`Runtime.fork`) came from: ``{"run_id": ..., "seq": ...}``, the
    # source run and the event whose checkpoint its first attempt started from.
    forked_from: JsonValue = attrs.field(default=None, converter=_payload)
    # When the run was created, last committed, first ``Running`` and ended (its terminal
    # commit), read from the runtime's clock like events' ``at``; None when not (yet)
    # known (a run written by a release that kept no times has only what its events say).
    created_at: float | None = None
    updated_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    # The worker (`WorkerRecord.worker_id`) that holds the run's claim, or held it last;
    # None for a run never claimed.
    worker_id: str | None = None
    # A queued run's earliest start (wall-clock seconds, the runtime's clock): no runtime
    # starts its next attempt before then. Set by a delayed start (``submit(not_before=)``)
    # and by a run waiting to retry; None when it may start now, and in every other state.
    not_before: float | None = None
    # The run's deadline (wall-clock seconds, the runtime's clock): it ends
    # ``Stopped("deadline")`` then, whatever its state. None: no deadline.
    deadline: float | None = None
    # The version of the body its first attempt ran with (`Runtime.register`'s
    # ``version``), None for an unversioned body or a run that never started.
    body_version: str | None = None
    # How the run is tried again when its body fails (``retry=``), None: it is not.
    retry: RetryPolicy | None = None
    # Retries scheduled so far: the attempts that failed and were tried again (counted
    # apart from recoveries from a lost owner). A run waiting to retry is ``Queued`` with
    # ``not_before`` its ``retry_at``.
    retries: int = 0


class EventKind(enum.StrEnum):
    """The kinds of event the runtime writes (a body's own events, from ``ctx.emit``,
    carry dotted kinds of its own such as ``"agent.tool_started"``)."""

    COMMITTED = "committed"
    """A state commit: start, progress, pause or await, resume, end."""
    LATE_RESULT_DISCARDED = "late_result_discarded"
    """A value the body returned after its run was cancelled; never committed."""
    MESSAGES_DISCARDED = "messages_discarded"
    """Accepted messages no attempt will read, because the run ended."""
    STEP = "step"
    """A journaled step's result (``ctx.step``), detail ``{"name", "index", "result"}``: a
    later attempt of the run gets it back without running the step again."""
    RETRY_SCHEDULED = "retry_scheduled"
    """An attempt failed and the run is tried again (``retry=RetryPolicy(...)``), detail
    ``{"code", "message", "traceback", "attempt", "retry_at"}``: written right before the
    commit that puts the run back ``Queued`` until ``retry_at``."""


@final
@attrs.frozen
class RunEvent:
    """One committed event.

    ``kind`` is an `EventKind` (``"committed"`` for every state commit, progress commits
    included; ``"late_result_discarded"`` and ``"messages_discarded"`` for what a terminal
    commit threw away, right before that terminal event; ``"step"`` for a journaled step's
    result, from ``ctx.step``), or a body's own dotted kind from
    ``ctx.emit``. ``seq`` is one store-wide, strictly increasing sequence; ``at`` is read
    from the runtime's clock; ``detail`` is a frozen JSON object (cancel source and reason,
    discarded items, ...).
    """

    seq: int
    run_id: str
    thread_id: str
    generation: int
    kind: str
    state: RunState
    detail: FrozenDict = attrs.field(converter=_detail)
    at: float


ChunkKind = Literal["data", "reset", "end"]
"""The kinds of `StreamChunk`: a body's own chunk (``"data"``), the mark a later attempt's
first chunk on a channel comes after (``"reset"``: drop the earlier attempts' partial
output), and the run's last chunk on the channel (``"end"``)."""

CHUNK_KINDS: Final[tuple[ChunkKind, ...]] = ("data", "reset", "end")


@final
@attrs.frozen
class StreamChunk:
    """One chunk of a run's stream (`RunContext.stream`, `Runtime.read_stream`).

    ``offset`` numbers the channel's chunks 1, 2, ... across every attempt of the run;
    ``generation`` is the attempt that wrote it; ``kind`` is a `ChunkKind`; ``value`` is the
    frozen JSON value the body sent (None for ``"reset"`` and ``"end"``); ``at`` is the
    runtime's clock when the chunk was committed, as an event's ``at``.
    """

    offset: int
    generation: int
    kind: ChunkKind
    value: JsonValue = attrs.field(converter=_payload)
    at: float


CauseKind = Literal["natural_end", "max_steps", "cancelled", "stopped", "failed", "indeterminate"]
"""An `EndCause` variant by the name the stores and the JSON shapes give it."""

CAUSE_KINDS: Final[tuple[CauseKind, ...]] = (
    "natural_end",
    "max_steps",
    "cancelled",
    "stopped",
    "failed",
    "indeterminate",
)

_CAUSE_KIND: Final[Mapping[type[EndCause], CauseKind]] = {
    NaturalEnd: "natural_end",
    MaxSteps: "max_steps",
    Cancelled: "cancelled",
    Stopped: "stopped",
    Failed: "failed",
    Indeterminate: "indeterminate",
}


def cause_kind(cause: EndCause) -> CauseKind:
    """The kind of an end cause (``"natural_end"``, ``"failed"``, ...)."""
    return _CAUSE_KIND[type(cause)]


@final
@attrs.frozen
class RunCounts(Mapping[str, int]):
    """How many runs a store holds in each state, and how many of the ended ones ended
    with each cause (`Runtime.count_runs`). A frozen value, read by attribute or as a
    read-only mapping keyed by the kinds `Runtime.list_runs` filters by::

        counts = await runtime.count_runs()
        counts.failed == counts["failed"]
        dict(counts)  # {"queued": 0, "running": 2, ..., "indeterminate": 0}

    Every kind is present (0 when no run has it); the causes add up to ``ended``.
    """

    queued: int = 0
    running: int = 0
    awaiting: int = 0
    ended: int = 0
    natural_end: int = 0
    max_steps: int = 0
    cancelled: int = 0
    stopped: int = 0
    failed: int = 0
    indeterminate: int = 0

    @property
    def total(self) -> int:
        """Every run the store holds."""
        return self.queued + self.running + self.awaiting + self.ended

    def __getitem__(self, kind: str) -> int:
        if kind not in _COUNTED:
            raise KeyError(kind)
        value: int = getattr(self, kind)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(_COUNTED)

    def __len__(self) -> int:
        return len(_COUNTED)


_COUNTED: Final = (
    "queued",
    "running",
    "awaiting",
    "ended",
    "natural_end",
    "max_steps",
    "cancelled",
    "stopped",
    "failed",
    "indeterminate",
)


CANCELLED_CAUSE: EndCause = Cancelled()
"""One frozen `Cancelled` cause shared by every cancel (values compare by value)."""


def ended(cause: EndCause) -> RunState:
    """``Ended(cause)``, shared for the causes without fields."""
    shared = _SHARED_ENDS.get(type(cause))
    return shared if shared is not None else Ended(cause)


_SHARED_ENDS: dict[type[EndCause], RunState] = {
    NaturalEnd: Ended(NaturalEnd()),
    MaxSteps: Ended(MaxSteps()),
    Cancelled: Ended(CANCELLED_CAUSE),
}
