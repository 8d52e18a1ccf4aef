"""`AsyncClient`: the runtime's control calls for asyncio (or any anyio backend)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType
from typing import Generic, Protocol, TypeVar, final

import outcome
import trio

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
from ._portal import ClientMisuse, Operation, RuntimeThread
from ._streams import AsyncChunkIterator, stream_page

T = TypeVar("T")


class _Waiter(Protocol[T]):
    def deliver(self, result: outcome.Outcome[T]) -> None: ...

    async def wait(self) -> outcome.Outcome[T]: ...


@final
class _AsyncioWaiter(Generic[T]):
    """An asyncio future the Trio thread completes through ``call_soon_threadsafe``: the
    event loop never blocks on the client."""

    __slots__ = ("_future", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[outcome.Outcome[T]] = loop.create_future()

    def deliver(self, result: outcome.Outcome[T]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle, result)

    def _settle(self, result: outcome.Outcome[T]) -> None:
        if not self._future.done():  # a cancelled wait left it cancelled
            self._future.set_result(result)

    async def wait(self) -> outcome.Outcome[T]:
        return await self._future


@final
class _TrioWaiter(Generic[T]):
    """For a caller in another Trio run (anyio's trio backend): an event of that run, set
    through its token."""

    __slots__ = ("_done", "_result", "_token")

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._done = trio.Event()
        self._result: outcome.Outcome[T] | None = None

    def deliver(self, result: outcome.Outcome[T]) -> None:
        self._result = result
        with contextlib.suppress(trio.RunFinishedError):  # that run is over: nobody waits
            self._token.run_sync_soon(self._done.set)

    async def wait(self) -> outcome.Outcome[T]:
        await self._done.wait()
        assert self._result is not None
        return self._result


def _waiter(thread: RuntimeThread) -> _Waiter[T]:
    """A waiter for the event loop running the current task."""
    try:
        return _AsyncioWaiter(asyncio.get_running_loop())
    except RuntimeError:
        pass
    try:
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:
        raise ClientMisuse(
            "AsyncClient needs a running asyncio or Trio event loop; from a plain thread"
            " use awaken_trio.client.Client"
        ) from None
    if token is thread.token:
        raise ClientMisuse(
            "an AsyncClient was called from its own Trio thread; call it from the event loop"
            " that opened it"
        )
    return _TrioWaiter(token)


@final
class AsyncClient:
    """A runtime on a Trio thread of its own, for asyncio programs (FastAPI, Starlette,
    aiohttp handlers) and any anyio backend.

    It owns one runtime on ``store`` (no bodies, serving nothing), like `Client`; each
    method is an async version of the same call. A call hands its work to the Trio thread
    and awaits an asyncio future that thread completes, so the event loop never blocks;
    under anyio's trio backend the client still runs its own thread, and the call awaits
    an event of the caller's run. Errors are the runtime's own, raised in the calling task.

    Example::

        from awaken_trio.client import AsyncClient

        async with AsyncClient("sqlite:///runs.db") as client:
            run_id = await client.submit("summarise", input={"doc": 7})
            state = await client.wait(run_id, timeout=30)

    Cancelling a call (``task.cancel()``, ``asyncio.wait_for``, an anyio cancel scope)
    abandons it: the caller gets the cancellation at once, and the Trio side of the call
    is cancelled too, at its next checkpoint. That changes no run: `wait`, `state`,
    `record` and `events` only read, and a control call (`submit`, `cancel_run`,
    `stop_run`, `resume`, `send`) is either cancelled before its commit or, if its commit
    already landed, left committed (it is not undone; read the run's state to know which,
    or repeat a `submit` that named its ``run_id``: that is idempotent).

    Entering ``async with`` starts the thread and returns once the runtime is open (an
    error opening it is raised there); leaving it, or `aclose`, closes the runtime. A
    closed client raises `RuntimeClosed`.

    Args:
        store: as for `Client`.
        clock: as for `Client`.
        poll: as for `Client`.
    """

    def __init__(
        self, store: str | Store = "memory://", *, clock: Clock = time.time, poll: float = 0.05
    ) -> None:
        self._thread = RuntimeThread(store, clock=clock, poll=poll)

    def __repr__(self) -> str:
        return f"<awaken_trio.client.AsyncClient at {id(self):#x}>"

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> AsyncClient:
        opened: _Waiter[None] = _waiter(self._thread)
        self._thread.start(opened.deliver)
        try:
            result = await opened.wait()
        except BaseException:  # cancelled while opening: it closes again once open
            self._thread.abandon_open()
            raise
        if isinstance(result, outcome.Error):
            self._thread.join()  # the thread has ended: it delivers this as its last act
        result.unwrap()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the runtime: waits in flight raise `RuntimeClosed`, other calls in flight
        finish first. Cancelling this stops the waiting, not the close. Closing again does
        nothing."""
        closed: _Waiter[None] = _waiter(self._thread)
        self._thread.close(closed.deliver)
        result = await closed.wait()
        # The thread delivers the close as its last act: joining it does not block.
        self._thread.join()
        result.unwrap()

    async def _run(self, operation: Operation[T], *, abandon_on_close: bool = False) -> T:
        waiter: _Waiter[T] = _waiter(self._thread)
        call = self._thread.call(operation, waiter.deliver, abandon_on_close=abandon_on_close)
        try:
            result = await waiter.wait()
        except BaseException:  # cancelled: the Trio side of the call is cancelled too
            call.abandon()
            raise
        return result.unwrap()

    # ------------------------------------------------------------------ control

    async def submit(
        self,
        name: str,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the run's deadline, not this call's
        deadline: float | None = None,
        queue_timeout: float | None = None,
        not_before: float | None = None,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
    ) -> str:
        """`Client.submit`: the run id of a run committed ``Queued`` (with the same
        options)."""
        return await self._run(
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

    async def fork(
        self, run_id: str, *, at: int | None = None, new_run_id: str | None = None
    ) -> str:
        """`Client.fork`: the id of the new run, committed ``Queued``."""
        return await self._run(lambda runtime: ops.fork(runtime, run_id, at, new_run_id))

    async def cancel_run(self, run_id: str, *, reason: str | None = None) -> RunState:
        """`Client.cancel_run`: ``Ended(Cancelled())`` wherever the run executes."""
        return await self._run(lambda runtime: ops.cancel_run(runtime, run_id, reason))

    async def stop_run(self, run_id: str, reason: str) -> RunState:
        """`Client.stop_run`: ``Ended(Stopped(reason))``."""
        return await self._run(lambda runtime: ops.stop_run(runtime, run_id, reason))

    async def resume(
        self, run_id: str, value: JsonValue = None, *, correlation_id: str | None = None
    ) -> RunState:
        """`Client.resume`: the state read right after the resume committed."""
        return await self._run(lambda runtime: ops.resume(runtime, run_id, value, correlation_id))

    async def send(self, command: LiveCommand) -> None:
        """`Client.send`: a `LiveCommand`, stored for the run's current attempt."""
        await self._run(lambda runtime: ops.send(runtime, command))

    # ------------------------------------------------------------------ reading

    async def state(self, run_id: str) -> RunState:
        """The run's committed state. `UnknownRun`."""
        return await self._run(lambda runtime: ops.state(runtime, run_id))

    async def record(self, run_id: str) -> RunRecord:
        """The run's committed record. `UnknownRun`."""
        return await self._run(lambda runtime: ops.record(runtime, run_id))

    # ``timeout`` is the contract's (DESIGN 3.5): an asyncio caller has no Trio scope to wrap.
    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunState:  # noqa: ASYNC109
        """`Client.wait`: the run's state once it is ``Awaiting`` or ``Ended``;
        `TimeoutError` after ``timeout`` seconds. Cancelling it leaves the run as it is."""
        seconds = ops.check_timeout(timeout)
        return await self._run(
            lambda runtime: ops.wait(runtime, run_id, seconds), abandon_on_close=True
        )

    async def events(self, run_id: str | None = None, *, after: int = 0) -> list[RunEvent]:
        """`Client.events`: committed events with ``seq > after``, oldest first."""
        after = ops.check_after(after)
        return await self._run(lambda runtime: ops.events(runtime, run_id, after))

    def read_stream(
        self, run_id: str, channel: str = "output", *, after: int = 0, follow: bool = True
    ) -> AsyncChunkIterator:
        """`Client.read_stream` as an async iterator (``async for chunk in
        client.read_stream(run_id)``): each step awaits the next `StreamChunk`, and
        cancelling a step abandons its read and loses nothing (the next step reads from the
        last chunk handed out).

        Raises:
            InvalidArgument: a bad channel, ``after`` or ``follow`` (at the call).
        """
        check_read(run_id, channel, after, follow)

        async def fetch(since: int) -> list[StreamChunk]:
            return await self._run(
                lambda runtime: stream_page(runtime, run_id, channel, since, follow),
                abandon_on_close=follow,
            )

        return AsyncChunkIterator._create(fetch, after=after, follow=follow)
