"""explore_cancellation: every schedule point of a body, cancelled, stopped and paused, and
the bugs it must find."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import trio
import trio.lowlevel

from awaken_trio import EndCause, InvalidArgument, RunContext, RunEvent, RunRecord, RunState
from awaken_trio.agent import Agent, ModelReply, ScriptedModel, Tool, ToolCall
from awaken_trio.testing import (
    CancellationViolation,
    Command,
    ExploredPoint,
    explore_cancellation,
    fresh,
)

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
STOPPED = RunState.Ended(EndCause.Stopped("explored stop"))
ALL: tuple[Command, ...] = ("cancel", "stop", "pause")


async def steps(ctx: RunContext) -> object:
    """A clean body: three steps of work, each committed at a boundary."""
    progress = ctx.checkpoint or {"step": 0}
    while progress["step"] < 3:
        await trio.sleep(1)
        progress = {"step": progress["step"] + 1}
        await ctx.boundary(progress)
    return {"done": progress["step"]}


# --------------------------------------------------------------------------- clean bodies


async def test_a_clean_body_reports_every_point_and_no_violation() -> None:
    report = await explore_cancellation(steps, commands=ALL)
    assert report.baseline == NATURAL_END
    assert report.schedule_points > 3
    assert not report.stopped_early
    assert len(report.points) == report.schedule_points * 3
    assert [p.index for p in report.points[:6]] == [0, 0, 0, 1, 1, 1]
    assert [p.command for p in report.points[:3]] == list(ALL)
    by_command = {c: [p for p in report.points if p.command == c] for c in ALL}
    # Before the body's first step the cancel is a pre-start cancel; in the middle each
    # command ends the run its own way; a pause resumes to the uninterrupted end.
    assert by_command["cancel"][0].outcome == CANCELLED
    assert by_command["stop"][0].outcome == STOPPED
    assert all(p.outcome == NATURAL_END for p in by_command["pause"])
    assert CANCELLED in {p.outcome for p in by_command["cancel"][1:]}
    assert all(p.location for p in report.points)
    assert any("test_explore.py" in p.location for p in report.points)


async def test_a_cancel_after_the_body_returned_leaves_its_natural_end() -> None:
    report = await explore_cancellation(steps)
    last = report.points[-1]
    assert last.outcome == NATURAL_END, "a cancel after the end must not change it"


async def test_two_explorations_of_one_body_give_identical_reports() -> None:
    async def racing(ctx: RunContext) -> object:
        # Two tasks whose steps interleave: their order is Trio's scheduler's choice.
        seen: list[int] = []

        async def worker(n: int) -> None:
            for _ in range(3):
                await trio.lowlevel.checkpoint()
                seen.append(n)

        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(worker, n)
        return seen

    first = await explore_cancellation(racing, commands=ALL)
    second = await explore_cancellation(racing, commands=ALL)
    assert first == second
    assert any("worker" in p.task for p in first.points)


async def test_max_points_caps_the_work_and_the_report_says_so() -> None:
    report = await explore_cancellation(steps, commands=("cancel", "stop"), max_points=5)
    assert len(report.points) == 5
    assert report.stopped_early
    assert [(p.index, p.command) for p in report.points] == [
        (0, "cancel"),
        (0, "stop"),
        (1, "cancel"),
        (1, "stop"),
        (2, "cancel"),
    ]
    whole = await explore_cancellation(steps, commands=("cancel",), max_points=500)
    assert not whole.stopped_early


async def test_the_check_sees_each_runs_record_and_events() -> None:
    seen: list[tuple[RunState, int]] = []

    async def check(record: RunRecord, events: tuple[RunEvent, ...]) -> None:
        await trio.lowlevel.checkpoint()
        assert record.run_id == events[0].run_id
        seen.append((record.state, len(events)))

    report = await explore_cancellation(steps, commands=("stop",), check=check)
    assert len(seen) == report.schedule_points + 1  # the uninterrupted run, then each point
    assert seen[0][0] == NATURAL_END
    assert {state for state, _ in seen[1:]} >= {STOPPED}


async def test_a_body_with_children_is_explored_through_their_steps() -> None:
    async def child(ctx: RunContext) -> object:
        await trio.sleep(1)
        return ctx.input

    async def parent(ctx: RunContext) -> object:
        handle = await ctx.start_child(child, input=1)
        other = await ctx.run_child(child, input=2)
        await handle.wait()
        return {"other": str(other)}

    report = await explore_cancellation(parent, commands=ALL)
    assert any("'child #" in p.task for p in report.points), "children's steps are points"
    assert {p.outcome for p in report.points if p.command == "cancel"} >= {CANCELLED}


async def test_an_agent_body_is_explored() -> None:
    async def add(arguments: dict[str, Any], ctx: RunContext) -> object:
        await trio.sleep(1)
        return arguments["a"] + arguments["b"]

    def agent() -> Agent:
        model = ScriptedModel(
            [
                ModelReply(tool_calls=(ToolCall("c1", "add", {"a": 1, "b": 2}),)),
                ModelReply(text="3"),
            ]
        )
        return Agent(model, [Tool("add", add, parameters={"type": "object"})], max_steps=4)

    report = await explore_cancellation(fresh(agent), input="1 + 2?", commands=ALL)
    assert report.baseline == NATURAL_END
    assert {p.outcome for p in report.points} >= {NATURAL_END, CANCELLED, STOPPED}


# --------------------------------------------------------------------------- planted bugs


async def test_it_finds_a_lock_released_only_on_the_normal_path() -> None:
    held: set[str] = set()

    async def body(ctx: RunContext) -> object:
        held.add(ctx.run_id)  # acquire
        await trio.sleep(1)
        held.discard(ctx.run_id)  # released only if nothing interrupted the sleep
        return None

    def check(record: RunRecord, events: tuple[RunEvent, ...]) -> None:
        assert record.run_id not in held, "the lock is still held"

    with pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(body, check=check)
    violation = caught.value
    assert violation.command == "cancel"
    assert violation.point is not None
    assert "the lock is still held" in str(violation)
    assert isinstance(violation.__cause__, AssertionError)
    assert violation.location is not None
    assert "test_explore.py" in violation.location
    assert violation.task is not None
    assert f"point {violation.point}" in str(violation)
    assert violation.events
    assert violation.events[-1].state == CANCELLED


async def test_it_finds_a_body_that_swallows_the_cancel_and_returns() -> None:
    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            return "finished anyway"
        return "finished"

    with pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(body, commands=("stop",))
    violation = caught.value
    assert violation.command == "stop"
    assert "caught the trio.Cancelled" in str(violation)
    # The runtime's part held: the value was recorded as a late result, never committed.
    kinds = [e.kind for e in violation.events]
    assert "late_result_discarded" in kinds
    assert violation.events[-1].state == STOPPED


async def test_a_value_returned_in_the_cancelled_step_is_a_late_result_not_a_violation() -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep(1)
        return "done"  # returned in the step the cancel is delivered before

    report = await explore_cancellation(body)
    assert CANCELLED in {p.outcome for p in report.points}


async def test_it_finds_a_child_task_in_a_smuggled_nursery_outliving_its_run() -> None:
    nurseries: dict[str, trio.Nursery] = {}

    async def worker(done: trio.Event) -> None:
        try:
            await trio.sleep(1)
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)  # a flush, shielded as it should be
        done.set()

    async def child(ctx: RunContext) -> object:
        done = trio.Event()
        # The bug: the worker goes into the parent's nursery, not one of the child's own.
        nurseries[str(ctx.parent_run_id)].start_soon(worker, done)
        await done.wait()
        return None

    async def parent(ctx: RunContext) -> object:
        async with trio.open_nursery() as nursery:
            nurseries[ctx.run_id] = nursery
            await ctx.run_child(child)
        return None

    with pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(parent)
    assert "outlives the run" in str(caught.value)
    assert caught.value.command == "cancel"


async def test_it_finds_a_finally_that_awaits_without_a_shield() -> None:
    cleaned: set[str] = set()

    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep(1)
        finally:
            await trio.lowlevel.checkpoint()  # not shielded: a cancel raises here again
            cleaned.add(ctx.run_id)
        return None

    def check(record: RunRecord, events: tuple[RunEvent, ...]) -> None:
        # Every exploration run uses the same run id: the check resets what it reads.
        done = record.run_id in cleaned
        cleaned.clear()
        assert done, "the cleanup did not run"

    with pytest.raises(CancellationViolation, match="the cleanup did not run"):
        await explore_cancellation(body, check=check)


async def test_it_finds_a_body_that_shields_itself_from_the_cancel_for_good() -> None:
    async def body(ctx: RunContext) -> object:
        try:
            await trio.sleep(1)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await trio.sleep_forever()
            raise
        return None

    with pytest.raises(CancellationViolation, match="could not shut the run down") as caught:
        await explore_cancellation(body)
    assert caught.value.point is not None


async def test_an_uninterrupted_run_that_never_ends_is_reported() -> None:
    async def body(ctx: RunContext) -> object:
        with trio.CancelScope(shield=True):
            await trio.sleep_forever()
        return None

    with pytest.raises(CancellationViolation, match="uninterrupted run") as caught:
        await explore_cancellation(body)
    assert caught.value.point is None


async def test_a_body_that_waits_forever_is_explored_until_cancelled() -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep(1)
        await trio.sleep_forever()  # only cancellation ends it

    report = await explore_cancellation(body, commands=("cancel", "pause"))
    assert report.baseline == RunState.Ended(EndCause.Stopped("runtime shutdown"))
    cancels = [p for p in report.points if p.command == "cancel"]
    assert {p.outcome for p in cancels if p.delivered} == {CANCELLED}
    # Points met while the runtime shuts the never-ending run down change nothing.
    assert {p.outcome for p in cancels if not p.delivered} == {report.baseline}


# --------------------------------------------------------------------------- bodies that spin

# Each test below is bounded twice: by the explorer's own watchdogs (set low where the test
# is not about their defaults), and by a guard of real time around it (the caller's clock
# here is Trio's real one), so a regression fails in seconds rather than hanging.
GUARD = 30.0


async def retries_on_anything(ctx: RunContext) -> object:
    """Three steps, each retried until it succeeds: a cancel is "retried" for ever."""
    done = 0
    while done < 3:
        try:
            await trio.sleep(1)  # once cancelled, raises at once, again and again
            done += 1
        except trio.Cancelled:
            pass
    return done


async def loops_until_cancelled(ctx: RunContext) -> object:
    while True:
        try:  # noqa: SIM105 - the bug, as it is usually written
            await trio.sleep(1)
        except trio.Cancelled:
            pass


async def test_it_finds_a_body_that_catches_cancelled_in_a_loop() -> None:
    began = time.monotonic()
    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(retries_on_anything)  # the default watchdogs
    violation = caught.value
    assert violation.point is not None
    assert violation.command == "cancel"
    message = str(violation)
    assert message.startswith(f"cancel delivered before schedule point {violation.point} (")
    (problem,) = violation.problems
    assert problem.startswith("the body kept running after the cancel was delivered: 10001")
    assert "none of which let the virtual clock move (step_limit=10000) later" in problem
    assert "it caught the trio.Cancelled raised at" in problem
    assert "test_explore.py" in problem
    assert "in retries_on_anything" in problem
    assert time.monotonic() - began < GUARD


async def test_a_stop_landing_in_a_swallowing_loop_is_reported_too() -> None:
    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(retries_on_anything, commands=("stop",), step_limit=2_000)
    assert caught.value.command == "stop"
    assert "kept running after the stop was delivered" in str(caught.value)
    assert "2001 schedule points" in str(caught.value)
    assert "(step_limit=2000)" in str(caught.value)


async def test_the_wall_clock_watchdog_ends_a_spin_the_step_budget_does_not() -> None:
    began = time.monotonic()
    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(retries_on_anything, step_limit=10**12, time_limit=0.5)
    (problem,) = caught.value.problems
    assert problem.startswith("the body kept running after the cancel was delivered")
    assert "seconds of real time (" in problem
    assert "time_limit=0.5) later it had not ended" in problem
    assert caught.value.point is not None
    assert time.monotonic() - began < 10


async def test_a_body_that_loops_until_cancelled_and_swallows_the_cancel_is_reported() -> None:
    # It never ends on its own: at the step limit the runtime shuts it down, as at the hang
    # limit, and then it spins in the uninterrupted run already.
    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(loops_until_cancelled, step_limit=2_000)
    violation = caught.value
    assert violation.point is None
    (problem,) = violation.problems
    assert problem.startswith(
        "the run did not end on its own within the explorer's limits, so the runtime shut it"
        " down, and the body kept running: 2001 schedule points"
    )
    assert "it caught the trio.Cancelled raised at" in problem
    assert "in loops_until_cancelled" in problem


async def test_a_body_that_loops_until_cancelled_is_explored_within_the_step_limit() -> None:
    async def body(ctx: RunContext) -> object:
        polls = 0
        while True:
            await trio.sleep(1)  # a poll every second, until cancelled
            polls += 1
            await ctx.boundary({"polls": polls})

    with trio.fail_after(GUARD):
        report = await explore_cancellation(body, step_limit=1_000, max_points=20)
    # The step limit ends the uninterrupted run as the hang limit would, deterministically.
    assert report.baseline == RunState.Ended(EndCause.Stopped("runtime shutdown"))
    assert report.schedule_points > 1_000
    assert {p.outcome for p in report.points[1:]} == {CANCELLED}


async def test_a_callers_cancel_ends_the_exploration_of_a_spinning_body() -> None:
    wound_down = threading.Event()

    async def body(ctx: RunContext) -> object:
        try:
            await loops_until_cancelled(ctx)
        finally:
            wound_down.set()
        return None

    began = time.monotonic()
    with trio.fail_after(GUARD):
        with trio.move_on_after(1) as waited:
            await explore_cancellation(body)  # the default watchdogs: seconds away
        assert waited.cancelled_caught
        assert time.monotonic() - began < 3
        # The run left in its thread is wound down, not left spinning.
        assert await trio.to_thread.run_sync(wound_down.wait, GUARD / 2)


async def test_an_uninterrupted_run_that_never_waits_is_reported() -> None:
    async def body(ctx: RunContext) -> object:
        while True:
            await trio.lowlevel.checkpoint()  # never waits on the clock, never ends

    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(body, step_limit=2_000)
    violation = caught.value
    assert violation.point is None
    assert violation.command is None
    message = str(violation)
    assert message.startswith("the uninterrupted run broke the contract")
    (problem,) = violation.problems
    assert problem.startswith("the run did not end: after 2001 schedule points (")
    assert "none of which let the virtual clock move (step_limit=2000)" in problem
    assert "raise step_limit" in problem


async def test_a_body_that_catches_everything_in_a_loop_is_reported_and_left_behind() -> None:
    async def body(ctx: RunContext) -> object:
        done = False
        while not done:
            try:
                await trio.sleep(1)
                done = True
            except BaseException:
                pass
        return None

    with trio.fail_after(GUARD), pytest.raises(CancellationViolation) as caught:
        await explore_cancellation(body, step_limit=2_000)
    (problem,) = caught.value.problems
    assert problem.startswith("the body kept running after the cancel was delivered")
    assert "it catches every exception" in problem
    assert "its thread is left behind" in problem


async def test_it_finds_a_pause_that_does_not_resume_to_the_same_end() -> None:
    async def body(ctx: RunContext) -> object:
        await trio.sleep(1)
        await ctx.boundary()
        return {"generation": ctx.generation}  # differs once paused and resumed

    with pytest.raises(CancellationViolation, match="same end") as caught:
        await explore_cancellation(body, commands=("pause",))
    assert caught.value.command == "pause"


async def test_a_broken_uninterrupted_run_is_reported_without_a_point() -> None:
    def check(record: RunRecord, events: tuple[RunEvent, ...]) -> None:
        raise ValueError("always wrong")

    with pytest.raises(CancellationViolation, match="uninterrupted run") as caught:
        await explore_cancellation(steps, check=check)
    assert caught.value.point is None
    assert caught.value.command is None
    assert caught.value.report.points == ()


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"commands": ()}, "commands must name"),
        ({"commands": ("cancel", "cancel")}, "commands must name"),
        ({"commands": ("kill",)}, "commands must name"),
        ({"commands": "cancel"}, "sequence of command names"),
        ({"max_points": 0}, "max_points"),
        ({"check": 3}, "check must be a callable"),
        ({"input": {1, 2}}, "input"),
        ({"step_limit": 0}, "step_limit must be a positive int"),
        ({"step_limit": True}, "step_limit must be a positive int"),
        ({"step_limit": 1.5}, "step_limit must be a positive int"),
        ({"time_limit": 0}, "time_limit must be a positive number of seconds"),
        ({"time_limit": -1.0}, "time_limit must be a positive number of seconds"),
        ({"time_limit": float("nan")}, "time_limit must be a positive number of seconds"),
        ({"time_limit": float("inf")}, "time_limit must be a positive number of seconds"),
        ({"time_limit": "60"}, "time_limit must be a positive number of seconds"),
        ({"time_limit": False}, "time_limit must be a positive number of seconds"),
    ],
)
async def test_bad_arguments_are_refused_with_what_to_do(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await explore_cancellation(steps, **kwargs)


async def test_a_body_that_is_not_async_is_refused() -> None:
    def body(ctx: RunContext) -> object:
        return None

    with pytest.raises(InvalidArgument, match="async"):
        await explore_cancellation(body)  # type: ignore[arg-type]


def test_explored_points_are_frozen_values() -> None:
    point = ExploredPoint(0, "cancel", CANCELLED)
    assert point == ExploredPoint(0, "cancel", CANCELLED)
    with pytest.raises(AttributeError):
        point.index = 1  # type: ignore[misc]
