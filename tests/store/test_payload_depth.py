"""A payload nested as deep as the JSON check allows is accepted in every position (input,
progress, result, ticket payload, resume value, message, event detail) and read back
unchanged from every store, however the store wraps it (a message carried over a pause, a
message or a late result recorded as discarded); one level deeper is refused at the call,
and the store's history stays readable either way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from awaken_trio import (
    EndCause,
    EventKind,
    InvalidPayload,
    LiveCommand,
    RunContext,
    RunHandle,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio._core import check_json


def nested(levels: int) -> Any:
    """A JSON array ``levels`` levels deep."""
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def _deepest_accepted() -> int:
    levels = 1
    while True:
        try:
            check_json(nested(levels + 1), "probe")
        except InvalidPayload:
            return levels
        levels += 1


LIMIT = _deepest_accepted()
AT_LIMIT = nested(LIMIT)
OVER = nested(LIMIT + 1)
DETAIL_AT_LIMIT = {"deep": nested(LIMIT - 1)}
DETAIL_OVER = {"deep": nested(LIMIT)}


@pytest.fixture(params=["memory", "sqlite"])
async def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runtime]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_runtime(url) as runtime:
        yield runtime


async def _readable(runtime: Runtime, run_id: str) -> list[Any]:
    """Everything the store holds stays readable: the run's record and state, and the
    history of every run; the run's events, returned."""
    await runtime.record(run_id)
    await runtime.state(run_id)
    every = [event async for event in runtime.events(follow=False)]
    assert every
    return [event async for event in runtime.events(run_id, follow=False)]


def test_the_limit_is_the_json_checks() -> None:
    assert LIMIT >= 100
    with pytest.raises(InvalidPayload, match="nested deeper"):
        check_json(OVER, "probe")


async def _returns_none(ctx: RunContext) -> object:
    return None


async def test_input(runtime: Runtime) -> None:
    handle = await runtime.start(_returns_none, input=AT_LIMIT)
    assert await handle.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record(handle.run_id)).input == AT_LIMIT
    await _readable(runtime, handle.run_id)
    with pytest.raises(InvalidPayload, match="nested deeper"):
        await runtime.start(_returns_none, input=OVER)


@pytest.mark.parametrize("value", [AT_LIMIT, OVER], ids=["at_limit", "over"])
async def test_progress(runtime: Runtime, value: Any) -> None:
    async def body(ctx: RunContext) -> object:
        try:
            await ctx.boundary(value)
        except InvalidPayload:
            return "refused"
        return None

    handle = await runtime.start(body)
    await handle.wait()
    record = await runtime.record(handle.run_id)
    if value is OVER:
        assert (record.result, record.checkpoint) == ("refused", None)
    else:
        assert (record.result, record.checkpoint) == (None, AT_LIMIT)
    await _readable(runtime, handle.run_id)


@pytest.mark.parametrize("value", [AT_LIMIT, OVER], ids=["at_limit", "over"])
async def test_result(runtime: Runtime, value: Any) -> None:
    async def body(ctx: RunContext) -> object:
        return value

    handle = await runtime.start(body)
    state = await handle.wait()
    if value is OVER:
        assert isinstance(state, RunState.Ended)
        assert isinstance(state.cause, EndCause.Failed)
        assert state.cause.code == "invalid_result"
    else:
        assert state == RunState.Ended(EndCause.NaturalEnd())
        assert (await runtime.record(handle.run_id)).result == AT_LIMIT
    await _readable(runtime, handle.run_id)


@pytest.mark.parametrize("value", [AT_LIMIT, OVER], ids=["at_limit", "over"])
async def test_ticket_payload_and_resume_value(runtime: Runtime, value: Any) -> None:
    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            try:
                await ctx.await_input("user_input", payload=value)
            except InvalidPayload:
                return "refused"
        return ctx.resume_value

    handle = await runtime.start(body)
    state = await handle.wait()
    if value is OVER:
        assert (await runtime.record(handle.run_id)).result == "refused"
        await _readable(runtime, handle.run_id)
        return
    assert isinstance(state, RunState.Awaiting)
    assert state.ticket.payload == AT_LIMIT
    assert await runtime.state(handle.run_id) == state
    await _readable(runtime, handle.run_id)
    with pytest.raises(InvalidPayload, match="nested deeper"):
        await runtime.resume(handle.run_id, OVER)
    assert await runtime.state(handle.run_id) == state  # refused: the ticket stays live
    resumed = await runtime.resume(handle.run_id, AT_LIMIT)
    assert await resumed.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record(handle.run_id)).result == AT_LIMIT
    await _readable(runtime, handle.run_id)


async def _message_run(
    runtime: Runtime, body_after: Callable[[RunContext], Awaitable[object]]
) -> RunHandle:
    """A run started with ``body_after``, once its first attempt's body is running."""
    ready = trio.Event()

    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            ready.set()
        return await body_after(ctx)

    handle = await runtime.start(body)
    await ready.wait()
    return handle


async def test_a_message_reaches_the_boundary(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        (message,) = await ctx.boundary(wait=True)
        return message

    handle = await _message_run(runtime, body)
    with pytest.raises(InvalidPayload, match="nested deeper"):
        runtime.deliver(LiveCommand.Message(handle.run_id, OVER))
    runtime.deliver(LiveCommand.Message(handle.run_id, AT_LIMIT))
    assert await handle.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record(handle.run_id)).result == AT_LIMIT
    await _readable(runtime, handle.run_id)


async def test_a_message_carried_over_a_pause(runtime: Runtime) -> None:
    go = trio.Event()

    async def body(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await go.wait()
            await ctx.boundary()  # the pause is honoured here: the message is carried
            return "not paused"
        (message,) = await ctx.boundary()
        return message

    handle = await _message_run(runtime, body)
    runtime.deliver(LiveCommand.Message(handle.run_id, AT_LIMIT))
    runtime.deliver(LiveCommand.Pause(handle.run_id))
    go.set()
    assert isinstance(await handle.wait(), RunState.Awaiting)
    await _readable(runtime, handle.run_id)
    resumed = await runtime.resume(handle.run_id)
    assert await resumed.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record(handle.run_id)).result == AT_LIMIT
    await _readable(runtime, handle.run_id)


async def test_a_message_recorded_as_discarded(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep_forever()

    handle = await _message_run(runtime, body)
    runtime.deliver(LiveCommand.Message(handle.run_id, AT_LIMIT))
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
    events = await _readable(runtime, handle.run_id)
    (discarded,) = [e for e in events if e.kind == EventKind.MESSAGES_DISCARDED]
    assert discarded.detail["messages"] == [AT_LIMIT]


async def test_a_late_result_recorded_as_discarded(runtime: Runtime) -> None:
    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        finally:
            return AT_LIMIT  # noqa: B012 (a late result, on purpose)

    handle = await _message_run(runtime, body)
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
    events = await _readable(runtime, handle.run_id)
    assert [e.kind for e in events].count(EventKind.LATE_RESULT_DISCARDED) == 1


@pytest.mark.parametrize("detail", [DETAIL_AT_LIMIT, DETAIL_OVER], ids=["at_limit", "over"])
async def test_an_event_detail(runtime: Runtime, detail: Any) -> None:
    async def body(ctx: RunContext) -> object:
        try:
            await ctx.emit("test.deep", detail)
        except InvalidPayload:
            return "refused"
        return None

    handle = await runtime.start(body)
    await handle.wait()
    events = await _readable(runtime, handle.run_id)
    emitted = [e.detail for e in events if e.kind == "test.deep"]
    if detail is DETAIL_OVER:
        assert emitted == []
        assert (await runtime.record(handle.run_id)).result == "refused"
    else:
        assert emitted == [DETAIL_AT_LIMIT]
