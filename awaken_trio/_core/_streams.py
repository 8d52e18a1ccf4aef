"""Streams: a run's live output (DESIGN §3.9), written like its commits and read from any
process.

Writing. ``ctx.stream(channel)`` gives the attempt's `StreamWriter` for a channel (one per
channel per attempt). `StreamWriter.send` is sync and never waits for the store: it checks
the chunk as a payload and appends it to the writer, in the attempt's `StreamOutbox`. The
outbox's chunks reach the store three ways, all through the commit mailbox, fenced like
every commit of the attempt:

* the runtime's one `StreamFlusher` task hands every outbox with chunks waiting to the
  mailbox as a stream commit (`Progress.post_chunks`), at most `FLUSH_INTERVAL` seconds
  after the first of them was sent, without waiting for the answer: the mailbox writes
  them with whatever else waits (group commit), and a chunk never costs a transaction
  of its own;
* `StreamWriter.flush` commits what waits now and returns once every chunk sent before it
  is committed;
* the attempt's end commit takes what is left (`StreamOutbox.close`), and the writers are
  closed with it.

Chunks go to the store only in those commits, so every chunk an attempt sent before a
given moment is in a commit the mailbox holds in order (it applies its commits first in,
first out): a flush's own commit answering means every chunk before it has landed.

Reading. `StreamReader` (``runtime.read_stream``) reads pages of chunks from the store by
offset and, following, waits for the next commit here or a change elsewhere (the relay's
look at the store; on PostgreSQL, a stream write another runtime's ``NOTIFY`` announced),
so a reader holds one page at a time and never slows a writer or another reader.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

import trio

from ._errors import ContextMisuse, InvalidArgument, StoreError, StreamGap, UnknownRun
from ._json import FrozenDict, FrozenList, JsonValue, check_payload
from ._state import StreamChunk
from ._storage import StreamDraft, StreamingStore, read_store
from ._util import NoPublicConstructor, safe_repr

if TYPE_CHECKING:
    from ._attempt import Attempt
    from ._host import AttemptHost
    from ._kernel import Kernel

FLUSH_INTERVAL: Final = 0.05
"""Seconds: the longest a sent chunk waits before the flusher hands it to the mailbox."""

SEGMENT_CHUNKS: Final = 4096
SEGMENT_BYTES: Final = 256 * 1024
"""A draft (`StreamDraft`) holds at most this many chunks, and about this many bytes of
their JSON text (one chunk more, if it is larger alone): a store may keep a draft as one
row, so a body that sends a million chunks between two flushes never makes one huge."""

PAGE: Final = 1000
"""The most chunks a reader reads at once (and holds)."""

LOOK_ANYWAY: Final = 1.0
"""Seconds: a reader following a stream of a durable store reads it again at least this
often, notice or not (a notice is a hint; a write no notice announced, such as a recovery
here ending the run, is found this way)."""

_CHANNEL = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def check_channel(channel: object, what: str) -> str:
    """A stream's channel name: 1 to 128 letters, digits, ``_``, ``.``, ``:`` or ``-`` (it
    goes in URLs and on command lines as it is)."""
    if type(channel) is not str or not _CHANNEL.fullmatch(channel):
        raise InvalidArgument(
            f"{what}: a channel is 1 to 128 letters, digits, '_', '.', ':' or '-'"
            f" (such as 'output' or 'agent.tokens'), not {safe_repr(channel)}"
        )
    return channel


def check_read(run_id: str, channel: object, after: object, follow: object) -> None:
    """`Runtime.read_stream`'s arguments (the run id is checked apart)."""
    what = f"read_stream() of run {run_id!r}"
    check_channel(channel, what)
    if type(after) is not int or after < 0:
        raise InvalidArgument(
            f"{what}: after must be the offset of a chunk, an int >= 0 (0: from the first),"
            f" not {safe_repr(after)}"
        )
    if type(follow) is not bool:
        raise InvalidArgument(f"{what}: follow must be a bool, not {safe_repr(follow)}")


def _size(value: JsonValue, limit: int) -> int:
    """About how many bytes of JSON text a checked chunk takes (at most ``limit``)."""
    if type(value) is str:
        return len(value) + 2
    if type(value) is FrozenDict or type(value) is FrozenList:
        return min(value._size, limit)
    return 8


@final
class StreamWriter(metaclass=NoPublicConstructor):
    """One channel of a run's stream, for one attempt (``ctx.stream(channel)``).

    `send` is sync and never waits for the store; `flush` waits until every chunk sent so
    far is committed. The writer belongs to its attempt: it is closed when the attempt
    ends (what it still holds is written with the attempt's last commit, unless the
    attempt lost its run), and a later attempt of the run gets a writer of its own, whose
    first chunk the store puts after a ``"reset"`` chunk. Use it from the attempt's own
    tasks (the body and the tasks it starts), on the Trio thread.
    """

    _obtained_from = "a run body gets one from ctx.stream(channel)"

    __slots__ = ("_box", "_bytes", "_channel", "_keep", "_segments", "_what")

    def __init__(self, box: StreamOutbox, channel: str, keep: bool) -> None:
        self._box = box
        self._channel = channel
        self._keep = keep
        self._what = f"a chunk of stream {channel!r} of run {box.attempt.run_id!r}"
        # What is waiting, in drafts of at most SEGMENT_CHUNKS chunks and about
        # SEGMENT_BYTES bytes; ``_bytes`` is the last one's.
        self._segments: list[list[JsonValue]] = []
        self._bytes = 0

    def __repr__(self) -> str:
        a = self._box.attempt
        state = "closed" if self._box.closed else "open"
        return (
            f"<StreamWriter {self._channel!r} of run {a.run_id!r} attempt {a.generation} ({state})>"
        )

    @property
    def channel(self) -> str:
        return self._channel

    @property
    def keep(self) -> bool:
        """Whether the channel's chunks are kept once the run ends (else only its ``"end"``
        chunk is)."""
        return self._keep

    @property
    def closed(self) -> bool:
        """Whether the writer's attempt has ended (`send` and `flush` then raise)."""
        return self._box.closed

    def send(self, chunk: JsonValue) -> None:
        """Send ``chunk`` (a JSON value: a str for a token) on the channel. Sync: it is
        buffered, and written with the attempt's commits within 50 ms (or by `flush`), at
        the channel's next offset.

        Raises:
            InvalidPayload: ``chunk`` is not a JSON value, or its JSON text is longer than
                the runtime's ``max_payload_bytes``; nothing is sent.
            ContextMisuse: the writer is closed: its attempt has ended.
        """
        box = self._box
        if box.closed:
            raise self._closed("send()")
        value = check_payload(chunk, self._what, box.max_bytes)
        size = _size(value, box.max_bytes)
        segments = self._segments
        if segments and len(segments[-1]) < SEGMENT_CHUNKS and self._bytes + size <= SEGMENT_BYTES:
            segments[-1].append(value)
            self._bytes += size
        else:
            segments.append([value])
            self._bytes = size
        box.sent += 1
        if not box.dirty:
            box.mark_dirty()

    async def flush(self) -> None:
        """Wait until every chunk sent so far, on any channel of the attempt, is
        committed. A checkpoint.

        Raises:
            ContextMisuse: the writer is closed: its attempt has ended.
            StoreError: the store failed to write chunks sent before this call (they are
                lost; the stream goes on with the next ones).
        """
        box = self._box
        if box.closed:
            raise self._closed("flush()")
        await box.flush()

    def _closed(self, call: str) -> ContextMisuse:
        a = self._box.attempt
        return ContextMisuse(
            f"{call} on the stream writer of channel {self._channel!r} of run {a.run_id!r}:"
            f" the writer is closed, its attempt {a.generation} has ended; each attempt"
            " sends on a writer of its own (ctx.stream() in that attempt's body)"
        )

    def _take(self) -> list[StreamDraft]:
        segments = self._segments
        if not segments:
            return []
        self._segments = []
        self._bytes = 0
        channel, keep = self._channel, self._keep
        return [StreamDraft(channel, tuple(values), keep) for values in segments]


@final
class StreamOutbox:
    """The chunks one attempt's writers have sent, and what became of them.

    Invariant: ``landed <= taken <= sent``: ``sent`` counts the chunks `StreamWriter.send`
    accepted, ``taken`` those handed to a commit, ``landed`` those whose commit the store
    answered (written, fenced off, or failed). Chunks are taken only into stream commits
    and the attempt's end, and commits are applied in the order they were handed over.
    """

    def __init__(self, attempt: Attempt, host: AttemptHost) -> None:
        self.attempt = attempt
        self.host = host
        self.max_bytes = host.max_payload_bytes
        self.writers: dict[str, StreamWriter] = {}
        self.closed = False
        # In the flusher's set of outboxes to hand over.
        self.dirty = False
        self.sent = 0
        self.taken = 0
        self.landed = 0
        # A store failure of a commit nobody awaited (the flusher's), for the next flush.
        self.error: StoreError | None = None
        self._landing: trio.Event | None = None

    def writer(self, channel: str, keep: bool) -> StreamWriter:
        found = self.writers.get(channel)
        if found is None:
            found = self.writers[channel] = StreamWriter._create(self, channel, keep)
        elif found.keep != keep:
            raise InvalidArgument(
                f"stream() of run {self.attempt.run_id!r}: channel {channel!r} is open with"
                f" keep={found.keep} in this attempt; ask for it with the same keep"
            )
        return found

    def mark_dirty(self) -> None:
        self.dirty = True
        self.host.stream_pending(self)

    @property
    def pending(self) -> bool:
        return self.taken < self.sent

    def take(self) -> tuple[tuple[StreamDraft, ...], int]:
        """Every chunk waiting, as drafts for one commit, and how many chunks they hold."""
        drafts: list[StreamDraft] = []
        for writer in self.writers.values():
            drafts.extend(writer._take())
        count = self.sent - self.taken
        self.taken = self.sent
        return tuple(drafts), count

    def land(self, count: int, error: StoreError | None = None) -> None:
        """``count`` chunks' commit was answered (``error``: the store failed it)."""
        self.landed += count
        if error is not None and self.error is None:
            self.error = error
        landing, self._landing = self._landing, None
        if landing is not None:
            landing.set()

    def close(self) -> tuple[StreamDraft, ...]:
        """The attempt ends: no chunk is accepted any more, and what waits is handed to its
        end commit (or dropped, if it commits nothing)."""
        self.closed = True
        drafts, _ = self.take()
        self.land(self.sent - self.landed)
        return drafts

    async def flush(self) -> None:
        target = self.sent
        await trio.lowlevel.checkpoint()
        if self.pending:
            await self.host.flush_streams(self.attempt)
        while self.landed < target and not self.closed:
            if self._landing is None:
                self._landing = trio.Event()
            await self._landing.wait()
        error, self.error = self.error, None
        if error is not None:
            raise error


@final
class StreamFlusher:
    """The runtime's one task that hands waiting chunks to the mailbox: woken by the first
    chunk an outbox holds, it waits `FLUSH_INTERVAL` seconds for more, then hands every
    outbox with chunks to ``post`` (which commits them without waiting). Nothing runs
    while no chunk waits."""

    def __init__(self, post: Callable[[StreamOutbox], None]) -> None:
        self._post = post
        self._dirty: dict[StreamOutbox, None] = {}
        self._wake = trio.Event()

    def mark(self, box: StreamOutbox) -> None:
        self._dirty[box] = None
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            await trio.sleep(FLUSH_INTERVAL)
            self._wake = trio.Event()
            boxes, self._dirty = self._dirty, {}
            for box in boxes:
                box.dirty = False
                if not box.closed and box.pending:
                    self._post(box)


@final
class StreamReader(metaclass=NoPublicConstructor):
    """An async iterator over one channel of a run's stream (`Runtime.read_stream`): its
    `StreamChunk` values in offset order, whichever runtime wrote them.

    A plain class rather than an async generator, so breaking out of ``async for`` needs
    no ``aclosing`` and nothing is left suspended. It holds at most one page of chunks.
    """

    _obtained_from = "runtime.read_stream() returns one"

    def __init__(
        self,
        kernel: Kernel,
        store: StreamingStore,
        run_id: str,
        channel: str,
        *,
        after: int,
        follow: bool,
    ) -> None:
        self._kernel = kernel
        self._store = store
        self._run_id = run_id
        self._channel = channel
        self._follow = follow
        # The offset of the last chunk handed out: the next read starts after it.
        self._after = after
        self._buffer: deque[StreamChunk] = deque()
        self._finished = False
        durable = kernel.store.durable
        self._look_every = LOOK_ANYWAY if durable else kernel.claims.idle_wait

    def __repr__(self) -> str:
        return f"<StreamReader {self._channel!r} of run {self._run_id!r} after {self._after}>"

    def __aiter__(self) -> StreamReader:
        return self

    async def __anext__(self) -> StreamChunk:
        await trio.lowlevel.checkpoint()  # every step is a checkpoint, buffered or not
        while True:
            if self._buffer:
                chunk = self._buffer.popleft()
                self._after = chunk.offset
                if chunk.kind == "end":
                    self._finished = True  # nothing follows a run's end
                    self._buffer.clear()
                return chunk
            if self._finished:
                raise StopAsyncIteration
            kernel = self._kernel
            # Taken before reading, so a commit in between is not missed.
            changed = kernel.changed_event()
            stopped = kernel.mailbox.stopped
            what = f"stream {self._channel!r} of run {self._run_id!r}"
            page = await read_store(
                self._store.read_chunks(self._run_id, self._channel, self._after, PAGE), what
            )
            if page is None:
                raise UnknownRun(self._run_id)
            if page.chunks:
                first = page.chunks[0].offset
                if first > self._after + 1:
                    raise StreamGap(self._run_id, self._channel, self._after, first)
                self._buffer.extend(page.chunks)
                continue
            if page.ended:
                if page.last == 0:
                    raise InvalidArgument(
                        f"run {self._run_id!r} has ended without writing stream"
                        f" {self._channel!r}; check the channel's name (the default is"
                        " 'output')"
                    )
                self._finished = True
                raise StopAsyncIteration
            if not self._follow or stopped:
                self._finished = True
                raise StopAsyncIteration
            kernel.stream_readers += 1
            try:
                await kernel.changed(changed, interval=self._look_every)
            finally:
                kernel.stream_readers -= 1
