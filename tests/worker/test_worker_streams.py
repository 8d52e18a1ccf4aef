"""Streams across runtimes sharing one store (virtual clock): a reader in one runtime follows
a stream written in another; an attempt fenced off by an end committed elsewhere, or by a
lost claim, writes no chunk after the truth; a recovered attempt's chunks come after a
reset."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import (
    EndCause,
    JsonValue,
    RunContext,
    RunState,
    Runtime,
    StreamChunk,
)
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    Stall,
    is_ended,
    past_lease,
    reach,
    serving,
    settle,
    shared_runtime,
    until_state,
)


async def chunks_of(runtime: Runtime, run_id: str, channel: str = "output") -> list[StreamChunk]:
    return [c async for c in runtime.read_stream(run_id, channel, follow=False)]


def seen(chunks: list[StreamChunk]) -> list[tuple[int, int, str, JsonValue]]:
    return [(c.offset, c.generation, c.kind, c.value) for c in chunks]


async def test_a_reader_in_another_runtime_follows_the_stream_to_its_end(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(10):
            out.send(i)
            await trio.sleep(0.2)
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": body}) as writer,
        shared_runtime(shared_store) as reader,
    ):
        handle = await writer.start(body, run_id="r1")
        got = [c async for c in reader.read_stream("r1")]
        assert [c.value for c in got] == [*range(10), None]
        assert got[-1].kind == "end"
        assert await settle(handle) == NATURAL


async def test_an_end_committed_elsewhere_fences_the_writer_off(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        started.set()
        i = 0
        while True:
            out.send(i)
            i += 1
            await trio.sleep(0.01)

    async with (
        shared_runtime(shared_store, bodies={"w": body}) as owner,
        shared_runtime(shared_store) as other,
    ):
        await owner.start(body, run_id="r1")
        await reach(started)
        await trio.sleep(0.3)
        assert await other.cancel_run("r1") == CANCELLED
        # The owner hears of it and stops; whatever it sent meanwhile is fenced off.
        await trio.sleep(2)
        assert owner.active_attempt_run_id("r1") is None
        got = await chunks_of(other, "r1")
        assert got[-1].kind == "end"
        assert [c.offset for c in got] == list(range(1, len(got) + 1))
        assert all(c.kind == "data" for c in got[:-1])
        assert len(got) > 5


async def test_a_recovered_attempts_chunks_come_after_a_reset_and_the_lost_one_writes_none(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()
    finish = trio.Event()

    async def in_a(ctx: RunContext) -> object:
        # Goes on sending while its claim lapses: what it sends once it is fenced off is
        # dropped, and it stops.
        out = ctx.stream()
        i = 0
        while True:
            out.send(f"a-{i}")
            i += 1
            if i == 3:
                await out.flush()
                started.set()
            await trio.sleep(0.1)

    async def in_b(ctx: RunContext) -> object:
        out = ctx.stream()
        out.send(f"b-{ctx.generation}")
        await finish.wait()
        return None

    async with (
        shared_runtime(shared_store, bodies={"w": in_a}) as a,
        shared_runtime(shared_store, bodies={"w": in_b}) as b,
    ):
        await a.start(in_a, run_id="r1", name="w")
        await reach(started)
        with Stall(a):
            async with serving(b):
                await past_lease()
                await until_state(b, "r1", lambda s: s == RunState.Running(2))
                await trio.sleep(1)  # the lost attempt would have sent ten more by now
                finish.set()
                await until_state(b, "r1", is_ended)
        assert a.active_attempt_run_id("r1") is None  # the lost attempt stopped
        got = seen(await chunks_of(b, "r1"))
        reset = next(i for i, c in enumerate(got) if c[2] == "reset")
        assert got[reset:] == [
            (reset + 1, 2, "reset", None),
            (reset + 2, 2, "data", "b-2"),
            (reset + 3, 2, "end", None),
        ]
        assert [c[3] for c in got[:reset]] == [f"a-{i}" for i in range(reset)]
        assert reset >= 3


async def test_a_run_that_can_never_run_again_ends_its_stream(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()

    async def body(ctx: RunContext) -> object:
        ctx.stream().send("partial")
        await ctx.stream().flush()
        started.set()
        await trio.sleep_forever()

    async with (
        shared_runtime(shared_store, bodies={"w": body}) as a,
        shared_runtime(shared_store, bodies={"w": body}, max_recoveries=0) as b,
    ):
        await a.start(body, run_id="r1", name="w")
        await reach(started)
        with Stall(a):
            async with serving(b):
                await past_lease()
                state = await until_state(b, "r1", is_ended)
        assert state == RunState.Ended(EndCause.Indeterminate("owner lost 1 times"))
        assert seen(await chunks_of(b, "r1")) == [
            (1, 1, "data", "partial"),
            (2, 1, "end", None),
        ]
