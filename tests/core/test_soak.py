"""Soak: many runs through every ending leave no process-local bookkeeping behind."""

from __future__ import annotations

import pytest
import trio

from awaken_trio import EndCause, LiveCommand, RunContext, RunState, Runtime, open_runtime
from awaken_trio.store import MemoryStore

pytestmark = pytest.mark.slow

WAVES = 200
PER_WAVE = 50  # 10,000 runs in all


async def quick(ctx: RunContext) -> object:
    return ctx.input


async def parked(ctx: RunContext) -> object:
    await ctx.boundary(wait=True)
    return "woken"


async def with_child(ctx: RunContext) -> object:
    await ctx.start_child(parked)
    return await ctx.run_child(quick, input=1)


async def one_wave(runtime: Runtime, wave: int) -> list[RunState]:
    handles = []
    for i in range(PER_WAVE):
        kind = i % 5
        thread = f"shared-{i % 3}" if kind == 4 else None
        body = (quick, parked, parked, with_child, quick)[kind]
        handles.append((kind, await runtime.start(body, input=i, thread_id=thread)))
    await trio.testing.wait_all_tasks_blocked()
    for kind, handle in handles:
        if kind == 1:
            runtime.deliver(LiveCommand.Cancel(handle.run_id))
        elif kind == 2:
            runtime.deliver(LiveCommand.Pause(handle.run_id))
    states = [await handle.wait() for _, handle in handles]
    for (kind, handle), state in zip(handles, states, strict=True):
        if kind == 2:
            assert isinstance(state, RunState.Awaiting)
            resumed = await runtime.resume(handle.run_id)
            runtime.deliver(LiveCommand.Wake(resumed.run_id))
            assert await resumed.wait() == RunState.Ended(EndCause.NaturalEnd())
    return states


async def test_ten_thousand_runs_leave_no_registry_gate_or_body_entries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    async with open_runtime(store) as runtime:
        for wave in range(WAVES):
            states = await one_wave(runtime, wave)
            assert states.count(RunState.Ended(EndCause.Cancelled())) == PER_WAVE // 5
        stats = runtime.statistics()
        assert (stats.active_attempts, stats.queued_runs, stats.busy_threads) == (0, 0, 0)
        assert stats.awaiting_bodies == 0
        # Runs, their children and their pause/resume commits are all in the store.
        assert stats.supervisor.commits > WAVES * PER_WAVE * 2
