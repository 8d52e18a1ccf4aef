"""A run's streams in the dashboard: ``GET /api/runs/{id}/streams`` (its channels) and
``GET /api/runs/{id}/streams/{channel}?after=N`` (server-sent events, one chunk each, its
offset as the event's ``id``, so a browser that reconnects resumes with ``Last-Event-ID``).

Each stream response reads the store for itself (`Runtime.read_stream`), in a task of its
own that hands chunks to the response through a bounded channel: a client that falls more
than `BUFFER` chunks behind loses its stream, as a page's event stream does (its browser
reconnects with the last offset it got, and reads on from there), and never holds a
writer or another reader back. The response ends after the channel's ``"end"`` chunk, when
the dashboard shuts down, or when the client goes.
"""

from __future__ import annotations

import contextlib
from typing import Final

import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .. import (
    InvalidArgument,
    JsonValue,
    RunState,
    Runtime,
    StoreError,
    StreamChunk,
    StreamGap,
    UnknownRun,
)
from .._face.failures import bad_input, error_json, failure_of
from .._face.shapes import chunk_json, dumps

BUFFER: Final = 1000
"""Chunks a client may fall behind by before its stream is closed."""
KEEPALIVE: Final = 15.0
"""Seconds between comment lines on an idle stream."""

_HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def chunk_event(chunk: StreamChunk) -> bytes:
    """One chunk as a server-sent event: ``id`` its offset, ``event: chunk``, its JSON."""
    return f"id: {chunk.offset}\nevent: chunk\ndata: {dumps(chunk_json(chunk))}\n\n".encode()


def resume_after(after: int, last_event_id: str | None) -> int:
    """Where a stream starts: after the ``Last-Event-ID`` a reconnecting browser sends
    (the offset of the last chunk it got), else after ``after``."""
    if last_event_id is None:
        return after
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit():
        raise InvalidArgument(
            f"Last-Event-ID must be the offset of a chunk (a whole number), not {last_event_id!r}"
        )
    return int(text)


async def first_page(runtime: Runtime, run_id: str, channel: str, after: int) -> bool:
    """Whether there is anything to stream after ``after``: False when the channel has
    ended before it (the answer is then 204, which a browser does not reconnect after).
    Raises what reading it raises (an unknown run, a gap, a channel the ended run never
    wrote), before the response starts."""
    async for _ in runtime.read_stream(run_id, channel, after=after, follow=False):
        return True
    # Nothing yet: there will be, unless the run has ended (its "end" chunk was read).
    return not isinstance((await runtime.record(run_id)).state, RunState.Ended)


class ChunkEvents(Response):
    """The server-sent events of one stream (see the module's docstring)."""

    media_type = "text/event-stream"

    def __init__(
        self, runtime: Runtime, run_id: str, channel: str, after: int, closed: trio.Event
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(_HEADERS)
        self._runtime = runtime
        self._run_id = run_id
        self._channel = channel
        self._after = after
        self._closed = closed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        gone = trio.Event()
        async with trio.open_nursery() as nursery:
            chunks, taken = trio.open_memory_channel[StreamChunk | bytes](BUFFER)
            nursery.start_soon(self._read, chunks)
            nursery.start_soon(_until_gone, receive, gone, nursery.cancel_scope)
            nursery.start_soon(_until_set, self._closed, nursery.cancel_scope)
            try:
                await self._write(taken, send)
            except OSError:  # the client went (ASGI 2.4 servers say so this way)
                gone.set()
            nursery.cancel_scope.cancel()
        if not gone.is_set():
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _read(self, chunks: trio.MemorySendChannel[StreamChunk | bytes]) -> None:
        """Follow the stream into ``chunks``; close it when the client is too far behind
        (its stream then ends), at the ``"end"`` chunk, or after an error event."""
        async with chunks:
            try:
                reader = self._runtime.read_stream(self._run_id, self._channel, after=self._after)
                async for chunk in reader:
                    try:
                        chunks.send_nowait(chunk)
                    except trio.WouldBlock:
                        return  # too far behind: it reconnects, and reads on from there
            except (UnknownRun, StreamGap, InvalidArgument, StoreError) as exc:
                error = dumps(_error(exc))
                with contextlib.suppress(trio.WouldBlock):
                    chunks.send_nowait(f"event: stream_error\ndata: {error}\n\n".encode())

    async def _write(
        self, taken: trio.MemoryReceiveChannel[StreamChunk | bytes], send: Send
    ) -> None:
        async with taken:
            while True:
                with trio.move_on_after(KEEPALIVE) as idle:
                    try:
                        item = await taken.receive()
                    except trio.EndOfChannel:
                        return
                if idle.cancelled_caught:
                    body = b": keepalive\n\n"
                else:
                    body = item if isinstance(item, bytes) else chunk_event(item)
                await send({"type": "http.response.body", "body": body, "more_body": True})


def _error(exc: Exception) -> dict[str, JsonValue]:
    if isinstance(exc, StreamGap):
        return {**error_json(failure_of(exc)), "oldest": exc.oldest}
    if isinstance(exc, InvalidArgument):
        return error_json(bad_input(str(exc), "unknown_stream"))
    return error_json(failure_of(exc))


async def _until_gone(receive: Receive, gone: trio.Event, scope: trio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            scope.cancel()
            return


async def _until_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
