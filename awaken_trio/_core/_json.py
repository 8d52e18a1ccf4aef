"""JSON payloads: checked when handed over, frozen from then on.

Every payload that crosses the runtime's boundary (input, result, progress, ticket payload,
resume value, messages, event details) must survive a JSON round trip unchanged. The check
runs when the value is handed over, so bad input is rejected at the call that supplied it,
never later, and it returns a deeply frozen copy: `FrozenDict` and `FrozenList` are
read-only subclasses of ``dict`` and ``list``. The runtime never shares a mutable container
with anyone, so nothing a caller or a body does afterwards can change committed truth, and a
frozen value can be handed out again and again without copying. Frozen values hash, so the
states and records that hold them hash too.

A runtime also bounds each payload's size (`check_payload`, ``max_payload_bytes``): the
length of its compact JSON text, bounded from both sides by the same walk, so the check
costs no encoding for the payloads almost every run hands over.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any, NoReturn, TypeAlias, final

from ._errors import InvalidPayload

# A JSON value: None, bool, int, finite float, str, list, or dict with str keys. Checked at
# run time by `check_json` wherever a payload is handed over; typed as Any so that a caller's
# `dict[str, int]` or a body reading `ctx.checkpoint["step"]` needs no casts.
JsonValue: TypeAlias = Any
"""A JSON value: None, bool, int, finite float, str, list, or dict with str keys."""

_MAX_DEPTH = 200
# A path of more levels than this is named by its first and last few, and its depth.
_PATH_LEVELS = 10
_PATH_ENDS = 4
# `open_runtime(max_payload_bytes=...)` by default: 4 MiB of JSON text per payload.
DEFAULT_MAX_PAYLOAD_BYTES = 4 * 2**20
# CPython refuses to turn an int of more than 4300 digits into text by default, so a larger
# one would not survive `json.dumps`. Below this many bits an int always has fewer digits.
_MAX_INT_DIGITS = 4300
_SAFE_INT_BITS = 14_280

# Payload sizes are the length of the payload's compact JSON text, ASCII only: the text the
# stores write. The walk that checks and freezes a payload bounds that length from both
# sides without encoding anything; only a payload whose bounds straddle the limit (a large
# one) is encoded to measure it exactly. Upper bounds per value: a str of n characters is
# at most 12n + 2 (a character outside the BMP becomes a surrogate pair of \uXXXX escapes),
# an int of at most 63 bits 20 characters, a float 24 (-1.7976931348623157e+308), null,
# true and false 5; a container adds its brackets and one separator per item (a colon and a
# comma per member of an object).
_STR_HIGH = 12
_INT_HIGH = 20
_FLOAT_HIGH = 24
_NO_LIMIT = 1 << 62
_isfinite = math.isfinite
# The size of a frozen container nobody has bounded (the runtime's own details): measured
# exactly, and then remembered, the first time a limit is checked against it.
_UNMEASURED = 1 << 62
_compact = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=False
).encode


# Where a value sits in the payload being checked: its container's path and its key (a
# str, in an object) or index (an int, in an array); None for the payload itself. Built as
# the walk goes down (one tuple a nested container), spelled out only for an error.
_Path: TypeAlias = "tuple[_Path, str | int] | None"


def _at(path: _Path) -> str:
    """The path spelled out, ``$.a[1].b``; past `_PATH_LEVELS` levels, its first and last
    levels and its depth, ``$.items[0].items[0] ... [0].items[0].x (depth 199)``, so an
    error about a deep payload stays a line."""
    levels: list[str] = []
    while path is not None:
        path, step = path
        levels.append(f"[{step}]" if type(step) is int else f".{step}")
    levels.reverse()
    if len(levels) <= _PATH_LEVELS:
        return "$" + "".join(levels)
    head = "".join(levels[:_PATH_ENDS])
    tail = "".join(levels[-_PATH_ENDS:])
    return f"${head} ... {tail} (depth {len(levels)})"


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

    # An upper bound of the length of its compact JSON text (exact once measured), so a
    # frozen value handed over again is checked against a size limit without a walk.
    __slots__ = ("_size",)
    _size: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        frozen = check_json(dict(*args, **kwargs), "a FrozenDict")
        dict.update(self, frozen)
        self._size = frozen._size

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

    __slots__ = ("_size",)  # as FrozenDict's
    _size: int

    def __init__(self, items: Iterable[Any] = ()) -> None:
        frozen = check_json(list(items), "a FrozenList")
        list.extend(self, frozen)
        self._size = frozen._size

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _read_only
    clear = sort = reverse = __iadd__ = __imul__ = _read_only


def _frozen_dict(items: dict[str, Any], size: int) -> FrozenDict:
    # Contents already checked and frozen: fill the instance without checking again.
    out = dict.__new__(FrozenDict)
    dict.update(out, items)
    out._size = size
    return out


EMPTY_DICT: FrozenDict = _frozen_dict({}, 2)


def scalar_dict(items: dict[str, str | int | float | bool | None]) -> FrozenDict:
    """A `FrozenDict` of values the caller has already checked to be JSON scalars (strs,
    ints, finite floats, bools, None): the runtime's own event details."""
    return _frozen_dict(items, _UNMEASURED)


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
        flat = _flat_dict(value)  # type: ignore[arg-type]
        if flat is not None:
            return flat[0]
    return _freeze(value, _Walk(what, _NO_LIMIT), None, 0)[0]


def check_payload(value: object, what: str, max_bytes: int) -> JsonValue:
    """`check_json`, and refuse a value whose compact JSON text is longer than ``max_bytes``
    (the runtime's ``max_payload_bytes``) with `InvalidPayload` naming its size and the
    limit. The size is bounded while the value is checked, so a small payload is never
    encoded, and a huge one is refused before it is copied."""
    cls = type(value)
    if value is None:
        if max_bytes < 4:
            _fit(value, 4, what, max_bytes)
        return value
    if cls is str:
        assert isinstance(value, str)
        if _STR_HIGH * len(value) + 2 > max_bytes:
            _fit(value, len(value) + 2, what, max_bytes)
        return value
    if cls is dict:
        flat = _flat_dict(value)  # type: ignore[arg-type]
        if flat is not None:
            frozen, low = flat
            if frozen._size > max_bytes:
                _fit(frozen, low, what, max_bytes)
            return frozen
    elif cls is bool or (cls is int and value.bit_length() < 64):  # type: ignore[attr-defined]
        if max_bytes < _INT_HIGH:
            _fit(value, 1, what, max_bytes)
        return value
    elif cls is FrozenDict or cls is FrozenList:
        assert isinstance(value, FrozenDict | FrozenList)
        if value._size > max_bytes:
            _fit(value, 2, what, max_bytes)
        return value
    walk = _Walk(what, max_bytes)
    frozen, high = _freeze(value, walk, None, 0)
    if high > max_bytes:
        _fit(frozen, walk.low, what, max_bytes)
    return frozen


def fits_as_it_is(value: object, max_bytes: int) -> bool:
    """Whether ``value`` is a scalar JSON value whose text surely fits ``max_bytes``: the
    results most bodies return, accepted without building anything."""
    cls = type(value)
    if cls is str:
        return _STR_HIGH * len(value) + 2 <= max_bytes  # type: ignore[arg-type]
    return max_bytes >= _INT_HIGH and (
        value is None or cls is bool or (cls is int and value.bit_length() < 64)  # type: ignore[attr-defined]
    )


def freeze_detail(detail: object, what: str, max_bytes: int = _NO_LIMIT) -> FrozenDict:
    """A frozen event detail (a JSON object), checked (and its size, given ``max_bytes``)."""
    frozen = check_payload(detail, what, max_bytes)
    if type(frozen) is not FrozenDict:
        raise InvalidPayload(f"{what} must be a JSON object (a dict with str keys)")
    return frozen


@final
class _Walk:
    """One payload's check: what it is, its size limit, and a lower bound of the length of
    its JSON text, grown as each container is done, so a walk stops once it is over."""

    __slots__ = ("limit", "low", "what")

    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit
        self.low = 0

    def over(self, low: int) -> NoReturn:
        raise InvalidPayload(_too_large(self.what, low, self.limit, exact=False))


def _fit(value: JsonValue, low: int, what: str, max_bytes: int) -> None:
    """Raise unless ``value``'s JSON text, at least ``low`` characters long, fits: measured
    exactly (and remembered by a frozen container) when the bounds cannot tell."""
    if low > max_bytes:
        raise InvalidPayload(_too_large(what, low, max_bytes, exact=False))
    size = len(_compact(value))
    if type(value) is FrozenDict or type(value) is FrozenList:
        value._size = size
    if size > max_bytes:
        raise InvalidPayload(_too_large(what, size, max_bytes, exact=True))


def _too_large(what: str, size: int, limit: int, *, exact: bool) -> str:
    return (
        f"{what} is {'' if exact else 'at least '}{size} bytes as JSON, over this runtime's"
        f" limit (max_payload_bytes={limit}); keep large data outside the run (a file, an"
        " object store) and pass a reference to it, or open the runtime with a larger"
        " max_payload_bytes"
    )


def _freeze(value: object, walk: _Walk, path: _Path, depth: int) -> tuple[JsonValue, int]:
    """``value`` frozen, with an upper bound of the length of its JSON text; its lower
    bound is added to ``walk.low``."""
    if depth > _MAX_DEPTH:
        raise InvalidPayload(
            f"{walk.what} is nested deeper than {_MAX_DEPTH} levels at {_at(path)}"
        )
    cls = type(value)
    if cls is list:
        assert isinstance(value, list)
        return _freeze_list(value, walk, path, depth)
    if cls is dict:
        assert isinstance(value, dict)
        flat = _flat_dict(value)
        if flat is None:
            return _freeze_dict(value, walk, path, depth)
        frozen, low = flat
        walk.low += low
        if walk.low > walk.limit:
            walk.over(walk.low)
        return frozen, frozen._size
    if cls is str:
        assert isinstance(value, str)
        walk.low += len(value) + 2
        return value, _STR_HIGH * len(value) + 2
    if value is None or cls is bool:
        walk.low += 4
        return value, 5
    if cls is FrozenDict or cls is FrozenList:
        assert isinstance(value, FrozenDict | FrozenList)
        walk.low += 2
        return value, value._size
    if cls is int:
        assert isinstance(value, int)
        bits = value.bit_length()
        if bits > _SAFE_INT_BITS and not _few_digits(value):
            raise InvalidPayload(
                f"{walk.what} holds an int of more than {_MAX_INT_DIGITS} digits at {_at(path)},"
                " which does not survive a JSON round trip; send it as a string"
            )
        walk.low += 1
        # At most floor(bits * log10(2)) + 1 digits, and a sign.
        return value, _INT_HIGH if bits < 64 else bits * 31 // 100 + 2
    if cls is float:
        assert isinstance(value, float)
        if not math.isfinite(value):
            raise InvalidPayload(
                f"{walk.what} holds {value!r} at {_at(path)}; JSON has no NaN or infinities"
                " (send None or a string instead)"
            )
        walk.low += 3
        return value, _FLOAT_HIGH
    hint = ""
    if isinstance(value, tuple | set | frozenset):
        hint = " (use a list)"
    elif isinstance(value, bytes | bytearray):
        hint = " (decode it to str, or encode it as base64 text)"
    raise InvalidPayload(
        f"{walk.what} holds a {cls.__name__} at {_at(path)}, which is not a JSON value{hint};"
        " payloads must be None, bool, int, finite float, str, list or dict with str keys"
    )


def _flat_dict(value: dict[Any, Any]) -> tuple[FrozenDict, int] | None:
    """``value`` frozen, with a lower bound of the length of its text (the upper one is in
    its ``_size``), if it is a flat object of plain scalars with str keys (the usual
    progress, result or detail): one pass, no walk, no paths. None if it needs the walk."""
    # Per member: its key's quotes, a colon and a comma (the last comma pays for the
    # closing brace), and the value's own text.
    low = 1
    high = 2
    for key, item in value.items():
        if type(key) is not str:
            return None
        cls = type(item)
        if cls is str:
            size = len(key) + len(item)
            low += size + 6
            high += _STR_HIGH * size + 6
        elif cls is int and item.bit_length() < 64:
            size = len(key)
            low += size + 5
            high += _STR_HIGH * size + 4 + _INT_HIGH
        elif item is None or cls is bool:
            size = len(key)
            low += size + 8
            high += _STR_HIGH * size + 9
        elif cls is float and _isfinite(item):
            size = len(key)
            low += size + 7
            high += _STR_HIGH * size + 4 + _FLOAT_HIGH
        else:
            return None
    out = dict.__new__(FrozenDict)
    dict.update(out, value)
    out._size = high
    return out, low


def _freeze_list(value: list[Any], walk: _Walk, path: _Path, depth: int) -> tuple[FrozenList, int]:
    n = len(value)
    # Brackets and commas; every item takes at least one character more.
    low = n + 1 if n else 2
    if walk.low + low + n > walk.limit:
        walk.over(walk.low + low + n)  # refused before anything is copied
    high = 2 + n
    replaced: dict[int, JsonValue] | None = None
    for i, item in enumerate(value):
        # The common scalars inline: no call, no path built.
        cls = type(item)
        if cls is str:
            size = len(item)
            low += size + 2
            high += _STR_HIGH * size + 2
        elif cls is int and item.bit_length() < 64:
            low += 1
            high += _INT_HIGH
        elif item is None or cls is bool:
            low += 4
            high += 5
        elif cls is float and _isfinite(item):
            low += 3
            high += _FLOAT_HIGH
        else:
            frozen, item_high = _freeze(item, walk, (path, i), depth + 1)
            high += item_high
            if frozen is not item:
                if replaced is None:
                    replaced = {}
                replaced[i] = frozen
    walk.low += low
    if walk.low > walk.limit:
        walk.over(walk.low)
    out = list.__new__(FrozenList)
    list.extend(out, value)
    if replaced is not None:
        for i, frozen in replaced.items():
            list.__setitem__(out, i, frozen)
    out._size = high
    return out, high


def _freeze_dict(
    value: dict[Any, Any], walk: _Walk, path: _Path, depth: int
) -> tuple[FrozenDict, int]:
    n = len(value)
    # Braces, colons and commas; every key takes at least two characters more (its
    # quotes), every value one.
    low = 2 * n + 1 if n else 2
    if walk.low + low + 3 * n > walk.limit:
        walk.over(walk.low + low + 3 * n)
    high = 2 + 2 * n
    replaced: dict[str, JsonValue] | None = None
    for key, item in value.items():
        if type(key) is not str:
            raise InvalidPayload(
                f"{walk.what} has the non-string key {_safe_repr(key)} at {_at(path)};"
                " JSON object keys must be str"
            )
        size = len(key)
        low += size + 2
        high += _STR_HIGH * size + 2
        cls = type(item)
        if cls is str:
            size = len(item)
            low += size + 2
            high += _STR_HIGH * size + 2
        elif cls is int and item.bit_length() < 64:
            low += 1
            high += _INT_HIGH
        elif item is None or cls is bool:
            low += 4
            high += 5
        elif cls is float and _isfinite(item):
            low += 3
            high += _FLOAT_HIGH
        else:
            frozen, item_high = _freeze(item, walk, (path, key), depth + 1)
            high += item_high
            if frozen is not item:
                if replaced is None:
                    replaced = {}
                replaced[key] = frozen
    walk.low += low
    if walk.low > walk.limit:
        walk.over(walk.low)
    out = dict.__new__(FrozenDict)
    dict.update(out, value)
    if replaced is not None:
        dict.update(out, replaced)
    out._size = high
    return out, high


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
