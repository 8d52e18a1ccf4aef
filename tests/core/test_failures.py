"""Failures: classification, non-JSON results, errors never hidden, bad arguments."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    InvalidBody,
    InvalidPayload,
    LiveCommand,
    RunAlreadyEnded,
    RunContext,
    RunExists,
    RunState,
    Runtime,
    UnknownRun,
)
from tests.run_helpers import history, reach, settle


class HTTPError(Exception):
    pass


async def test_a_raised_value_error_ends_failed_with_code_and_message(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"step": 1})
        raise ValueError("bad value 7")

    state = await runtime.execute(body, run_id="f1")
    assert state == RunState.Ended(EndCause.Failed("value_error", "bad value 7"))
    record = await runtime.record("f1")
    assert record.state == state
    assert record.result is None
    assert record.checkpoint == {"step": 1}


async def test_an_acronym_class_name_keeps_the_acronym_together(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        raise HTTPError("503 from upstream")

    state = await runtime.execute(body)
    assert state == RunState.Ended(EndCause.Failed("http_error", "503 from upstream"))


async def test_a_group_of_one_error_is_classified_by_that_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        raise ExceptionGroup("tool calls", [KeyError("missing")])

    state = await runtime.execute(body)
    assert state == RunState.Ended(EndCause.Failed("key_error", str(KeyError("missing"))))


async def test_an_error_from_a_nursery_in_the_body_is_classified_by_that_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def failing() -> None:
        raise LookupError("no such tool")

    async def body(ctx: RunContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(failing)
            await trio.sleep_forever()

    state = await runtime.execute(body)
    assert state == RunState.Ended(EndCause.Failed("lookup_error", "no such tool"))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param((1, 2), id="tuple"),
        pytest.param({1, 2}, id="set"),
        pytest.param(float("nan"), id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param({"nested": [(1,)]}, id="nested_tuple"),
        pytest.param({1: "int key"}, id="int_key"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(object(), id="object"),
    ],
)
async def test_a_non_json_result_ends_failed_invalid_result(
    runtime: Runtime, value: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> Any:
        return value

    state = await runtime.execute(body, run_id="bad-result")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_result"
    assert state.cause.message  # says what was wrong
    assert (await runtime.record("bad-result")).result is None


@pytest.mark.parametrize("how", ["deliver", "cancel_run", "stop_run"])
async def test_an_error_raised_while_being_cancelled_is_never_hidden(
    runtime: Runtime, how: str, autojump_clock: trio.testing.MockClock
) -> None:
    ready = trio.Event()

    async def body(ctx: RunContext) -> None:
        try:
            ready.set()
            await trio.sleep_forever()
        finally:
            raise ValueError("cleanup broke")

    handle = await runtime.start(body, run_id="f2")
    await reach(ready)
    failed = RunState.Ended(EndCause.Failed("value_error", "cleanup broke"))
    if how == "deliver":
        runtime.deliver(LiveCommand.Cancel("f2"))
    else:
        control = (
            runtime.cancel_run("f2") if how == "cancel_run" else runtime.stop_run("f2", "budget")
        )
        with pytest.raises(RunAlreadyEnded) as info:
            await control
        assert info.value.state == failed
    assert await settle(handle) == failed
    assert await runtime.state("f2") == failed


async def test_one_run_failing_never_disturbs_another(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def steady(ctx: RunContext) -> str:
        for step in range(5):
            await trio.sleep(1)
            await ctx.boundary({"step": step})
        return "steady done"

    async def failing(ctx: RunContext) -> None:
        await trio.sleep(2.5)
        raise RuntimeError("boom")

    async def cancelled(ctx: RunContext) -> None:
        await trio.sleep_forever()

    steady_handle = await runtime.start(steady, run_id="steady")
    failing_handle = await runtime.start(failing, run_id="failing")
    cancelled_handle = await runtime.start(cancelled, run_id="cancelled")
    assert await settle(failing_handle) == RunState.Ended(EndCause.Failed("runtime_error", "boom"))
    runtime.deliver(LiveCommand.Cancel("cancelled"))
    assert await settle(cancelled_handle) == RunState.Ended(EndCause.Cancelled())
    assert not steady_handle.done
    assert await settle(steady_handle) == RunState.Ended(EndCause.NaturalEnd())
    assert (await runtime.record("steady")).result == "steady done"
    assert trio.current_time() == 5
    # The runtime is still usable.
    assert await runtime.execute(steady) == RunState.Ended(EndCause.NaturalEnd())


def sync_body(ctx: RunContext) -> None:
    return None


async def an_async_body(ctx: RunContext) -> None:
    return None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(sync_body, id="sync_def"),
        pytest.param(lambda ctx: an_async_body(ctx), id="lambda"),
        pytest.param(None, id="none"),
        pytest.param("an_async_body", id="string"),
    ],
)
async def test_start_refuses_a_body_that_is_not_an_async_function(
    runtime: Runtime, body: Any, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidBody) as info:
        await runtime.start(body, run_id="not-async")
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, InvalidArgument)
    assert await history(runtime) == []
    with pytest.raises(UnknownRun):
        await runtime.state("not-async")


async def test_start_refuses_an_empty_run_id(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.raises(InvalidArgument):
        await runtime.start(an_async_body, run_id="")
    with pytest.raises(InvalidArgument):
        await runtime.start(an_async_body, thread_id="")
    assert await history(runtime) == []


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param((1, 2), id="tuple"),
        pytest.param({"a": {1, 2}}, id="set"),
        pytest.param(float("nan"), id="nan"),
        pytest.param([-math.inf], id="inf"),
        pytest.param({2: "x"}, id="int_key"),
        pytest.param(b"raw", id="bytes"),
    ],
)
async def test_non_json_input_is_refused_and_nothing_is_committed(
    runtime: Runtime, payload: Any, autojump_clock: trio.testing.MockClock
) -> None:
    await runtime.execute(an_async_body, run_id="existing")
    before = await history(runtime)
    with pytest.raises(InvalidPayload):
        await runtime.start(an_async_body, run_id="bad-input", input=payload)
    assert await history(runtime) == before
    with pytest.raises(UnknownRun):
        await runtime.state("bad-input")


async def test_a_duplicate_run_id_is_refused(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    runs: list[str] = []

    async def body(ctx: RunContext) -> str:
        runs.append(ctx.run_id)
        await gate.wait()
        return "first"

    handle = await runtime.start(body, run_id="dup", input=1)
    before = await history(runtime)
    with pytest.raises(RunExists):
        await runtime.start(body, run_id="dup", input=2)
    assert await history(runtime) == before
    gate.set()
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    with pytest.raises(RunExists):
        await runtime.start(body, run_id="dup")
    record = await runtime.record("dup")
    assert record.input == 1
    assert record.result == "first"
    assert runs == ["dup"]
    assert runtime.statistics().busy_threads == 0


async def test_non_json_progress_raises_in_the_body_and_ends_failed(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    raised: list[Exception] = []

    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"step": 1})
        try:
            await ctx.boundary({"step": (2,)})
        except InvalidPayload as exc:
            raised.append(exc)
            raise

    state = await runtime.execute(body, run_id="bad-progress")
    assert len(raised) == 1
    assert state == RunState.Ended(EndCause.Failed("invalid_payload", str(raised[0])))
    assert (await runtime.record("bad-progress")).checkpoint == {"step": 1}


async def test_a_non_json_message_is_refused_at_delivery(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    received: list[list[Any]] = []

    async def body(ctx: RunContext) -> None:
        received.append(await ctx.boundary(wait=True))

    handle = await runtime.start(body, run_id="msg")
    with pytest.raises(InvalidPayload):
        runtime.deliver(LiveCommand.Message("msg", {"x": (1,)}))
    await trio.testing.wait_all_tasks_blocked()
    assert not handle.done
    runtime.deliver(LiveCommand.Message("msg", "ok"))
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert received == [["ok"]]
