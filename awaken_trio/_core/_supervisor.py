"""The supervisor: the one actor that owns the kernel's state and the finish boundary.

It owns the `Kernel` (the active-attempt registry, the thread gate, the queued attempts,
the clock and the store's mailbox) and the parts that act on it, each an object over that
one state, none with state of its own that another part reads:

- `Admissions` (``_admit``): attempts get in (commit ``Running`` or ``Queued``, spawn the
  actor), and where a run is (`Admissions.locate`);
- `Progress` (``_progress``): a running attempt's own commits;
- `FinishBoundary` (``_finish``): the one place an attempt's end is committed and the
  attempt let go;
- `Serving` (``_serving``): what the worker's serving loop is handed.

Who writes the store: the supervisor's parts commit every state through its mailbox (a
single writer, so commits share transactions), `Admissions.post` stores live commands;
the worker's claim book renews and releases claims and its serving loop recovers lost runs,
through the store's own verbs (DESIGN §3.1: those are claim calls, fenced by epochs).

The supervisor itself keeps the lifetime: the nursery the top-level actors live in (only
shutdown cancels it, never the code that opened the runtime), shutdown, and interrupts. It
is the `AttemptHost` every actor and `RunContext` sees: its parts' operations, bound once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, final

import trio
from trio_util import RepeatedEvent

from ._admit import Admissions
from ._attempt import HAND_BACK, HANDED_BACK_WITH_PARENT, SHUTDOWN, Attempt, EndRequest
from ._claims import ClaimPolicy
from ._commits import CommitMailbox
from ._expire import Expiry
from ._finish import FinishBoundary
from ._handle import RunHandle
from ._handles import Handles
from ._json import DEFAULT_MAX_PAYLOAD_BYTES, FrozenDict, JsonValue
from ._kernel import Clock, Kernel, VerifierFactory
from ._progress import Progress
from ._retry import Retries
from ._schedule import Scheduler
from ._serving import Serving
from ._spec import RunSpec
from ._storage import Store, StreamingStore
from ._streams import StreamFlusher

if TYPE_CHECKING:
    from ._observe import AttemptObserver
    from ._state import RunEvent
    from ._verdict import Verdict

__all__ = ["Clock", "Supervisor", "VerifierFactory"]


@final
class Supervisor:
    """Owns the kernel's state and its parts (see the module docstring)."""

    # The AttemptHost's operations: the parts' own methods, bound once at construction
    # (an actor calls them on every run's path).
    start_run: Callable[[RunSpec], Coroutine[Any, Any, RunHandle]]
    begin_queued: Callable[[Attempt], Coroutine[Any, Any, bool]]
    load_commands: Callable[[Attempt], Coroutine[Any, Any, None]]
    commit_progress: Callable[[Attempt, JsonValue, int], Coroutine[Any, Any, None]]
    hand_over: Callable[[Attempt], Coroutine[Any, Any, list[JsonValue]]]
    emit: Callable[[Attempt, str, FrozenDict], Coroutine[Any, Any, None]]
    load_steps: Callable[[Attempt], Coroutine[Any, Any, list[RunEvent]]]
    commit_step: Callable[[Attempt, str, JsonValue], Coroutine[Any, Any, None]]
    finish: Callable[[Attempt, Verdict], Coroutine[Any, Any, None]]
    end_plainly: Callable[[Attempt, object], bool]
    flush_streams: Callable[[Attempt], Coroutine[Any, Any, None]]
    now: Callable[[], float]

    def __init__(
        self,
        store: Store,
        clock: Clock,
        claims: ClaimPolicy,
        *,
        max_batch: int = 1024,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        verifier_factory: VerifierFactory | None = None,
        observer: AttemptObserver | None = None,
    ) -> None:
        self.mailbox = CommitMailbox(store, max_batch=max_batch, on_interrupt=self.interrupted)
        # Scheduled resumes (ctx.sleep) committed here; its task runs as a kernel service.
        self.scheduler = Scheduler(self._scheduler_clock)
        self.kernel = kernel = Kernel(
            store,
            self.mailbox,
            clock,
            claims,
            max_payload_bytes=max_payload_bytes,
            verifier_factory=verifier_factory,
            observer=observer,
            on_scheduled=self.scheduler.schedule,
            on_retry=self.scheduler.retry_at,
            on_limits=self.scheduler.limits,
            on_interrupt=self.interrupted,
        )
        self.handles = Handles(kernel)
        self.finish_boundary = finish = FinishBoundary(kernel)
        self.admissions = admissions = Admissions(kernel, finish, self.handles, self)
        self.progress = progress = Progress(kernel)
        # Runs meet their time limits: the timer's and the serving loops' ends.
        self.expiry = Expiry(kernel, admissions, finish)
        # Runs that failed here are tried again here: the timer's retries.
        self.retries = Retries(kernel, admissions)
        self.serving = Serving(kernel, admissions, self.expiry)
        self.start_run = admissions.start_run
        self.begin_queued = admissions.begin_queued
        self.load_commands = admissions.load_commands
        self.commit_progress = progress.commit_progress
        self.hand_over = progress.hand_over
        self.emit = progress.emit
        self.load_steps = progress.load_steps
        self.commit_step = progress.commit_step
        self.finish = finish.finish
        self.end_plainly = finish.end_plainly
        self.flush_streams = progress.flush_chunks
        # Chunks streams hold, handed to the mailbox; its task runs as a kernel service.
        self.flusher = StreamFlusher(progress.post_chunks)
        self.stream_pending = self.flusher.mark
        self.keeps_streams = isinstance(store, StreamingStore)
        self.now = kernel.now
        self.checkpoint_before_commit = kernel.checkpoint_before_commit
        self.max_payload_bytes = max_payload_bytes
        self.store_changed: RepeatedEvent = kernel.store_changed
        self.interrupt: BaseException | None = None
        self._system_scope: trio.CancelScope | None = None
        self.actors_done = trio.Event()

    def _scheduler_clock(self) -> float:
        return self.kernel.now()

    # ------------------------------------------------------------------ what actors see

    @property
    def closing(self) -> bool:
        return self.kernel.closing

    @property
    def shutdown_request(self) -> EndRequest | None:
        return self.kernel.shutdown_request

    @property
    def poll_interval(self) -> float:
        return self.kernel.claims.poll

    # ------------------------------------------------------------------ lifetime

    def begin_shutdown(self) -> None:
        """Refuse new attempts, tell every attempt why it ends, and cancel every actor
        (sync: safe from any task). Telling each attempt first makes shutdown the cause
        it records, whatever request arrives while it unwinds."""
        kernel = self.kernel
        if kernel.closing:
            return
        kernel.closing = True
        kernel.shutdown_request = SHUTDOWN
        for attempt in (*kernel.registry.all(), *kernel.queued.values()):
            attempt.request_end(self._leaving(attempt))
        actors = self.admissions.actors_nursery_or_none()
        if actors is not None:
            actors.cancel_scope.cancel(reason="runtime shutdown")
        self.admissions.close()

    def _leaving(self, attempt: Attempt) -> EndRequest:
        """Why ``attempt`` ends at shutdown. On a durable store a named root run goes back
        to Queued for another runtime, and its descendants with it (rule 22: its next
        attempt takes them back); anything else ends Stopped, children first."""
        root = attempt
        while root.parent is not None:
            root = root.parent
        if not self.kernel.claims.hands_back(root):
            return SHUTDOWN
        return HAND_BACK if attempt.parent is None else HANDED_BACK_WITH_PARENT

    def interrupted(self, exc: BaseException) -> None:
        """A KeyboardInterrupt or SystemExit reached runtime code or a run's task: shut
        down, stop the block that opened the runtime, and raise it when the runtime closes."""
        if self.interrupt is None:
            self.interrupt = exc
        self.begin_shutdown()
        if self._system_scope is not None:
            self._system_scope.cancel(reason="interrupted")

    async def host_actors(
        self, system_scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]
    ) -> None:
        """Own the actors' nursery. Only shutdown cancels it, never the caller's scopes."""
        self._system_scope = system_scope
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as actors:
                    self.admissions.open(actors)
                    task_status.started()
                    # Stay open for admissions already under way; shutdown cancels the rest.
                    await self.admissions.closed.wait()
                # The actors are done once the ends they handed over with no task waiting
                # are answered too (the mailbox runs until `close` below).
                await self.finish_boundary.ends_answered()
        finally:
            self.actors_done.set()
            self.mailbox.close()
