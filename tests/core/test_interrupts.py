"""Ctrl-C: a KeyboardInterrupt, wherever it lands, shuts the runtime down cleanly.

These tests call `trio.run` themselves: a KeyboardInterrupt must never escape a pytest-trio
test, and the point is what comes out of `trio.run`.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Sequence

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, RunContext, RunState, Runtime, open_runtime
from awaken_trio.store import Commit, CommitResult, MemoryStore, Store
from tests.wrapped_stores import WrappedStore

SHUTDOWN = RunState.Ended(EndCause.Stopped("runtime shutdown"))


class InterruptingStore(WrappedStore):
    """Raises a real SIGINT while applying the first batch with a progress commit of
    ``run_id``, once ``armed``; the batch is then applied as usual."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.armed = False
        self.signalled = False

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        if self.armed and any(
            c.run_id == self.run_id and isinstance(c.state, RunState.Running) for c in batch
        ):
            self.armed = False
            signal.raise_signal(signal.SIGINT)
            self.signalled = True  # the signal did not tear the store's own code
        return await self.inner.apply(batch)


class InterruptingClock:
    """A wall clock that is interrupted once, on the call after ``fail_next``: it raises
    KeyboardInterrupt itself, or a real SIGINT arrives while it runs."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.reading = 1_000.0
        self.fail_next = False

    def __call__(self) -> float:
        if self.fail_next:
            self.fail_next = False
            if self.how == "raise":
                raise KeyboardInterrupt
            signal.raise_signal(signal.SIGINT)
        self.reading += 1.0
        return self.reading


async def sleeper(ctx: RunContext) -> None:
    await trio.sleep_forever()


async def parent_of_sleeper(ctx: RunContext) -> None:
    await ctx.run_child(sleeper, run_id="kid")


BYSTANDERS = ("bystander", "queued", "dad", "kid")


async def start_bystanders(runtime: Runtime) -> None:
    """A running run, one queued behind it, and a parent with a running child."""
    await runtime.start(sleeper, run_id="bystander", thread_id="t")
    await runtime.start(sleeper, run_id="queued", thread_id="t")
    await runtime.start(parent_of_sleeper, run_id="dad")
    await trio.testing.wait_all_tasks_blocked()
    assert await runtime.state("queued") == RunState.Queued()
    assert await runtime.state("kid") == RunState.Running(1)


def interrupted(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` in a fresh Trio run and expect a bare KeyboardInterrupt out of it."""
    with pytest.raises(KeyboardInterrupt) as info:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert type(info.value) is KeyboardInterrupt


def committed_states(store: Store, run_ids: Sequence[str]) -> dict[str, RunState]:
    async def read() -> dict[str, RunState]:
        states = {}
        for run_id in run_ids:
            record = await store.load(run_id)
            assert record is not None, run_id
            states[run_id] = record.state
        return states

    return trio.run(read)


def assert_nothing_left(runtime: Runtime) -> None:
    stats = runtime.statistics()
    assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)


def test_a_sigint_inside_the_store_shuts_the_runtime_down() -> None:
    store = InterruptingStore("r")
    kept: list[Runtime] = []
    go = trio.Event()

    async def stepper(ctx: RunContext) -> None:
        await go.wait()
        await ctx.boundary({"step": 1})
        await trio.sleep_forever()

    async def main() -> None:
        with trio.fail_after(60):
            async with open_runtime(store) as runtime:
                kept.append(runtime)
                await start_bystanders(runtime)
                await runtime.start(stepper, run_id="r")
                await trio.testing.wait_all_tasks_blocked()
                store.armed = True
                go.set()
                await trio.sleep_forever()

    interrupted(main)
    assert store.signalled
    states = committed_states(store, ("r", *BYSTANDERS))
    assert states == dict.fromkeys(("r", *BYSTANDERS), SHUTDOWN)
    record = trio.run(store.load, "r")
    assert record is not None
    assert record.checkpoint == {"step": 1}  # the commit the signal landed in went through
    assert_nothing_left(kept[0])


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_a_keyboard_interrupt_in_a_body_shuts_the_runtime_down(
    store: MemoryStore, how: str
) -> None:
    kept: list[Runtime] = []
    go = trio.Event()

    async def interrupter(ctx: RunContext) -> None:
        await go.wait()
        if how == "signal":
            signal.raise_signal(signal.SIGINT)
        else:
            raise KeyboardInterrupt

    async def main() -> None:
        with trio.fail_after(60):
            async with open_runtime(store) as runtime:
                kept.append(runtime)
                await start_bystanders(runtime)
                await runtime.start(interrupter, run_id="interrupter")
                await trio.testing.wait_all_tasks_blocked()
                go.set()
                await trio.sleep_forever()

    interrupted(main)
    states = committed_states(store, ("interrupter", *BYSTANDERS))
    assert states == dict.fromkeys(("interrupter", *BYSTANDERS), SHUTDOWN)
    assert_nothing_left(kept[0])


@pytest.mark.parametrize("how", ["raise", "signal"])
def test_a_keyboard_interrupt_from_the_clock_at_a_finish_boundary_shuts_down(
    store: MemoryStore, how: str
) -> None:
    clock = InterruptingClock(how)
    kept: list[Runtime] = []
    go = trio.Event()

    async def finisher(ctx: RunContext) -> str:
        await go.wait()
        clock.fail_next = True
        return "finished"

    async def main() -> None:
        with trio.fail_after(60):
            async with open_runtime(store, clock=clock) as runtime:
                kept.append(runtime)
                await start_bystanders(runtime)
                await runtime.start(finisher, run_id="finisher")
                await trio.testing.wait_all_tasks_blocked()
                go.set()
                await trio.sleep_forever()

    interrupted(main)
    assert not clock.fail_next
    states = committed_states(store, ("finisher", *BYSTANDERS))
    assert states == {
        "finisher": RunState.Ended(EndCause.NaturalEnd()),
        **dict.fromkeys(BYSTANDERS, SHUTDOWN),
    }

    async def finisher_end() -> dict[str, object]:
        events = await store.events_after(0, "finisher")
        return dict(events[-1].detail)

    detail = trio.run(finisher_end)
    if how == "raise":
        assert "KeyboardInterrupt" in str(detail["clock_error"])
    else:  # the signal reached the main task, not the runtime's own code
        assert "clock_error" not in detail
    assert_nothing_left(kept[0])
