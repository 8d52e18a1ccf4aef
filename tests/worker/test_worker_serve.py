"""`serve`: claiming queued runs whose body is registered here, within ``concurrency``."""

from __future__ import annotations

import logging
from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import InvalidArgument, RunContext, RunState, RuntimeClosed
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    LEASE,
    NATURAL,
    POLL,
    is_ended,
    is_running,
    reach,
    serving,
    settle,
    shared_runtime,
    until_state,
)
from tests.wrapped_stores import FlakyStore


async def noop(ctx: RunContext) -> object:
    return None


class Gauge:
    """Counts root bodies running at once, and remembers the most there ever were."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.entered: list[str] = []
        self.release = trio.Event()

    async def body(self, ctx: RunContext) -> object:
        self.entered.append(ctx.run_id)
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await self.release.wait()
        finally:
            self.now -= 1
        return ctx.run_id


async def test_nursery_start_of_serve_returns_once_it_is_claiming(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    gauge = Gauge()
    async with shared_runtime(shared_store, bodies={"g": gauge.body}) as rt:
        await rt.submit("g", run_id="a")
        await rt.submit("g", run_id="b")
        async with trio.open_nursery() as nursery:
            await nursery.start(rt.serve)
            # Its first pass is done: the queued runs are claimed and committed Running
            # before start() returns.
            assert await rt.state("a") == RunState.Running(1)
            assert await rt.state("b") == RunState.Running(1)
            gauge.release.set()
            await until_state(rt, "b", is_ended)
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("concurrency", [1, 2, 3])
async def test_serve_runs_at_most_concurrency_root_attempts_at_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, concurrency: int
) -> None:
    gauge = Gauge()
    async with (
        shared_runtime(shared_store, bodies={"g": gauge.body}) as rt,
        serving(rt, concurrency=concurrency),
    ):
        handles = [await rt.submit("g", run_id=f"r{i}") for i in range(6)]
        await trio.sleep(100 * POLL)
        assert gauge.now == concurrency
        states = [await rt.state(h.run_id) for h in handles]
        assert states.count(RunState.Queued()) == 6 - concurrency
        gauge.release.set()
        for handle in handles:
            assert await settle(handle) == NATURAL
    assert gauge.most == concurrency
    assert sorted(gauge.entered) == [f"r{i}" for i in range(6)]


async def test_serve_takes_the_next_run_when_a_slot_frees(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    releases = {f"r{i}": trio.Event() for i in range(3)}
    entries = {f"r{i}": trio.Event() for i in range(3)}
    entered: list[tuple[str, float]] = []

    async def body(ctx: RunContext) -> object:
        entered.append((ctx.run_id, trio.current_time()))
        entries[ctx.run_id].set()
        await releases[ctx.run_id].wait()
        return None

    async with shared_runtime(shared_store, bodies={"b": body}) as rt, serving(rt, concurrency=1):
        handles = [await rt.submit("b", run_id=f"r{i}") for i in range(3)]
        await trio.sleep(100 * POLL)
        assert [run_id for run_id, _ in entered] == ["r0"]
        releases["r0"].set()
        freed = trio.current_time()
        await settle(handles[0])
        await reach(entries["r1"])
        await trio.sleep(100 * POLL)
        assert [run_id for run_id, _ in entered] == ["r0", "r1"]
        assert entered[1][1] - freed <= 4 * POLL
        releases["r1"].set()
        await reach(entries["r2"])
        releases["r2"].set()
        for handle in handles:
            await settle(handle)


async def test_children_do_not_count_toward_concurrency(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    children_running = 0
    most_children = 0
    release_children = trio.Event()
    entered: list[str] = []

    async def child(ctx: RunContext) -> object:
        nonlocal children_running, most_children
        children_running += 1
        most_children = max(most_children, children_running)
        await release_children.wait()
        children_running -= 1
        return None

    async def parent(ctx: RunContext) -> object:
        entered.append(ctx.run_id)
        handles = [await ctx.start_child(child, run_id=f"{ctx.run_id}-kid{i}") for i in range(3)]
        for handle in handles:
            await handle.wait()
        return None

    async with (
        shared_runtime(shared_store, bodies={"parent": parent}) as rt,
        serving(rt, concurrency=1),
    ):
        first = await rt.submit("parent", run_id="p1")
        second = await rt.submit("parent", run_id="p2")
        await trio.sleep(100 * POLL)
        # All three children of the one root run at once, and the root still counts once:
        # the second root waits for its slot.
        assert most_children == 3
        assert entered == ["p1"]
        assert await rt.state("p2") == RunState.Queued()
        release_children.set()
        assert await settle(first) == NATURAL
        assert await settle(second) == NATURAL
    assert entered == ["p1", "p2"]


async def test_serve_starts_queued_runs_of_a_thread_in_fifo_order(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    order: list[str] = []
    running: set[str] = set()
    overlaps: list[set[str]] = []

    async def step(ctx: RunContext) -> object:
        if running:
            overlaps.append(set(running))
        running.add(ctx.run_id)
        order.append(ctx.run_id)
        await trio.sleep(1)
        running.discard(ctx.run_id)
        return None

    names = ["m", "c", "x", "a", "q", "b"]
    async with (
        shared_runtime(shared_store, bodies={"step": step}) as submitter,
        shared_runtime(shared_store, bodies={"step": step}) as rt,
    ):
        handles = [await submitter.submit("step", run_id=n, thread_id="t") for n in names]
        async with serving(rt, concurrency=8):
            for handle in handles:
                assert await settle(handle) == NATURAL
    assert order == names
    assert overlaps == []


async def test_serve_without_registered_bodies_raises_invalid_argument(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidArgument, match="register"):
            await rt.serve()


@pytest.mark.parametrize("concurrency", [0, -1, True, 1.5, "2", None])
async def test_serve_refuses_a_concurrency_that_is_not_a_positive_int(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, concurrency: Any
) -> None:
    async with shared_runtime(shared_store, bodies={"noop": noop}) as rt:
        with pytest.raises(InvalidArgument, match="concurrency"):
            await rt.serve(concurrency=concurrency)


async def test_serve_after_the_runtime_closed_raises_runtime_closed(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with shared_runtime(shared_store, bodies={"noop": noop}) as rt:
        pass
    with pytest.raises(RuntimeClosed):
        await rt.serve()


async def test_two_serving_runtimes_never_run_the_same_run_twice(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    entries: Counter[str] = Counter()
    runtimes_used: set[int] = set()

    def body_for(tag: int) -> Any:
        async def body(ctx: RunContext) -> object:
            entries[ctx.run_id] += 1
            runtimes_used.add(tag)
            await trio.sleep(0.5)
            return tag

        return body

    async with (
        shared_runtime(shared_store, bodies={"job": body_for(1)}) as one,
        shared_runtime(shared_store, bodies={"job": body_for(2)}) as two,
        serving(one, concurrency=3),
        serving(two, concurrency=3),
    ):
        handles = [await one.submit("job", run_id=f"r{i}") for i in range(30)]
        for handle in handles:
            assert await settle(handle) == NATURAL
        for handle in handles:
            record = await one.record(handle.run_id)
            assert record.generation == 1
    assert entries == Counter({f"r{i}": 1 for i in range(30)})
    assert runtimes_used == {1, 2}


async def test_serve_stops_when_cancelled_and_its_runs_go_on(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    gauge = Gauge()
    async with shared_runtime(shared_store, bodies={"g": gauge.body}) as rt:
        handle = await rt.submit("g", run_id="served")
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(rt.serve, concurrency=2))
                nursery.cancel_scope.cancel()
        # serve() has returned: nothing more is claimed.
        await rt.submit("g", run_id="later")
        await trio.sleep(100 * POLL)
        assert await rt.state("later") == RunState.Queued()
        # The run it had started belongs to the runtime, not to serve(): it goes on.
        assert await rt.state("served") == RunState.Running(1)
        gauge.release.set()
        assert await settle(handle) == NATURAL
        assert gauge.entered == ["served"]


@pytest.mark.parametrize("commits_only", [False, True], ids=["every-call", "commits"])
async def test_serve_outlives_a_failing_store_and_later_runs_end(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    commits_only: bool,
) -> None:
    """The store fails for longer than a lease (a write lock held, a full disk): serve logs,
    backs off and keeps serving; the attempt whose claim it could not renew is stopped, and
    once the store works again that run is recovered and the run submitted meanwhile runs."""
    store = MemoryStore(shared=True)
    flaky = FlakyStore(store, commits_only=commits_only)
    release = trio.Event()
    entered: list[tuple[str, int]] = []

    async def body(ctx: RunContext) -> object:
        entered.append((ctx.run_id, ctx.generation))
        await release.wait()
        return ctx.generation

    caplog.set_level(logging.INFO, logger="awaken_trio.worker")
    async with (
        shared_runtime(store) as control,
        shared_runtime(flaky, bodies={"w": body}) as worker,
        serving(worker),
    ):
        await control.submit("w", run_id="r1")
        await until_state(control, "r1", is_running)
        flaky.failing = True
        await control.submit("w", run_id="r2")
        await trio.sleep(3 * LEASE)
        assert flaky.failures > 3
        assert await control.state("r2") == RunState.Queued()
        flaky.failing = False
        release.set()
        assert await until_state(control, "r2", is_ended) == NATURAL
        assert await until_state(control, "r1", is_ended) == NATURAL
        if commits_only:
            # r1's renewals worked: its attempt was never stopped.
            assert (await control.record("r1")).result == 1
        else:
            # r1's claim could not be renewed for a whole lease: its attempt was stopped
            # there, and the run recovered once the store worked again.
            assert (await control.record("r1")).result == 2
    records = [r for r in caplog.records if r.name == "awaken_trio.worker"]
    assert any(r.levelno == logging.ERROR and "serving" in r.message for r in records)
    if commits_only:
        assert any(getattr(r, "run_id", None) == "r2" for r in records), records


async def test_serve_starts_the_runs_a_look_found_without_a_task_each(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A look's runs are admitted side by side with no task each: the only task a run
    adds is its attempt's actor."""
    spawned: Counter[str] = Counter()

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned[task.name.rsplit(".", 1)[-1]] += 1

    store = MemoryStore(shared=True)
    async with shared_runtime(store) as control:
        for i in range(20):
            await control.submit("w", run_id=f"r{i}")
    async with shared_runtime(store, bodies={"w": noop}) as worker:
        instrument = Spawns()
        trio.lowlevel.add_instrument(instrument)
        try:
            async with serving(worker, concurrency=20):
                for i in range(20):
                    assert await until_state(worker, f"r{i}", is_ended) == NATURAL
        finally:
            trio.lowlevel.remove_instrument(instrument)
    assert spawned["run_attempt"] == 20
    assert not [name for name in spawned if "admit" in name], spawned
