"""Chaos: many tasks drive random operations at once; the committed log stays sound.

No model here: concurrent callers race each other and the runs (Trio also shuffles its
run queue), every call may legitimately be refused, and afterwards the event log must
still satisfy the invariants of the design: one terminal commit per run and nothing after
it, tickets only in Awaiting commits, children ended before their parents, generations
that never go back, and a runtime that never broke.
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from awaken_trio import (
    AwakenError,
    LiveCommand,
    RunContext,
    RunEvent,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.store import MemoryStore

RUNS = 24
OPERATIONS = 300
THREADS = ["t0", "t1", "t2"]


async def worker(ctx: RunContext) -> object:
    """Acts on its messages; spawns children; sometimes fails; sometimes awaits input."""
    progress = ctx.checkpoint or {"step": 0}
    while True:
        await trio.sleep(0.1)
        progress = {"step": progress["step"] + 1}
        for message in await ctx.boundary(progress, wait=progress["step"] % 3 == 0):
            if message == "finish":
                return progress
            if message == "fail":
                raise RuntimeError("asked to fail")
            if message == "child":
                await ctx.start_child(worker)
            if message == "ask":
                await ctx.await_input("user_input", payload=progress)


async def chaos(runtime: Runtime, rng: random.Random) -> list[str]:
    run_ids: list[str] = []

    async def one_operation(i: int) -> None:
        await trio.sleep(rng.random() * 5)
        op = rng.choice(
            [
                "start",
                "start",
                "cancel",
                "pause",
                "message",
                "message",
                "wake",
                "cancel_run",
                "stop_run",
                "resume",
                "resume",
            ]
        )
        target = rng.choice(run_ids) if run_ids else None
        try:
            if op == "start" or target is None:
                thread = rng.choice([*THREADS, None])
                handle = await runtime.start(worker, thread_id=thread, input=i)
                run_ids.append(handle.run_id)
            elif op == "cancel":
                runtime.deliver(LiveCommand.Cancel(target, reason=f"op {i}"))
            elif op == "pause":
                runtime.deliver(LiveCommand.Pause(target))
            elif op == "message":
                payload = rng.choice(["finish", "fail", "child", "ask", "noise"])
                runtime.deliver(LiveCommand.Message(target, payload))
            elif op == "wake":
                await runtime.deliver_to_current_attempt(LiveCommand.Wake(target))
            elif op == "cancel_run":
                await runtime.cancel_run(target)
            elif op == "stop_run":
                await runtime.stop_run(target, f"policy {i}")
            else:
                await runtime.resume(target, {"answer": i})
        except AwakenError:
            pass  # refusals are legitimate outcomes of a race; the log is checked below

    async with trio.open_nursery() as nursery:
        for i in range(OPERATIONS):
            nursery.start_soon(one_operation, i)
    return run_ids


def check_log(events: list[RunEvent]) -> None:
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), "seq must be store-wide and strictly increasing"
    ended_at: dict[str, int] = {}
    generation: dict[str, int] = {}
    for event in events:
        assert event.run_id not in ended_at, f"event after the terminal commit: {event}"
        assert event.generation >= generation.get(event.run_id, 0), f"generation went back: {event}"
        generation[event.run_id] = event.generation
        if event.kind == "committed" and isinstance(event.state, RunState.Ended):
            ended_at[event.run_id] = event.seq
        if isinstance(event.state, RunState.Awaiting):
            assert event.state.ticket.run_id == event.run_id
        elif event.kind == "committed":
            assert not hasattr(event.state, "ticket")


async def test_random_concurrent_control_keeps_the_log_sound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for seed in range(8):
        rng = random.Random(seed)
        store = MemoryStore(inline=bool(seed % 2))
        async with open_runtime(store) as runtime:
            await chaos(runtime, rng)
        stats = runtime.statistics()
        assert stats.active_attempts == 0
        assert stats.queued_runs == 0
        assert stats.busy_threads == 0
        events = await store.events_after(0, limit=1_000_000)
        check_log(events)
        # Every run is Ended or Awaiting after shutdown (a memory store stops what ran),
        # and every child ended before its parent's terminal commit.
        terminal = {
            e.run_id: e.seq
            for e in events
            if e.kind == "committed" and isinstance(e.state, RunState.Ended)
        }
        for run_id in {e.run_id for e in events}:
            record = await store.load(run_id)
            assert record is not None
            assert isinstance(record.state, RunState.Ended | RunState.Awaiting), record
            parent = record.parent_run_id
            if parent is not None and parent in terminal:
                assert run_id in terminal, f"{run_id} outlived its parent {parent}"
                assert terminal[run_id] < terminal[parent]


@pytest.mark.parametrize("seed", range(3))
async def test_chaos_never_breaks_the_runtime_of_a_caller(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    # The block finishes normally: nothing any run did escaped into the caller.
    async with open_runtime() as runtime:
        run_ids = await chaos(runtime, random.Random(100 + seed))
    assert run_ids
