"""Reading a run's stream from outside Trio: `Client.read_stream` in a plain thread and
`AsyncClient.read_stream` on asyncio and on anyio's trio backend, following a run a worker
process executes, from an offset, without following, and with every refusal raised in the
caller; a cancelled step loses nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest
import trio

from awaken_trio import (
    InvalidArgument,
    RunContext,
    StreamChunk,
    StreamGap,
    UnknownRun,
    open_runtime,
)
from awaken_trio.client import AsyncChunkIterator, AsyncClient, ChunkIterator, Client
from tests.client.client_helpers import POLL, WAIT

COUNT = 12


def values(chunks: list[StreamChunk]) -> list[object]:
    return [c.value for c in chunks]


def test_a_thread_follows_a_run_a_worker_streams_to_its_end(served_url: str) -> None:
    with Client(served_url, poll=POLL) as client:
        run_id = client.submit("streamer", input={"count": COUNT, "delay": 0.01})
        stream = client.read_stream(run_id)
        assert isinstance(stream, ChunkIterator)
        got = list(stream)
        assert values(got) == [*(f"1:{i}" for i in range(COUNT)), None]
        assert [c.offset for c in got] == list(range(1, COUNT + 2))
        assert got[-1].kind == "end"
        assert list(stream) == []  # an ended iterator stays ended
        # From an offset, and without following: what is committed, then the end.
        assert [c.offset for c in client.read_stream(run_id, after=COUNT - 1)] == [
            COUNT,
            COUNT + 1,
        ]
        assert len(list(client.read_stream(run_id, follow=False))) == COUNT + 1
        client.wait(run_id, timeout=WAIT)


def test_the_runtimes_refusals_are_raised_in_the_calling_thread(served_url: str) -> None:
    with Client(served_url, poll=POLL) as client:
        with pytest.raises(UnknownRun):
            next(client.read_stream("nobody"))
        for bad in (-1, "2", None):
            with pytest.raises(InvalidArgument, match="after must be"):
                client.read_stream("r1", after=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="a channel is"):
            client.read_stream("r1", "not a channel")
        with pytest.raises(InvalidArgument, match="follow must be a bool"):
            client.read_stream("r1", follow="yes")  # type: ignore[arg-type]
        run_id = client.submit("streamer", input={"count": 2, "channel": "scratch"})
        client.wait(run_id, timeout=WAIT)
        with pytest.raises(InvalidArgument, match="without writing stream 'output'"):
            next(client.read_stream(run_id))
        assert values(list(client.read_stream(run_id, "scratch"))) == ["1:0", "1:1", None]


def test_a_page_at_a_time_holds_nothing_in_the_trio_thread(served_url: str) -> None:
    with Client(served_url, poll=POLL) as client:
        run_id = client.submit("streamer", input={"count": 3, "delay": 0.2})
        stream = client.read_stream(run_id)
        first = next(stream)
        assert first.value == "1:0"
        assert client._thread.calls_in_flight == 0  # nothing waits while we do not ask
        del stream
        client.wait(run_id, timeout=WAIT)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_client_follows_a_stream_and_a_cancelled_step_loses_nothing(
    served_url: str, backend: str
) -> None:
    async def main() -> None:
        async with AsyncClient(served_url, poll=POLL) as client:
            run_id = await client.submit("streamer", input={"count": COUNT, "delay": 0.05})
            stream = client.read_stream(run_id)
            assert isinstance(stream, AsyncChunkIterator)
            got = [await stream.__anext__()]
            # A step cancelled while it waits for the next chunk: nothing is lost.
            with anyio.move_on_after(0.001):
                got.append(await stream.__anext__())
            got.extend([chunk async for chunk in stream])
            assert values(got) == [*(f"1:{i}" for i in range(COUNT)), None]
            with pytest.raises(UnknownRun):
                await client.read_stream("nobody").__anext__()
            with pytest.raises(InvalidArgument):
                client.read_stream(run_id, after=-3)
            await client.wait(run_id, timeout=WAIT)

    anyio.run(main, backend=backend)


def test_an_asyncio_wait_for_on_a_step_abandons_only_that_step(served_url: str) -> None:
    async def main() -> None:
        async with AsyncClient(served_url, poll=POLL) as client:
            run_id = await client.submit("streamer", input={"count": 3, "delay": 0.3})
            stream = client.read_stream(run_id)
            offsets = []
            while True:
                try:
                    chunk = await asyncio.wait_for(stream.__anext__(), 0.05)
                except TimeoutError:
                    continue
                except StopAsyncIteration:
                    break
                offsets.append(chunk.offset)
            assert offsets == [1, 2, 3, 4]

    asyncio.run(main())


def test_a_gap_is_raised_with_the_oldest_kept_offset(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"

    async def scratch(ctx: RunContext) -> object:
        out = ctx.stream(keep=False)
        out.send("a")
        out.send("b")
        return None

    async def write() -> None:
        async with open_runtime(url) as runtime:
            await runtime.execute(scratch, run_id="r1")

    trio.run(write)
    with Client(url) as client:
        with pytest.raises(StreamGap) as gap:
            next(client.read_stream("r1"))
        assert gap.value.oldest == 3
        assert [c.kind for c in client.read_stream("r1", after=2)] == ["end"]
