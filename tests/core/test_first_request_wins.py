"""The first request to end an attempt decides its cause: a cancel delivered while the
attempt already unwinds for shutdown or for its parent changes neither cause nor source."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    LiveCommand,
    NotActive,
    RunContext,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore
from tests.run_helpers import history, reach, settle

SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))
CANCELLED = RunState.Ended(EndCause.Cancelled())


def deliver_cancel(runtime: Runtime, run_id: str, delivered: list[str]) -> None:
    try:
        runtime.deliver(LiveCommand.Cancel(run_id, reason="a late cancel"))
    except NotActive:
        delivered.append("NotActive")
    else:
        delivered.append("delivered")


@pytest.mark.parametrize("sender", ["itself", "another_run"])
async def test_a_cancel_during_shutdown_cleanup_leaves_the_run_stopped_by_shutdown(
    store: MemoryStore, sender: str, autojump_clock: trio.testing.MockClock
) -> None:
    kept: list[Runtime] = []
    delivered: list[str] = []
    parked = trio.Event()
    in_cleanup = trio.Event()

    async def cleaner(ctx: RunContext) -> None:
        try:
            parked.set()
            await trio.sleep_forever()
        finally:
            if sender == "itself":
                deliver_cancel(kept[0], ctx.run_id, delivered)
            with trio.CancelScope(shield=True):
                in_cleanup.set()
                await trio.sleep(1)

    async def sender_run(ctx: RunContext) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await in_cleanup.wait()
                deliver_cancel(kept[0], "r", delivered)

    with trio.fail_after(60):
        async with open_runtime(store) as runtime:
            kept.append(runtime)
            if sender == "another_run":
                await runtime.start(sender_run, run_id="sender")
            await runtime.start(cleaner, run_id="r")
            await reach(parked)
            await trio.testing.wait_all_tasks_blocked()

    assert delivered == ["delivered"]  # the attempt was still there to take it
    record = await store.load("r")
    assert record is not None
    assert record.state == SHUTDOWN
    end = (await history(runtime, "r"))[-1]
    assert end.state == SHUTDOWN
    assert (end.detail["source"], end.detail["reason"]) == ("shutdown", "runtime shutdown")


async def test_a_cancel_for_a_child_unwinding_with_its_parent_keeps_the_parent_as_source(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()
    in_cleanup = trio.Event()
    release = trio.Event()

    async def child(ctx: RunContext) -> None:
        try:
            started.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                in_cleanup.set()
                await release.wait()

    async def parent(ctx: RunContext) -> None:
        await ctx.run_child(child, run_id="kid")

    handle = await runtime.start(parent, run_id="dad")
    await reach(started)
    runtime.deliver(LiveCommand.Cancel("dad", reason="user quit"))
    await reach(in_cleanup)
    runtime.deliver(LiveCommand.Cancel("kid", reason="a late cancel"))
    release.set()
    assert await settle(handle) == CANCELLED
    assert await runtime.state("kid") == CANCELLED

    kid_end = (await history(runtime, "kid"))[-1]
    assert kid_end.detail["source"] == "parent"
    assert "user quit" in kid_end.detail["reason"]
    assert "late" not in kid_end.detail["reason"]
    dad_end = (await history(runtime, "dad"))[-1]
    assert (dad_end.detail["source"], dad_end.detail["reason"]) == ("deliver", "user quit")
    assert kid_end.seq < dad_end.seq
