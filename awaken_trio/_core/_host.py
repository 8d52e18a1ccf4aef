"""What an attempt needs from the supervisor that runs it.

The actor and `RunContext` see their supervisor through this narrow protocol, never its
internals: committing an attempt's progress, events and end, starting children, and the
runtime's shutdown state. A supervisor that adds durable claims keeps this surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from trio_util import RepeatedEvent

from ._json import FrozenDict, JsonValue

if TYPE_CHECKING:
    from ._attempt import Attempt, Body, EndRequest
    from ._handle import RunHandle
    from ._verdict import Verdict


class AttemptHost(Protocol):
    @property
    def closing(self) -> bool:
        """Shutdown has begun: every actor's scope is being cancelled."""
        ...

    @property
    def shutdown_request(self) -> EndRequest | None:
        """Why attempts end at shutdown, once it has begun."""
        ...

    async def start_run(
        self,
        body: Body,
        *,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
        parent: Attempt | None,
    ) -> RunHandle:
        """Commit a new run (a child when ``parent`` is given) and start its attempt."""
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

    async def finish(self, attempt: Attempt, verdict: Verdict) -> None:
        """Commit the attempt's end; never raises."""
        ...

    def interrupted(self, exc: BaseException) -> None:
        """A KeyboardInterrupt or SystemExit reached a run's task: shut down."""
        ...
