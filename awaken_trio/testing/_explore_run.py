"""One exploration run: a body on a fresh memory runtime, in a ``trio.run`` of its own on the
virtual clock, watched step by step, with one command delivered just before a chosen step.

The watcher is a `trio.abc.Instrument`. A step belongs to the explored run when the task is
the actor of one of its attempts (`run_attempt`, the body's own task) or a task whose context
holds an attempt (`attempt_in`: Trio copies a task's context into the tasks it
spawns, so the tasks a body starts, and its child runs' tasks, carry it). Only this run's
tasks exist in the ``trio.run``, so every such step is one of the explored tree's.

The watcher is also the run's watchdog on what the virtual clock cannot see. A body that
catches ``trio.Cancelled`` in a loop spins on checkpoints that raise at once: the run never
idles, so virtual time never moves and neither the hang limit nor the runtime's shutdown
ever comes. The watcher counts the run's steps and reads both clocks at each of them (see
`_Probe._count`): ``step_limit`` steps in which the virtual clock did not move, or
``time_limit`` seconds of real time, and the run is ended and reported; ``step_limit``
steps of a run whose clock does move (a body that loops until it is cancelled) count as the
hang limit, deterministically: the runtime shuts the run down, and that is no violation.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, final

import attrs
import outcome
import trio
import trio.testing

from .._core import (
    Attempt,
    Awaiting,
    AwakenError,
    Body,
    Ended,
    EndRequest,
    EventKind,
    JsonValue,
    LiveCommand,
    NotActive,
    RunEvent,
    RunRecord,
    RunState,
    Runtime,
    Stopped,
    attempt_in,
    request_end_here,
    run_attempt,
)
from .._open import open_runtime
from ..store import MemoryStore

Command = Literal["cancel", "stop", "pause"]
"""A command the explorer delivers: `LiveCommand.Cancel`, a stop (``stop_run`` semantics:
``Ended(Stopped(reason))``) or `LiveCommand.Pause`."""

Check = Callable[[RunRecord, tuple[RunEvent, ...]], object]

ROOT = "explored"
"""The explored run's id (children get ids of their own)."""
CANCEL_REASON = "explored cancel"
STOP_REASON = "explored stop"

# Wall-clock seconds at virtual time 0: event times and ticket deadlines read Trio's
# virtual clock, so they are the same in every run.
_EPOCH = 1_700_000_000.0
# A run still going this long (virtual seconds) is waiting for something that never comes.
HANG_LIMIT = 10_000_000.0
_ACTOR_CODE = run_attempt.__code__
_TRIO_DIR = os.path.dirname(trio.__file__) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep
_HEX = frozenset("0123456789abcdef")


def _virtual_wall_clock() -> float:
    return _EPOCH + trio.current_time()


@final
@attrs.frozen
class StepSite:
    """A schedule point of the explored run (``index`` counts them): before its first step,
    or after one of its steps, the task that took it, and the line that task is suspended
    at (where a command delivered there lands)."""

    index: int
    when: Literal["before", "after"]
    task: str
    location: str


@final
@attrs.frozen
class Limits:
    """How long one exploration run may go on without ending, in schedule points of the
    explored run and in seconds of real time: from the run's start, and again from the
    command's delivery."""

    steps: int
    seconds: float


@final
@attrs.frozen
class Plan:
    """What one exploration run does. ``target`` is None for the uninterrupted run."""

    body: Body | Callable[[], Body]
    fresh: bool
    input: JsonValue
    check: Check | None
    limits: Limits
    command: Command | None = None
    target: StepSite | None = None


@final
@attrs.frozen
class Overrun:
    """A run that went past its `Limits` without ending.

    ``limit`` says which limit: ``"steps"`` (schedule points in which the virtual clock did
    not move) or ``"seconds"`` (of real time); ``steps`` and ``seconds`` are the span that
    went past it. ``after`` says where the span began: the run's ``"start"``, the
    ``"command"``'s delivery, or the runtime's ``"shutdown"`` of a run that had not ended
    on its own. ``caught`` counts the times a body's task resumed with a
    ``trio.Cancelled`` since then, ``at`` is where the task that went past the limit was
    about to resume (with a ``trio.Cancelled`` there, if ``resumed_cancelled``);
    ``unstoppable`` says the run went on even once the explorer raised
    `ExplorationAborted` in place of its cancellations (its thread is left behind).
    """

    limit: Literal["steps", "seconds"]
    steps: int
    seconds: float
    after: Literal["start", "command", "shutdown"]
    caught: int
    at: str
    resumed_cancelled: bool
    unstoppable: bool = False


class ExplorationAborted(BaseException):
    """Raised by the explorer in a body's task in place of a ``trio.Cancelled``, once the run
    went past its limits: a body that catches ``trio.Cancelled`` and goes on does not catch
    this (a BaseException, like ``trio.Cancelled``, so ``except Exception`` does not either),
    and the run ends."""


@final
@attrs.frozen
class RunReport:
    """What happened in one exploration run, read once its runtime had closed."""

    sites: tuple[StepSite, ...]
    final: RunState
    record: RunRecord
    records: dict[str, RunRecord]
    events: tuple[RunEvent, ...]
    ended: bool  # the run ended (or awaits input) before the hang limit
    delivered: bool
    landed: StepSite | None
    # The runs whose body a trio.Cancelled from their own (or an ancestor's) token reached
    # after the command, with where.
    cancel_reached: dict[str, str]
    leaks: tuple[str, ...]
    problems: tuple[str, ...]
    check_error: BaseException | None
    mismatch: StepSite | None  # the step found where the target was expected
    overrun: Overrun | None


# How far a run that went past its limits is along being ended (see `_Probe._overrun`).
_Stage = Literal["running", "ending", "abandoned"]


class _Probe(trio.abc.Instrument):
    """Counts the explored run's steps, delivers the command before the target step, and
    ends a run that goes past its limits."""

    def __init__(self, plan: Plan, stop: threading.Event) -> None:
        self.plan = plan
        self.stop = stop  # set when the caller gave up on the exploration
        self.stage: _Stage = "running"
        # The span the limits count: from the run's start, the command's delivery, or the
        # shutdown at the step limit (`_count`).
        self.span: Literal["start", "command", "shutdown"] = "start"
        self.steps = 0  # the explored run's steps in the span
        self.still = 0  # ... since the virtual clock last moved
        self.clock = 0.0  # the virtual time it last read
        self.since = time.monotonic()  # when the span began
        self.caught = 0  # a body's task resumed with trio.Cancelled, in the span
        self.overrun: Overrun | None = None
        # Cancelled by `_overrun`: the hang limit (the runtime then shuts the run down), and
        # the watchdog's wait (it then hands the report over).
        self.hang_scope: trio.CancelScope | None = None
        self.watchdog_scope: trio.CancelScope | None = None
        self.handed_over = False
        self.record_sites = plan.target is None
        self.started = False
        self.overdue = False
        self.points = 0
        # The run's task taking the current step, and its label.
        self.stepping: tuple[trio.lowlevel.Task, str] | None = None
        self.sites: list[StepSite] = []
        self.runtime: Runtime | None = None
        self.delivered = False
        self.watching = False  # a cancel or stop was delivered: watch for Cancelled
        self.landed: StepSite | None = None
        self.mismatch: StepSite | None = None
        self.cancel_reached: dict[str, str] = {}
        self.leaks: list[str] = []
        self.leaked: set[trio.lowlevel.Task] = set()
        self.actors: dict[trio.lowlevel.Task, Attempt] = {}
        self.aliases: dict[str, str] = {ROOT: ROOT}
        self.error: BaseException | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.stepping = None
        attempt = attempt_in(task.context)
        actor = getattr(task.coro, "cr_code", None) is _ACTOR_CODE
        if attempt is None and not actor:
            return
        # An instrument that raises is removed by Trio, silently for the caller: keep the
        # error and report it after the run instead.
        try:
            self._before(task, attempt, actor)
        except Exception as exc:  # pragma: no cover - a bug of the explorer itself
            if self.error is None:
                self.error = exc

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        stepping = self.stepping
        if stepping is None or stepping[0] is not task:
            return
        self.stepping = None
        try:
            self._point("after", stepping[1], task)
        except Exception as exc:  # pragma: no cover - a bug of the explorer itself
            if self.error is None:
                self.error = exc

    def _before(self, task: trio.lowlevel.Task, attempt: Attempt | None, actor: bool) -> None:
        self._count(task)
        own = self._actor_attempt(task) if actor else attempt
        # Every run is named on every step, so its alias is the same in every run.
        run = "?" if own is None else self.alias(own.run_id)
        label = f"the body task of run {run!r}" if actor else f"task {task.name!r} of run {run!r}"
        if not self.started:
            # The one point before a step: ahead of the run's first (a pre-start command).
            self.started = True
            self._point("before", label, task)
        self.stepping = (task, label)
        if attempt is None or (actor and attempt is not own):
            return  # an actor before or after its body: the runtime's own steps
        sent = getattr(task, "_next_send", None)
        if type(sent) is outcome.Error and isinstance(sent.error, trio.Cancelled):
            self.caught += 1
            if self.stage != "running":
                # The run went past its limits: the body's task gets, where a Cancelled
                # would raise (a point where the runtime's code already unwinds), one it
                # does not catch as a Cancelled, and the run ends.
                aborted = ExplorationAborted(
                    "the explorer ended the run: it went on running past its limits"
                )
                aborted.__context__ = sent.error
                task._next_send = outcome.Error(aborted)
        if not actor and attempt.completion.done and task not in self.leaked:
            self.leaked.add(task)
            self.leaks.append(
                f"task {task.name!r} of run {run!r} ran after that run had ended (resuming"
                f" at {location(task)}): it was started in a nursery outside the run's"
                " attempt, so it outlives the run"
            )
        if self.watching and attempt.run_id not in self.cancel_reached:
            sent = getattr(task, "_next_send", None)
            if (
                type(sent) is outcome.Error
                and isinstance(sent.error, trio.Cancelled)
                and sent.error.source == "explicit"
                and attempt.cancel_reaches(False)
            ):
                self.cancel_reached[attempt.run_id] = location(task)

    def _count(self, task: trio.lowlevel.Task) -> None:
        """One step of the explored run, counted against the run's limits.

        ``step_limit`` steps in which the virtual clock did not move, or ``time_limit``
        seconds, and the run is ended and reported (`_overrun`), as it is once the caller
        gave up. ``step_limit`` steps of a run whose clock moves are a run that never ends
        on its own, like one at the hang limit: the runtime shuts it down, once (no
        violation: a body may loop until it is cancelled); after a cancel or a stop (or
        that shutdown) they are a body that goes on running, reported."""
        if self.stage == "abandoned" and self.handed_over:
            # Even an uncatchable error did not end the run, and its report is handed
            # over: the thread is left behind, blocked and idle, rather than spinning.
            threading.Event().wait()
        self.steps += 1
        now = trio.current_time()
        if now != self.clock:
            self.clock = now
            self.still = 0
        self.still += 1
        limits = self.plan.limits
        if self.still > limits.steps:
            self._overrun(task, "steps", self.still)
        elif time.monotonic() - self.since > limits.seconds:
            self._overrun(task, "seconds", self.steps)
        elif self.steps > limits.steps:
            must_end = self.span == "shutdown" or (
                self.span == "command" and self.plan.command != "pause"
            )
            if must_end or self.overdue:
                self._overrun(task, "steps", self.steps)
            else:
                self.overdue = True  # commands from now on land in the shutdown
                if self.hang_scope is not None:
                    self.hang_scope.cancel(reason="the run did not end within the step limit")
                self._new_span("shutdown")
        elif self.stop.is_set() and self.stage == "running":
            self._overrun(task, "steps", self.steps)  # nobody reads this run's report

    def _new_span(self, span: Literal["start", "command", "shutdown"]) -> None:
        self.span = span
        self.steps = self.still = self.caught = 0
        self.since = time.monotonic()

    def _overrun(
        self, task: trio.lowlevel.Task, limit: Literal["steps", "seconds"], steps: int
    ) -> None:
        """The run went past its limits without ending: end it, in stages.

        First as the hang limit would (the runtime shuts the run down, cancelling it), and,
        from now on, with `ExplorationAborted` raised in a body's task wherever a
        ``trio.Cancelled`` would be (`_before`). If the run goes on for as long again (its
        body catches every exception), the watchdog hands its report over and the thread
        is abandoned (`_count`)."""
        if self.stage == "running":
            sent = getattr(task, "_next_send", None)
            self.overrun = Overrun(
                limit=limit,
                steps=steps,
                seconds=time.monotonic() - self.since,
                after="shutdown" if self.span == "start" and self.overdue else self.span,
                caught=self.caught,
                at=location(task),
                resumed_cancelled=type(sent) is outcome.Error
                and isinstance(sent.error, trio.Cancelled),
            )
            self.stage = "ending"
            self.overdue = True
            if self.hang_scope is not None:
                self.hang_scope.cancel(reason="the run went past its limits")
        elif self.stage == "ending":
            assert self.overrun is not None
            self.overrun = attrs.evolve(self.overrun, unstoppable=True)
            self.stage = "abandoned"
            if self.watchdog_scope is not None:
                self.watchdog_scope.cancel(reason="the run cannot be ended")
        self._new_span(self.span)

    def _point(
        self, when: Literal["before", "after"], label: str, task: trio.lowlevel.Task
    ) -> None:
        """One schedule point: recorded (the uninterrupted run), or the target's turn."""
        index = self.points
        self.points += 1
        target = self.plan.target
        if target is not None and index != target.index:
            return  # not the target: where the task is suspended is not worth reading
        site = StepSite(index, when, label, location(task))
        if self.record_sites:
            self.sites.append(site)
            return
        assert target is not None
        if site != target:
            self.mismatch = site
            return
        self.landed = site
        self.delivered = not self.overdue and self._deliver()
        self.watching = self.delivered and self.plan.command != "pause"
        if self.delivered and self.stage == "running":
            # The limits count again from here: what the body does once commanded.
            self._new_span("command")

    def _actor_attempt(self, task: trio.lowlevel.Task) -> Attempt | None:
        """The attempt an actor task runs (its own, whatever its context holds)."""
        own = self.actors.get(task)
        if own is None:
            frame = getattr(task.coro, "cr_frame", None)
            found = None if frame is None else frame.f_locals.get("attempt")
            if isinstance(found, Attempt):
                self.actors[task] = own = found
        return own

    def _deliver(self) -> bool:
        runtime = self.runtime
        assert runtime is not None
        command = self.plan.command
        try:
            if command == "cancel":
                runtime.deliver(LiveCommand.Cancel(ROOT, CANCEL_REASON))
            elif command == "pause":
                runtime.deliver(LiveCommand.Pause(ROOT))
            else:
                # stop_run's own request, made synchronously at this step (stop_run itself
                # yields before it asks).
                request = EndRequest(Stopped(STOP_REASON), "stop_run", STOP_REASON)
                if not request_end_here(runtime, ROOT, request):
                    return False
        except NotActive:
            return False
        return True

    def alias(self, run_id: str) -> str:
        """A name for the run that is the same in every exploration run: its id if it was
        chosen, else its place among the explored tree's runs."""
        alias = self.aliases.get(run_id)
        if alias is None:
            generated = len(run_id) == 28 and set(run_id) <= _HEX
            alias = f"child #{len(self.aliases)}" if generated else run_id
            self.aliases[run_id] = alias
        return alias


def location(task: trio.lowlevel.Task) -> str:
    """The line the task is suspended at: the innermost frame of the user's code, else the
    innermost one outside Trio."""
    user = outside_trio = None
    for frame, lineno in task.iter_await_frames():
        path = frame.f_code.co_filename
        if path.startswith(_TRIO_DIR):
            continue
        where = (path, lineno, frame.f_code.co_name)
        outside_trio = where
        if not path.startswith(_PACKAGE_DIR):
            user = where
    found = user or outside_trio
    if found is None:
        return "<finished>"
    path, lineno, name = found
    with contextlib.suppress(ValueError):  # another drive, on Windows
        path = os.path.relpath(path)
    return f"{path}:{lineno} in {name}"


def run_in_fresh_trio(
    plan: Plan, on_stuck: Callable[[RunReport], None], stop: threading.Event
) -> RunReport:
    """One exploration run, in a new ``trio.run`` on the virtual clock (called in a worker
    thread: the caller's run and its clock are left alone).

    A run that cannot be shut down (a body that shields itself from cancellation forever,
    or catches every exception in a loop) never lets this ``trio.run`` return: its report
    is handed to ``on_stuck`` instead, and the thread stays blocked, idle, for the rest of
    the process. ``stop`` set (the caller gave up) ends the run as going past its limits
    would, so the thread winds down on its own.
    """
    probe = _Probe(plan, stop)
    report: RunReport = trio.run(
        _explore_once,
        plan,
        probe,
        on_stuck,
        clock=trio.testing.MockClock(autojump_threshold=0),
        instruments=[probe],
    )
    if probe.error is not None:  # pragma: no cover - a bug of the explorer itself
        raise probe.error
    return report


async def _explore_once(
    plan: Plan, probe: _Probe, on_stuck: Callable[[RunReport], None]
) -> RunReport:
    body: Body = plan.body() if plan.fresh else plan.body  # type: ignore[call-arg, assignment]
    store = MemoryStore()
    problems: list[str] = []
    ended = True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watchdog, plan, probe, store, problems, on_stuck)
        async with open_runtime(store, clock=_virtual_wall_clock) as runtime:
            probe.runtime = runtime
            with trio.move_on_after(HANG_LIMIT) as waited:
                probe.hang_scope = waited
                await runtime.start(body, input=plan.input, run_id=ROOT)
                await _follow(runtime, plan.command == "pause", problems)
            ended = not waited.cancelled_caught
            # Past the hang limit the runtime shuts the run down: a command from now on
            # lands in that shutdown, not in the body's work.
            probe.overdue = probe.overdue or not ended
        nursery.cancel_scope.cancel(reason="the run is over")
    return await _report(plan, probe, store, problems, ended=ended)


async def _watchdog(
    plan: Plan,
    probe: _Probe,
    store: MemoryStore,
    problems: list[str],
    on_stuck: Callable[[RunReport], None],
) -> None:
    # Virtual time only gets this far once the run has outlived the hang limit and its
    # runtime could not shut it down either (it shields itself from every cancellation);
    # the probe cuts the wait short for a run that cannot be ended (`_Probe._overrun`).
    with trio.CancelScope() as probe.watchdog_scope:
        await trio.sleep(2 * HANG_LIMIT)
    if probe.overrun is None:
        problems.append(
            "the runtime could not shut the run down: a task of its body shields itself"
            " from cancellation and never returns"
        )
    on_stuck(await _report(plan, probe, store, problems, ended=False))
    probe.handed_over = True


async def _report(
    plan: Plan, probe: _Probe, store: MemoryStore, problems: list[str], *, ended: bool
) -> RunReport:
    probe.runtime = None
    probe.watching = False
    events = await _all_events(store)
    records: dict[str, RunRecord] = {}
    for event in events:
        if event.run_id not in records:
            record = await store.load(event.run_id)
            if record is not None:
                records[event.run_id] = record
    root = records[ROOT]
    check_error: BaseException | None = None
    if plan.check is not None and ended:
        try:
            result = plan.check(root, events)
            if inspect.isawaitable(result):
                await _awaited(result)
        except Exception as exc:  # the user's check failed: a violation, reported as such
            check_error = exc
    return RunReport(
        sites=tuple(probe.sites),
        final=root.state,
        record=root,
        records=records,
        events=events,
        ended=ended,
        delivered=probe.delivered,
        landed=probe.landed,
        cancel_reached=dict(probe.cancel_reached),
        leaks=tuple(probe.leaks),
        problems=tuple(problems),
        check_error=check_error,
        mismatch=probe.mismatch,
        overrun=probe.overrun,
    )


async def _awaited(result: Awaitable[Any]) -> None:
    await result


async def _follow(runtime: Runtime, resume_pauses: bool, problems: list[str]) -> None:
    """Follow the explored run until it ends or waits for input; a run that paused for the
    explorer is resumed (in the same runtime), a scheduled wake-up is waited for."""
    async for event in runtime.events(ROOT):
        if event.kind != EventKind.COMMITTED:
            continue
        state = event.state
        if isinstance(state, Ended):
            return
        if not isinstance(state, Awaiting):
            continue
        reason = state.ticket.reason
        if reason == "scheduled_action":
            continue  # the runtime resumes it when due (virtual time jumps there)
        if reason != "manual_pause" or not resume_pauses:
            return  # it waits for input nobody here gives: that is how it ends
        try:
            await runtime.resume(ROOT, correlation_id=state.ticket.correlation_id)
        except AwakenError as exc:
            problems.append(f"resuming the paused run failed: {exc!r}")
            return


async def _all_events(store: MemoryStore) -> tuple[RunEvent, ...]:
    events: list[RunEvent] = []
    while True:
        batch = await store.events_after(events[-1].seq if events else 0)
        if not batch:
            return tuple(events)
        events.extend(batch)


def run_ids(events: Sequence[RunEvent]) -> list[str]:
    """The runs the events are about, in the order they first appear."""
    return list(dict.fromkeys(event.run_id for event in events))
