"""One exploration run: a body on a fresh memory runtime, in a ``trio.run`` of its own on the
virtual clock, watched step by step, with one command delivered just before a chosen step.

The watcher is a `trio.abc.Instrument`. A step belongs to the explored run when the task is
the actor of one of its attempts (`run_attempt`, the body's own task) or a task whose context
holds an attempt (`current_attempt`: Trio copies a task's context into the tasks it
spawns, so the tasks a body starts, and its child runs' tasks, carry it). Only this run's
tasks exist in the ``trio.run``, so every such step is one of the explored tree's.
"""

from __future__ import annotations

import contextlib
import inspect
import os
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
    current_attempt,
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


_Where = tuple[Literal["before", "after"], str, str]


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
class Plan:
    """What one exploration run does. ``target`` is None for the uninterrupted run."""

    body: Body | Callable[[], Body]
    fresh: bool
    input: JsonValue
    check: Check | None
    command: Command | None = None
    target: StepSite | None = None


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


class _Probe(trio.abc.Instrument):
    """Counts the explored run's steps and delivers the command before the target step."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
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
        attempt = task.context.get(current_attempt)
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
            self._point(("after", stepping[1], location(task)))
        except Exception as exc:  # pragma: no cover - a bug of the explorer itself
            if self.error is None:
                self.error = exc

    def _before(self, task: trio.lowlevel.Task, attempt: Attempt | None, actor: bool) -> None:
        own = self._actor_attempt(task) if actor else attempt
        # Every run is named on every step, so its alias is the same in every run.
        run = "?" if own is None else self.alias(own.run_id)
        label = f"the body task of run {run!r}" if actor else f"task {task.name!r} of run {run!r}"
        if not self.started:
            # The one point before a step: ahead of the run's first (a pre-start command).
            self.started = True
            self._point(("before", label, location(task)))
        self.stepping = (task, label)
        if attempt is None or (actor and attempt is not own):
            return  # an actor before or after its body: the runtime's own steps
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

    def _point(self, where: _Where) -> None:
        """One schedule point: recorded (the uninterrupted run), or the target's turn."""
        site = StepSite(self.points, *where)
        self.points += 1
        if self.record_sites:
            self.sites.append(site)
            return
        target = self.plan.target
        assert target is not None
        if site.index != target.index:
            return
        if site != target:
            self.mismatch = site
            return
        self.landed = site
        self.delivered = not self.overdue and self._deliver()
        self.watching = self.delivered and self.plan.command != "pause"

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
                attempt = runtime._registry.get(ROOT)
                if attempt is None or attempt.phase == "sealed":
                    return False
                attempt.request_end(EndRequest(Stopped(STOP_REASON), "stop_run", STOP_REASON))
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


def run_in_fresh_trio(plan: Plan, on_stuck: Callable[[RunReport], None]) -> RunReport:
    """One exploration run, in a new ``trio.run`` on the virtual clock (called in a worker
    thread: the caller's run and its clock are left alone).

    A run that cannot be shut down (a body that shields itself from cancellation forever)
    never lets this ``trio.run`` return: its report is handed to ``on_stuck`` instead, and
    the thread stays blocked, idle, for the rest of the process.
    """
    probe = _Probe(plan)
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
                await runtime.start(body, input=plan.input, run_id=ROOT)
                await _follow(runtime, plan.command == "pause", problems)
            ended = not waited.cancelled_caught
            # Past the hang limit the runtime shuts the run down: a command from now on
            # lands in that shutdown, not in the body's work.
            probe.overdue = not ended
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
    # runtime could not shut it down either (it shields itself from every cancellation).
    await trio.sleep(2 * HANG_LIMIT)
    problems.append(
        "the runtime could not shut the run down: a task of its body shields itself from"
        " cancellation and never returns"
    )
    on_stuck(await _report(plan, probe, store, problems, ended=False))


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
