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
    RunEvent,
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


async def test_a_cancelled_call_that_would_commit_raises_before_committing(
    runtime: Runtime,
) -> None:
    # Through the mailbox only the cancel point comes before the commit (its wait is the
    # schedule point); either way a pending cancel wins and nothing is committed.
    with trio.CancelScope() as scope:
        scope.cancel()
        await runtime.start(quick, run_id="never")
    assert scope.cancelled_caught
    with pytest.raises(UnknownRun):
        await runtime.state("never")

    async def body(ctx: RunContext) -> object:
        with trio.CancelScope() as inner:
            inner.cancel()
            await ctx.boundary({"step": 1})
        assert inner.cancelled_caught
        with trio.CancelScope() as inner:
            inner.cancel()
            await ctx.emit("app.note", {"n": 1})
        assert inner.cancelled_caught
        return ctx.checkpoint

    await runtime.execute(body, run_id="b")
    record = await runtime.record("b")
    assert record.checkpoint is None
    assert record.result is None
    assert [e.kind for e in await _events(runtime, "b")].count("app.note") == 0


async def _events(runtime: Runtime, run_id: str) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]
