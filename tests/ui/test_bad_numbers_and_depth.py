"""Input past Python's own limits is bad input like any other (DESIGN §3.6: 400 with the
error object), never a 500: a number of thousands of digits (``int`` refuses more than
4,300) and JSON nested deeper than the interpreter's recursion limit."""

from __future__ import annotations

import sys
from typing import Final

import pytest

from tests.ui.ui_helpers import api, dashboard, settle, waits

pytestmark = pytest.mark.usefixtures("autojump_clock")

HUGE: Final = "9" * 5000
DEEP: Final = sys.getrecursionlimit() + 100
"""Levels of JSON nesting past the interpreter's recursion limit."""


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/api/runs", "limit"),
        ("/ui/table", "limit"),
        ("/", "limit"),
        (api("w", "events"), "after"),
        (api("w", "events"), "limit"),
    ],
)
@pytest.mark.parametrize("value", [HUGE, "1" + "0" * 4999, f"-{HUGE}", "١٢"])
async def test_a_number_of_thousands_of_digits_is_400_naming_the_parameter(
    path: str, key: str, value: str
) -> None:
    async with dashboard() as d:
        await d.runtime.submit("steps", run_id="w")
        answer = await d.http.get(path, params={key: value})
        assert answer.status_code == 400, answer.text[:300]
        if path == "/":
            assert key in answer.text
            return
        error = answer.json()
        assert error["error"] == "bad_input"
        assert key in error["message"]
        assert error["state"] is None
        assert len(error["message"]) < 200  # the number is not echoed whole


async def test_a_number_padded_with_thousands_of_zeros_is_the_number() -> None:
    async with dashboard() as d:
        for n in range(3):
            await d.runtime.submit("steps", run_id=f"r{n}")
        answer = await d.http.get("/api/runs", params={"limit": "0" * 5000 + "2"})
        assert answer.status_code == 200, answer.text[:300]
        assert [row["run_id"] for row in answer.json()] == ["r2", "r1"]


def nested_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_object(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("control", "body"),
    [
        ("message", f'{{"payload": {nested_list(DEEP)}}}'),
        ("message", f'{{"payload": {nested_object(DEEP)}}}'),
        ("resume", f'{{"value": {nested_list(DEEP)}}}'),
        ("cancel", nested_object(DEEP)),
    ],
)
async def test_a_body_nested_past_the_recursion_limit_is_400_and_changes_nothing(
    control: str, body: str
) -> None:
    async with dashboard() as d:
        await d.runtime.start(waits, run_id="w", name="waits")
        await settle(d.runtime, "w", "running")
        before = [e async for e in d.runtime.events("w", follow=False)]
        answer = await d.http.post(
            api("w", control), content=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 400, answer.text[:300]
        error = answer.json()
        assert error["error"] == "malformed_json"
        assert "nested" in error["message"]
        assert error["state"] is None
        assert [e async for e in d.runtime.events("w", follow=False)] == before
