"""`awaken_trio.current_context()`: the calling task's `RunContext` in a run body, in every
task the body starts, in a sync step's worker thread and in a child run (its own); outside
any run, `NotInRun`."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from awaken_trio import (
    AwakenError,
    EndCause,
    NotActive,
    NotInRun,
    RunContext,
    RunState,
    Runtime,
    current_context,
)

NATURAL = RunState.Ended(EndCause.NaturalEnd())


async def test_outside_any_run_current_context_raises_not_in_run() -> None:
    with pytest.raises(NotInRun) as caught:
        current_context()
    assert isinstance(caught.value, AwakenError)
    assert "outside any run" in str(caught.value)
    assert "pass the body's ctx" in str(caught.value)


def test_outside_trio_current_context_raises_not_in_run() -> None:
    with pytest.raises(NotInRun):
        current_context()


async def test_the_body_its_tasks_and_its_sync_steps_see_the_bodys_context(
    runtime: Runtime,
) -> None:
    seen: dict[str, RunContext] = {}

    def in_thread() -> str:
        assert threading.current_thread() is not threading.main_thread()
        seen["sync step"] = current_context()
        return "ok"

    async def in_task(where: str) -> None:
        await trio.lowlevel.checkpoint()
        seen[where] = current_context()

    async def body(ctx: RunContext) -> None:
        seen["body"] = current_context()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_task, "task")
            # A task of a task too: Trio copies the context at every spawn.
            nursery.start_soon(_spawns, in_task)
        await ctx.step("sync", in_thread)
        await ctx.step("async", in_task, "async step")
        seen["expected"] = ctx

    assert await runtime.execute(body, run_id="cc") == NATURAL
    expected = seen.pop("expected")
    places = ["body", "task", "grandchild", "sync step", "async step"]
    assert seen == dict.fromkeys(places, expected)
    assert all(ctx is expected for ctx in seen.values())
    assert expected.run_id == "cc"


async def _spawns(in_task: object) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(in_task, "grandchild")  # type: ignore[arg-type]


async def test_a_child_run_sees_its_own_context_and_its_parent_keeps_its_own(
    runtime: Runtime,
) -> None:
    seen: list[tuple[str, str]] = []

    async def child(ctx: RunContext) -> None:
        seen.append(("child", current_context().run_id))

    async def parent(ctx: RunContext) -> None:
        seen.append(("parent", current_context().run_id))
        assert await ctx.run_child(child, run_id="kid") == NATURAL
        seen.append(("parent again", current_context().run_id))

    assert await runtime.execute(parent, run_id="mom") == NATURAL
    assert seen == [("parent", "mom"), ("child", "kid"), ("parent again", "mom")]


async def test_the_runtime_task_that_started_a_run_has_no_current_run(
    runtime: Runtime,
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> None:
        entered.set()
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="bg")
    await entered.wait()
    with pytest.raises(NotInRun):
        current_context()
    await runtime.cancel_run(handle.run_id)


async def test_a_context_found_after_its_attempt_ended_refuses_to_be_used(
    runtime: Runtime,
) -> None:
    """A thread a cancelled sync step left running still finds its run's context; using
    it raises NotActive, so nothing it does is committed."""
    found: list[RunContext] = []
    started = threading.Event()
    release = threading.Event()
    done = threading.Event()

    def outlives() -> None:
        started.set()
        release.wait(30)
        found.append(current_context())
        done.set()

    async def body(ctx: RunContext) -> None:
        await ctx.step("outlives", outlives)

    handle = await runtime.start(body, run_id="late")
    await trio.to_thread.run_sync(started.wait, 30)
    await runtime.cancel_run("late")
    assert isinstance(await handle.wait(), RunState.Ended)
    release.set()
    await trio.to_thread.run_sync(done.wait, 30)
    assert found[0].run_id == "late"
    with pytest.raises(NotActive):
        await found[0].boundary()
