"""Reading a run's stream from outside Trio: `ChunkIterator` (threads) and
`AsyncChunkIterator` (asyncio, any anyio backend).

Each step that needs chunks makes one call into the client's Trio thread
(`stream_page`): it reads the chunks committed after the last offset handed out, at most a
page, or (following) waits for the next one. No call outlives its step, so an iterator a
caller drops leaves nothing running, and one that falls behind holds at most a page.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, final

from .._core import NoPublicConstructor, Runtime, StreamChunk

PAGE: Final = 1000
"""The most chunks one call hands over."""


async def stream_page(
    runtime: Runtime, run_id: str, channel: str, after: int, follow: bool
) -> list[StreamChunk]:
    """The channel's chunks after ``after``: those committed now, at most `PAGE`; if there
    are none and ``follow``, the next one, once it is committed. Empty when there is
    nothing more to read (the stream has ended, or nothing follows without ``follow``)."""
    page: list[StreamChunk] = []
    async for chunk in runtime.read_stream(run_id, channel, after=after, follow=False):
        page.append(chunk)
        if len(page) >= PAGE:
            break
    if page or not follow:
        return page
    async for chunk in runtime.read_stream(run_id, channel, after=after, follow=True):
        return [chunk]
    return []


Fetch = Callable[[int], list[StreamChunk]]
AsyncFetch = Callable[[int], Awaitable[list[StreamChunk]]]


@final
class _Pages:
    """Where an iterator stands: the chunks of the last page not handed out yet, the offset
    of the last one that was, and whether the stream has ended."""

    def __init__(self, after: int, follow: bool) -> None:
        self.after = after
        self.follow = follow
        self.buffer: deque[StreamChunk] = deque()
        self.done = False

    def take(self) -> StreamChunk | None:
        if not self.buffer:
            return None
        chunk = self.buffer.popleft()
        self.after = chunk.offset
        if chunk.kind == "end":
            self.done = True
            self.buffer.clear()
        return chunk

    def add(self, page: list[StreamChunk]) -> None:
        """A page read after ``after``. An empty one ends the iteration (the stream has
        ended, or nothing more is committed and it does not follow); so does a short one
        without following, once its chunks are handed out."""
        self.buffer.extend(page)
        if not page or (not self.follow and len(page) < PAGE):
            self.done = True


@final
class ChunkIterator(metaclass=NoPublicConstructor):
    """A run's stream for a thread (`Client.read_stream`): each `next` returns the next
    `StreamChunk`, blocking while it waits for one (following), and the iteration ends
    after the ``"end"`` chunk. The runtime's errors (`UnknownRun`, `StreamGap`,
    `InvalidArgument`) are raised by the `next` that meets them."""

    _obtained_from = "Client.read_stream() returns one"

    def __init__(self, fetch: Fetch, *, after: int, follow: bool) -> None:
        self._fetch = fetch
        self._pages = _Pages(after, follow)

    def __iter__(self) -> ChunkIterator:
        return self

    def __next__(self) -> StreamChunk:
        pages = self._pages
        while True:
            chunk = pages.take()
            if chunk is not None:
                return chunk
            if pages.done:
                raise StopIteration
            pages.add(self._fetch(pages.after))


@final
class AsyncChunkIterator(metaclass=NoPublicConstructor):
    """A run's stream for asyncio (`AsyncClient.read_stream`): as `ChunkIterator`, each
    step awaited. Cancelling a step abandons its call and loses no chunk: the next step
    reads from the last chunk handed out."""

    _obtained_from = "AsyncClient.read_stream() returns one"

    def __init__(self, fetch: AsyncFetch, *, after: int, follow: bool) -> None:
        self._fetch = fetch
        self._pages = _Pages(after, follow)

    def __aiter__(self) -> AsyncChunkIterator:
        return self

    async def __anext__(self) -> StreamChunk:
        pages = self._pages
        while True:
            chunk = pages.take()
            if chunk is not None:
                return chunk
            if pages.done:
                raise StopAsyncIteration
            pages.add(await self._fetch(pages.after))
