"""Every refusal the command line prints speaks its own words (``runs cancel ID``), never
the Python API's (``runtime.state(...)``, ``cancel_run``, ``RunState.Queued()``,
``body=``), and still names the run, why, and what to do next."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio

from awaken_trio import RunContext, RunState, Runtime, open_runtime
from tests.cli.cli_helpers import cli

pytestmark = pytest.mark.slow  # a process per command

API_WORDS: Final = re.compile(
    r"\bruntime\b|cancel_run|stop_run|RunState|EndCause|\w+\(\)|\b(body|at)=|"
    r"\brun_id\b|\bcorrelation_id\b|\bresume\(|\bstate\("
)


async def asks(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input", accepts={"type": "string"})
    return ctx.resume_value


async def asks_briefly(ctx: RunContext) -> object:
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input", deadline=time.time() + 0.05)
    return ctx.resume_value


async def parent(ctx: RunContext) -> object:
    await ctx.start_child(asks, run_id="child")
    await trio.sleep_forever()


@asynccontextmanager
async def program(store: str) -> AsyncIterator[Runtime]:
    """A program of the user's own on the same store, its bodies given by name."""
    bodies = {"asks": asks, "parent": parent}
    async with open_runtime(store, bodies=bodies) as runtime:
        yield runtime


async def test_refusals_speak_the_command_lines_words(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/words.db"

    async def refused(code: int, error: str, *args: str) -> str:
        """The refusal's message (``--json``), and for some its line of text too (the
        same message, with the run's committed state)."""
        as_json = await cli("runs", *args, "--store", store, "--json")
        assert as_json.code == code, (args, as_json.stdout, as_json.stderr)
        assert as_json.json()["error"] == error, args
        message: str = as_json.json()["message"]
        assert not API_WORDS.search(message), (args, message)
        if error in ("not_active", "ticket_expired", "invalid_argument"):
            text = await cli("runs", *args, "--store", store)
            assert text.code == code
            [line] = text.stderr.splitlines()
            assert message in line
        return message

    assert (await cli("runs", "submit", "job", "--run-id", "q", "--store", store)).code == 0
    assert (await cli("runs", "submit", "job", "--run-id", "e", "--store", store)).code == 0
    assert (await cli("runs", "cancel", "e", "--store", store)).code == 0
    async with program(store) as runtime:
        await runtime.execute(asks, run_id="a")  # awaiting, by name
        await runtime.execute(asks_briefly, run_id="x")  # awaiting, its ticket soon expired
        await runtime.start(parent, run_id="p")
        async for event in runtime.events():  # (the child, once it awaits)
            if event.run_id == "child" and isinstance(event.state, RunState.Awaiting):
                break

        async def no_name(ctx: RunContext) -> object:
            await ctx.await_input("user_input")

        await runtime.execute(no_name, run_id="n")  # awaiting, its body given by value
        await trio.sleep(0.1)  # (x's deadline passes)

        assert "runs show q" in await refused(1, "not_awaiting", "resume", "q")
        assert "already ended" in await refused(1, "run_already_ended", "cancel", "e")
        assert "already ended" in await refused(1, "not_active", "pause", "e")
        assert "never resumed" in await refused(1, "not_awaiting", "resume", "e")
        assert "not in this store" in await refused(1, "not_active", "pause", "nobody")
        assert "runs list" in await refused(1, "unknown_run", "show", "nobody")
        assert "--run-id" in await refused(1, "run_exists", "submit", "other", "--run-id", "q")
        assert "--run-id" in await refused(1, "run_exists", "fork", "q", "--run-id", "e")
        assert "runs events q" in await refused(2, "invalid_argument", "fork", "q", "--at", "99")
        assert "no body name" in await refused(2, "invalid_argument", "fork", "n")
        mismatch = await refused(
            1, "ticket_mismatch", "resume", "a", "--correlation-id", "other", "--value", '"v"'
        )
        assert "--correlation-id" in mismatch
        assert "runs cancel x" in await refused(1, "ticket_expired", "resume", "x")
        assert "no body name" in await refused(2, "invalid_argument", "resume", "n")
        assert "child of run 'p'" in await refused(
            2, "invalid_argument", "resume", "child", "--value", '"v"'
        )
        assert "schema" in await refused(1, "invalid_payload", "resume", "a", "--value", "3")
