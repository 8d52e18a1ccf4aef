"""One runtime on a Trio thread of its own, and the hand-off of calls into it.

`RuntimeThread` is what both clients are built on. Its thread runs ``trio.run`` with
``open_runtime`` open and, inside that block, a nursery for calls. A call made from any
other thread is handed over with ``TrioToken.run_sync_soon`` and runs as a task of that
nursery, in a cancel scope of its own; its outcome is handed back through the caller's
`Deliver` callback (a thread's event, an asyncio future, another Trio run's event), so the
host decides how to wait and nothing here knows about asyncio.

Why a nursery and not ``trio.from_thread.run`` (which runs the call as a system task): a
call must live inside the runtime's block, so that closing can cancel the waits in flight
and wait for the rest before the runtime closes, and so that no call ever touches a closed
runtime.

Invariants:

* Every call handed over is delivered exactly once (`Call.deliver` keeps the first), even
  if the Trio thread dies: no caller waits forever. A call its caller abandoned is
  cancelled in the Trio thread, and its outcome delivered to nobody.
* Calls handed over before `RuntimeThread.close` start before the close begins
  (``run_sync_soon`` keeps FIFO order, and the state lock orders the hand-offs against the
  close); a call made after it raises `RuntimeClosed` at once.
* On close, calls that only wait (``abandon_on_close``) are cancelled and raise
  `RuntimeClosed`; every other call (a short store read or commit) runs to its end, so a
  control call accepted before the close is never cut in half.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, final

import outcome
import trio

from .._core import (
    AwakenError,
    Clock,
    Runtime,
    RuntimeClosed,
    Store,
)
from .._open import open_runtime

T = TypeVar("T")

Deliver = Callable[[outcome.Outcome[T]], None]
"""Hands a call's outcome to its caller. Called once, from the Trio thread (or from that
thread as it ends, after ``trio.run``); it must not block and must be safe from any
thread."""

Operation = Callable[[Runtime], Awaitable[T]]
"""What a call does, given the runtime, in the Trio thread."""


class ClientMisuse(AwakenError, RuntimeError):
    """A client was used where it cannot work: from its own Trio thread (the call would
    wait for the thread that is waiting), before it was opened, or, for `AsyncClient`,
    outside an event loop. The message says what to do instead."""


class _State(enum.Enum):
    NEW = "new"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@final
class Call(Generic[T]):
    """One call handed to the Trio thread. `abandon` may be called from any thread."""

    __slots__ = (
        "_deliver",
        "_delivered",
        "_lock",
        "_thread",
        "abandon_on_close",
        "operation",
        "scope",
    )

    def __init__(
        self,
        thread: RuntimeThread,
        operation: Operation[T],
        deliver: Deliver[T],
        *,
        abandon_on_close: bool,
    ) -> None:
        self._thread = thread
        self.operation = operation
        self._deliver = deliver
        self._delivered = False
        self._lock = threading.Lock()
        self.abandon_on_close = abandon_on_close
        # Made here, entered in the Trio thread: a cancel that arrives before the call
        # starts still cancels it (entering a cancelled scope cancels at the first
        # checkpoint). Only ever cancelled from the Trio thread.
        self.scope = trio.CancelScope()

    def deliver(self, result: outcome.Outcome[T]) -> None:
        """Hand ``result`` to the caller, unless an outcome was handed already."""
        with self._lock:
            if self._delivered:
                return
            self._delivered = True
        self._thread._forget(self)
        self._deliver(result)

    def abandon(self) -> None:
        """The caller stopped waiting (its task was cancelled, or its thread interrupted):
        cancel the call's scope in the Trio thread. A call that already finished is left
        as it is: whatever it committed stays committed."""
        self._thread._run_soon(self.scope.cancel)


@final
class RuntimeThread:
    """A runtime (no bodies, not serving) on a Trio thread of its own.

    `start` starts the thread, `call` hands it calls from any thread, `close` closes the
    runtime and lets the thread end; `join` waits for that. None of them blocks except
    `join`; each reports through a `Deliver` callback.
    """

    def __init__(self, store: str | Store, *, clock: Clock, poll: float) -> None:
        self._store = store
        self._clock = clock
        self._poll = poll
        self._lock = threading.Lock()
        self._state = _State.NEW
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._runtime: Runtime | None = None
        self._calls: trio.Nursery | None = None
        self._close_requested: trio.Event | None = None
        # Calls handed over and not yet delivered: failed with RuntimeClosed if the thread
        # ends without delivering them.
        self._pending: set[Call[Any]] = set()
        self._opened: Deliver[None] | None = None
        self._abandoned = False
        # What the Trio thread died of while the client was open, for the next close().
        self._died: BaseException | None = None
        self._closed: list[Deliver[None]] = []

    # ------------------------------------------------------------------ seen from any thread

    @property
    def token(self) -> trio.lowlevel.TrioToken | None:
        """The Trio thread's token, once the runtime is open."""
        return self._token

    @property
    def calls_in_flight(self) -> int:
        """How many calls were handed over and have not finished."""
        with self._lock:
            return len(self._pending)

    def in_own_thread(self) -> bool:
        """Whether the current thread is this runtime's Trio thread."""
        thread = self._thread
        return thread is not None and thread.ident == threading.get_ident()

    def start(self, opened: Deliver[None]) -> None:
        """Start the thread; ``opened`` gets ``Value(None)`` once the runtime is open, or
        the error that opening raised (the thread has then ended: `join` it)."""
        with self._lock:
            if self._state is not _State.NEW:
                raise ClientMisuse(
                    "a client opens once; make a new Client or AsyncClient for another block"
                )
            self._state = _State.OPENING
            self._opened = opened
            # A daemon: a client nobody closed must not keep the interpreter from exiting.
            # It holds no claims (it serves nothing), and SQLite rolls back a transaction
            # cut short, so nothing committed is at risk.
            self._thread = threading.Thread(
                target=self._main, name="awaken_trio.client runtime", daemon=True
            )
        self._thread.start()

    def call(
        self, operation: Operation[T], deliver: Deliver[T], *, abandon_on_close: bool
    ) -> Call[T]:
        """Hand ``operation`` to the Trio thread; ``deliver`` gets its outcome.

        Raises:
            RuntimeClosed: the client is closing or closed.
            ClientMisuse: it was never opened, or this is its own Trio thread.
        """
        if self.in_own_thread():
            raise ClientMisuse(
                "a client was called from its own Trio thread, which would wait for itself;"
                " call it from another thread (or task of another event loop)"
            )
        call = Call(self, operation, deliver, abandon_on_close=abandon_on_close)
        with self._lock:
            self._check_open()
            token = self._token
            assert token is not None
            try:
                # Under the lock: a close requested after this is scheduled after it (FIFO).
                token.run_sync_soon(self._start_call, call)
            except trio.RunFinishedError:
                # The Trio thread died while the client was open; _main is about to mark
                # it closed.
                raise RuntimeClosed(
                    "the client's runtime has stopped; open a new Client or AsyncClient"
                ) from None
            self._pending.add(call)
        return call

    def close(self, closed: Deliver[None]) -> None:
        """Close the runtime: waits in flight raise `RuntimeClosed`, other calls finish,
        then the runtime closes and the thread ends; ``closed`` is told when it has (at
        once if it already had). Closing again is harmless."""
        if self.in_own_thread():
            raise ClientMisuse(
                "a client was closed from its own Trio thread, which would wait for itself;"
                " close it from the thread or task that opened it"
            )
        with self._lock:
            state = self._state
            if state in (_State.OPEN, _State.CLOSING):
                self._closed.append(closed)
                if state is _State.OPEN:
                    self._state = _State.CLOSING
                    assert self._token is not None
                    # If the Trio thread already died, _main tells ``closed`` as it exits.
                    with contextlib.suppress(trio.RunFinishedError):
                        self._token.run_sync_soon(self._begin_close)
                return
            if state is _State.OPENING:
                raise ClientMisuse("a client cannot be closed while it is still opening")
            self._state = _State.CLOSED
            died, self._died = self._died, None
        closed(outcome.Error(died) if died is not None else outcome.Value(None))

    def abandon_open(self) -> None:
        """The opener stopped waiting for `start` (cancelled, interrupted): the runtime is
        closed as soon as it is open, and ``opened`` is not called. Not blocking."""
        with self._lock:
            if self._state is _State.OPENING:
                self._abandoned = True
                self._opened = None
                return
        self.close(_ignore)

    def join(self) -> None:
        """Wait for the thread to end (after `close`, or after a failed open)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _check_open(self) -> None:
        state = self._state
        if state is _State.OPEN:
            return
        if state in (_State.NEW, _State.OPENING):
            raise ClientMisuse(
                "the client is not open yet; use it inside 'with Client(...) as client:'"
                " or 'async with AsyncClient(...) as client:'"
            )
        raise RuntimeClosed(
            "the client is closed (its runtime closed when its block ended, or close() was"
            " called); open a new Client or AsyncClient"
        )

    def _run_soon(self, fn: Callable[[], object]) -> None:
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):  # the thread ended: nothing to cancel
            token.run_sync_soon(fn)

    def _forget(self, call: Call[T]) -> None:
        with self._lock:
            self._pending.discard(call)

    # ------------------------------------------------------------------ the Trio thread

    def _main(self) -> None:
        failure: BaseException | None = None
        try:
            trio.run(self._host)
        except BaseException as exc:  # handed to the opener or the closer, below
            failure = exc
        with self._lock:
            opening = self._state is _State.OPENING
            self._state = _State.CLOSED
            opened, self._opened = self._opened, None
            closed, self._closed = self._closed, []
            pending, self._pending = list(self._pending), set()
        gone = RuntimeClosed(
            "the client's runtime stopped before this call finished; open a new client"
        )
        for call in pending:  # only if the thread died: calls are delivered in _perform
            call.deliver(outcome.Error(gone))
        if opening and opened is not None:
            opened(outcome.Error(failure) if failure is not None else outcome.Value(None))
        if failure is None or opening:
            for deliver in closed:
                deliver(outcome.Value(None))
        elif closed:
            for deliver in closed:
                deliver(outcome.Error(failure))
        else:
            with self._lock:  # nobody is closing yet: the first close() raises it
                self._died = failure

    async def _host(self) -> None:
        async with (
            open_runtime(self._store, clock=self._clock, poll=self._poll) as runtime,
            trio.open_nursery() as calls,
        ):
            self._runtime = runtime
            self._calls = calls
            self._close_requested = trio.Event()
            with self._lock:
                self._token = trio.lowlevel.current_trio_token()
                opened, self._opened = self._opened, None
                if self._abandoned:
                    # The opener gave up while the runtime opened: close it again at once.
                    self._state = _State.CLOSING
                    self._close_requested.set()
                else:
                    self._state = _State.OPEN
            if opened is not None:
                opened(outcome.Value(None))
            await self._close_requested.wait()
            # Leaving the nursery waits for the calls that were not cancelled; then the
            # runtime closes.

    def _start_call(self, call: Call[T]) -> None:
        # In the Trio thread, in hand-off order: every call handed over before the close
        # starts before _begin_close runs, so the nursery is still open here.
        assert self._calls is not None
        self._calls.start_soon(self._perform, call)

    def _begin_close(self) -> None:
        assert self._close_requested is not None
        with self._lock:
            waits = [call for call in self._pending if call.abandon_on_close]
        for call in waits:
            call.scope.cancel()
        self._close_requested.set()

    async def _perform(self, call: Call[T]) -> None:
        runtime = self._runtime
        assert runtime is not None
        result: outcome.Outcome[T] | None = None
        with call.scope:
            try:
                result = outcome.Value(await call.operation(runtime))
            except Exception as exc:  # the runtime's own error, re-raised in the caller
                result = outcome.Error(exc)
        if result is None:
            # Cancelled before it finished: by the close (tell the caller), or by the
            # caller giving up (nobody listens; this just clears the call).
            result = outcome.Error(
                RuntimeClosed(
                    "the client was closed while this call was waiting; the run was not"
                    " changed by it: read its state with a new client"
                )
            )
        call.deliver(result)


def _ignore(result: outcome.Outcome[None]) -> None:
    """A `Deliver` for an outcome nobody waits for."""
