"""explore_cancellation: every schedule point of a body, cancelled, stopped and paused, and
the bugs it must find."""

from __future__ import annotations

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
