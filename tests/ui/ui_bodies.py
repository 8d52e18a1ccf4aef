"""Bodies an ``awaken-trio worker ui_bodies`` process serves in the dashboard's tests
(imported from this directory, the worker's working directory)."""

from __future__ import annotations

import trio

from awaken_trio import JsonValue, RunContext


async def steps(ctx: RunContext) -> object:
    """Steps until a message says "finish" (or for ever), a boundary each."""
    progress = ctx.checkpoint or {"step": 0}
    while True:
        await trio.sleep(0.05)
        messages: list[JsonValue] = await ctx.boundary({"step": progress["step"] + 1})
        progress = {"step": progress["step"] + 1}
        if "finish" in messages:
            return progress


bodies: dict[str, object] = {"steps": steps}


async def talks(ctx: RunContext) -> object:
    """Streams words, a flush each: its first attempt then awaits input, and its second
    (after the resume) starts the output over, and ends."""
    out = ctx.stream()
    first = ctx.generation == 1
    for word in ("first ", "attempt ", "tokens") if first else ("second ", "attempt"):
        out.send(word)
        await out.flush()
        await trio.sleep(0.2)
    if first:
        await ctx.await_input("user_input")
    return None


bodies["talks"] = talks


async def fails(ctx: RunContext) -> object:
    """Steps until a message says "fail", then raises."""
    while True:
        await trio.sleep(0.05)
        if "fail" in await ctx.boundary():
            raise ValueError("the source document is empty")


bodies["fails"] = fails
