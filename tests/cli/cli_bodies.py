"""Bodies a ``worker`` process serves in the command line's tests (imported from the
working directory, as ``awaken-trio worker cli_bodies`` does)."""

from __future__ import annotations

from pathlib import Path

import trio

from awaken_trio import JsonValue, RunContext, RunError, VersionedBody
from awaken_trio._core import Body


async def steps(ctx: RunContext) -> object:
    """Counts steps for ever, a boundary each; keeps the messages it is sent; ends when a
    message says ``"finish"``."""
    progress = ctx.checkpoint or {"step": 0, "messages": []}
    while True:
        await trio.sleep(0.02)
        messages: list[JsonValue] = await ctx.boundary(
            {"step": progress["step"] + 1, "messages": progress["messages"]}
        )
        progress = {"step": progress["step"] + 1, "messages": [*progress["messages"], *messages]}
        if "finish" in messages:
            return {"messages": progress["messages"]}


async def asks(ctx: RunContext) -> object:
    """Awaits a string from the user, then ends with it."""
    if ctx.resumed_ticket is None:
        await ctx.await_input("user_input", accepts={"type": "string"})
    return {"answer": ctx.resume_value}


async def waits(ctx: RunContext) -> object:
    """Waits at a boundary until woken, then ends with the reason it saw."""
    await ctx.boundary(wait=True)
    return {"woken": True}


bodies: dict[str, object] = {"steps": steps, "asks": asks, "waits": waits}


def make_bodies() -> dict[str, object]:
    return dict(bodies)


not_a_mapping = 42


async def stubborn(ctx: RunContext) -> object:
    """When cancelled, takes its time to unwind (a shielded cleanup), so a worker that
    leaves drains for long."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(60)


bodies["stubborn"] = stubborn


async def fails(ctx: RunContext) -> object:
    """Fails at once, its error naming a URL with a password (which no log may show)."""
    raise ValueError("cannot reach postgresql://bob:s3cret-pw@db.example/app")


bodies["fails"] = fails


async def chat(ctx: RunContext) -> object:
    """Answers one chat message (input: ``{"log": path, "slow": bool}``), writing to the log
    when its attempt starts and when it has stopped, so a test can see that two attempts
    of one thread never overlapped."""
    assert isinstance(ctx.input, dict)
    log = Path(str(ctx.input["log"]))
    _note(log, f"start {ctx.run_id}")
    try:
        if ctx.input.get("slow"):
            await trio.sleep_forever()
        return {"answered": ctx.run_id}
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.3)  # a model call's cleanup
        _note(log, f"stop {ctx.run_id}")


def _note(log: Path, line: str) -> None:
    with log.open("a") as file:
        file.write(f"{line}\n")


bodies["chat"] = chat


def _versioned(version: str) -> Body:
    async def ask_twice(ctx: RunContext) -> object:
        """Awaits one answer, then ends saying which version of the body ran each
        attempt."""
        seen = [*(ctx.checkpoint or {"ran": []})["ran"], version]
        await ctx.boundary({"ran": seen})
        if ctx.resumed_ticket is None:
            await ctx.await_input("user_input")
        return {"ran": seen}

    return ask_twice


versioned_v1 = {"versioned": VersionedBody(_versioned("1"), version="1")}
versioned_v2 = {"versioned": VersionedBody(_versioned("2"), version="2")}


async def flaky(ctx: RunContext) -> object:
    """Fails its first ``input["fail"]`` tries (code ``flaky``), counting them in its
    checkpoint (each retry starts from it), then ends with the count."""
    assert isinstance(ctx.input, dict)
    tries = int((ctx.checkpoint or {"tries": 0})["tries"]) + 1
    await ctx.boundary({"tries": tries})
    if tries <= int(ctx.input["fail"]):
        raise RunError("flaky", f"try {tries} failed")
    return {"tries": tries}


bodies["flaky"] = flaky
