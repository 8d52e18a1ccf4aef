"""JSON payloads: checked when handed over, frozen from then on.

Every payload that crosses the runtime's boundary (input, result, progress, ticket payload,
resume value, messages, event details) must survive a JSON round trip unchanged. The check
runs when the value is handed over, so bad input is rejected at the call that supplied it,
never later, and it returns a deeply frozen copy: `FrozenDict` and `FrozenList` are
read-only subclasses of ``dict`` and ``list``. The runtime never shares a mutable container
with anyone, so nothing a caller or a body does afterwards can change committed truth, and a
frozen value can be handed out again and again without copying. Frozen values hash, so the
states and records that hold them hash too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NoReturn, TypeAlias

from ._errors import InvalidPayload

# A JSON value: None, bool, int, finite float, str, list, or dict with str keys. Checked at
# run time by `check_json` wherever a payload is handed over; typed as Any so that a caller's
# `dict[str, int]` or a body reading `ctx.checkpoint["step"]` needs no casts.
JsonValue: TypeAlias = Any

_MAX_DEPTH = 200
# CPython refuses to turn an int of more than 4300 digits into text by default, so a larger
# one would not survive `json.dumps`. Below this many bits an int always has fewer digits.
_MAX_INT_DIGITS = 4300
_SAFE_INT_BITS = 14_280


def _read_only(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(
        f"this {type(self).__name__} is a committed JSON value and cannot be changed;"
        " make a copy to edit (dict(value) or list(value)) and hand the copy over"
    )


class FrozenDict(dict[str, Any]):
    """A read-only ``dict`` holding a checked JSON object.

    Payloads the runtime hands out (``ctx.input``, ``ctx.checkpoint``, records, tickets,
    events) are frozen: reading is plain ``dict`` reading, every mutator raises
    ``TypeError``. ``dict(value)`` is a mutable copy. Building one checks its contents.
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.update(self, check_json(dict(*args, **kwargs), "a FrozenDict"))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only


class FrozenList(list[Any]):
    """A read-only ``list`` holding a checked JSON array (see `FrozenDict`)."""

    __slots__ = ()

    def __init__(self, items: Iterable[Any] = ()) -> None:
        list.extend(self, check_json(list(items), "a FrozenList"))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _read_only
    clear = sort = reverse = __iadd__ = __imul__ = _read_only


def _frozen_dict(items: dict[str, Any]) -> FrozenDict:
    # Contents already checked and frozen: fill the instance without checking again.
    out = dict.__new__(FrozenDict)
    dict.update(out, items)
    return out


def _frozen_list(items: list[Any]) -> FrozenList:
    out = list.__new__(FrozenList)
    list.extend(out, items)
    return out


EMPTY_DICT: FrozenDict = _frozen_dict({})


def scalar_dict(items: dict[str, str | int | float | bool | None]) -> FrozenDict:
    """A `FrozenDict` of values the caller has already checked to be JSON scalars (strs,
    ints, finite floats, bools, None): the runtime's own event details."""
    return _frozen_dict(items)


def check_json(value: object, what: str) -> JsonValue:
    """Return ``value`` as a frozen JSON value, or raise `InvalidPayload` naming ``what``.

    Args:
        value: the candidate payload.
        what: a phrase naming the payload and its run, used in the error message
            (for example ``"input of run 'r1'"``).
    """
    cls = type(value)
    if value is None or cls is str or cls is bool or cls is FrozenDict or cls is FrozenList:
        return value  # immutable already (a frozen container was checked when it was built)
    if cls is int and value.bit_length() <= _SAFE_INT_BITS:  # type: ignore[attr-defined]
        return value
    if cls is dict:
        frozen = _flat_dict(value)  # type: ignore[arg-type]
        if frozen is not None:
            return frozen
    return _freeze(value, what, "$", 0)


def freeze_detail(detail: object, what: str) -> FrozenDict:
    """A frozen event detail (a JSON object), checked."""
    frozen = check_json(detail, what)
    if type(frozen) is not FrozenDict:
        raise InvalidPayload(f"{what} must be a JSON object (a dict with str keys)")
    return frozen


def _freeze(value: object, what: str, path: str, depth: int) -> JsonValue:
    if depth > _MAX_DEPTH:
        raise InvalidPayload(f"{what} is nested deeper than {_MAX_DEPTH} levels at {path}")
    cls = type(value)
    if value is None or cls is str or cls is bool or cls is FrozenDict or cls is FrozenList:
        return value
    if cls is int:
        assert isinstance(value, int)
        if value.bit_length() > _SAFE_INT_BITS and not _few_digits(value):
            raise InvalidPayload(
                f"{what} holds an int of more than {_MAX_INT_DIGITS} digits at {path}, which"
                " does not survive a JSON round trip; send it as a string"
            )
        return value
    if cls is float:
        assert isinstance(value, float)
        if not math.isfinite(value):
            raise InvalidPayload(
                f"{what} holds {value!r} at {path}; JSON has no NaN or infinities"
                " (send None or a string instead)"
            )
        return value
    if cls is list:
        assert isinstance(value, list)
        return _frozen_list(
            [
                item if _plain(item) else _freeze(item, what, f"{path}[{i}]", depth + 1)
                for i, item in enumerate(value)
            ]
        )
    if cls is dict:
        assert isinstance(value, dict)
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidPayload(
                    f"{what} has the non-string key {_safe_repr(key)} at {path};"
                    " JSON object keys must be str"
                )
            out[key] = item if _plain(item) else _freeze(item, what, f"{path}.{key}", depth + 1)
        return _frozen_dict(out)
    hint = ""
    if isinstance(value, tuple | set | frozenset):
        hint = " (use a list)"
    elif isinstance(value, bytes | bytearray):
        hint = " (decode it to str, or encode it as base64 text)"
    raise InvalidPayload(
        f"{what} holds a {cls.__name__} at {path}, which is not a JSON value{hint};"
        " payloads must be None, bool, int, finite float, str, list or dict with str keys"
    )


def _flat_dict(value: dict[Any, Any]) -> FrozenDict | None:
    """``value`` frozen if it is a flat object of plain scalars (the usual progress, result
    or detail), checked in one pass with no paths built; None if it needs the full walk."""
    for key, item in value.items():
        if type(key) is not str or not _plain(item):
            return None
    out = dict.__new__(FrozenDict)
    dict.update(out, value)
    return out


def _plain(item: object) -> bool:
    """Whether ``item`` is a JSON scalar that needs no further look: most items of most
    payloads, kept as they are without building their path or recursing."""
    cls = type(item)
    return (
        cls is str
        or item is None
        or cls is bool
        or (cls is int and item.bit_length() <= _SAFE_INT_BITS)  # type: ignore[attr-defined]
    )


def _few_digits(value: int) -> bool:
    try:
        return len(str(abs(value))) <= _MAX_INT_DIGITS
    except ValueError:  # the interpreter's own digit limit is lower still
        return False


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
