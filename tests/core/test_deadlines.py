"""Deadlines and queue timeouts (DESIGN §3.8): ``timeout=``, ``deadline=`` and
``queue_timeout=`` on ``start``, ``execute``, ``submit``, ``ctx.start_child`` and
``ctx.run_child``. A running attempt is interrupted by its scope's own Trio deadline (even
in a hung await), a queued or awaiting run is ended by the runtime holding it, and the end
is ``Ended(Stopped("deadline"))`` with detail ``{"source": "deadline"}``."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest
import trio
import trio.testing

from awaken_trio import (
    EndCause,
    InvalidArgument,
    NotAwaiting,
    RunAlreadyEnded,
    RunContext,
    RunState,
    Runtime,
    StoreError,
    UnknownRun,
    open_runtime,
)
from tests.run_helpers import history, reach, settle, terminal_commits
from tests.wrapped_stores import FailingStore, HoldingStore

DEADLINE = RunState.Ended(EndCause.Stopped("deadline"))
QUEUE_TIMEOUT = RunState.Ended(EndCause.Stopped("queue_timeout"))
NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


class FakeClock:
    """A wall clock the test moves by hand (Trio's time does not move with it)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def hung(ctx: RunContext) -> object:
    await trio.sleep_forever()  # an inference that never answers


async def quick(ctx: RunContext) -> object:
    return {"done": True}


def runtime() -> Any:
    return open_runtime(clock=trio.current_time)


async def _end_event(rt: Runtime, run_id: str) -> Any:
    [end] = terminal_commits(await history(rt, run_id))
    return end


def _tasks() -> int:
    def count(task: trio.lowlevel.Task) -> int:
        return 1 + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return count(root)


# --------------------------------------------------------------------------- running


async def test_a_hung_attempt_is_interrupted_at_its_timeout_and_ends_stopped_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        t0 = trio.current_time()
        handle = await rt.start(hung, run_id="r", timeout=30)
        assert (await rt.record("r")).deadline == t0 + 30
        assert await settle(handle) == DEADLINE
        end = await _end_event(rt, "r")
        assert dict(end.detail) == {"source": "deadline"}
        assert end.at == t0 + 30
        assert trio.current_time() == t0 + 30


async def test_an_absolute_deadline_is_the_wall_clock_time_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        at = trio.current_time() + 12.5
        assert await rt.execute(hung, run_id="r", deadline=at) == DEADLINE
        assert (await rt.record("r")).deadline == at
        assert (await _end_event(rt, "r")).at == at


async def test_a_run_that_ends_first_keeps_its_end_and_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        assert await rt.execute(quick, run_id="r", timeout=10) == NATURAL
        await trio.sleep(20)  # the deadline passes: nothing changes
        record = await rt.record("r")
        assert record.state == NATURAL
        assert record.deadline is not None
        assert len(terminal_commits(await history(rt, "r"))) == 1


async def test_a_body_that_swallows_the_cancel_still_ends_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def stubborn(ctx: RunContext) -> object:
        with contextlib.suppress(trio.Cancelled):
            await trio.sleep_forever()
        return {"late": True}

    async with runtime() as rt:
        assert await rt.execute(stubborn, run_id="r", timeout=3) == DEADLINE
        kinds = [e.kind for e in await history(rt, "r")]
        assert "late_result_discarded" in kinds
        assert (await rt.record("r")).result is None


async def test_an_error_raised_at_the_deadline_is_still_a_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Rule 4: an error the body raises wins over the cancel that made it.
    async def converts(ctx: RunContext) -> object:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise ValueError("gave up") from None

    async with runtime() as rt:
        state = await rt.execute(converts, timeout=3)
        assert state == RunState.Ended(EndCause.Failed("value_error", "gave up"))


async def test_cancel_before_the_deadline_wins_and_the_deadline_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        handle = await rt.start(hung, run_id="r", timeout=10)
        await trio.sleep(1)
        assert await rt.cancel_run("r") == CANCELLED
        assert await settle(handle) == CANCELLED
        await trio.sleep(20)
        assert await rt.state("r") == CANCELLED
        assert len(terminal_commits(await history(rt, "r"))) == 1


async def test_a_deadline_costs_no_task_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        base = _tasks()
        for i in range(10):
            await rt.start(hung, run_id=f"plain{i}")
        plain = _tasks() - base
        for i in range(10):
            await rt.start(hung, run_id=f"limited{i}", timeout=100 + i)
        assert _tasks() - base == 2 * plain  # one actor each, with or without a deadline
        await trio.sleep(200)
        for i in range(10):
            assert await rt.state(f"limited{i}") == DEADLINE
            await rt.cancel_run(f"plain{i}")


# --------------------------------------------------------------------------- already past


async def test_a_deadline_already_past_commits_the_run_and_ends_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = []

    async def body(ctx: RunContext) -> object:
        ran.append(ctx.run_id)
        return None

    async with runtime() as rt:
        t0 = trio.current_time()
        assert await rt.execute(body, run_id="r", deadline=t0 - 5) == DEADLINE
        assert trio.current_time() == t0
        assert ran == []
        record = await rt.record("r")
        assert (record.state, record.deadline) == (DEADLINE, t0 - 5)
        assert await rt.execute(body, run_id="zero", timeout=0) == DEADLINE
        assert ran == []


# --------------------------------------------------------------------------- bad input

BAD = [
    ({"timeout": 1, "deadline": 5.0}, "not both"),
    ({"timeout": -1}, "timeout must be a finite number of seconds >= 0"),
    ({"timeout": math.nan}, "timeout must be"),
    ({"timeout": math.inf}, "timeout must be"),
    ({"timeout": "5"}, "timeout must be"),
    ({"timeout": True}, "timeout must be"),
    ({"deadline": math.inf}, "deadline must be a time"),
    ({"deadline": "tomorrow"}, "deadline must be a time"),
    ({"queue_timeout": -0.5}, "queue_timeout must be a finite number of seconds >= 0"),
    ({"queue_timeout": math.nan}, "queue_timeout must be"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
@pytest.mark.parametrize("call", ["start", "execute", "submit", "start_child", "run_child"])
async def test_bad_limits_are_refused_naming_the_option_and_nothing_is_committed(
    autojump_clock: trio.testing.MockClock, options: dict[str, Any], message: str, call: str
) -> None:
    refused: list[BaseException] = []

    async def parent(ctx: RunContext) -> object:
        try:
            if call == "start_child":
                await ctx.start_child(quick, run_id="c", **options)
            else:
                await ctx.run_child(quick, run_id="c", **options)
        except InvalidArgument as exc:
            refused.append(exc)
        return None

    async with runtime() as rt:
        rt.register("quick", quick)
        if call in ("start_child", "run_child"):
            assert await rt.execute(parent, run_id="p") == NATURAL
            [error] = refused
            assert message in str(error)
            with pytest.raises(UnknownRun):
                await rt.record("c")
            return
        if call == "submit":
            attempt = rt.submit("quick", run_id="r", **options)
        else:
            attempt = getattr(rt, call)(quick, run_id="r", **options)
        with pytest.raises(InvalidArgument, match=message):
            await attempt
        with pytest.raises(UnknownRun):
            await rt.record("r")
        assert await history(rt) == []


async def test_a_child_takes_no_not_before(autojump_clock: trio.testing.MockClock) -> None:
    refused: list[str] = []

    async def parent(ctx: RunContext) -> object:
        for call in (ctx.start_child, ctx.run_child):
            try:
                await call(quick, run_id="c", not_before=trio.current_time() + 5)
            except InvalidArgument as exc:
                refused.append(str(exc))
        return None

    async with runtime() as rt:
        assert await rt.execute(parent, run_id="p") == NATURAL
        assert len(refused) == 2
        assert all("start_child() starts the run now" in why for why in refused)
        with pytest.raises(UnknownRun):
            await rt.record("c")


# --------------------------------------------------------------------------- children


async def test_a_childs_deadline_is_its_parents_when_that_is_earlier_and_it_ends_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def parent(ctx: RunContext) -> object:
        await ctx.run_child(hung, run_id="child", timeout=1000)
        return None

    async with runtime() as rt:
        t0 = trio.current_time()
        assert await rt.execute(parent, run_id="p", timeout=20) == DEADLINE
        child = await rt.record("child")
        assert (child.state, child.deadline) == (DEADLINE, t0 + 20)
        ends = terminal_commits(await history(rt))
        assert [(e.run_id, dict(e.detail)) for e in ends] == [
            ("child", {"source": "deadline"}),
            ("p", {"source": "deadline"}),
        ]


async def test_a_childs_own_earlier_deadline_ends_the_child_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def parent(ctx: RunContext) -> object:
        state = await ctx.run_child(hung, run_id="child", timeout=5)
        return {"child": type(state).__name__, "cause": repr(state)}

    async with runtime() as rt:
        t0 = trio.current_time()
        assert await rt.execute(parent, run_id="p", timeout=50) == NATURAL
        assert (await rt.record("child")).deadline == t0 + 5
        assert await rt.state("child") == DEADLINE
        assert trio.current_time() == t0 + 5


async def test_a_queued_and_an_awaiting_child_end_at_the_parents_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def asks(ctx: RunContext) -> object:
        await ctx.await_input("user_input")
        return None

    async def parent(ctx: RunContext) -> object:
        await ctx.run_child(asks, run_id="asking")
        await ctx.start_child(hung, run_id="busy", thread_id="t")
        await ctx.start_child(hung, run_id="queued", thread_id="t")
        await trio.sleep_forever()

    async with runtime() as rt:
        assert await rt.execute(parent, run_id="p", timeout=30) == DEADLINE
        for run_id in ("asking", "busy", "queued"):
            assert await rt.state(run_id) == DEADLINE, run_id
        order = [e.run_id for e in terminal_commits(await history(rt))]
        assert order[-1] == "p"


# --------------------------------------------------------------------------- not running


async def test_an_awaiting_run_is_ended_at_its_deadline_by_the_runtime_holding_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def asks(ctx: RunContext) -> object:
        await ctx.await_input("user_input")
        return None

    async with runtime() as rt:
        t0 = trio.current_time()
        state = await rt.execute(asks, run_id="r", timeout=60)
        assert isinstance(state, RunState.Awaiting)
        await trio.sleep(61)
        assert await rt.state("r") == DEADLINE
        end = await _end_event(rt, "r")
        assert (end.at, dict(end.detail)) == (t0 + 60, {"source": "deadline"})
        with pytest.raises(NotAwaiting) as raised:
            await rt.resume("r", "too late")
        assert raised.value.state == DEADLINE


async def test_a_resume_after_the_deadline_ends_the_run_first_if_nothing_has(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The wall clock passes the deadline while Trio's time (the timer's) stands still:
    # nothing has ended the run when the resume comes.
    clock = FakeClock(1000.0)

    async def asks(ctx: RunContext) -> object:
        await ctx.await_input("user_input")
        return None

    async with open_runtime(clock=clock) as rt:
        state = await rt.execute(asks, run_id="r", timeout=60)
        assert isinstance(state, RunState.Awaiting)
        clock.now = 1060.5
        assert await rt.state("r") == state  # not ended yet
        with pytest.raises(NotAwaiting) as raised:
            await rt.resume("r", "too late")
        assert raised.value.state == DEADLINE
        assert await rt.state("r") == DEADLINE
        assert len(terminal_commits(await history(rt, "r"))) == 1


async def test_the_deadline_survives_a_resume(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answered = trio.Event()

    async def asks_then_hangs(ctx: RunContext) -> object:
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        answered.set()
        await trio.sleep_forever()

    async with runtime() as rt:
        t0 = trio.current_time()
        await rt.execute(asks_then_hangs, run_id="r", timeout=40)
        await trio.sleep(10)
        handle = await rt.resume("r", "go", body=asks_then_hangs)
        await reach(answered)
        assert await settle(handle) == DEADLINE
        assert (await _end_event(rt, "r")).at == t0 + 40


async def test_a_submitted_run_past_its_deadline_at_the_call_is_committed_and_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        handle = await rt.submit("job", run_id="r", deadline=trio.current_time() - 1)
        assert await rt.state("r") == DEADLINE
        assert await settle(handle) == DEADLINE


async def test_a_submitted_run_nobody_serves_ends_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        t0 = trio.current_time()
        handle = await rt.submit("job", run_id="r", timeout=15)
        assert await settle(handle) == DEADLINE
        assert (await _end_event(rt, "r")).at == t0 + 15


# --------------------------------------------------------------------------- queue timeout


async def test_a_run_that_never_started_in_time_ends_stopped_queue_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        busy = await rt.start(hung, run_id="busy", thread_id="t")
        t0 = trio.current_time()
        waiting = await rt.start(quick, run_id="w", thread_id="t", queue_timeout=5)
        assert await rt.state("w") == RunState.Queued()
        assert await settle(waiting) == QUEUE_TIMEOUT
        end = await _end_event(rt, "w")
        assert (end.at, dict(end.detail)) == (t0 + 5, {"source": "queue_timeout"})
        await rt.cancel_run("busy")
        assert await settle(busy) == CANCELLED


async def test_a_run_that_started_in_time_is_not_ended_by_its_queue_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(ctx: RunContext) -> object:
        await trio.sleep(30)
        return "done"

    async with runtime() as rt:
        busy = await rt.start(hung, run_id="busy", thread_id="t")
        waiting = await rt.start(slow, run_id="w", thread_id="t", queue_timeout=5)
        await trio.sleep(1)
        await rt.cancel_run("busy")
        await settle(busy)
        assert await settle(waiting) == NATURAL
        submitted = await rt.submit("job", run_id="s", queue_timeout=3)
        assert await settle(submitted) == QUEUE_TIMEOUT


async def test_the_earlier_limit_decides(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with runtime() as rt:
        await rt.start(hung, run_id="busy", thread_id="t")
        one = await rt.start(quick, run_id="a", thread_id="t", queue_timeout=9, timeout=4)
        two = await rt.start(quick, run_id="b", thread_id="t", queue_timeout=4, timeout=9)
        assert await settle(one) == DEADLINE
        assert await settle(two) == QUEUE_TIMEOUT
        await rt.cancel_run("busy")


# --------------------------------------------------------------------------- the store


async def test_a_store_failing_at_a_new_runs_commit_leaves_nothing_and_no_limit_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()
    async with open_runtime(store, clock=trio.current_time) as rt:
        store.failing = True
        with pytest.raises(StoreError):
            await rt.submit("job", run_id="s", timeout=5, queue_timeout=1)
        with pytest.raises(StoreError):
            await rt.start(hung, run_id="r", timeout=5)
        store.failing = False
        await trio.sleep(10)  # past both limits: nothing to end, nothing fails
        for run_id in ("s", "r"):
            with pytest.raises(UnknownRun):
                await rt.record(run_id)
        assert await history(rt) == []


async def test_a_store_failing_at_the_deadlines_end_leaves_the_run_as_it_was(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FailingStore()
    async with open_runtime(store, clock=trio.current_time) as rt:
        state = await rt.execute(asks_input, run_id="r", timeout=5)
        assert isinstance(state, RunState.Awaiting)
        store.failing_runs.add("r")
        await trio.sleep(10)  # the timer's end fails: the run is as the store holds it
        assert store.failed_batches >= 1
        assert await rt.state("r") == state
        store.failing_runs.clear()
        # The next one to look ends it: here, a resume, which then refuses.
        with pytest.raises(NotAwaiting) as raised:
            await rt.resume("r", "late")
        assert raised.value.state == DEADLINE
        assert len(terminal_commits(await history(rt, "r"))) == 1


async def test_a_cancel_racing_the_deadlines_end_in_a_stalled_store_ends_the_run_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HoldingStore(RunState.Ended)
    async with open_runtime(store, clock=trio.current_time) as rt:
        state = await rt.execute(asks_input, run_id="r", timeout=5)
        assert isinstance(state, RunState.Awaiting)
        outcome: list[object] = []

        async def cancel() -> None:
            try:
                outcome.append(await rt.cancel_run("r"))
            except RunAlreadyEnded as exc:
                outcome.append(exc.state)

        async with trio.open_nursery() as nursery:
            with trio.fail_after(60):
                await store.holding.wait()  # the deadline's end is in the store, stalled
            nursery.start_soon(cancel)
            await trio.sleep(1)
            store.release.set()
        assert outcome == [DEADLINE]  # the deadline's end landed first; the cancel sees it
        assert await rt.state("r") == DEADLINE
        assert len(terminal_commits(await history(rt, "r"))) == 1


async def asks_input(ctx: RunContext) -> object:
    await ctx.await_input("user_input")
    return None
