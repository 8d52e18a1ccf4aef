"""Reading what a person typed or sent: JSON arguments and bodies, whole numbers, and
long values quoted short in the messages that refuse them."""

from __future__ import annotations

import json
import sys
from typing import Final

from .. import JsonValue
from .failures import bad_input


def parse_json(text: str, what: str) -> JsonValue:
    """A JSON argument (``--input``, ``--value``, a message, a control's body), or bad
    input (exit 2, or 400) naming the problem; never Python's own error for text past its
    limits (a number of thousands of digits, nesting past the recursion limit)."""

    def refuse_constant(name: str) -> object:
        raise ValueError(f"{name} is not a JSON value")

    try:
        value: JsonValue = json.loads(text, parse_constant=refuse_constant)
    except RecursionError:
        raise bad_input(
            f"{what} is nested too deeply to read (more levels than this interpreter's"
            f" recursion limit of {sys.getrecursionlimit()}): send a value nested less deeply",
            "malformed_json",
        ) from None
    except ValueError as exc:
        raise bad_input(
            f"{what} is not valid JSON ({exc}): give a JSON value, e.g. '{{\"q\": 1}}',"
            " '\"text\"' or '3'",
            "malformed_json",
        ) from None
    return value


SHOWN_CHARACTERS: Final = 24
"""How much of a long value a message quotes."""


def shorten(text: str) -> str:
    """``text`` quoted for a message, its start alone when it is long (a value of
    thousands of characters is named, not echoed)."""
    if len(text) <= SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[:SHOWN_CHARACTERS]!r}... ({len(text)} characters)"


def whole_number(text: str, *, low: int, high: int) -> int | None:
    """``text`` as a whole number from ``low`` to ``high`` (ASCII digits, leading zeros
    allowed), else None. A number too long to be in range is refused by its length, so
    Python's limit on digits converted (4,300) is never reached."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(high)):
        return None
    number = int(digits)
    return number if low <= number <= high else None
