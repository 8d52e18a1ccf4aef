"""What each client call does in the Trio thread, given the client's runtime.

Both clients hand these to `RuntimeThread.call`; they are the runtime's own calls (a
control's, through the faces' controls table, `awaken_trio._face.controls`), with the few
answers a caller outside Trio needs in another shape (a run id instead of a handle, the
state a resume committed, a list of events instead of a stream).
"""

from __future__ import annotations

import math

import trio

from .._core import (
    Awaiting,
    Ended,
    EventKind,
    IfBusy,
    InvalidArgument,
    JsonValue,
    LiveCommand,
    RetryPolicy,
    RunEvent,
    RunRecord,
    RunState,
    Runtime,
    RuntimeClosed,
    safe_repr,
)
from .._face.controls import control

_PAGE = 1000
"""How many events one store read asks for."""


def check_timeout(timeout: float | None) -> float:
    """``wait``'s ``timeout`` in seconds (``inf`` for None); refused before any hand-off."""
    if timeout is None:
        return math.inf
    if type(timeout) not in (int, float) or not timeout >= 0:
        raise InvalidArgument(
            f"wait() needs timeout=None or a number of seconds >= 0, not {safe_repr(timeout)}"
        )
    return float(timeout)


def check_after(after: int) -> int:
    """``events``' ``after``: a seq, refused before any hand-off."""
    if type(after) is not int or after < 0:
        raise InvalidArgument(f"events() needs after= an int seq >= 0, not {safe_repr(after)}")
    return after


def settled(state: RunState) -> bool:
    """Whether ``wait`` returns this state: the run awaits, or has ended."""
    return isinstance(state, Awaiting | Ended)


async def submit(
    runtime: Runtime,
    name: str,
    input: JsonValue,
    run_id: str | None,
    thread_id: str | None,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - the run's deadline, not this call's
    deadline: float | None = None,
    queue_timeout: float | None = None,
    not_before: float | None = None,
    if_busy: IfBusy = "queue",
    retry: RetryPolicy | None = None,
) -> str:
    handle = await runtime.submit(
        name,
        input=input,
        run_id=run_id,
        thread_id=thread_id,
        timeout=timeout,
        deadline=deadline,
        queue_timeout=queue_timeout,
        not_before=not_before,
        if_busy=if_busy,
        retry=retry,
    )
    return handle.run_id


async def fork(runtime: Runtime, run_id: str, at: int | None, new_run_id: str | None) -> str:
    handle = await runtime.fork(run_id, at=at, new_run_id=new_run_id)
    return handle.run_id


async def cancel_run(runtime: Runtime, run_id: str, reason: str | None) -> RunState:
    return await control(runtime, "cancel", run_id, {"reason": reason})


async def stop_run(runtime: Runtime, run_id: str, reason: str) -> RunState:
    return await control(runtime, "stop", run_id, {"reason": reason})


async def resume(
    runtime: Runtime, run_id: str, value: JsonValue, correlation_id: str | None
) -> RunState:
    # The client has no bodies, so the resume was committed Queued for a serving runtime;
    # read back after it (`control`), the state may already be that runtime's next commit.
    arguments: dict[str, JsonValue] = {"value": value, "correlation_id": correlation_id}
    return await control(runtime, "resume", run_id, arguments)


async def send(runtime: Runtime, command: LiveCommand) -> None:
    await runtime.send(command)


async def state(runtime: Runtime, run_id: str) -> RunState:
    return await runtime.state(run_id)


async def record(runtime: Runtime, run_id: str) -> RunRecord:
    return await runtime.record(run_id)


async def events(runtime: Runtime, run_id: str | None, after: int) -> list[RunEvent]:
    """Committed events with ``seq > after`` (of one run, or of all), oldest first, as the
    store holds them when the call reads its last page."""
    return [event async for event in runtime.events(run_id, after=after, follow=False)]


async def wait(runtime: Runtime, run_id: str, seconds: float) -> RunState:
    """The run's committed state once it is ``Awaiting`` or ``Ended``: at once if it is
    now, else the first such state committed after this call read the run's history.

    ``seconds`` bounds the waiting for a new state (a run that has settled already is
    answered even with ``timeout=0``).
    """
    deadline = trio.current_time() + seconds
    current = await runtime.state(run_id)  # UnknownRun; the cheap answer for a settled run
    if settled(current):
        return current
    # Where the run's history stands now: a state committed after this is news.
    seen = 0
    for event in await events(runtime, run_id, 0):
        seen = event.seq
        if event.kind == EventKind.COMMITTED:
            current = event.state
    if settled(current):
        return current
    with trio.move_on_at(deadline) as waiting:
        async for event in runtime.events(run_id):
            if event.seq <= seen or event.kind != EventKind.COMMITTED:
                continue
            current = event.state
            if settled(current):
                return current
    if not waiting.cancelled_caught:
        # A run's events end with its terminal event, which returned above; a stream that
        # ends before that means the runtime closed under it.
        raise RuntimeClosed(f"the client's runtime closed while waiting for run {run_id!r}")
    raise TimeoutError(
        f"run {run_id!r} was still {current!r} after {seconds} s (it has neither awaited nor"
        " ended); wait again, or end it with cancel_run or stop_run"
    )
