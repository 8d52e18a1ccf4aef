"""asyncio code under Trio: an asyncio event loop on a thread of its own, shared by the runs
of a runtime that use it.

`open_asyncio_bridge` gives one attempt a `Bridge` to that loop (starting it, on a new
thread, if no bridge is open), with the two crossings an asyncio framework needs inside a
run:

- Trio awaits asyncio: `Bridge.run` runs a coroutine function as a task of the loop and
  waits for it without blocking Trio. A Trio cancel cancels the asyncio task at once
  (``Task.cancel()``, so the framework's ``await`` sees ``CancelledError`` wherever it is,
  an HTTP request included) and waits, shielded, until the task has finished, so nothing
  it does outlives the call.
- asyncio awaits Trio: `Bridge.call` (called in the loop's thread) runs an async Trio
  function as a task of the attempt (started by a task of the bridge's nursery, so it
  belongs to the run: `current_context` works, and so does every `RunContext` method) and
  waits for it without blocking the loop. An asyncio cancel of the waiting task cancels
  the Trio call's scope. A Trio call that ends the attempt (a pause, an ``await_input``, a
  cancel, the step budget: any ``BaseException`` that is not an ``Exception``) is not
  handed to asyncio: the bridge cancels every asyncio task it is waiting for instead, and
  `Bridge.run` re-raises it in Trio once they have finished.

When the ``async with`` block ends, the attempt's Trio calls are stopped and everything it
ran on the loop has finished (`Bridge.run` waits for its task, shielded): nothing of the
attempt is left running on any thread. When the last open bridge closes, whatever is still
on the loop is cancelled and waited for, the loop's default executor is shut down (its
threads joined), and the loop's thread exits. A sync function
running on one of the loop's threads cannot be interrupted (Python cannot stop a thread): a
cancel waits for it to return, as Trio waits for a ``to_thread`` call it cannot abandon.

Why a thread and not trio-asyncio: measured on the machine this was written on, a round
trip through the thread bridge costs about 80 µs each way, against 130 µs (Trio to asyncio)
and 440 µs (asyncio to Trio) for trio-asyncio's ``aio_as_trio`` and ``trio_as_aio``, and
importing trio-asyncio replaces ``asyncio.new_event_loop`` for the whole process (an asyncio
loop made elsewhere in a Trio thread then raises), which a library embedded in other
programs must not do. ``benchmarks/bench_pydantic_ai.py`` measures the bridge per model call.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar, final

import outcome
import trio

P = ParamSpec("P")
T = TypeVar("T")


@final
class Bridge:
    """The crossings between one attempt's Trio tasks and its asyncio loop (see the module
    docstring). Made by `open_asyncio_bridge`; not constructed directly."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, token: trio.lowlevel.TrioToken, name: str
    ) -> None:
        self._loop = loop
        self._token = token
        self._name = name
        # Where the Trio calls asyncio asks for run, while the bridge is open, and the
        # context they start in (the opening task's: they belong to its run).
        self._nursery: trio.Nursery | None = None
        self._context = contextvars.copy_context()
        # Why the attempt stops, once a Trio call raised something that ends it.
        self._stop: BaseException | None = None
        # The asyncio tasks Trio waits for (`run`), cancelled when the attempt stops.
        self._waited: set[asyncio.Task[Any]] = set()
        self._values: list[tuple[contextvars.ContextVar[Any], Any]] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def set_in_tasks(self, var: contextvars.ContextVar[T], value: T) -> None:
        """Give ``var`` the value ``value`` in every asyncio task `run` starts from now on."""
        self._values.append((var, value))

    async def run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(*args, **kwargs)`` as a task of the loop and return its result (Trio
        awaits asyncio). A Trio cancel cancels the task and waits for it to finish.

        The task runs in a copy of the calling task's context (as a Trio task it started
        would), so context variables set around the call (``current_context``, a library's
        overrides such as pydantic-ai's ``Agent.override``) hold in it. Trio tells sniffio
        (and so anyio) who runs a thread by a thread-local, which the loop's thread does
        not share: asyncio code still finds asyncio."""
        context = contextvars.copy_context()
        for var, value in self._values:
            context.run(var.set, value)
        done = trio.Event()
        token = self._token
        loop = self._loop
        holder: list[asyncio.Task[T]] = []

        def start() -> None:
            task = loop.create_task(fn(*args, **kwargs), context=context)
            holder.append(task)
            self._waited.add(task)
            task.add_done_callback(finished)

        def finished(task: asyncio.Task[T]) -> None:
            self._waited.discard(task)
            token.run_sync_soon(done.set)

        loop.call_soon_threadsafe(start)
        try:
            await done.wait()
        except BaseException:
            # Cancelled (or interrupted): the asyncio side stops too, and is waited for.
            loop.call_soon_threadsafe(self._cancel_holder, holder)
            with trio.CancelScope(shield=True):
                await done.wait()
            raise
        if self._stop is not None:
            raise self._stop
        (task,) = holder
        return task.result()

    @staticmethod
    def _cancel_holder(holder: list[asyncio.Task[Any]]) -> None:
        for task in holder:
            task.cancel()

    async def call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the Trio function ``fn(*args, **kwargs)`` as a task of the attempt and return
        its result (asyncio awaits Trio; call it in the loop's thread). Cancelling the
        awaiting asyncio task cancels the Trio call."""
        loop = asyncio.get_running_loop()
        assert loop is self._loop, "Bridge.call is for the bridge's own loop"
        answer: asyncio.Future[outcome.Outcome[T]] = loop.create_future()
        request = _TrioCall(fn, args, kwargs, answer, loop)
        self._token.run_sync_soon(self._start, request)
        try:
            result = await answer
        except asyncio.CancelledError:
            self._token.run_sync_soon(request.cancel)
            raise
        return result.unwrap()

    def _start(self, request: _TrioCall) -> None:
        """Start a Trio call asyncio asks for, as a task of the attempt (a callback on the
        Trio thread: it never raises). Once the bridge has closed, asyncio is told the call
        was cancelled."""
        nursery = self._nursery
        if nursery is None:
            request.abandon()
        else:
            # A task copies the context it is started from: the opening task's.
            self._context.run(nursery.start_soon, self._answer, request)

    async def _answer(self, request: _TrioCall) -> None:
        with trio.CancelScope() as scope:
            request.scope = scope
            if request.cancelled:
                scope.cancel()
            try:
                result: outcome.Outcome[Any] = outcome.Value(
                    await request.fn(*request.args, **request.kwargs)
                )
            except Exception as exc:
                result = outcome.Error(exc)
            except trio.Cancelled:
                request.abandon()
                raise
            except BaseException as exc:
                # It ends the attempt (a pause, an await, the step budget, an interrupt):
                # asyncio is not handed it, its tasks are cancelled instead, and `run`
                # raises it in the body's own task once they have finished.
                if self._stop is None:
                    self._stop = exc
                self._loop.call_soon_threadsafe(self._cancel_waited)
                request.abandon()
                return
        if scope.cancelled_caught:
            request.abandon()
            return
        request.answer(result)

    def _cancel_waited(self) -> None:
        for task in list(self._waited):
            task.cancel()


@final
class _TrioCall:
    """One Trio call asyncio waits for."""

    __slots__ = ("args", "cancelled", "fn", "future", "kwargs", "loop", "scope")

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        future: asyncio.Future[outcome.Outcome[Any]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.future = future
        self.loop = loop
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """The asyncio side stopped waiting (Trio thread)."""
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()

    def answer(self, result: outcome.Outcome[Any]) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, result)

    def abandon(self) -> None:
        self.loop.call_soon_threadsafe(_abandon, self.future)


def _settle(future: asyncio.Future[outcome.Outcome[Any]], result: outcome.Outcome[Any]) -> None:
    if not future.done():
        future.set_result(result)


def _abandon(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.cancel()


@final
class _LoopHost:
    """The asyncio loop the bridges of one Trio run share, on a thread of its own, while
    any of them is open (`open_asyncio_bridge` counts them)."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.users = 0
        self.loop = asyncio.new_event_loop()
        self._done = trio.Event()
        self._thread = threading.Thread(target=self._host, name="asyncio bridge", daemon=True)
        self._thread.start()

    def _host(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Stopped: cancel what is left, wait for it, join the executor's threads.
            leftover = asyncio.all_tasks(loop)
            for task in leftover:
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            self.token.run_sync_soon(self._done.set)

    async def close(self) -> None:
        """Stop the loop and wait until its thread has exited. Shielded and unbounded, as
        Trio waits for a ``to_thread`` call it cannot abandon: a sync function still
        running on one of the loop's threads (Python cannot stop a thread) is waited for."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        with trio.CancelScope(shield=True):
            await self._done.wait()
        self._thread.join()  # (it has set the event as its last act: this returns at once)


# The loop host of each Trio run with a bridge open (the Trio thread alone touches it).
_hosts: dict[trio.lowlevel.TrioToken, _LoopHost] = {}


@asynccontextmanager
async def open_asyncio_bridge(name: str) -> AsyncIterator[Bridge]:
    """A `Bridge` (named after ``name``) to the asyncio loop of this Trio run, for the
    block.

    The bridges open at once in one Trio run (the attempts of one runtime, most often)
    share one loop, on one thread, started by the first and stopped by the last to close:
    an HTTP client an asyncio library keeps for the process (pydantic-ai's providers do)
    belongs to the loop that opened its connections, so concurrent runs on loops of their
    own would share connections across loops. Leaving the block stops the Trio calls its
    asyncio code made and waits for what it ran on the loop (`Bridge.run` does), so none
    of it outlives the block; when no bridge is left open, the loop's remaining tasks are
    cancelled and waited for, its default executor shut down (its threads joined), and its
    thread exits.
    """
    token = trio.lowlevel.current_trio_token()
    host = _hosts.get(token)
    if host is None:
        host = _hosts[token] = _LoopHost(token)
    host.users += 1
    bridge = Bridge(host.loop, token, name)
    try:
        try:
            async with trio.open_nursery() as nursery:
                bridge._nursery = nursery
                try:
                    yield bridge
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # (No checkpoint since the nursery closed: no call could have been started.)
            bridge._nursery = None
    finally:
        host.users -= 1
        if host.users == 0:
            # Taken out first, so a bridge opened while this loop stops gets a new one.
            if _hosts.get(token) is host:
                del _hosts[token]
            await host.close()
