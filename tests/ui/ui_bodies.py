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
