"""One OS thread that owns one resource (the SQLite connection) and runs jobs on it.

``sqlite3`` connections belong to the thread that made them, and Trio's worker threads are
not pinned (two calls may land on two threads), so the store keeps a thread of its own: it
opens the resource, takes jobs from a queue in order, and hands each result back to Trio
with ``run_sync_soon``, where the caller is waiting on an Event. A caller that is cancelled
abandons its wait, never the job: a write that was handed over is finished and committed
(or rolled back) whatever happens to the task that asked for it.

The thread lives exactly as long as the store: it is started by opening and ends after
`ResourceThread.aclose` (or after a failed open), having closed the resource.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, final

import attrs
import outcome
import trio

T = TypeVar("T")


class Closeable(Protocol):
    def close(self) -> None: ...


R = TypeVar("R", bound=Closeable)


@final
@attrs.define(eq=False)
class _Job(Generic[R, T]):
    fn: Callable[[R], T]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: outcome.Outcome[T] | None = None


def _finish(job: _Job[R, T], result: outcome.Outcome[T]) -> None:
    job.result = result
    job.done.set()


@final
class _Worker(Generic[R]):
    """What the thread itself holds: never the `ResourceThread`, so a store dropped
    without being closed can still be collected, and its finalizer can stop the thread."""

    def __init__(self, opener: Callable[[], R], token: trio.lowlevel.TrioToken) -> None:
        self.opener = opener
        self.token = token
        self.queue: queue.SimpleQueue[_Job[R, object] | None] = queue.SimpleQueue()
        self.stopped = trio.Event()

    def main(self, opened: _Job[R, None]) -> None:
        try:
            resource = self.opener()
        except BaseException as exc:
            self.deliver(opened, outcome.Error(exc))
            self.deliver_stopped()
            return
        self.deliver(opened, outcome.Value(None))
        try:
            while (job := self.queue.get()) is not None:
                self.deliver(job, outcome.capture(job.fn, resource))
        finally:
            resource.close()
            self.deliver_stopped()

    def deliver(self, job: _Job[R, T], result: outcome.Outcome[T]) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # nobody is left to wait for it
            self.token.run_sync_soon(_finish, job, result)

    def deliver_stopped(self) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.stopped.set)


@final
class ResourceThread(Generic[R]):
    """A thread named ``name`` that opens a resource with ``opener`` and runs jobs on it."""

    def __init__(self, name: str, opener: Callable[[], R]) -> None:
        self._name = name
        self._opener = opener
        self._worker: _Worker[R] | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    async def start(self) -> None:
        """Start the thread and open the resource on it; raises what opening raised (the
        thread has ended then). Called once."""
        assert self._worker is None
        worker = self._worker = _Worker(self._opener, trio.lowlevel.current_trio_token())
        opened: _Job[R, None] = _Job(_nothing)
        self._thread = threading.Thread(
            target=worker.main, args=(opened,), name=self._name, daemon=True
        )
        self._thread.start()
        # A store dropped without aclose() must not keep its thread (and file) forever.
        self._finalizer = weakref.finalize(self, worker.queue.put, None)
        await opened.done.wait()
        assert opened.result is not None
        if isinstance(opened.result, outcome.Error):
            await worker.stopped.wait()
            self._thread.join()
        opened.result.unwrap()

    async def run(self, fn: Callable[[R], T]) -> T:
        """Run ``fn(resource)`` on the thread, after every job handed over before it."""
        worker = self._worker
        assert worker is not None
        if worker.token is not trio.lowlevel.current_trio_token():
            raise RuntimeError("this store was opened in another Trio run; open one per run")
        if self._closing:  # a job behind the closing marker would never be run
            raise trio.ClosedResourceError("the store's thread is closing")
        job: _Job[R, T] = _Job(fn)
        worker.queue.put(job)  # type: ignore[arg-type]
        await job.done.wait()
        assert job.result is not None
        return job.result.unwrap()

    async def aclose(self) -> None:
        """Close the resource after the jobs already handed over, and end the thread."""
        worker, thread = self._worker, self._thread
        if worker is None or thread is None:
            await trio.lowlevel.checkpoint()
            return
        self._closing = True
        if self._finalizer is not None:
            self._finalizer.detach()
        worker.queue.put(None)
        if worker.token is not trio.lowlevel.current_trio_token():
            # Opened in a Trio run that has ended: nobody can be told the thread stopped,
            # so wait for it from a worker thread.
            await trio.to_thread.run_sync(thread.join)
            return
        await worker.stopped.wait()
        # The thread has nothing left to do but return, so this join is immediate.
        thread.join()

    @property
    def name(self) -> str:
        return self._name


def _nothing(_: object) -> None:
    return None
