"""Input past Python's own limits is bad input like any other (DESIGN §3.3: exit 2, one
line on stderr; with ``--json`` the error object on stdout), never 70 "internal error": a
number of thousands of digits (``int`` refuses more than 4,300) and JSON nested deeper than
the interpreter's recursion limit."""

from __future__ import annotations

import sys
from typing import Final

import pytest

from tests.cli.cli_helpers import HERE, cli

HUGE: Final = "9" * 5000
DEEP: Final = "[" * (sys.getrecursionlimit() + 100) + "]" * (sys.getrecursionlimit() + 100)

CASES: Final = [
    (["runs", "prune", "--ended-before", f"{HUGE}d"], "--ended-before"),
    (["runs", "prune", "--ended-before", f"1{'0' * 4999}s"], "--ended-before"),
    (["runs", "list", "--limit", HUGE], "--limit"),
    (["runs", "events", "--after", HUGE], "--after"),
    (["runs", "watch", "--limit", HUGE], "--limit"),
    (["runs", "fork", "x", "--at", HUGE], "--at"),
    (["runs", "message", "x", DEEP], "nested too deeply"),
    (["runs", "submit", "job", "--input", DEEP], "nested too deeply"),
    (["runs", "resume", "x", "--value", DEEP], "nested too deeply"),
    (["runs", "message", "x", HUGE], "not valid JSON"),
]


@pytest.mark.parametrize(("args", "says"), CASES)
async def test_input_past_pythons_limits_exits_2_with_one_short_line(
    store: str, args: list[str], says: str
) -> None:
    done = await cli(*args, "--store", store)
    assert done.code == 2, done.stderr[:500]
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert says in line
    assert line.startswith("awaken-trio: ")
    assert len(line) < 300  # the value is named, not echoed whole
    as_json = await cli(*args, "--store", store, "--json")
    assert as_json.code == 2, as_json.stderr[:500]
    assert as_json.stderr == ""
    error = as_json.json()
    assert set(error) == {"error", "message", "state"}
    assert says in error["message"]
    assert error["state"] is None


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", HUGE],
        ["--lease", HUGE],
        ["--poll", f"0.{HUGE}"],
    ],
)
async def test_a_worker_option_of_thousands_of_digits_exits_2_with_one_short_line(
    store: str, args: list[str]
) -> None:
    done = await cli("worker", "cli_bodies", "--store", store, *args, cwd=HERE)
    assert done.code == 2, done.stderr[:500]
    [line] = done.stderr.splitlines()
    assert args[0] in line
    assert len(line) < 300


async def test_a_usage_error_is_one_line_naming_the_commands_help(store: str) -> None:
    done = await cli("runs", "cancel", "--store", store)
    assert done.code == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("awaken-trio: usage_error: ")
    assert "awaken-trio runs cancel --help" in line
    as_json = await cli("runs", "list", "--limit", "0", "--store", store, "--json")
    assert as_json.code == 2
    assert as_json.json()["error"] == "bad_input"
    assert "--limit" in as_json.json()["message"]


async def test_a_group_given_no_command_prints_its_help() -> None:
    done = await cli("runs")
    assert done.code == 2
    assert "Commands:" in done.stderr
    assert "submit" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "list"],
        ["runs", "show", "x"],
        ["runs", "submit", "job"],
        ["runs", "cancel", "x"],
        ["runs", "resume", "x", "--value", "1"],
        ["worker", "cli_bodies"],
        ["ui", "--port", "0"],
    ],
)
async def test_a_memory_store_is_refused_where_it_would_hold_nothing(args: list[str]) -> None:
    """A memory store lives inside one process: a command that reads, steers or serves
    runs would open a new, empty one (exit 2, saying so), where the user meant another."""
    for url in ("memory://", "sqlite:///:memory:") if args == ["runs", "list"] else ("memory://",):
        done = await cli(*args, "--store", url, cwd=HERE)
        assert done.code == 2, (done.stdout, done.stderr)
        [line] = done.stderr.splitlines()
        assert "memory" in line
        if url == "memory://":
            assert "sqlite:///runs.db" in line  # what to give instead
