"""check_json: JSON payloads are accepted as private copies; anything else is refused
with an error that names the payload and where in it the bad value sits."""

from __future__ import annotations

import enum
import math
import re

import pytest

from awaken_trio import FrozenDict, FrozenList, InvalidPayload
from awaken_trio._core import check_json

WHAT = "input of run 'r1'"


class Colour(enum.IntEnum):
    RED = 1


class Tag(str):
    pass


class Thing:
    pass


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**70,
        1.5,
        -0.0,
        1e308,
        "",
        "text",
        [],
        {},
        [1, "a", None, True, 2.5],
        {"a": [1, {"b": None}], "c": {"d": [[], {}]}, "": "empty key"},
    ],
)
def test_accepts_json_values_and_returns_an_equal_frozen_value(value: object) -> None:
    copy = check_json(value, WHAT)
    assert copy == value
    frozen: dict[type, type] = {dict: FrozenDict, list: FrozenList}
    assert type(copy) is frozen.get(type(value), type(value))
    hash(copy)  # frozen values hash, so states and records holding them hash too


def test_copy_is_independent_of_the_input() -> None:
    numbers = [1, 2]
    inner: dict[str, object] = {"b": numbers}
    outer_list: list[object] = [inner, 3]
    top = {"x": 1}
    original: dict[str, object] = {"a": outer_list, "top": top}
    copy = check_json(original, WHAT)
    assert copy == original
    assert copy is not original

    numbers.append(99)
    inner["new"] = True
    outer_list.append(4)
    top["x"] = 2
    original["added"] = "late"

    assert copy == {"a": [{"b": [1, 2]}, 3], "top": {"x": 1}}


def test_copy_of_a_list_is_a_new_list_at_every_level() -> None:
    original: list[object] = [[1], {"k": [2]}]
    copy = check_json(original, WHAT)
    assert isinstance(copy, list)
    assert copy is not original
    assert copy[0] is not original[0]
    assert copy[1] is not original[1]
    assert isinstance(copy[1], dict)
    assert copy[1]["k"] is not original[1]["k"]  # type: ignore[index]


def test_shared_substructure_is_copied_apart() -> None:
    shared = [1]
    copy = check_json({"a": shared, "b": shared}, WHAT)
    assert isinstance(copy, dict)
    assert copy["a"] is not copy["b"]
    shared.append(2)
    assert copy == {"a": [1], "b": [1]}


def _deep(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ((1, 2), "$", "tuple"),
        ({"a": (1,)}, "$.a", "tuple"),
        ({1, 2}, "$", "set"),
        (frozenset({1}), "$", "frozenset"),
        (b"raw", "$", "bytes"),
        (bytearray(b"raw"), "$", "bytearray"),
        (float("nan"), "$", "nan"),
        (math.inf, "$", "inf"),
        (-math.inf, "$", "-inf"),
        ({"a": [0, float("nan")]}, "$.a[1]", "nan"),
        ({"a": [0, {"b": math.inf}]}, "$.a[1].b", "inf"),
        ({1: "x"}, "$", "non-string key 1"),
        ({"a": {("t",): 1}}, "$.a", "non-string key ('t',)"),
        (Thing(), "$", "Thing"),
        ([Thing()], "$[0]", "Thing"),
        (Colour.RED, "$", "Colour"),
        ({"c": [Colour.RED]}, "$.c[0]", "Colour"),
        (Tag("x"), "$", "Tag"),
        ({"a": [1, b"x"]}, "$.a[1]", "bytes"),
    ],
)
def test_rejects_non_json_values_naming_path_and_payload(
    value: object, path: str, fragment: str
) -> None:
    with pytest.raises(InvalidPayload) as info:
        check_json(value, WHAT)
    message = str(info.value)
    assert WHAT in message
    assert fragment in message
    # The path is named as a whole token (not as a prefix of a longer path).
    assert re.search(rf"at {re.escape(path)}(?![\w.\[])", message), message


def test_rejects_int_subclass_even_when_nested_in_an_accepted_container() -> None:
    with pytest.raises(InvalidPayload, match=r"IntEnum|Colour"):
        check_json({"ok": 1, "bad": Colour.RED}, WHAT)


def test_rejection_is_an_invalid_argument_and_a_value_error() -> None:
    from awaken_trio import AwakenError, InvalidArgument

    with pytest.raises(InvalidPayload) as info:
        check_json((1,), WHAT)
    assert isinstance(info.value, InvalidArgument)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, AwakenError)


def test_accepts_moderate_nesting() -> None:
    value = _deep(150)
    assert check_json(value, WHAT) == value


def test_rejects_too_deep_nesting_naming_path() -> None:
    with pytest.raises(InvalidPayload) as info:
        check_json(_deep(400), WHAT)
    message = str(info.value)
    assert WHAT in message
    assert "deeper" in message
    assert re.search(r"at \$(\[0\])+", message), message


def test_rejects_too_deep_dict_nesting() -> None:
    value: object = 1
    for _ in range(400):
        value = {"k": value}
    with pytest.raises(InvalidPayload) as info:
        check_json(value, WHAT)
    assert WHAT in str(info.value)
    assert re.search(r"at \$(\.k)+", str(info.value))


def _items(levels: int, leaf: object) -> object:
    """``leaf`` under ``{"items": [...]}`` wrappers, two levels each."""
    value = leaf
    for _ in range(levels // 2):
        value = {"items": [value]}
    return value


@pytest.mark.parametrize(
    ("value", "depth", "last", "fragment"),
    [
        # Past the depth limit: the path of the first value too deep.
        (_items(202, "leaf"), 201, "[0].items[0].items", "deeper than 200 levels"),
        # A bad value just inside it.
        (_items(198, {"x": float("nan")}), 199, "[0].items[0].x", "nan"),
    ],
)
def test_a_deep_path_is_named_by_its_first_and_last_levels_and_its_depth(
    value: object, depth: int, last: str, fragment: str
) -> None:
    with pytest.raises(InvalidPayload) as info:
        check_json(value, WHAT)
    message = str(info.value)
    assert len(message) < 300, message
    assert fragment in message
    assert f"at $.items[0].items[0] ... {last} (depth {depth})" in message
    assert message.count(".items") < 10


def test_a_path_of_ten_levels_is_named_in_full() -> None:
    with pytest.raises(InvalidPayload) as info:
        check_json(_items(10, b"raw"), WHAT)
    assert f"at ${'.items[0]' * 5}, which" in str(info.value)


def test_what_phrase_is_used_verbatim() -> None:
    with pytest.raises(InvalidPayload) as info:
        check_json({"x": {1, 2}}, "message for run 'abc'")
    assert "message for run 'abc'" in str(info.value)
    assert "$.x" in str(info.value)
