"""Streams on one runtime (DESIGN §3.9): what a body sends with ``ctx.stream(channel)`` is
written with the attempt's commits and read back by offset; resets between attempts, the
end chunk, channels not kept, and every refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import pytest
import trio
import trio.lowlevel
import trio.testing

from awaken_trio import (
    ContextMisuse,
    EndCause,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    LiveCommand,
    RunContext,
    RunState,
    Runtime,
    StoreError,
    StreamChunk,
    StreamGap,
    StreamReader,
    StreamWriter,
    UnknownRun,
    open_runtime,
)
from awaken_trio._core._streams import FLUSH_INTERVAL, PAGE, SEGMENT_CHUNKS
from awaken_trio.store import Commit, CommitResult, MemoryStore, StreamPage
from tests.run_helpers import reach, settle
from tests.wrapped_stores import WrappedStore

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


async def chunks_of(
    runtime: Runtime, run_id: str, channel: str = "output", after: int = 0
) -> list[StreamChunk]:
    """What the store holds of the channel now (no following)."""
    return [c async for c in runtime.read_stream(run_id, channel, after=after, follow=False)]


def seen(chunks: Sequence[StreamChunk]) -> list[tuple[int, int, str, JsonValue]]:
    return [(c.offset, c.generation, c.kind, c.value) for c in chunks]


def values(chunks: Sequence[StreamChunk]) -> list[JsonValue]:
    return [c.value for c in chunks if c.kind == "data"]


# --------------------------------------------------------------------------- writing


async def test_a_bodys_chunks_are_read_in_offset_order_then_the_end(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for word in ("The", " answer", " is", " 42"):
            out.send(word)
            await trio.sleep(0.01)
        ctx.stream("agent.tokens").send({"token": 1})
        return "done"

    handle = await runtime.start(body)
    got = [chunk async for chunk in runtime.read_stream(handle.run_id)]
    assert seen(got) == [
        (1, 1, "data", "The"),
        (2, 1, "data", " answer"),
        (3, 1, "data", " is"),
        (4, 1, "data", " 42"),
        (5, 1, "end", None),
    ]
    assert await settle(handle) == NATURAL_END
    tokens = await chunks_of(runtime, handle.run_id, "agent.tokens")
    assert seen(tokens) == [(1, 1, "data", {"token": 1}), (2, 1, "end", None)]
    # The end chunk is dated as the terminal event.
    (last,) = [e async for e in runtime.events(handle.run_id, follow=False)][-1:]
    assert got[-1].at == last.at


async def test_send_waits_for_nothing_and_chunks_land_within_the_flush_interval(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    sent = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        before = trio.current_time()
        for i in range(3):
            out.send(i)  # sync: no await, no time passes
        assert trio.current_time() == before
        sent.set()
        await release.wait()
        return None

    handle = await runtime.start(body)
    await reach(sent)
    sent_at = trio.current_time()
    assert await chunks_of(runtime, handle.run_id) == []  # buffered, not committed yet
    await trio.sleep(FLUSH_INTERVAL * 0.9)
    assert await chunks_of(runtime, handle.run_id) == []
    await trio.sleep(FLUSH_INTERVAL * 0.2)
    assert trio.current_time() - sent_at <= FLUSH_INTERVAL * 1.1 + 1e-9
    assert values(await chunks_of(runtime, handle.run_id)) == [0, 1, 2]
    release.set()
    await settle(handle)


async def test_a_stream_that_keeps_sending_is_written_every_flush_interval(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    """While chunks keep coming, none waits longer than the flush interval."""
    landed: dict[int, float] = {}
    sent: dict[int, float] = {}

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(40):
            sent[i] = trio.current_time()
            out.send(i)
            await trio.sleep(0.01)
        return None

    handle = await runtime.start(body)
    async for chunk in runtime.read_stream(handle.run_id):
        if chunk.kind == "data":
            assert isinstance(chunk.value, int)
            landed[chunk.value] = trio.current_time()
    assert sorted(landed) == list(range(40))
    assert max(landed[i] - sent[i] for i in range(40)) <= FLUSH_INTERVAL + 1e-9


async def test_flush_returns_once_every_chunk_sent_is_committed(runtime: Runtime) -> None:
    counts: list[int] = []

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(3):
            out.send(i)
        counts.append(len(await chunks_of(runtime, ctx.run_id)))
        await out.flush()
        counts.append(len(await chunks_of(runtime, ctx.run_id)))
        await out.flush()  # nothing waits: a checkpoint, no commit
        return None

    assert await runtime.execute(body) == NATURAL_END
    assert counts == [0, 3]


async def test_what_a_writer_holds_is_written_with_the_attempts_end(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        ctx.stream().send("only")
        return "done"  # no checkpoint after the send: the end commit takes it

    handle = await runtime.start(body)
    assert await settle(handle) == NATURAL_END
    assert seen(await chunks_of(runtime, handle.run_id)) == [
        (1, 1, "data", "only"),
        (2, 1, "end", None),
    ]


async def test_a_failed_or_cancelled_run_ends_its_streams_too(runtime: Runtime) -> None:
    async def fails(ctx: RunContext) -> object:
        ctx.stream().send("partial")
        raise ValueError("boom")

    failed = await runtime.start(fails)
    await settle(failed)
    assert seen(await chunks_of(runtime, failed.run_id)) == [
        (1, 1, "data", "partial"),
        (2, 1, "end", None),
    ]

    sent = trio.Event()

    async def hangs(ctx: RunContext) -> object:
        ctx.stream().send("partial")
        sent.set()
        await trio.sleep_forever()

    hung = await runtime.start(hangs)
    await reach(sent)
    assert await runtime.cancel_run(hung.run_id) == CANCELLED
    assert seen(await chunks_of(runtime, hung.run_id)) == [
        (1, 1, "data", "partial"),
        (2, 1, "end", None),
    ]


async def test_a_later_attempt_starts_its_output_after_a_reset(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        if ctx.generation == 1:
            out.send("draft one")
            out.send("draft two")
            await ctx.await_input("user_input")
        out.send("final")
        return None

    handle = await runtime.start(body)
    assert isinstance(await settle(handle), RunState.Awaiting)
    assert seen(await chunks_of(runtime, handle.run_id)) == [
        (1, 1, "data", "draft one"),
        (2, 1, "data", "draft two"),
    ]
    resumed = await runtime.resume(handle.run_id, "go")
    assert await settle(resumed) == NATURAL_END
    assert seen(await chunks_of(runtime, handle.run_id)) == [
        (1, 1, "data", "draft one"),
        (2, 1, "data", "draft two"),
        (3, 2, "reset", None),
        (4, 2, "data", "final"),
        (5, 2, "end", None),
    ]
    # Read from an offset of the first attempt, a reader goes on across the reset.
    assert seen(await chunks_of(runtime, handle.run_id, after=2))[0] == (3, 2, "reset", None)


async def test_tasks_of_the_body_share_its_writer(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        async def send(tag: str) -> None:
            out = ctx.stream()
            for i in range(50):
                out.send(f"{tag}{i}")
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "a")
            nursery.start_soon(send, "b")
        return None

    handle = await runtime.start(body)
    await settle(handle)
    got = await chunks_of(runtime, handle.run_id)
    assert [c.offset for c in got] == list(range(1, 102))
    assert sorted(values(got)) == sorted(
        [f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)]
    )
    a = [v for v in values(got) if str(v).startswith("a")]
    assert a == [f"a{i}" for i in range(50)]  # each task's chunks in the order it sent them


async def test_many_chunks_at_once_keep_contiguous_offsets(runtime: Runtime) -> None:
    count = SEGMENT_CHUNKS * 2 + 17

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(count):
            out.send(i)
        await out.flush()
        out.send("x" * 1000)
        return None

    handle = await runtime.start(body)
    await settle(handle)
    got = await chunks_of(runtime, handle.run_id)
    assert [c.offset for c in got] == list(range(1, count + 3))
    assert values(got)[:count] == list(range(count))
    middle = await chunks_of(runtime, handle.run_id, after=SEGMENT_CHUNKS + 5)
    assert middle[0].offset == SEGMENT_CHUNKS + 6
    assert middle[0].value == SEGMENT_CHUNKS + 5


async def test_a_child_streams_on_its_own_and_its_stream_ends_with_its_parent(
    runtime: Runtime,
) -> None:
    sent = trio.Event()

    async def child(ctx: RunContext) -> object:
        ctx.stream().send("child says")
        await ctx.stream().flush()
        sent.set()
        await trio.sleep_forever()

    async def parent(ctx: RunContext) -> object:
        ctx.stream().send("parent says")
        await ctx.start_child(child, run_id="kid")
        await trio.sleep_forever()

    handle = await runtime.start(parent)
    await reach(sent)
    await runtime.cancel_run(handle.run_id)
    assert seen(await chunks_of(runtime, "kid")) == [
        (1, 1, "data", "child says"),
        (2, 1, "end", None),
    ]
    assert values(await chunks_of(runtime, handle.run_id)) == ["parent says"]


async def test_runtime_shutdown_writes_what_writers_hold_with_the_stopped_end() -> None:
    store = MemoryStore()
    sent = trio.Event()

    async def body(ctx: RunContext) -> object:
        ctx.stream().send("before shutdown")
        sent.set()
        await trio.sleep_forever()

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body)
        await reach(sent)
    async with open_runtime(store) as again:
        assert seen(await chunks_of(again, handle.run_id)) == [
            (1, 1, "data", "before shutdown"),
            (2, 1, "end", None),
        ]


# --------------------------------------------------------------------------- bad input


async def test_a_chunk_that_is_not_json_or_too_big_is_refused_at_send() -> None:
    refused: list[str] = []

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for bad in ({1, 2}, float("nan"), ("a", "tuple"), {"k": object()}, "x" * 200):
            try:
                out.send(bad)
            except InvalidPayload as exc:
                refused.append(str(exc))
        out.send("fits")
        return None

    async with open_runtime(max_payload_bytes=100) as runtime:
        handle = await runtime.start(body, run_id="r1")
        await settle(handle)
        assert seen(await chunks_of(runtime, "r1")) == [(1, 1, "data", "fits"), (2, 1, "end", None)]
    assert len(refused) == 5
    assert all("chunk of stream 'output' of run 'r1'" in text for text in refused)
    assert "100" in refused[-1]  # the limit is named


async def test_send_or_flush_after_the_attempt_ended_says_the_writer_is_closed(
    runtime: Runtime,
) -> None:
    kept: list[StreamWriter] = []

    async def body(ctx: RunContext) -> object:
        out = ctx.stream("output")
        out.send("in time")
        kept.append(out)
        assert not out.closed
        return None

    handle = await runtime.start(body, run_id="r1")
    await settle(handle)
    (writer,) = kept
    assert writer.closed
    assert writer.channel == "output"
    assert writer.keep is True
    with pytest.raises(ContextMisuse, match="the writer is closed") as raised:
        writer.send("too late")
    assert "run 'r1'" in str(raised.value)
    assert "'output'" in str(raised.value)
    assert isinstance(raised.value, RuntimeError)
    with pytest.raises(ContextMisuse, match="the writer is closed"):
        await writer.flush()
    assert values(await chunks_of(runtime, "r1")) == ["in time"]
    assert "closed" in repr(writer)


async def test_one_writer_per_channel_per_attempt_and_channels_are_checked(
    runtime: Runtime,
) -> None:
    errors: list[str] = []

    async def body(ctx: RunContext) -> object:
        first = ctx.stream("output")
        assert ctx.stream("output") is first
        assert ctx.stream() is first
        assert ctx.stream("other") is not first
        scratch = ctx.stream("scratch", keep=False)
        assert scratch.keep is False
        calls: list[Callable[[], object]] = [
            lambda: ctx.stream("scratch"),  # open with the other keep
            lambda: ctx.stream(""),
            lambda: ctx.stream("has space"),
            lambda: ctx.stream("a/b"),
            lambda: ctx.stream("x" * 129),
            lambda: ctx.stream(7),  # type: ignore[arg-type]
            lambda: ctx.stream("ok", keep="yes"),  # type: ignore[arg-type]
        ]
        for call in calls:
            try:
                call()
            except InvalidArgument as exc:
                errors.append(str(exc))
        return None

    await runtime.execute(body)
    assert len(errors) == 7
    assert "keep=False" in errors[0]
    assert all("stream() of run" in text for text in errors)


async def test_stream_from_another_runs_task_is_refused(runtime: Runtime) -> None:
    contexts: list[RunContext] = []
    parked = trio.Event()

    async def first(ctx: RunContext) -> object:
        contexts.append(ctx)
        parked.set()
        await trio.sleep_forever()

    handle = await runtime.start(first)
    await reach(parked)
    with pytest.raises(ContextMisuse):
        contexts[0].stream()
    await runtime.cancel_run(handle.run_id)


async def test_read_stream_refuses_bad_arguments_at_the_call(runtime: Runtime) -> None:
    for bad_after in (-1, 1.5, "3", None, True):
        with pytest.raises(InvalidArgument, match="after must be"):
            runtime.read_stream("r1", after=bad_after)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="a channel is"):
        runtime.read_stream("r1", "no/slash")
    with pytest.raises(InvalidArgument, match="follow must be a bool"):
        runtime.read_stream("r1", follow=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        runtime.read_stream("")


async def test_read_stream_of_an_unknown_run_raises_unknown_run(runtime: Runtime) -> None:
    reader = runtime.read_stream("ghost")
    assert isinstance(reader, StreamReader)
    with pytest.raises(UnknownRun, match="ghost"):
        await reader.__anext__()
    with pytest.raises(UnknownRun):
        await chunks_of(runtime, "ghost")


async def test_an_ended_run_that_never_wrote_the_channel_is_named(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        ctx.stream("output").send("x")
        return None

    handle = await runtime.start(body, run_id="r1")
    await settle(handle)
    with pytest.raises(InvalidArgument, match="has ended without writing stream 'outptu'"):
        await chunks_of(runtime, "r1", "outptu")
    with pytest.raises(InvalidArgument, match="without writing"):
        async for _ in runtime.read_stream("r1", "outptu"):
            pass


async def test_a_follower_waits_for_a_channel_not_written_yet(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    go = trio.Event()

    async def body(ctx: RunContext) -> object:
        await go.wait()
        ctx.stream("late").send("at last")
        return None

    handle = await runtime.start(body)
    got: list[StreamChunk] = []

    async def follow() -> None:
        got.extend([chunk async for chunk in runtime.read_stream(handle.run_id, "late")])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.sleep(5)
        assert got == []
        go.set()
    assert seen(got) == [(1, 1, "data", "at last"), (2, 1, "end", None)]


async def test_without_follow_a_reader_gives_what_is_committed_now(runtime: Runtime) -> None:
    flushed = trio.Event()
    release = trio.Event()

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        out.send("a")
        out.send("b")
        await out.flush()
        flushed.set()
        await release.wait()
        return None

    handle = await runtime.start(body)
    await reach(flushed)
    assert values(await chunks_of(runtime, handle.run_id)) == ["a", "b"]
    assert values(await chunks_of(runtime, handle.run_id, after=1)) == ["b"]
    assert await chunks_of(runtime, handle.run_id, after=2) == []
    assert await chunks_of(runtime, handle.run_id, "not.yet") == []  # it may come
    release.set()
    await settle(handle)


async def test_a_follower_sees_a_chunk_in_the_step_its_commit_lands(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    flushed_at: list[float] = []

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(5):
            await trio.sleep(1)
            out.send(i)
            await out.flush()
            flushed_at.append(trio.current_time())
        return None

    handle = await runtime.start(body)
    times = [
        (chunk.value, trio.current_time())
        async for chunk in runtime.read_stream(handle.run_id)
        if chunk.kind == "data"
    ]
    assert [t for _, t in times] == flushed_at  # no virtual time between flush and read


async def test_a_channel_not_kept_keeps_only_its_end_and_a_reader_behind_gets_a_gap(
    runtime: Runtime,
) -> None:
    async def body(ctx: RunContext) -> object:
        scratch = ctx.stream("scratch", keep=False)
        for i in range(5):
            scratch.send(i)
        ctx.stream("kept").send("k")
        return None

    handle = await runtime.start(body, run_id="r1")
    await settle(handle)
    with pytest.raises(StreamGap) as raised:
        await chunks_of(runtime, "r1", "scratch")
    gap = raised.value
    assert (gap.run_id, gap.channel, gap.after, gap.oldest) == ("r1", "scratch", 0, 6)
    assert "read it from after=5" in str(gap)
    with pytest.raises(StreamGap):
        await chunks_of(runtime, "r1", "scratch", after=3)
    assert seen(await chunks_of(runtime, "r1", "scratch", after=gap.oldest - 1)) == [
        (6, 1, "end", None)
    ]
    assert values(await chunks_of(runtime, "r1", "kept")) == ["k"]


async def test_a_follower_that_kept_up_with_a_channel_not_kept_sees_its_end(
    runtime: Runtime,
) -> None:
    async def body(ctx: RunContext) -> object:
        scratch = ctx.stream("scratch", keep=False)
        scratch.send("a")
        await scratch.flush()
        await trio.sleep(0.1)
        return None

    handle = await runtime.start(body)
    got = [c async for c in runtime.read_stream(handle.run_id, "scratch")]
    assert seen(got) == [(1, 1, "data", "a"), (2, 1, "end", None)]


async def test_prune_deletes_a_runs_stream_with_it() -> None:
    now = [1000.0]
    async with open_runtime(clock=lambda: now[0]) as runtime:

        async def body(ctx: RunContext) -> object:
            ctx.stream().send("x")
            return None

        handle = await runtime.start(body, run_id="r1")
        await settle(handle)
        now[0] += 100
        assert await runtime.prune(ended_before=10) == 1
        with pytest.raises(UnknownRun):
            await chunks_of(runtime, "r1")


async def test_a_memory_store_forgets_a_stream_with_its_run() -> None:
    async with open_runtime(MemoryStore(max_ended_runs=1)) as runtime:

        async def body(ctx: RunContext) -> object:
            ctx.stream().send(ctx.run_id)
            return None

        await runtime.execute(body, run_id="old")
        await runtime.execute(body, run_id="new")
        with pytest.raises(UnknownRun):
            await chunks_of(runtime, "old")
        assert values(await chunks_of(runtime, "new")) == ["new"]


# --------------------------------------------------------------------------- readers


async def test_two_readers_each_read_every_chunk(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(30):
            out.send(i)
            await trio.sleep(0.002)
        return None

    handle = await runtime.start(body)
    results: list[list[JsonValue]] = []

    async def read() -> None:
        results.append([c.value async for c in runtime.read_stream(handle.run_id)])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(read)
    assert results == [[*range(30), None]] * 2


async def test_a_reader_that_falls_behind_holds_one_page_and_never_slows_the_writer(
    runtime: Runtime,
) -> None:
    count = PAGE * 5

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(count):
            out.send(i)
            if i % 100 == 0:
                await trio.lowlevel.checkpoint()
        return None

    handle = await runtime.start(body)
    reader = runtime.read_stream(handle.run_id)
    first = await reader.__anext__()
    assert first.offset == 1
    # The reader stops reading; the run goes on to its end regardless.
    assert await settle(handle) == NATURAL_END
    assert len(reader._buffer) < PAGE  # (one page, of which one chunk was taken)
    rest = [chunk async for chunk in reader]
    assert [c.offset for c in rest] == list(range(2, count + 2))


async def test_breaking_out_of_a_reader_leaves_nothing_behind(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(10):
            out.send(i)
            await trio.sleep(0.001)
        return None

    handle = await runtime.start(body)
    async for chunk in runtime.read_stream(handle.run_id):
        if chunk.value == 3:
            break
    assert await settle(handle) == NATURAL_END


# --------------------------------------------------------------------------- stores


class _NoStreams(WrappedStore):
    """A store without ``read_chunks``: not a StreamingStore."""


async def test_a_store_that_keeps_no_streams_is_named_at_the_call() -> None:
    refused: list[str] = []

    async def body(ctx: RunContext) -> object:
        try:
            ctx.stream()
        except InvalidArgument as exc:
            refused.append(str(exc))
        return None

    async with open_runtime(_NoStreams()) as runtime:
        await runtime.execute(body)
        with pytest.raises(InvalidArgument, match="keeps no streams"):
            runtime.read_stream("r1")
    assert len(refused) == 1
    assert "keeps no streams" in refused[0]


class _Streaming(WrappedStore):
    """A memory store on the mailbox path that can hold back or fail stream commits."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.holding = trio.Event()
        self.release = trio.Event()
        self.fail = False

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if any(commit.chunks for commit in batch):
            if self.fail:
                raise OSError("disk full")
            if self.hold:
                self.holding.set()
                await self.release.wait()
        return await self.inner.apply(batch)

    async def read_chunks(
        self, run_id: str, channel: str, after: int, limit: int
    ) -> StreamPage | None:
        return await self.inner.read_chunks(run_id, channel, after, limit)

    async def stream_channels(self, run_id: str) -> list[str] | None:
        return await self.inner.stream_channels(run_id)


@pytest.fixture
async def streaming() -> AsyncIterator[tuple[_Streaming, Runtime]]:
    store = _Streaming()
    async with open_runtime(store) as runtime:
        yield store, runtime


async def test_flush_waits_for_chunks_the_flusher_handed_over_before_it(
    streaming: tuple[_Streaming, Runtime],
) -> None:
    store, runtime = streaming
    store.hold = True
    flushed = trio.Event()
    in_flight = trio.Event()

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        out.send("a")
        await store.holding.wait()  # the flusher's commit is held by the store
        in_flight.set()
        await out.flush()  # nothing left to take: it waits for that commit
        flushed.set()
        return None

    handle = await runtime.start(body)
    await reach(in_flight)
    await trio.sleep(0.05)
    assert not flushed.is_set()
    store.release.set()
    await reach(flushed)
    assert values(await chunks_of(runtime, handle.run_id)) == ["a"]
    await settle(handle)


async def test_a_store_failure_is_raised_by_flush_and_the_stream_goes_on(
    streaming: tuple[_Streaming, Runtime],
) -> None:
    store, runtime = streaming
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        store.fail = True
        out.send("lost")
        try:
            await out.flush()
        except StoreError as exc:
            raised.append(exc)
        out.send("lost too")
        await trio.sleep(0.2)  # the flusher's commit fails: the next flush says so
        try:
            await out.flush()
        except StoreError as exc:
            raised.append(exc)
        store.fail = False
        out.send("kept")
        await out.flush()
        return None

    handle = await runtime.start(body, run_id="r1")
    assert await settle(handle) == NATURAL_END
    assert len(raised) == 2
    assert all("disk full" in str(exc) for exc in raised)
    got = await chunks_of(runtime, "r1")
    assert seen(got) == [(1, 1, "data", "kept"), (2, 1, "end", None)]


async def test_a_cancel_while_flush_waits_leaves_the_chunks_to_land(
    streaming: tuple[_Streaming, Runtime],
) -> None:
    store, runtime = streaming
    store.hold = True
    waiting = trio.Event()

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        out.send("a")
        waiting.set()
        await out.flush()
        return "unreachable"

    handle = await runtime.start(body, run_id="r1")
    await reach(waiting)
    await store.holding.wait()
    runtime.deliver(LiveCommand.Cancel("r1"))
    store.release.set()
    assert await settle(handle) == CANCELLED
    assert seen(await chunks_of(runtime, "r1")) == [(1, 1, "data", "a"), (2, 1, "end", None)]


async def test_stream_channels_lists_what_a_run_wrote(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        ctx.stream("b").send(1)
        await ctx.stream("b").flush()
        ctx.stream("a").send(2)
        return None

    with pytest.raises(UnknownRun):
        await runtime.stream_channels("ghost")
    with pytest.raises(InvalidArgument):
        await runtime.stream_channels("")
    handle = await runtime.start(body, run_id="r1")
    await settle(handle)
    assert await runtime.stream_channels("r1") == ["b", "a"]

    async def quiet(ctx: RunContext) -> object:
        return None

    await runtime.execute(quiet, run_id="quiet")
    assert await runtime.stream_channels("quiet") == []


async def test_stream_channels_on_a_store_that_keeps_no_streams_is_refused() -> None:
    async with open_runtime(_NoStreams()) as runtime:
        with pytest.raises(InvalidArgument, match="keeps no streams"):
            await runtime.stream_channels("r1")
