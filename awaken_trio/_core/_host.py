"""What the layers around the supervisor need from it, and what it needs from them.

- `AttemptHost`: what an attempt needs from the supervisor that runs it. The actor and
  `RunContext` see their supervisor through it, never its internals: committing an
  attempt's progress, events and end, starting children, the runtime's shutdown state.
- `ServingHost`: what durable serving (``awaken_trio.worker``) needs: claiming and starting
  runs found in the store, applying commands stored for them, learning of ends committed
  elsewhere, losing a claim. The worker is typed against it alone, and handed the
  supervisor's `Serving` part, never the supervisor.
- `ClaimSettings`: how a runtime claims runs on a durable store (the claim policy itself,
  `ClaimPolicy`, is in ``_claims``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, final

import attrs
import trio
from trio_util import RepeatedEvent

from ._json import FrozenDict, JsonValue

if TYPE_CHECKING:
    from ._attempt import Attempt, EndRequest
    from ._handle import RunHandle
    from ._spec import RunSpec
    from ._state import Ended, RunEvent, RunRecord
    from ._storage import Fence, Overdue, Store, StoredCommand
    from ._streams import StreamOutbox
    from ._verdict import Verdict
    from ._versions import BodyVersions


class AttemptHost(Protocol):
    @property
    def closing(self) -> bool:
        """Shutdown has begun: every actor's scope is being cancelled."""
        ...

    @property
    def shutdown_request(self) -> EndRequest | None:
        """Why attempts end at shutdown, once it has begun."""
        ...

    async def start_run(self, spec: RunSpec) -> RunHandle:
        """Commit a new run (a child when ``spec.parent`` is given) and start its attempt."""
        ...

    @property
    def max_payload_bytes(self) -> int:
        """The most characters of compact JSON text one payload may take."""
        ...

    @property
    def poll_interval(self) -> float:
        """How often a waiter looks at the store again even if nothing signalled."""
        ...

    @property
    def store_changed(self) -> RepeatedEvent:
        """Set whenever the store may have changed elsewhere."""
        ...

    async def begin_queued(self, attempt: Attempt) -> bool:
        """The queued attempt got its thread: commit ``Running``; False if the thread is
        still busy in another runtime."""
        ...

    async def load_commands(self, attempt: Attempt) -> None:
        """Durable stores: apply the commands stored for the run before the attempt began."""
        ...

    @property
    def checkpoint_before_commit(self) -> Callable[[], Awaitable[None]]:
        """The checkpoint of a call that commits next (its cancel point; the schedule
        point too unless the commit itself yields)."""
        ...

    def now(self) -> float:
        """The runtime's wall clock."""
        ...

    async def commit_progress(self, attempt: Attempt, progress: JsonValue, steps: int) -> None:
        """Commit the attempt's progress as the run's checkpoint."""
        ...

    async def hand_over(self, attempt: Attempt) -> list[JsonValue]:
        """The messages a boundary returns when the store holds some of them: their
        consumption committed first."""
        ...

    async def emit(self, attempt: Attempt, kind: str, detail: FrozenDict) -> None:
        """Commit an event of the body's own kind."""
        ...

    async def load_steps(self, attempt: Attempt) -> list[RunEvent]:
        """The run's committed ``step`` events (read once per attempt, at its first step)."""
        ...

    async def commit_step(self, attempt: Attempt, name: str, result: JsonValue) -> None:
        """Journal a step's result under the next index of its name."""
        ...

    async def finish(self, attempt: Attempt, verdict: Verdict) -> None:
        """Commit the attempt's end; never raises."""
        ...

    def end_plainly(self, attempt: Attempt, value: object) -> bool:
        """Commit the common end (the body returned ``value``, nobody asked the attempt to
        end, it has no child) in the caller's step if nothing else is to be done; False,
        having done nothing, for `finish` to commit it. Never raises."""
        ...

    @property
    def keeps_streams(self) -> bool:
        """Whether the store keeps streams (it is a `StreamingStore`)."""
        ...

    def stream_pending(self, outbox: StreamOutbox) -> None:
        """The attempt's outbox holds chunks: hand them to the mailbox soon (the flusher)."""
        ...

    async def flush_streams(self, attempt: Attempt) -> None:
        """Commit the chunks the attempt's outbox holds, and wait for the answer."""
        ...

    def interrupted(self, exc: BaseException) -> None:
        """A KeyboardInterrupt or SystemExit reached a run's task: shut down."""
        ...


@final
@attrs.frozen
class ClaimSettings:
    """How a runtime on a durable store claims runs: its owner id, the lease it holds
    them for (renewed every third of it), how often it polls the store for what other
    runtimes did, and how many times a run is re-executed after losing its owner."""

    owner: str
    lease: float
    poll: float
    max_recoveries: int


class ServedRun(Protocol):
    """An attempt a serving loop started, as the loop sees it."""

    @property
    def run_id(self) -> str: ...

    def counts_toward_concurrency(self) -> bool:
        """False once the attempt has ended, or has lost its claim (it may still be
        unwinding, but the run is another runtime's to execute)."""
        ...


Started = ServedRun | None | Exception
"""How a run a look found was started (`ServingHost.post_stored`): its attempt; None if it
was not this runtime's to start after all; or what the store or the commit raised."""


@final
@attrs.frozen
class HeardEnd:
    """An end committed by another runtime, as its transaction announced it (PostgreSQL:
    in the ``NOTIFY`` sent after the transaction's ``COMMIT``, so only once it committed),
    so it is as true as a read of the store.

    ``epoch`` is the claim epoch of the attempt the end stopped (the run's live-attempt
    mark when it was ended), and the commit's events come after ``after_seq``: together
    they say which attempt it ended, so a notice that arrives late never ends a later
    attempt of a run of the same id.
    """

    run_id: str
    state: Ended
    epoch: int
    after_seq: int


@final
@attrs.frozen(eq=False)
class Watched:
    """The attempts here that control from other runtimes may reach, taken at one moment:
    running ones and those waiting for their thread (a cancel ends those at once)."""

    _attempts: tuple[Attempt, ...]

    @property
    def run_ids(self) -> list[str]:
        return [attempt.run_id for attempt in self._attempts]

    @property
    def fresh(self) -> bool:
        """Some attempt's stored commands were never read (read it from its first)."""
        return any(not attempt.relayed for attempt in self._attempts)

    def running(self) -> list[str]:
        """The runs among them whose attempt has started by now (an end committed
        elsewhere stops those)."""
        return [attempt.run_id for attempt in self._attempts if attempt.started]

    def mark_relayed(self) -> None:
        """Every command stored for them so far has been read."""
        for attempt in self._attempts:
            attempt.relayed = True


class ServingHost(Protocol):
    """What serving needs from the supervisor (see the module docstring)."""

    @property
    def store(self) -> Store: ...

    @property
    def claims(self) -> ClaimSettings | None:
        """How this runtime claims runs; None on a store without claims."""
        ...

    @property
    def poll_interval(self) -> float: ...

    def names(self) -> list[str]:
        """The names bodies are registered under here."""
        ...

    def served(self) -> Mapping[str, BodyVersions]:
        """The names bodies are registered under here, each with the versions of runs
        its body may run (what `DurableStore.recover` is given as its ``names``)."""
        ...

    def now(self) -> float:
        """The runtime's wall clock (checked)."""
        ...

    def changed_event(self) -> trio.Event:
        """An event set by the next change (a commit here, or one seen elsewhere); take it
        before looking, so a change in between is not missed."""
        ...

    async def changed(self, local: trio.Event, *, interval: float | None = None) -> bool:
        """Wait until ``local`` is set or ``interval`` passes; whether it was set."""
        ...

    def thread_taken(self, thread_id: str) -> bool:
        """Whether an attempt here holds the thread."""
        ...

    async def start_stored(self, record: RunRecord, *, fence: Fence | None) -> ServedRun | None:
        """Start an attempt of a root run found in the store (queued, due for its
        scheduled resume, or recovered under ``fence``); None if it is not this runtime's
        to start after all. Raises `StoreError` if the store failed."""
        ...

    def post_stored(self, record: RunRecord, done: Callable[[Started], None]) -> None:
        """`start_stored` for a run a look found, without a task: sync; ``done`` is called
        in the commit's step with the attempt, None if it is not this runtime's to start
        after all, or what the store or the commit raised.

        Raises:
            RuntimeClosed: the runtime is shutting down (nothing was handed over).
        """
        ...

    def watched(self) -> Watched:
        """The attempts here that stored commands and ends made elsewhere may reach."""
        ...

    async def end_overdue(self, found: Overdue) -> None:
        """End a run the store found past a time limit (`DeadlineStore.overdue`), unless it
        moved on meanwhile. Raises `StoreError` if the store failed."""
        ...

    def apply_stored(self, command: StoredCommand) -> None:
        """Apply a command stored for a run whose attempt is here (once)."""
        ...

    def ended_elsewhere(self, run_id: str, state: Ended) -> None:
        """Another runtime committed the run's end: its attempt here stops at once and
        commits nothing."""
        ...

    def heard_end(self, end: HeardEnd) -> None:
        """As `ended_elsewhere`, for an end heard of before the store was read: it stops
        the run's attempt here only if that is the attempt the end was committed against
        (its claim epoch, and admitted no later than the end)."""
        ...

    def store_changed_elsewhere(self) -> None:
        """Another runtime changed the store: wake everything that waits on it."""
        ...

    def streams_written_elsewhere(self) -> None:
        """Another runtime wrote stream chunks (a notice from the store): wake the stream
        readers here. Cheap when there are none."""
        ...

    def lose(self, run_id: str, why: str) -> bool:
        """This runtime's claim on the root run is lost: its attempt stops at once. False
        when no attempt of it was left to stop here (its end is committed or being
        committed: a claim its own end dropped reads as lost to a renewal in flight)."""
        ...


class Serve(Protocol):
    """The serving loop `Runtime.serve` runs (the worker's): claims and runs stored runs
    through ``host`` until cancelled, at most ``concurrency`` root attempts at once."""

    async def __call__(
        self,
        host: ServingHost,
        concurrency: int,
        *,
        task_status: trio.TaskStatus[None] = ...,
    ) -> None: ...
