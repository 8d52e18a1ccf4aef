"""Helpers for the durable-layer tests: several runtimes sharing one `MemoryStore(shared=True)`
in one process, on Trio's virtual clock.

Every runtime here reads ``trio.current_time`` as its clock, so leases, tickets and event
times follow the virtual clock and a test can let a lease pass with ``trio.sleep``.

Fault injection (the only use of internals): `Stall` makes a runtime stop renewing its
claims, as a stalled process would, by emptying its supervisor's ``held`` map; restoring it
makes the next renewal report the claims lost. Everything the tests assert goes through the
public API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any

import trio
import trio.testing

from awaken_trio import (
    EndCause,
    EventKind,
    EventStream,
    RunContext,
    RunEvent,
    RunHandle,
    RunState,
    Runtime,
    VersionedBody,
    open_runtime,
)
from awaken_trio.store import Store
from awaken_trio.worker._cadence import IDLE_CEILING
from awaken_trio.worker._claims import ClaimBook

Body = Callable[[RunContext], Any]

LEASE = 10.0
POLL = 0.05
# What "within the poll bound" means here: a signal takes effect within a few intervals.
POLL_BOUND = 4 * POLL

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))
OWNER_LOST = RunState.Ended(EndCause.Indeterminate("owner lost"))


def shared_runtime(
    store: Store,
    *,
    bodies: Mapping[str, Body | VersionedBody] | None = None,
    lease: float = LEASE,
    poll: float = POLL,
    max_recoveries: int = 3,
) -> Any:
    """``open_runtime`` on the shared store, on the virtual clock."""
    return open_runtime(
        store,
        clock=trio.current_time,
        bodies=bodies,
        lease=lease,
        poll=poll,
        max_recoveries=max_recoveries,
    )


@asynccontextmanager
async def serving(runtime: Runtime, concurrency: int = 8) -> AsyncIterator[None]:
    """``runtime.serve`` in a nursery of its own for the block; cancelled when it ends."""
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(runtime.serve, concurrency=concurrency))
        yield
        nursery.cancel_scope.cancel()


class Stall:
    """While active, ``runtime`` renews none of its claims (a stalled process); leaving
    restores them, so its next renewal finds them lost."""

    def __init__(self, runtime: Runtime) -> None:
        book = runtime._supervisor.kernel.claims
        assert isinstance(book, ClaimBook), "a stall needs a durable store's claims"
        self._book = book
        self._held: dict[str, int] = {}

    def __enter__(self) -> Stall:
        self._held = dict(self._book.held)
        assert self._held, "a stall needs a claim to stall"
        self._book.held.clear()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._book.held.update(self._held)


async def past_lease(lease: float = LEASE) -> None:
    """Let virtual time run past a lease, and past the longest wait of an idle serving
    loop (which finds the lapse), and a few polls more."""
    await trio.sleep(lease + IDLE_CEILING + 10 * POLL)


class Follower:
    """Collects a followed event stream as it comes, with the time each event arrived."""

    def __init__(self, stream: EventStream) -> None:
        self._stream = stream
        self.events: list[RunEvent] = []
        self.arrived: list[float] = []

    async def run(self) -> None:
        async for event in self._stream:
            self.events.append(event)
            self.arrived.append(trio.current_time())


async def history(runtime: Runtime, run_id: str | None = None) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]


def committed(events: list[RunEvent]) -> list[RunEvent]:
    return [e for e in events if e.kind == EventKind.COMMITTED]


def terminal(events: list[RunEvent]) -> list[RunEvent]:
    return [e for e in committed(events) if isinstance(e.state, RunState.Ended)]


async def terminal_event(runtime: Runtime, run_id: str) -> RunEvent:
    ends = terminal(await history(runtime, run_id))
    assert len(ends) == 1, ends
    return ends[0]


async def settle(handle: RunHandle, seconds: float = 600) -> RunState:
    """The handle's committed end; a failure instead of a hang."""
    with trio.fail_after(seconds):
        return await handle.wait()


async def reach(event: trio.Event, seconds: float = 600) -> None:
    with trio.fail_after(seconds):
        await event.wait()


async def until_state(
    runtime: Runtime, run_id: str, wanted: Callable[[RunState], bool], seconds: float = 600
) -> RunState:
    """Poll the committed state (virtual time) until ``wanted`` holds for it."""
    with trio.fail_after(seconds):
        while True:
            state = await runtime.state(run_id)
            if wanted(state):
                return state
            await trio.sleep(POLL)


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 600) -> None:
    """Poll ``check`` (virtual time) until it holds."""
    with trio.fail_after(seconds):
        while True:
            if await check():
                return
            await trio.sleep(POLL)


def is_running(state: RunState) -> bool:
    return isinstance(state, RunState.Running)


def is_ended(state: RunState) -> bool:
    return isinstance(state, RunState.Ended)
