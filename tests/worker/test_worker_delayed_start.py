"""Delayed starts (``submit(..., not_before=T)``): the run is committed ``Queued`` at once
and no runtime starts it before ``T``; the runtime that submitted it wakes its serving loop
at ``T`` (its one timer), so it starts then, not at the next idle look."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import EndCause, InvalidArgument, RunContext, RunState, UnknownRun
from awaken_trio.store import MemoryStore
from tests.worker.worker_helpers import (
    CANCELLED,
    NATURAL,
    POLL,
    history,
    serving,
    settle,
    shared_runtime,
)


def _tasks() -> int:
    """How many tasks run in this trio.run."""

    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


def recorder(started: list[tuple[str, float]]) -> Any:
    async def job(ctx: RunContext) -> object:
        started.append((ctx.run_id, trio.current_time()))
        return None

    return job


async def test_a_delayed_run_is_queued_at_once_and_starts_at_its_time(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started: list[tuple[str, float]] = []
    async with (
        shared_runtime(shared_store, bodies={"job": recorder(started)}) as rt,
        serving(rt),
    ):
        at = trio.current_time() + 100.0
        handle = await rt.submit("job", run_id="later", not_before=at)
        record = await rt.record("later")
        assert record.state == RunState.Queued()
        assert record.not_before == at
        await trio.sleep(99.0)
        assert started == []  # idle looks meanwhile passed over it
        assert await settle(handle) == NATURAL
    # Started at its time by the runtime's timer, not at an idle look up to a second on.
    [(run_id, when)] = started
    assert run_id == "later"
    assert at <= when <= at + POLL
    assert (await _record_after(shared_store, "later")).not_before is None


async def _record_after(store: MemoryStore, run_id: str) -> Any:
    record = await store.load(run_id)
    assert record is not None
    return record


async def test_no_other_serving_runtime_starts_it_before_its_time(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started: list[tuple[str, float]] = []
    job = recorder(started)
    async with (
        shared_runtime(shared_store) as submitter,
        shared_runtime(shared_store, bodies={"job": job}) as one,
        shared_runtime(shared_store, bodies={"job": job}) as two,
        serving(one),
        serving(two),
    ):
        at = trio.current_time() + 30.0
        late = await submitter.submit("job", run_id="late", not_before=at)
        now = await submitter.submit("job", run_id="now")
        # The run behind it in the queue is not held up.
        assert await settle(now) == NATURAL
        assert await settle(late) == NATURAL
    times = dict(started)
    assert times["now"] < at
    # The serving runtimes did not know the time: they found it at a look, within
    # their idle wait of it, never before it.
    assert at <= times["late"] <= at + 2.0


async def test_a_time_already_past_starts_the_run_at_once(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    started: list[tuple[str, float]] = []
    async with (
        shared_runtime(shared_store, bodies={"job": recorder(started)}) as rt,
        serving(rt),
    ):
        t0 = trio.current_time()
        handle = await rt.submit("job", not_before=t0 - 50.0)
        assert await settle(handle) == NATURAL
    assert started[0][1] <= t0 + POLL


@pytest.mark.parametrize("how", ["cancel", "stop"])
async def test_cancel_and_stop_end_a_delayed_run_that_never_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    started: list[tuple[str, float]] = []
    async with (
        shared_runtime(shared_store, bodies={"job": recorder(started)}) as rt,
        serving(rt),
    ):
        handle = await rt.submit("job", run_id="r", not_before=trio.current_time() + 10)
        if how == "cancel":
            state = await rt.cancel_run("r")
            assert state == CANCELLED
        else:
            state = await rt.stop_run("r", "operator")
            assert state == RunState.Ended(EndCause.Stopped("operator"))
        assert await settle(handle) == state
        await trio.sleep(20)  # past its time: nothing starts it
    assert started == []
    assert (await _record_after(shared_store, "r")).not_before is None


@pytest.mark.parametrize("value", ["soon", math.nan, math.inf, True, [1]])
async def test_a_bad_not_before_is_refused_and_nothing_is_committed(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock, value: object
) -> None:
    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidArgument, match="not_before must be a time"):
            await rt.submit("job", run_id="r", not_before=value)
        with pytest.raises(UnknownRun):
            await rt.record("r")
        assert await history(rt) == []


async def test_start_and_execute_take_no_not_before(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        return None

    async with shared_runtime(shared_store) as rt:
        with pytest.raises(InvalidArgument, match=r"start\(\) starts the run now.*submit"):
            await rt.start(body, run_id="r", not_before=trio.current_time() + 5)
        with pytest.raises(InvalidArgument, match=r"execute\(\) starts the run now"):
            await rt.execute(body, run_id="r", not_before=trio.current_time() + 5)
        with pytest.raises(UnknownRun):
            await rt.record("r")
        assert await history(rt) == []


async def test_one_timer_wakes_serving_for_many_delayed_runs(
    shared_store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    # However many runs wait, the runtime holds one timer task (no task per run).
    started: list[tuple[str, float]] = []
    async with (
        shared_runtime(shared_store, bodies={"job": recorder(started)}) as rt,
        serving(rt),
    ):
        t0 = trio.current_time()
        before = _tasks()
        handles = [
            await rt.submit("job", run_id=f"r{i}", not_before=t0 + 10 * (i + 1)) for i in range(20)
        ]
        assert _tasks() == before
        for handle in handles:
            assert await settle(handle) == NATURAL
    for i, (run_id, when) in enumerate(sorted(started, key=lambda s: s[1])):
        assert run_id == f"r{i}"
        assert t0 + 10 * (i + 1) <= when <= t0 + 10 * (i + 1) + POLL
