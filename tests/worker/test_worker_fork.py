"""`fork` from a runtime without the body: the fork waits ``Queued`` and a serving runtime
that has the body runs it from the source's checkpoint."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import JsonValue, RunContext, RunState
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import NATURAL, history, serving, settle, shared_runtime


async def count(ctx: RunContext) -> JsonValue:
    start = ctx.checkpoint if isinstance(ctx.checkpoint, int) else 0
    n = start
    while n < 3:
        n += 1
        await ctx.boundary(n)
    return {"from": start, "to": n, "input": ctx.input}


async def test_a_fork_made_without_the_body_is_queued_and_served_by_a_worker_with_it(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        shared_runtime(shared_store) as client,
        shared_runtime(shared_store, bodies={"count": count}) as worker,
    ):
        async with serving(worker):
            source = await client.submit("count", input={"k": 1}, run_id="src")
            assert await settle(source) == NATURAL
        progress = [
            e.seq
            for e in await history(client, "src")
            if e.kind == "committed" and e.detail.get("source") == "boundary"
        ]
        fork = await client.fork("src", at=progress[0], new_run_id="f")
        record = await client.record("f")
        assert record.state == RunState.Queued()
        assert record.forked_from == {"run_id": "src", "seq": progress[0]}
        assert record.checkpoint == 1
        async with serving(worker):
            assert await settle(fork) == NATURAL
        assert (await client.record("f")).result == {"from": 1, "to": 3, "input": {"k": 1}}
