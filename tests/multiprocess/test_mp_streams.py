"""A stream across real processes: the worker writing it is killed (kill -9) mid-stream, and
a reader in this process sees every chunk the killed attempt committed, once, then the
reset, then the recovered attempt's chunks, then the end, and nothing after it. On an
SQLite file and on a PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from awaken_trio import Runtime, StreamChunk
from tests.multiprocess.mp_harness import (
    NATURAL,
    Cluster,
    StoreAt,
    control_runtime,
    open_cluster,
    store_url,
    until_line,
    until_said,
)

pytestmark = pytest.mark.slow

COUNT = 30


@pytest.fixture
def url(durable_at: StoreAt) -> str:
    return store_url(durable_at)


@pytest.fixture
async def control(url: str) -> AsyncIterator[Runtime]:
    async with control_runtime(url) as runtime:
        yield runtime


@pytest.fixture
async def cluster(url: str, control: Runtime) -> AsyncIterator[Cluster]:
    async with open_cluster(url) as workers:
        yield workers


async def test_a_reader_sees_the_killed_attempts_chunks_once_then_a_reset_then_the_next(
    control: Runtime, cluster: Cluster
) -> None:
    await cluster.start_many(["w1", "w2"])
    handle = await control.submit(
        "streamer", input={"count": COUNT, "delay": 0.05, "loud": True}, run_id="s"
    )
    w1, _ = await until_said(cluster, "enter", "s", "1")
    followed: list[StreamChunk] = []

    async def follow() -> None:
        followed.extend([chunk async for chunk in control.read_stream("s")])

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await until_line(w1, "sent", "s", "1", "5")
            await w1.kill()
            assert await handle.wait() == NATURAL
    # What the store holds, read again: the follower saw exactly that, once each.
    stored = [chunk async for chunk in control.read_stream("s", follow=False)]
    assert followed == stored
    assert [c.offset for c in followed] == list(range(1, len(followed) + 1))
    reset = next(i for i, c in enumerate(followed) if c.kind == "reset")
    first, second = followed[:reset], followed[reset + 1 : -1]
    # The killed attempt: every chunk it committed (at least the six it said it sent).
    assert len(first) >= 6
    assert [c.value for c in first] == [f"1:{i}" for i in range(len(first))]
    assert {c.generation for c in first} == {1}
    assert followed[reset].generation == 2
    # The recovered attempt starts over after the reset and sends all of its chunks.
    assert [c.value for c in second] == [f"2:{i}" for i in range(COUNT)]
    assert followed[-1].kind == "end"
    assert followed[-1].generation == 2
    # Nothing after the terminal commit: the end is the last chunk.
    assert [c async for c in control.read_stream("s", after=followed[-1].offset)] == []
