"""`explore_cancellation`: cancel, stop and pause a body at every one of its schedule points.

A first run of the body, uninterrupted, counts the steps of the explored run's tasks (the
body's, the tasks it starts, its child runs'). Then, for each step ``k`` and each command,
a fresh runtime runs the body again and the command is delivered just before step ``k``;
each run is checked against the runtime's rules (DESIGN §2) and the caller's own ``check``.
Every run is a ``trio.run`` of its own on Trio's virtual clock, in a worker thread, with
Trio's scheduler seeded for that thread: the same body gives the same steps in the same
order, so a failure replays.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Callable, Iterable
from typing import Protocol, final

import attrs
import trio

from .._core import (
    Awaiting,
    Body,
    Cancelled,
    Ended,
    EventKind,
    Failed,
    InvalidArgument,
    JsonValue,
    NaturalEnd,
    RunEvent,
    RunState,
    Stopped,
    check_body,
    check_json,
    safe_repr,
)
from ._explore_run import (
    CANCEL_REASON,
    HANG_LIMIT,
    ROOT,
    STOP_REASON,
    Check,
    Command,
    Limits,
    Overrun,
    Plan,
    RunReport,
    StepSite,
    run_ids,
    run_in_fresh_trio,
)
from ._scheduling import PerThreadRandom, deterministic_scheduling

_COMMANDS: tuple[Command, ...] = ("cancel", "stop", "pause")
_SEED = 0
STEP_LIMIT = 10_000
TIME_LIMIT = 60.0


@final
@attrs.frozen
class FreshBody:
    """A body made anew for every exploration run (see `fresh`)."""

    factory: Callable[[], Body]


def fresh(factory: Callable[[], Body]) -> FreshBody:
    """Explore the body ``factory()`` returns, calling it once per exploration run.

    For a body that keeps state between runs, such as an `~awaken_trio.agent.Agent` over a
    `~awaken_trio.agent.ScriptedModel` (whose replies are used up)::

        await explore_cancellation(fresh(lambda: Agent(ScriptedModel([...]), tools)))
    """
    if not callable(factory):
        raise InvalidArgument(f"fresh() needs a callable that returns a body, not {factory!r}")
    return FreshBody(factory)


@final
@attrs.frozen
class ExploredPoint:
    """One explored schedule point and command.

    ``outcome`` is the explored run's committed state once it was over (after resuming a
    pause); ``delivered`` is False when the run had already ended (or was no longer
    controllable) at that point, so the command changed nothing; ``task`` and
    ``location`` say which task was about to take the step and the line it resumed at.
    """

    index: int
    command: Command
    outcome: RunState
    task: str = ""
    location: str = ""
    delivered: bool = True


@final
@attrs.frozen
class ExplorationReport:
    """Every explored point, in order (for each schedule point, each command).

    ``schedule_points`` is how many points the uninterrupted run has, ``baseline`` the state
    it ended in; ``stopped_early`` says ``max_points`` cut the exploration short.
    """

    points: tuple[ExploredPoint, ...]
    stopped_early: bool
    schedule_points: int
    baseline: RunState
    commands: tuple[Command, ...]


class CancellationViolation(AssertionError):
    """A run of the body broke a rule when a command was delivered at one schedule point.

    ``point`` and ``command`` are None for the uninterrupted run; ``task`` and ``location``
    say where the command landed; ``events`` are the run's committed events; ``problems``
    lists what was wrong; ``report`` holds the points explored before this one.
    """

    def __init__(
        self,
        message: str,
        *,
        point: int | None,
        command: Command | None,
        task: str | None,
        location: str | None,
        events: tuple[RunEvent, ...],
        problems: tuple[str, ...],
        report: ExplorationReport,
    ) -> None:
        super().__init__(message)
        self.point = point
        self.command = command
        self.task = task
        self.location = location
        self.events = events
        self.problems = problems
        self.report = report


async def explore_cancellation(
    body: Body | FreshBody,
    *,
    input: JsonValue = None,
    commands: Iterable[Command] = ("cancel",),
    check: Check | None = None,
    max_points: int = 500,
    step_limit: int = STEP_LIMIT,
    time_limit: float = TIME_LIMIT,
) -> ExplorationReport:
    """Run ``body`` once uninterrupted, then once per schedule point and command with the
    command delivered just before that point, and check every run.

    Each run is checked against the runtime's rules: exactly one terminal commit per run
    and nothing after it; every child ended before its parent's attempt; no task of a run
    still running after the run ended; a cancel ends the run ``Cancelled`` and a stop
    ``Stopped`` (with the source in the terminal event), unless it had already ended; no
    result committed for a cancelled run, and no value returned by a body that a
    ``trio.Cancelled`` reached (it caught the cancellation); a paused run resumes to the
    same end as the uninterrupted one. Then ``check(record, events)`` (sync or async; the
    explored run's record and all events of the run and its children) runs; raising fails
    the point.

    A run that does not end is found by watchdogs, each counting from the run's start and
    again from the command's delivery. A run still going after ten million virtual seconds,
    or after ``step_limit`` schedule points, does not end on its own: the runtime shuts it
    down, as a worker's would (a body that loops until it is cancelled ends
    ``Stopped("runtime shutdown")`` in the uninterrupted run and is explored like any other).
    A run that takes ``step_limit`` schedule points in which the virtual clock does not
    move, or ``time_limit`` seconds of real time, spins: a body that catches
    ``trio.Cancelled`` in a loop (every checkpoint then raises at once), or a loop of
    checkpoints that never waits. So does one that takes ``step_limit`` points after a
    cancel, a stop or that shutdown. The explorer ends such a run, raising in its body's
    task, in place of the ``trio.Cancelled``, an error the body does not catch as one, and
    reports it: after a command, a body that kept running; in the uninterrupted run, a body
    that did not end. A run that goes on even then (its body catches every exception) is
    reported all the same, and its thread is left behind, blocked. The caller's own
    cancellation ends the exploration at once: the run under way is ended in its thread,
    and nothing waits for it.

    Args:
        body: the run body, or `fresh(factory)` for one made anew for every run.
        input: the run's input.
        commands: any of ``"cancel"``, ``"stop"`` and ``"pause"``.
        check: the caller's own invariant (a file closed, a lock released).
        max_points: the most points (point and command pairs) to explore.
        step_limit: schedule points (a positive int, 10,000 by default): a run may take this
            many without the virtual clock moving, and this many in all before it counts
            as one that does not end on its own.
        time_limit: seconds of real time (a positive number, 60 by default) a run may take.

    Raises:
        CancellationViolation: the first run that broke a rule.
        InvalidArgument: a bad argument.
    """
    plan = _plan(body, input, commands, check, max_points, step_limit, time_limit)
    chosen = plan.commands
    with deterministic_scheduling() as scheduler:
        baseline = await _run(plan.base, scheduler)
        empty = ExplorationReport((), False, len(baseline.sites), baseline.final, chosen)
        problems = _check_run(baseline, None, None, plan.base.limits)
        if problems:
            raise _violation(baseline, None, None, problems, empty)
        points: list[ExploredPoint] = []
        total = len(baseline.sites) * len(chosen)
        for index, site in enumerate(baseline.sites):
            for command in chosen:
                if len(points) >= max_points:
                    break
                report = await _run(
                    attrs.evolve(plan.base, command=command, target=site), scheduler
                )
                so_far = ExplorationReport(
                    tuple(points), False, len(baseline.sites), baseline.final, chosen
                )
                problems = _check_run(report, baseline, command, plan.base.limits)
                if problems:
                    raise _violation(report, index, command, problems, so_far)
                points.append(
                    ExploredPoint(
                        index, command, report.final, site.task, site.location, report.delivered
                    )
                )
    return ExplorationReport(
        tuple(points), len(points) < total, len(baseline.sites), baseline.final, chosen
    )


class Explore(Protocol):
    """The type of the ``explore`` fixture: `explore_cancellation` itself."""

    async def __call__(
        self,
        body: Body | FreshBody,
        *,
        input: JsonValue = None,
        commands: Iterable[Command] = ("cancel",),
        check: Check | None = None,
        max_points: int = 500,
        step_limit: int = STEP_LIMIT,
        time_limit: float = TIME_LIMIT,
    ) -> ExplorationReport: ...


@final
@attrs.frozen
class _Exploration:
    base: Plan
    commands: tuple[Command, ...]


def _plan(
    body: Body | FreshBody,
    input: JsonValue,
    commands: Iterable[Command],
    check: Check | None,
    max_points: int,
    step_limit: int,
    time_limit: float,
) -> _Exploration:
    if isinstance(body, FreshBody):
        made: Body | Callable[[], Body] = body.factory
        is_fresh = True
    else:
        made = check_body(body)
        is_fresh = False
    if isinstance(commands, str):
        raise InvalidArgument(
            f"commands must be a sequence of command names, such as ({commands!r},)"
        )
    chosen = tuple(commands)
    unknown = [c for c in chosen if c not in _COMMANDS]
    if not chosen or unknown or len(set(chosen)) != len(chosen):
        raise InvalidArgument(
            f"commands must name each of 'cancel', 'stop', 'pause' at most once, and at least"
            f" one of them, not {safe_repr(chosen)}"
        )
    if check is not None and not callable(check):
        raise InvalidArgument(
            f"check must be a callable (record, events) -> None, not {safe_repr(check)}"
        )
    if type(max_points) is not int or max_points < 1:
        raise InvalidArgument(f"max_points must be a positive int, not {safe_repr(max_points)}")
    if type(step_limit) is not int or step_limit < 1:
        raise InvalidArgument(
            f"step_limit must be a positive int (schedule points), not {safe_repr(step_limit)}"
        )
    if type(time_limit) not in (int, float) or not math.isfinite(time_limit) or time_limit <= 0:
        raise InvalidArgument(
            "time_limit must be a positive number of seconds (an int or a finite float),"
            f" not {safe_repr(time_limit)}"
        )
    input = check_json(input, "input of the explored body")
    limits = Limits(step_limit, float(time_limit))
    return _Exploration(Plan(made, is_fresh, input, check, limits), chosen)


async def _run(plan: Plan, scheduler: PerThreadRandom) -> RunReport:
    """One exploration run in a worker thread.

    The caller's cancellation leaves at once and tells the thread to end its run (it does,
    at the run's next step: `_Probe._overrun`); nothing waits for it. A run stuck for good
    (its body shields itself from cancellation forever, or catches every exception in a
    loop) hands its report over from the thread, which is left behind, blocked and idle.
    """
    token = trio.lowlevel.current_trio_token()
    stuck: list[RunReport] = []
    stop = threading.Event()
    with trio.CancelScope() as scope:

        def give_up(report: RunReport) -> None:  # in this thread, through the token
            stuck.append(report)
            scope.cancel(reason="the exploration run is stuck")

        def hand_over(report: RunReport) -> None:  # in the exploration's thread
            # The caller may be gone already (its trio.run over): nobody to hand it to.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(give_up, report)

        try:
            return await trio.to_thread.run_sync(
                _in_thread, plan, scheduler, hand_over, stop, abandon_on_cancel=True
            )
        finally:
            # Left by a cancellation (the caller's, or give_up's): the thread goes on alone,
            # so it ends its run rather than finish it for nobody. (After a return the
            # thread is done and this is a no-op.)
            stop.set()
    return stuck[0]


def _in_thread(
    plan: Plan,
    scheduler: PerThreadRandom,
    on_stuck: Callable[[RunReport], None],
    stop: threading.Event,
) -> RunReport:
    with scheduler.seeded(_SEED):
        # A context of its own: nothing of the caller's (such as the attempt it runs in)
        # leaks into the exploration's trio.run.
        return contextvars.Context().run(run_in_fresh_trio, plan, on_stuck, stop)


# --------------------------------------------------------------------------- checks


def _check_run(
    report: RunReport, baseline: RunReport | None, command: Command | None, limits: Limits
) -> list[str]:
    """What the run did wrong, by the runtime's rules and the caller's check."""
    problems = list(report.problems)
    if report.mismatch is not None:
        assert baseline is not None
        problems.append(
            f"the body does not run deterministically: its schedule point"
            f" {report.mismatch.index} was {report.mismatch.task} at"
            f" {report.mismatch.location}, not what the uninterrupted run had there; its"
            " schedule must depend on nothing but Trio (no real time, threads, or randomness)"
        )
        return problems
    if report.overrun is not None:
        # The explorer ended the run itself: how it ended says nothing about the body.
        problems.append(_overrun_problem(report.overrun, command, limits))
        return problems
    problems.extend(_terminal_problems(report))
    problems.extend(report.leaks)
    problems.extend(_cause_problems(report, baseline, command))
    if report.check_error is not None:
        problems.append(f"check(record, events) raised {safe_repr(report.check_error)}")
    return problems


def _overrun_problem(overrun: Overrun, command: Command | None, limits: Limits) -> str:
    """What a run that went past its limits did, and what to do about it."""
    if overrun.limit == "steps":
        span = (
            f"{overrun.steps} schedule points ({overrun.seconds:.1f} s), none of which let the"
            f" virtual clock move (step_limit={limits.steps})"
        )
        knob = "step_limit"
    else:
        span = (
            f"{overrun.seconds:.1f} seconds of real time ({overrun.steps} schedule points;"
            f" time_limit={limits.seconds:g})"
        )
        knob = "time_limit"
    if overrun.after == "start":
        return (
            f"the run did not end: after {span} it was still running, at {overrun.at}: its"
            " body loops without ever waiting for the clock (a loop of checkpoints that"
            f" never ends?); explore a body that ends, or raise {knob} if it is meant to"
            " take longer"
        )
    if overrun.after == "command":
        text = f"the body kept running after the {command} was delivered"
    else:
        text = (
            "the run did not end on its own within the explorer's limits, so the runtime"
            " shut it down, and the body kept running"
        )
    text += f": {span} later it had not ended"
    if overrun.caught:
        where = (
            f"raised at {overrun.at}"
            if overrun.resumed_cancelled
            else f"that reached it (it was last running at {overrun.at})"
        )
        text += (
            f"; it caught the trio.Cancelled {where} and went on ({overrun.caught} times),"
            " so the cancellation never ended it: a body must let trio.Cancelled"
            " propagate (re-raise it after cleanup)"
        )
    else:
        text += (
            f"; it was running at {overrun.at} and no trio.Cancelled reached it: does it"
            " loop under a shielded scope?"
        )
    if overrun.unstoppable:
        text += (
            "; it went on even when the explorer raised an error in place of the"
            " cancellation: it catches every exception (`except BaseException`, a bare"
            " `except:`), so its thread is left behind, blocked"
        )
    return text


def _terminal_problems(report: RunReport) -> list[str]:
    """Exactly one terminal commit per run and nothing after it; children end before the
    end of their parent's attempt."""
    problems: list[str] = []
    events = report.events
    terminal: dict[str, int] = {}
    for run_id in run_ids(events):
        mine = [e for e in events if e.run_id == run_id]
        ends = [e for e in mine if e.kind == EventKind.COMMITTED and isinstance(e.state, Ended)]
        if len(ends) > 1:
            problems.append(
                f"run {run_id!r} has {len(ends)} terminal commits (seq"
                f" {', '.join(str(e.seq) for e in ends)}); a run ends exactly once"
            )
        if ends:
            terminal[run_id] = ends[0].seq
            after = [e for e in mine if e.seq > ends[0].seq]
            if after:
                problems.append(
                    f"run {run_id!r} has events after its terminal commit (seq {ends[0].seq}):"
                    f" {', '.join(f'{e.kind} (seq {e.seq})' for e in after)}"
                )
        elif report.ended and not _awaits(mine):
            problems.append(f"run {run_id!r} never ended (its last state: {mine[-1].state!r})")
    for run_id, record in report.records.items():
        parent = record.parent_run_id
        if parent is None:
            continue
        born = next(e.seq for e in events if e.run_id == run_id)
        parent_end = next(
            (
                e.seq
                for e in events
                if e.run_id == parent
                and e.seq > born
                and e.kind == EventKind.COMMITTED
                and isinstance(e.state, Awaiting | Ended)
            ),
            None,
        )
        child_end = terminal.get(run_id)
        if parent_end is not None and (child_end is None or child_end > parent_end):
            problems.append(
                f"child run {run_id!r} ended after its parent {parent!r} ended the attempt it"
                f" was started in (seq {parent_end}): no run outlives its parent's attempt"
            )
    return problems


def _awaits(events: list[RunEvent]) -> bool:
    committed = [e for e in events if e.kind == EventKind.COMMITTED]
    return bool(committed) and isinstance(committed[-1].state, Awaiting)


def _cause_problems(
    report: RunReport, baseline: RunReport | None, command: Command | None
) -> list[str]:
    problems: list[str] = []
    events = report.events
    late = {e.run_id for e in events if e.kind == EventKind.LATE_RESULT_DISCARDED}
    for run_id, where in report.cancel_reached.items():
        record = report.records.get(run_id)
        if record is None:
            continue
        if run_id in late:
            problems.append(
                f"the body of run {run_id!r} caught the trio.Cancelled that reached it at"
                f" {where} and returned a value (recorded as a late result, never committed):"
                " a body must let Cancelled propagate (re-raise it after cleanup)"
            )
        state = record.state
        if isinstance(state, Ended) and isinstance(state.cause, Failed):
            problems.append(
                f"run {run_id!r} ended {state!r} after the trio.Cancelled that reached it at"
                f" {where}: its body turned the cancellation into an error"
            )
    for run_id, record in report.records.items():
        state = record.state
        if (
            isinstance(state, Ended)
            and isinstance(state.cause, Cancelled | Stopped)
            and record.result is not None
        ):
            problems.append(
                f"run {run_id!r} ended {state!r} with a committed result {record.result!r}:"
                " a cancelled run's value is a late result, never committed"
            )
    if baseline is None or command is None:
        return problems
    final = report.final
    same_end = final == baseline.final and report.record.result == baseline.record.result
    if not report.ended:
        if report.delivered and command != "pause":
            problems.append(
                f"the run did not end within {HANG_LIMIT:g} virtual seconds after the {command}"
                " was delivered: its body ignores or shields the cancellation"
            )
        return problems
    if not report.delivered or command == "pause":
        if not same_end and baseline.ended:
            problems.append(
                f"the run ended {final!r} with result {report.record.result!r}, but the"
                f" uninterrupted run ended {baseline.final!r} with result"
                f" {baseline.record.result!r}"
                + (" (a paused run must resume to the same end)" if command == "pause" else "")
            )
        return problems
    wanted = Cancelled() if command == "cancel" else Stopped(STOP_REASON)
    if not isinstance(final, Ended):
        problems.append(f"the run was left {final!r} after the {command}; it must end {wanted!r}")
        return problems
    cause = final.cause
    if cause == wanted:
        terminal = [
            e
            for e in events
            if e.run_id == ROOT and e.kind == EventKind.COMMITTED and isinstance(e.state, Ended)
        ]
        source, reason = (
            ("deliver", CANCEL_REASON) if command == "cancel" else ("stop_run", STOP_REASON)
        )
        detail = terminal[-1].detail if terminal else {}
        if detail.get("source") != source or detail.get("reason") != reason:
            problems.append(
                f"the terminal event's detail is {dict(detail)!r}; it must name source"
                f" {source!r} and reason {reason!r}"
            )
    elif isinstance(cause, Failed) or (isinstance(cause, NaturalEnd) and same_end):
        pass  # the body failed on its own, or had ended before the command could matter
    else:
        problems.append(f"the run ended {final!r} after the {command}; it must end {wanted!r}")
    return problems


def _violation(
    report: RunReport,
    point: int | None,
    command: Command | None,
    problems: list[str],
    so_far: ExplorationReport,
) -> CancellationViolation:
    site: StepSite | None = report.landed
    if point is None:
        what = "the uninterrupted run"
    else:
        where = f" ({site.task} resuming at {site.location})" if site is not None else ""
        what = f"{command} delivered before schedule point {point}{where}"
    lines = [f"{what} broke the contract:"]
    lines += [f"  - {problem}" for problem in problems]
    lines.append("events:")
    lines += [
        f"  {e.seq:>4} {e.run_id} g{e.generation} {e.kind} {e.state!r} {dict(e.detail)!r}"
        for e in report.events
    ]
    violation = CancellationViolation(
        "\n".join(lines),
        point=point,
        command=command,
        task=None if site is None else site.task,
        location=None if site is None else site.location,
        events=report.events,
        problems=tuple(problems),
        report=so_far,
    )
    if report.check_error is not None:
        violation.__cause__ = report.check_error
    return violation
