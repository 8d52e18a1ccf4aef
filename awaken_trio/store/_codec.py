"""How committed values are kept as JSON by the stores that keep text (SQLite, PostgreSQL).

The shapes are part of the schema: a change to them is a schema version and a migration.

* a state: ``{"kind": "queued"}``, ``{"kind": "running", "generation": 2}``,
  ``{"kind": "awaiting", "ticket": {...}}``, ``{"kind": "ended", "cause": {...}}``;
* a ticket: ``{"correlation_id", "run_id", "thread_id", "reason", "payload", "deadline",
  "accepts"}``;
* a cause: ``{"kind": "natural_end" | "max_steps" | "cancelled"}``, ``{"kind": "stopped",
  "reason"}``, ``{"kind": "failed", "code", "message"}``, ``{"kind": "indeterminate",
  "reason"}``.

Text is ASCII only (``ensure_ascii``): a NUL or an unpaired surrogate in a reason or a payload
travels escaped, so every text column survives a database that refuses them (PostgreSQL).
Everything read back is frozen, through the converters of the committed values or
`check_json`, so nothing a caller changes reaches the store.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from .._core import (
    Awaiting,
    Cancelled,
    EndCause,
    Ended,
    Failed,
    FrozenDict,
    FrozenList,
    Indeterminate,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    MaxSteps,
    NaturalEnd,
    Queued,
    ResumeTicket,
    RetryPolicy,
    RunEvent,
    Running,
    RunRecord,
    RunState,
    Stopped,
    StoreError,
    check_json,
    ended,
)
from ._rules import kind_of_variant as kind_of_variant
from ._rules import state_kind as state_kind

QUEUED: Final = "queued"
RUNNING: Final = "running"
AWAITING: Final = "awaiting"
ENDED: Final = "ended"


_encode = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=False
).encode
_decode = json.JSONDecoder().decode

CARRIED_WRAPPING: Final = 1
"""Levels the store adds around carried messages: one array of them."""
DETAIL_WRAPPING: Final = 2
"""Levels an event detail of the store's own may add around a payload: the
``{"messages": [...]}`` of discarded messages (a late result's ``{"result": ...}`` adds one)."""


class CodecError(StoreError):
    """A stored value does not have the shape this schema version writes."""

    def __init__(self, message: str) -> None:
        super().__init__(message, outcome_unknown=False)


# ---------------------------------------------------------------------------- payloads


def dump_json(value: JsonValue) -> str:
    """A checked JSON value as compact ASCII text."""
    # The encoder sets itself up on every call, which costs more than encoding a small
    # value: the values written most (a number, a text, a flat object of those) are put
    # together here, exactly as the encoder would.
    kind = type(value)
    if kind is str:
        return _encode(value)  # (the encoder's own shortcut)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is FrozenDict or kind is dict:
        items = value.items()
        if len(items) <= _FLAT_MAX:
            parts = []
            for key, item in items:
                text = _SCALARS.get(type(item))
                if text is None or type(key) is not str:
                    return _encode(value)
                parts.append(f"{_encode(key)}:{text(item)}")
            return "{" + ",".join(parts) + "}"
    return _encode(value)


_FLAT_MAX: Final = 8
_SCALARS: Final[dict[type, Callable[[Any], str]]] = {
    str: _encode,
    int: int.__repr__,
    bool: lambda flag: "true" if flag else "false",
    type(None): lambda _: "null",
}


_SHARED_MAX: Final = 256
_shared: dict[int, tuple[object, str]] = {}


def dump_shared(value: JsonValue) -> str:
    """`dump_json` for a value the runtime hands over again and again: an event's detail is
    most often one of a few module-level constants. A `FrozenDict` cannot change, so its
    text is kept, by identity (never by equality: ``1 == 1.0 == True``, but their texts
    differ), in a small table: the object itself is kept with it, so no other object can
    take its id while the entry lives."""
    found = _shared.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    text = _encode(value)
    if type(value) is FrozenDict:
        if len(_shared) >= _SHARED_MAX:
            _shared.clear()  # many one-off values: start over rather than track their age
        _shared[id(value)] = (value, text)
    return text


def load_json(text: str, what: str) -> JsonValue:
    """A stored JSON text as a frozen value."""
    try:
        return check_json(_decode(text), what)
    except (ValueError, TypeError) as exc:  # InvalidPayload is a ValueError
        raise CodecError(f"{what} in the store is not valid JSON: {exc}") from None


def load_wrapped(text: str, what: str, levels: int) -> JsonValue:
    """A stored JSON text as a frozen value, when its outer ``levels`` levels of arrays and
    objects are the store's own wrapping around payloads (carried messages kept in one
    array; an event detail holding the messages or the late result it records).

    The JSON check bounds how deep one payload is nested, and the wrapping adds levels of
    its own: each payload inside it is checked on its own, so a payload nested as deep as
    the check accepts is read back exactly as it was accepted.
    """
    try:
        value = _decode(text)
    except ValueError as exc:
        raise CodecError(f"{what} in the store is not valid JSON: {exc}") from None
    try:
        try:
            return check_json(value, what)  # the usual case: shallow, checked in one walk
        except InvalidPayload:
            if levels <= 0:
                raise
            return _unwrap(value, what, levels)
    except (ValueError, TypeError) as exc:  # InvalidPayload is a ValueError
        raise CodecError(f"{what} in the store is not valid JSON: {exc}") from None


def _unwrap(value: Any, what: str, levels: int) -> JsonValue:
    if levels > 0 and type(value) is list:
        return FrozenList([_unwrap(item, what, levels - 1) for item in value])
    if levels > 0 and type(value) is dict:
        # (Decoded JSON: its keys are str.) Frozen items are taken as they are, so the
        # wrapping's own levels are never counted again.
        return FrozenDict({key: _unwrap(item, what, levels - 1) for key, item in value.items()})
    return check_json(value, what)


def load_raw(text: str, what: str) -> Any:
    """A stored JSON text, not frozen: for values an attrs converter freezes next."""
    if text == "null":
        # Most of a queued run's payload columns (its result, its checkpoint), read by
        # every look: 0.05 µs here, 0.87 through the decoder.
        return None
    try:
        return _decode(text)
    except ValueError as exc:
        raise CodecError(f"{what} in the store is not valid JSON: {exc}") from None


# ---------------------------------------------------------------------------- states


def state_to_json(state: RunState) -> dict[str, JsonValue]:
    """A `RunState` as the JSON object the stores keep: ``{"kind": "queued"}``,
    ``{"kind": "running", "generation": n}``, ``{"kind": "awaiting", "ticket": {...}}``
    (see `ticket_to_json`) or ``{"kind": "ended", "cause": {...}}`` (see `cause_to_json`)."""
    match state:
        case Running(generation):
            return {"kind": RUNNING, "generation": generation}
        case Awaiting(ticket):
            return {"kind": AWAITING, "ticket": ticket_to_json(ticket)}
        case Ended(cause):
            return {"kind": ENDED, "cause": cause_to_json(cause)}
        case Queued():
            return {"kind": QUEUED}
    raise TypeError(f"not a RunState: {state!r}")  # pragma: no cover


def cause_to_json(cause: EndCause) -> dict[str, JsonValue]:
    """An `EndCause` as a JSON object: ``{"kind": "natural_end" | "max_steps" |
    "cancelled"}``, ``{"kind": "stopped", "reason"}``, ``{"kind": "failed", "code",
    "message"}`` or ``{"kind": "indeterminate", "reason"}``."""
    match cause:
        case NaturalEnd():
            return {"kind": "natural_end"}
        case MaxSteps():
            return {"kind": "max_steps"}
        case Cancelled():
            return {"kind": "cancelled"}
        case Stopped(reason):
            return {"kind": "stopped", "reason": reason}
        case Failed(code, message):
            return {"kind": "failed", "code": code, "message": message}
        case Indeterminate(reason):
            return {"kind": "indeterminate", "reason": reason}
    raise TypeError(f"not an EndCause: {cause!r}")  # pragma: no cover


def ticket_to_json(ticket: ResumeTicket) -> dict[str, JsonValue]:
    """A `ResumeTicket` as a JSON object of its fields: ``{"correlation_id", "run_id",
    "thread_id", "reason", "payload", "deadline", "accepts"}``."""
    return {
        "correlation_id": ticket.correlation_id,
        "run_id": ticket.run_id,
        "thread_id": ticket.thread_id,
        "reason": ticket.reason,
        "payload": ticket.payload,
        "deadline": ticket.deadline,
        "accepts": ticket.accepts,
    }


def dump_state(state: RunState) -> str:
    # The states written most often have no payload: build their text without a dict.
    if isinstance(state, Running):
        return f'{{"kind":"running","generation":{state.generation}}}'
    if isinstance(state, Queued):
        return '{"kind":"queued"}'
    if isinstance(state, Ended):
        return _dump_ended(state)
    return _encode(state_to_json(state))


@functools.lru_cache(maxsize=1024)
def _dump_ended(state: Ended) -> str:
    # Kept by equality, which is safe here as it would not be for a payload: an end cause
    # holds only strings (its fields are checked to be exactly `str`), and equal strings
    # have equal texts.
    return _encode(state_to_json(state))


def dump_ticket(ticket: ResumeTicket) -> str:
    return _encode(ticket_to_json(ticket))


def load_state(text: str) -> RunState:
    """A stored state. States are frozen values, so one decoded state is shared by every
    row and event that stored the same text (short texts only: a ticket's payload may be
    large, and the cache must stay small)."""
    if len(text) <= _CACHED_STATE_TEXT:
        return _load_state_cached(text)
    return state_from_json(load_raw(text, "a run state"))


_CACHED_STATE_TEXT = 512


@functools.lru_cache(maxsize=4096)
def _load_state_cached(text: str) -> RunState:
    return state_from_json(load_raw(text, "a run state"))


def load_ticket(text: str) -> ResumeTicket:
    return ticket_from_json(load_raw(text, "a resume ticket"))


def state_from_json(data: object) -> RunState:
    try:
        kind = _field(data, "kind", str)
        if kind == RUNNING:
            return Running(_field(data, "generation", int))
        if kind == QUEUED:
            return Queued()
        if kind == AWAITING:
            return Awaiting(ticket_from_json(_field(data, "ticket", dict)))
        if kind == ENDED:
            return ended(cause_from_json(_field(data, "cause", dict)))
    except (TypeError, ValueError, KeyError) as exc:
        raise CodecError(f"a run state in the store is malformed: {exc}") from None
    raise CodecError(f"a run state in the store has the unknown kind {kind!r}")


def cause_from_json(data: object) -> EndCause:
    kind = _field(data, "kind", str)
    if kind == "natural_end":
        return NaturalEnd()
    if kind == "max_steps":
        return MaxSteps()
    if kind == "cancelled":
        return Cancelled()
    if kind == "stopped":
        return Stopped(_field(data, "reason", str))
    if kind == "failed":
        return Failed(_field(data, "code", str), _field(data, "message", str))
    if kind == "indeterminate":
        return Indeterminate(_field(data, "reason", str))
    raise ValueError(f"unknown end cause kind {kind!r}")


def ticket_from_json(data: object) -> ResumeTicket:
    try:
        deadline = _field(data, "deadline", object)
        if deadline is not None and (
            isinstance(deadline, bool) or not isinstance(deadline, int | float)
        ):
            raise TypeError(f"'deadline' has the wrong type ({type(deadline).__name__})")
        return ResumeTicket(
            correlation_id=_field(data, "correlation_id", str),
            run_id=_field(data, "run_id", str),
            thread_id=_field(data, "thread_id", str),
            reason=_field(data, "reason", str),
            payload=_field(data, "payload", object),
            deadline=deadline,
            accepts=_field(data, "accepts", object),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise CodecError(f"a resume ticket in the store is malformed: {exc}") from None


def _field(data: object, key: str, kind: type) -> Any:
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a JSON object, found {type(data).__name__}")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise TypeError(f"{key!r} has the wrong type ({type(value).__name__})")
    return value


# The text columns the SQL stores share: a run's record and its carried messages.

NO_MESSAGES: Final = "[]"

RECORD_COLUMNS: Final = (
    "r.run_id, r.thread_id, r.parent_run_id, r.name, r.state, r.generation, r.result,"
    " r.checkpoint, r.input, r.steps, r.max_steps, r.forked_from, r.created_at, r.updated_at,"
    " r.started_at, r.ended_at, r.worker_id, r.not_before, r.deadline, r.body_version,"
    " r.retry, r.retries"
)


def event_of(found: Sequence[Any]) -> RunEvent:
    """A `RunEvent` of an event row (seq, run, thread, generation, kind, state, detail, at)."""
    seq, run_id, thread_id, generation, kind, state, detail, at = found
    return RunEvent(
        seq=seq,
        run_id=run_id,
        thread_id=thread_id,
        generation=generation,
        kind=kind,
        state=load_state(state),
        detail=load_wrapped(detail, "an event detail", DETAIL_WRAPPING),
        at=at,
    )


def dump_retry(policy: RetryPolicy | None) -> str | None:
    """A run's retry policy as its ``retry`` column keeps it (JSON text; None: none)."""
    return None if policy is None else dump_json(policy.to_json())


def load_retry(text: str) -> RetryPolicy:
    """The retry policy `dump_retry` wrote.

    Raises:
        StoreError: the column holds something else (the file was written by something
            that is not this library).
    """
    try:
        return RetryPolicy.from_json(json.loads(text))
    except (ValueError, InvalidArgument) as exc:
        raise StoreError(
            f"a run's stored retry policy is unreadable ({exc}); the store was changed by"
            " something other than awaken_trio",
            outcome_unknown=False,
        ) from None


def record_of(found: Sequence[Any]) -> RunRecord:
    """A `RunRecord` of a row read with `RECORD_COLUMNS`; its converters freeze the
    payloads."""
    (
        run_id,
        thread_id,
        parent,
        name,
        state,
        generation,
        result,
        checkpoint,
        input_,
        steps,
        cap,
        forked_from,
        *as_stored,  # (created_at to body_version: taken as they are)
        retry,
        retries,
    ) = found
    # Positional, in the fields' order (which is the columns'): called with keywords the
    # record cost a look 0.5 µs a run more.
    fields = (
        run_id,
        thread_id,
        parent,
        name,
        load_state(state),
        generation,
        load_raw(result, "a result"),
        load_raw(checkpoint, "a checkpoint"),
        load_raw(input_, "an input"),
        steps,
        cap,
        None if forked_from is None else load_raw(forked_from, "a fork origin"),
        *as_stored,
        None if retry is None else load_retry(retry),
        retries,
    )
    return RunRecord(*fields)


@final
@attrs.frozen
class TextCarried:
    """`_rules.Carried` as a file or database keeps it: the messages' JSON text, decoded
    only when asked (most hand-overs carry nothing, and a carried list is usually passed on
    unread)."""

    text: str
    pause: bool

    def __bool__(self) -> bool:
        return self.text != NO_MESSAGES or self.pause

    def messages(self) -> tuple[JsonValue, ...]:
        if self.text == NO_MESSAGES:
            return ()
        return tuple(load_wrapped(self.text, "carried messages", CARRIED_WRAPPING))
