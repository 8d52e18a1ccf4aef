"""Every public async call is a checkpoint, on its fast path too (the Trio convention)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    LiveCommand,
    NotActive,
    RunAlreadyEnded,
    RunContext,
    Runtime,
    UnknownRun,
)


async def quick(ctx: RunContext) -> object:
    return None


async def parked(ctx: RunContext) -> object:
    await trio.sleep_forever()


async def pausing(ctx: RunContext) -> object:
    await ctx.await_input("user_input")


async def test_start_execute_wait_state_and_record_checkpoint(runtime: Runtime) -> None:
    with trio.testing.assert_checkpoints():
        handle = await runtime.start(quick, run_id="r1")
    with trio.testing.assert_checkpoints():
        await handle.wait()
    with trio.testing.assert_checkpoints():
        await handle.wait()  # already ended: still a checkpoint
    with trio.testing.assert_checkpoints():
        await runtime.execute(quick)
    with trio.testing.assert_checkpoints():
        await runtime.state("r1")
    with trio.testing.assert_checkpoints():
        await runtime.record("r1")
    with trio.testing.assert_checkpoints(), pytest.raises(UnknownRun):
        await runtime.state("ghost")


async def test_control_calls_checkpoint_even_when_they_refuse(runtime: Runtime) -> None:
    handle = await runtime.start(parked, run_id="p")
    with trio.testing.assert_checkpoints():
        await runtime.deliver_to_current_attempt(LiveCommand.Wake("p"))
    with trio.testing.assert_checkpoints(), pytest.raises(NotActive):
        await runtime.deliver_to_current_attempt(LiveCommand.Wake("ghost"))
    with trio.testing.assert_checkpoints():
        await runtime.cancel_run("p")
    await handle.wait()
    with trio.testing.assert_checkpoints(), pytest.raises(RunAlreadyEnded):
        await runtime.stop_run("p", "budget")
    await runtime.execute(pausing, run_id="a")
    with trio.testing.assert_checkpoints():
        await runtime.resume("a", "answer")


async def test_event_stream_steps_checkpoint_when_buffered(runtime: Runtime) -> None:
    await runtime.execute(quick, run_id="e")
    stream = runtime.events("e", follow=False)
    with trio.testing.assert_checkpoints():
        await stream.__anext__()  # reads the store and buffers the rest
    with trio.testing.assert_checkpoints():
        await stream.__anext__()  # served from the buffer


async def test_body_calls_checkpoint(runtime: Runtime) -> None:
    seen: list[str] = []

    async def body(ctx: RunContext) -> object:
        with trio.testing.assert_checkpoints():
            await ctx.boundary()
        with trio.testing.assert_checkpoints():
            await ctx.boundary({"step": 1})
        with trio.testing.assert_checkpoints():
            await ctx.run_child(quick)
        seen.append("checked")
        return None

    await runtime.execute(body)
    assert seen == ["checked"]
