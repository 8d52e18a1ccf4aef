"""`Client`: the runtime's control calls for plain threads."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Generic, TypeVar, final

import outcome

from .._core import (
    Clock,
    IfBusy,
    JsonValue,
    LiveCommand,
    RetryPolicy,
    RunEvent,
    RunRecord,
    RunState,
    Store,
    StreamChunk,
    check_read,
)
from . import _operations as ops
from ._portal import Operation, RuntimeThread
from ._streams import ChunkIterator, stream_page

T = TypeVar("T")


@final
class _ThreadWaiter(Generic[T]):
    """Where a blocked thread waits for an outcome the Trio thread hands it."""

    __slots__ = ("_done", "_result")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: outcome.Outcome[T] | None = None

    def deliver(self, result: outcome.Outcome[T]) -> None:
        self._result = result
        self._done.set()

    def wait(self) -> outcome.Outcome[T]:
        self._done.wait()
        assert self._result is not None
        return self._result


@final
class Client:
    """A runtime on a Trio thread of its own, for code that is not async: scripts, web
    handlers of a threaded server, notebooks. Any number of threads may call it at once.

    It owns one runtime on ``store`` (no bodies, serving nothing): runs it submits are
    executed by whatever runtime serves that store with their body, in this process or
    another. Each method is the runtime's call of the same name; it blocks the calling
    thread until the Trio thread has its answer, and raises the runtime's own error
    (`UnknownRun`, `NotActive`, `RunAlreadyEnded`, ...) in the calling thread.

    Example::

        from awaken_trio.client import Client

        with Client("sqlite:///runs.db") as client:
            run_id = client.submit("summarise", input={"doc": 7})
            state = client.wait(run_id, timeout=30)   # Awaiting or Ended, or TimeoutError
            client.cancel_run(run_id)                 # or RunAlreadyEnded, with .state

    Entering the block starts the thread and returns once the runtime is open (an error
    opening it, such as `StoreError` for a file that is not a store, is raised there);
    leaving it, or `close`, closes the runtime and joins the thread. A closed client raises
    `RuntimeClosed`. Calling a client from its own Trio thread raises `ClientMisuse`
    (the call would wait for itself). Its calls block: from async code, use `AsyncClient`.

    Args:
        store: a store URL (``"sqlite:///runs.db"``, ``"memory://"``) or a `Store`.
        clock: the runtime's wall clock (ticket deadlines, event times).
        poll: seconds between looks at a durable store for what other processes did;
            `wait` notices another process's commit within a few.
    """

    def __init__(
        self, store: str | Store = "memory://", *, clock: Clock = time.time, poll: float = 0.05
    ) -> None:
        self._thread = RuntimeThread(store, clock=clock, poll=poll)

    def __repr__(self) -> str:
        return f"<awaken_trio.client.Client at {id(self):#x}>"

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> Client:
        opened: _ThreadWaiter[None] = _ThreadWaiter()
        self._thread.start(opened.deliver)
        try:
            result = opened.wait()
        except BaseException:  # interrupted while opening: close it once it is open
            self._thread.abandon_open()
            raise
        if isinstance(result, outcome.Error):
            self._thread.join()
        result.unwrap()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the runtime and join its thread. Waits in flight in other threads raise
        `RuntimeClosed`; other calls in flight finish first. Closing again does nothing."""
        closed: _ThreadWaiter[None] = _ThreadWaiter()
        self._thread.close(closed.deliver)
        result = closed.wait()
        self._thread.join()
        result.unwrap()

    def _run(self, operation: Operation[T], *, abandon_on_close: bool = False) -> T:
        waiter: _ThreadWaiter[T] = _ThreadWaiter()
        call = self._thread.call(operation, waiter.deliver, abandon_on_close=abandon_on_close)
        try:
            result = waiter.wait()
        except BaseException:  # KeyboardInterrupt: stop the Trio side of the call too
            call.abandon()
            raise
        return result.unwrap()

    # ------------------------------------------------------------------ control

    def submit(
        self,
        name: str,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        queue_timeout: float | None = None,
        not_before: float | None = None,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
    ) -> str:
        """Commit a run ``Queued`` for a serving runtime with a body named ``name``; its
        run id. Idempotent by ``run_id`` (`Runtime.submit`); `RunExists` if it differs.
        ``timeout``/``deadline``, ``queue_timeout`` and ``not_before`` are
        `Runtime.submit`'s (times are wall-clock seconds, ``time.time()`` scale), and so are
        ``if_busy`` (`ThreadBusy` when ``"reject"`` finds the thread busy) and ``retry``
        (a `RetryPolicy`: a worker tries the run again when its body fails)."""
        return self._run(
            lambda runtime: ops.submit(
                runtime,
                name,
                input,
                run_id,
                thread_id,
                timeout=timeout,
                deadline=deadline,
                queue_timeout=queue_timeout,
                not_before=not_before,
                if_busy=if_busy,
                retry=retry,
            )
        )

    def fork(self, run_id: str, *, at: int | None = None, new_run_id: str | None = None) -> str:
        """Commit a fork of ``run_id`` ``Queued`` (`Runtime.fork`), from its checkpoint as
        of its event ``at`` (its last by default), for a serving runtime with its body; the
        new run's id."""
        return self._run(lambda runtime: ops.fork(runtime, run_id, at, new_run_id))

    def cancel_run(self, run_id: str, *, reason: str | None = None) -> RunState:
        """End the run ``Ended(Cancelled())`` wherever it executes (`Runtime.cancel_run`);
        ``reason`` is recorded with the cancel. `RunAlreadyEnded`, `UnknownRun`."""
        return self._run(lambda runtime: ops.cancel_run(runtime, run_id, reason))

    def stop_run(self, run_id: str, reason: str) -> RunState:
        """End the run ``Ended(Stopped(reason))`` (`Runtime.stop_run`)."""
        return self._run(lambda runtime: ops.stop_run(runtime, run_id, reason))

    def resume(
        self, run_id: str, value: JsonValue = None, *, correlation_id: str | None = None
    ) -> RunState:
        """Answer the run's ticket (`Runtime.resume`): a serving runtime with its body runs
        the next attempt. Returns the run's committed state read right after the resume
        (``Queued``, or already a later state). `NotAwaiting`, `TicketMismatch`,
        `TicketExpired`, `InvalidPayload`, `UnknownRun`: nothing was committed."""
        return self._run(lambda runtime: ops.resume(runtime, run_id, value, correlation_id))

    def send(self, command: LiveCommand) -> None:
        """Store a `LiveCommand` for the run's current attempt, wherever it executes
        (`Runtime.send`). `NotActive` unless the run is ``Queued`` or ``Running``."""
        self._run(lambda runtime: ops.send(runtime, command))

    # ------------------------------------------------------------------ reading

    def state(self, run_id: str) -> RunState:
        """The run's committed state. `UnknownRun`."""
        return self._run(lambda runtime: ops.state(runtime, run_id))

    def record(self, run_id: str) -> RunRecord:
        """The run's committed record. `UnknownRun`."""
        return self._run(lambda runtime: ops.record(runtime, run_id))

    def wait(self, run_id: str, *, timeout: float | None = None) -> RunState:
        """The run's committed state once it is ``Awaiting`` or ``Ended`` (at once if it
        is now), whichever process commits it.

        Raises:
            TimeoutError: it was neither after ``timeout`` seconds (the run is untouched).
            UnknownRun: no such run. RuntimeClosed: the client closed meanwhile.
        """
        seconds = ops.check_timeout(timeout)
        return self._run(lambda runtime: ops.wait(runtime, run_id, seconds), abandon_on_close=True)

    def events(self, run_id: str | None = None, *, after: int = 0) -> list[RunEvent]:
        """Committed events with ``seq > after``, oldest first: of one run, or of every
        run. Pass the last ``seq`` seen as ``after`` to read only what is new."""
        after = ops.check_after(after)
        return self._run(lambda runtime: ops.events(runtime, run_id, after))

    def read_stream(
        self, run_id: str, channel: str = "output", *, after: int = 0, follow: bool = True
    ) -> ChunkIterator:
        """The run's stream on ``channel`` (`Runtime.read_stream`), as an iterator of
        `StreamChunk` values for this thread: from the first chunk after offset ``after``;
        with ``follow``, each `next` blocks until the next chunk is committed, and the
        iteration ends after the ``"end"`` chunk. Without it, what is committed now.

        Each step that needs chunks reads a page of them (at most a thousand) in the
        client's Trio thread, so an iterator left unfinished holds nothing there. The
        errors of `Runtime.read_stream` are raised by the step that meets them; a closed
        client raises `RuntimeClosed` (a step waiting for a chunk too).

        Raises:
            InvalidArgument: a bad channel, ``after`` or ``follow`` (at the call).
        """
        check_read(run_id, channel, after, follow)

        def fetch(since: int) -> list[StreamChunk]:
            return self._run(
                lambda runtime: stream_page(runtime, run_id, channel, since, follow),
                abandon_on_close=follow,
            )

        return ChunkIterator._create(fetch, after=after, follow=follow)
