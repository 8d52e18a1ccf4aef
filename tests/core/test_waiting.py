"""Waiting for a run's end: any number of waiters, each free to give up without affecting
the run or the other waiters, and a late waiter answered at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, RunContext, RunState, Runtime

NATURAL = RunState.Ended(EndCause.NaturalEnd())


def _gated() -> tuple[trio.Event, Callable[[RunContext], Awaitable[str]]]:
    gate = trio.Event()

    async def body(ctx: RunContext) -> str:
        await gate.wait()
        return "done"

    return gate, body


async def test_every_waiter_gets_the_end(runtime: Runtime) -> None:
    gate, body = _gated()
    handle = await runtime.start(body)
    ends: list[RunState] = []

    async def wait() -> None:
        ends.append(await handle.wait())

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert ends == [NATURAL] * 3


async def test_a_waiter_that_gives_up_leaves_the_run_and_later_waiters_alone(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate, body = _gated()
    handle = await runtime.start(body)
    with trio.move_on_after(1) as scope:
        await handle.wait()  # the first waiter: it gives up before the end
    assert scope.cancelled_caught
    ends: list[RunState] = []

    async def wait() -> None:
        ends.append(await handle.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert ends == [NATURAL]
    assert (await handle.record()).result == "done"


@pytest.mark.parametrize("gives_up", ["first", "second"])
async def test_a_waiter_giving_up_leaves_the_other_one_waiting(
    runtime: Runtime, gives_up: str
) -> None:
    # The first waiter in line is parked directly, the second on an event: either may go.
    gate, body = _gated()
    handle = await runtime.start(body)
    ends: list[str] = []
    leaving = trio.CancelScope()

    async def waiter(name: str) -> None:
        if name == gives_up:
            with leaving:
                await handle.wait()
        else:
            assert await handle.wait() == NATURAL
            ends.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "first")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "second")
        await trio.testing.wait_all_tasks_blocked()
        leaving.cancel()
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert leaving.cancelled_caught
    assert ends == ["second" if gives_up == "first" else "first"]


async def test_a_waiter_after_the_end_is_answered_at_once_and_checkpoints(
    runtime: Runtime,
) -> None:
    gate, body = _gated()
    handle = await runtime.start(body)
    gate.set()
    assert await handle.wait() == NATURAL
    with trio.CancelScope() as scope:
        scope.cancel()
        await handle.wait()  # a checkpoint even when the end is known: it raises here
    assert scope.cancelled_caught
    assert await handle.wait() == NATURAL


async def test_giving_up_on_execute_leaves_the_run_going(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    gate, body = _gated()
    with trio.move_on_after(1):
        await runtime.execute(body, run_id="r1")
    assert await runtime.state("r1") == RunState.Running(1)
    gate.set()
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state("r1") == NATURAL
