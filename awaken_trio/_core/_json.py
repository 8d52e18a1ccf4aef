"""JSON payload checking.

Every payload that crosses the runtime's boundary (input, result, progress, ticket payload,
resume value, messages) must survive a JSON round trip unchanged. Checking happens when the
value is handed over, so bad input is rejected at the call that supplied it, never later.
The check also copies the value: the runtime never shares a mutable list or dict with the
caller, so nothing the caller does afterwards can change committed truth.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

from ._errors import InvalidPayload

# A JSON value: None, bool, int, finite float, str, list, or dict with str keys. Checked at
# run time by `check_json` wherever a payload is handed over; typed as Any so that a caller's
# `dict[str, int]` or a body reading `ctx.checkpoint["step"]` needs no casts.
JsonValue: TypeAlias = Any

_SCALARS = (str, bool, int)
_MAX_DEPTH = 200


def check_json(value: object, what: str) -> JsonValue:
    """Return a private copy of ``value`` or raise `InvalidPayload` naming ``what``.

    Args:
        value: the candidate payload.
        what: a phrase naming the payload and its run, used in the error message
            (for example ``"input of run 'r1'"``).
    """
    if value is None:
        return None
    cls = type(value)
    if cls is str or cls is int or cls is bool:
        return value
    return _copy(value, what, "$", 0)


def _copy(value: object, what: str, path: str, depth: int) -> JsonValue:
    if depth > _MAX_DEPTH:
        raise InvalidPayload(f"{what} is nested deeper than {_MAX_DEPTH} levels at {path}")
    if value is None:
        return None
    cls = type(value)
    if cls in _SCALARS:
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
        return [_copy(item, what, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if cls is dict:
        assert isinstance(value, dict)
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidPayload(
                    f"{what} has the non-string key {key!r} at {path}; JSON object keys must be str"
                )
            out[key] = _copy(item, what, f"{path}.{key}", depth + 1)
        return out
    hint = ""
    if isinstance(value, tuple | set | frozenset):
        hint = " (use a list)"
    elif isinstance(value, bytes | bytearray):
        hint = " (decode it to str, or encode it as base64 text)"
    raise InvalidPayload(
        f"{what} holds a {cls.__name__} at {path}, which is not a JSON value{hint};"
        " payloads must be None, bool, int, finite float, str, list or dict with str keys"
    )
