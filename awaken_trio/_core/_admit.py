"""Admissions: how an attempt gets into the kernel, and where a run is.

An admission commits ``Running`` (its thread free here) or ``Queued`` (behind its thread)
and spawns the attempt's actor. Two rules keep every committed state backed by an actor: an
admission reserves its place in a nursery before it commits (`Admissions.reserve`), and a
nursery closes only after the admissions under way have spawned (`Attempt.close_children`,
and `closed` for the runtime's own nursery).

`locate` answers "where is this run?" once, as a value: an attempt here (`Here`), or only
the store's record (`Stored`); control acts on that answer. `post` is the one place a live
command is written to the store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, final

import attrs
import trio

from . import _commit_of as commit_of
from ._actor import run_attempt
from ._admission import Admission
from ._attempt import Attempt, Body
from ._attempts import first_attempt, new_attempt, stored_attempt
from ._commands import LiveCommand
from ._errors import RunExists, RuntimeClosed, StoreError, ThreadBusy
from ._json import FrozenDict, JsonValue, check_payload, freeze_detail
from ._policy import NO_DEADLINES, Deadlines
from ._spec import RunSpec, check_run_arguments, checked_input
from ._state import ResumeTicket, RunRecord
from ._storage import (
    Accepted,
    Commit,
    CommitResult,
    NewRun,
    Rejected,
    RejectReason,
    StoredCommand,
)
from ._takeback import refusal_of_child, take_back
from ._validate import new_run_id
from ._verdict import CommitFailed, Committed

if TYPE_CHECKING:
    from ._finish import FinishBoundary
    from ._handle import RunHandle
    from ._handles import Handles
    from ._host import AttemptHost
    from ._kernel import Kernel

DETAIL_START = freeze_detail({"source": "start"}, "detail")
DETAIL_FORK = freeze_detail({"source": "fork"}, "detail")
_DETAIL_THREAD_FREE = freeze_detail({"source": "thread_free"}, "detail")
_DETAIL_SUBMIT = freeze_detail({"source": "submit"}, "detail")
_TAKEN_IF_A_CHILD = (RejectReason.EXISTS, RejectReason.ENDED)

Answer = CommitResult | Exception
"""What a posted admission (`Admissions.admit_posted`) is answered with: the store's
answer, or what the store (`StoreError`) or the commit's effect raised."""


@final
@attrs.frozen(eq=False)
class Here:
    """The run has an attempt here: running, queued for its thread, or being let go (its
    end is being committed; its completion answers what it committed)."""

    attempt: Attempt


@final
@attrs.frozen
class Stored:
    """The run has no attempt here: the store's record is all there is (it may run
    elsewhere, wait queued or awaiting, or have ended)."""

    record: RunRecord


Location = Here | Stored


@final
class Admissions:
    """Admits attempts over the kernel's state (see the module docstring)."""

    def __init__(
        self, kernel: Kernel, finish: FinishBoundary, handles: Handles, host: AttemptHost
    ) -> None:
        self._kernel = kernel
        self._finish = finish
        self._handles = handles
        # What the actors of the attempts admitted here see of the kernel.
        self._host = host
        self._actors: trio.Nursery | None = None
        self._admitting = 0
        # Set once the runtime is closing and no admission of a top-level run is under way.
        self.closed = trio.Event()
        # The commit effects, bound once: each commit's partial holds no method of its own.
        self._admitted_effect = self._admitted

    # ------------------------------------------------------------------ places

    def open(self, actors: trio.Nursery) -> None:
        """Top-level actors live in ``actors`` from now on (the supervisor's nursery)."""
        self._actors = actors

    def close(self) -> None:
        """The runtime is closing: `closed` is set once admissions under way have spawned."""
        if self._admitting == 0:
            self.closed.set()

    def actors_nursery_or_none(self) -> trio.Nursery | None:
        return self._actors

    def actors_nursery(self) -> trio.Nursery:
        """The nursery for top-level actors; refuses once shutdown has begun."""
        if self._kernel.closing or self._actors is None:
            raise _closed()
        return self._actors

    def reserve(self, parent: Attempt | None) -> trio.Nursery | None:
        """A place for an actor: in the parent attempt's nursery, or the runtime's. None
        once that nursery has begun to close (the caller raises its own error)."""
        if parent is not None:
            return parent.admit_child()
        if self._kernel.closing or self._actors is None:
            return None
        self._admitting += 1
        return self._actors

    def _unreserve(self, parent: Attempt | None) -> None:
        if parent is not None:
            parent.child_admitted()
        else:
            self._admitting -= 1
            if self._kernel.closing:
                self.close()

    # ------------------------------------------------------------------ where a run is

    async def locate(self, run_id: str) -> Location:
        """Where the run is, looked at once after a checkpoint: its attempt here, or the
        store's record of it.

        Raises:
            UnknownRun: the store does not hold it.
        """
        await trio.lowlevel.checkpoint()
        kernel = self._kernel
        attempt = kernel.registry.get(run_id) or kernel.queued.get(run_id)
        if attempt is not None:
            return Here(attempt)
        record = await kernel.load(run_id)
        # An attempt may have been admitted here while the store was read.
        attempt = kernel.registry.get(run_id) or kernel.queued.get(run_id)
        return Stored(record) if attempt is None else Here(attempt)

    async def post(self, command: LiveCommand) -> StoredCommand | Rejected | None:
        """Store ``command`` for its run's attempt wherever it runs (the claim policy
        says whether the store keeps commands: None when it does not); an attempt here
        still waiting for its thread takes a cancel at once, and the rest when it starts."""
        kernel = self._kernel
        stored = await kernel.claims.post(command, kernel.now())
        if isinstance(stored, StoredCommand):
            attempt = kernel.attempt_here(stored.run_id)
            if attempt is not None:
                attempt.apply_stored(stored.id, stored.kind, stored.payload, stored.reason)
        return stored

    # ------------------------------------------------------------------ new runs

    async def start_run(self, spec: RunSpec) -> RunHandle:
        """Commit a new run and start (or queue) its first attempt; for a child whose run
        id its parent's run already has (rule 22), take that child back instead."""
        attempt = await self._begin(spec)
        if isinstance(attempt, Rejected):
            # (A run that exists is refused ENDED if it has ended, EXISTS otherwise.)
            if attempt.reason is RejectReason.BUSY:
                raise thread_busy(spec.thread_id, attempt)
            if spec.parent is None or attempt.reason not in _TAKEN_IF_A_CHILD:
                raise RunExists(spec.run_id)
            return await take_back(self, self._kernel, self._handles, spec, spec.parent)
        return self._handles.handle(attempt)

    async def begin_run(
        self,
        spec: RunSpec,
        *,
        checkpoint: JsonValue = None,
        forked_from: JsonValue = None,
        step_events: tuple[FrozenDict, ...] = (),
        detail: FrozenDict = DETAIL_START,
    ) -> Attempt:
        """`start_run`, returning the first attempt itself rather than a handle to it.

        A fork (``forked_from``) starts from ``checkpoint`` and ``step_events`` (the details
        of its source's journaled steps), its source's.

        Raises:
            RunExists: the store holds a run of that id.
        """
        attempt = await self._begin(
            spec,
            checkpoint=checkpoint,
            forked_from=forked_from,
            step_events=step_events,
            detail=detail,
        )
        if isinstance(attempt, Rejected):
            if attempt.reason is RejectReason.BUSY:
                raise thread_busy(spec.thread_id, attempt)
            raise RunExists(spec.run_id)
        return attempt

    async def _begin(
        self,
        spec: RunSpec,
        *,
        checkpoint: JsonValue = None,
        forked_from: JsonValue = None,
        step_events: tuple[FrozenDict, ...] = (),
        detail: FrozenDict = DETAIL_START,
    ) -> Attempt | Rejected:
        kernel = self._kernel
        await kernel.checkpoint_before_commit()
        parent = spec.parent
        if spec.name is None and kernel.named:
            # A run started with a registered body carries its name (what lets a root be
            # recovered, resumed and forked by name, and what shows which body any run,
            # a child too, runs).
            name = kernel.name_of(spec.body)
            if name is not None:
                spec = attrs.evolve(spec, name=name)
        version = kernel.version_for(spec.name, spec.body) if kernel.versions else None
        attempt = new_attempt(kernel, spec, generation=1, steps=0, checkpoint=checkpoint)
        new_run = NewRun(
            spec.thread_id,
            None if parent is None else parent.run_id,
            spec.name,
            spec.input,
            spec.max_steps,
            attempt.root_run_id,
            checkpoint,
            forked_from,
            step_events,
            spec.deadlines.deadline,
            spec.deadlines.queue_deadline,
            spec.if_busy,
            version,
            spec.retry,
        )
        admission = object.__new__(Admission)  # (see _commit_of, "Built by their own __init__")
        Admission.__init__(
            admission,
            attempt=attempt,
            expect=commit_of.EXPECT_NEW,
            detail=detail,
            new_run=new_run,
        )
        result = await self.admit(admission)
        if isinstance(result, Rejected):
            return result
        if spec.deadlines is not NO_DEADLINES and not attempt.started:
            # Queued here: its scope will carry its deadline once it runs; until then the
            # timer keeps both of its limits (a running attempt needs none).
            kernel.on_limits(run_id=spec.run_id, limits=spec.deadlines)
        return attempt

    async def start_root(
        self,
        body: Body,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
    ) -> Attempt:
        """`begin_run` for a top-level run with no time limits, no retry policy and the
        default busy-thread policy (``"queue"``): the common start, checked here.

        When the store needs no I/O, nothing waits in the mailbox, no claim is taken and
        the run's thread is free, its admission is made in this one step, as `admit`
        would make it, with no `RunSpec` or `Admission` built on the way; otherwise it is
        handed to `admit`.

        Raises:
            InvalidBody, InvalidArgument, InvalidPayload: a bad argument (nothing is
                committed).
            RunExists: the store holds a run of that id.
            RuntimeClosed: the runtime is shutting down.
        """
        kernel = self._kernel
        check_run_arguments(body, run_id, thread_id, name, max_steps)
        run_id = run_id or new_run_id()
        input = checked_input(input, run_id, kernel.max_payload_bytes)
        thread_id = thread_id or run_id
        await kernel.checkpoint_before_commit()
        attempt, new_run = first_attempt(kernel, body, input, run_id, thread_id, name, max_steps)
        mailbox = kernel.mailbox
        actors = self._actors
        if (
            actors is None
            or kernel.closing
            or not mailbox.applies_now
            or kernel.claims.start_under(attempt) is not None
            or not kernel.gate.try_acquire(thread_id, attempt)
        ):
            result = await self.admit(
                Admission(
                    attempt=attempt,
                    expect=commit_of.EXPECT_NEW,
                    detail=DETAIL_START,
                    new_run=new_run,
                )
            )
            if isinstance(result, Rejected):
                raise RunExists(run_id)
            return attempt
        # Its thread is taken: as in `admit`, from here to the spawn nothing yields.
        try:
            attempt.commands_before = False  # (its own commit creates the run Running)
            commit = commit_of.root_start(attempt, new_run, at=kernel.now(), detail=DETAIL_START)
            applied = mailbox.commit_now(commit)
            if type(applied) is Accepted:
                attempt.start_seq = applied.last_seq
                self._started(attempt, applied)
                if kernel.awaiting_bodies:
                    kernel.awaiting_bodies.pop(run_id, None)
        except BaseException:
            if not attempt.started:
                kernel.free_thread(attempt)  # nothing was committed: give the thread back
            raise
        if not attempt.started:  # refused: the run exists (a start made no claim to lose)
            kernel.free_thread(attempt)
            raise RunExists(run_id)
        actors.start_soon(run_attempt, self._host, attempt)
        return attempt

    def checked_input(self, input: JsonValue, run_id: str) -> JsonValue:
        return check_payload(input, f"input of run {run_id!r}", self._kernel.max_payload_bytes)

    async def commit_queued_run(
        self,
        run_id: str,
        new_run: NewRun,
        source: Literal["submit", "fork"],
        *,
        not_before: float | None = None,
    ) -> CommitResult:
        """Create the run ``Queued`` for any serving runtime that has its body by name
        (`Runtime.submit`, or a fork whose body is not here), not to start before
        ``not_before`` if given."""
        detail = _DETAIL_SUBMIT if source == "submit" else DETAIL_FORK
        kernel = self._kernel
        result = await kernel.mailbox.commit(
            commit_of.queue_new(
                run_id, new_run, at=kernel.now(), detail=detail, not_before=not_before
            ),
            functools.partial(self._queued_effect, run_id),
        )
        if isinstance(result, Rejected) and result.reason is RejectReason.BUSY:
            raise thread_busy(new_run.thread_id, result)
        return result

    def _queued_effect(self, run_id: str, result: CommitResult) -> None:
        if isinstance(result, Accepted) and result.superseded:
            self._kernel.superseded(result.superseded, run_id)

    # ------------------------------------------------------------------ resumes

    async def commit_queued_resume(
        self, record: RunRecord, ticket: ResumeTicket, value: JsonValue
    ) -> CommitResult:
        """Answer the awaiting run's ticket by committing it ``Queued`` with ``value``, for
        a serving runtime that has its body (durable stores)."""
        kernel = self._kernel
        return await kernel.mailbox.commit(
            commit_of.queue_resume(
                record.generation,
                record.run_id,
                ticket,
                value,
                at=kernel.now(),
                detail=resume_detail(ticket.correlation_id),
            )
        )

    async def resume_here(
        self,
        record: RunRecord,
        ticket: ResumeTicket,
        value: JsonValue,
        body: Body,
        parent: Attempt | None,
    ) -> Attempt | Rejected:
        """Answer the awaiting run's ticket with ``value`` and start its next attempt here
        (or queue it behind its thread); the refusal if the run moved on meanwhile.

        Raises:
            NotActive: the parent's attempt has begun to end (a child).
            RuntimeClosed: the runtime is shutting down.
        """
        attempt = stored_attempt(
            self._kernel, record, body, parent=parent, resume_value=value, ticket=ticket
        )
        expect = commit_of.expect_awaiting(record.generation, ticket)
        detail = resume_detail(ticket.correlation_id)
        result = await self.admit(Admission(attempt=attempt, expect=expect, detail=detail))
        return result if isinstance(result, Rejected) else attempt

    # ------------------------------------------------------------------ admitting

    async def admit(self, admission: Admission) -> CommitResult:
        """Commit ``Running`` (thread free) or ``Queued`` (thread busy) and spawn the actor.

        The clock is read first and the actor's place is reserved before the thread is
        taken, so a failure of either leaves nothing behind. The thread's place is taken
        before the commit, so FIFO order is call order; the registration and the spawn
        happen in the commit's own step.

        On a durable store a root attempt also takes its run's claim (or comes with the
        ``fence`` of a claim already taken, for a recovery), every commit of its tree is
        made under that claim, and a thread busy in another runtime makes the run wait
        ``Queued`` here or refuses the admission (`Rejected`), as
        ``when_busy_elsewhere`` says.
        ``take_handover`` takes the resume value and ticket the store holds for the run
        (a queued resume this runtime did not make, or the answer a lost or handed-back
        attempt was running with).

        Raises:
            RuntimeClosed: the runtime is shutting down (top-level runs).
            NotActive: the parent's attempt has begun to end (children).
        """
        kernel = self._kernel
        attempt, expect, new_run = admission.attempt, admission.expect, admission.new_run
        commit, nursery, at = self._prepare(admission)
        run_id, thread_id, generation = attempt.run_id, attempt.thread_id, attempt.generation
        gate = kernel.gate
        mailbox = kernel.mailbox
        on_commit = None
        try:
            # Applied here if the store needs no I/O (no coroutine for a call that never
            # yields, and its effect called at once, in the same step), else through the
            # mailbox: the same commit, effects and answer.
            result = mailbox.commit_now(commit)
            if result is not None:
                self._admitted(admission, result)
            else:
                # The effect of the commit, in its step: a partial rather than a closure,
                # as it lives as long as the commit waits for the mailbox.
                on_commit = functools.partial(self._admitted_effect, admission)
                result = await mailbox.commit(commit, on_commit)
            if (
                isinstance(result, Rejected)
                and result.reason is RejectReason.THREAD_BUSY
                and admission.when_busy_elsewhere == "queue"
            ):
                # The thread is busy in another runtime: the run waits Queued here, and
                # its actor retries when the store changes.
                attempt.phase = "waiting_elsewhere"
                attempt.queued_generation = generation - 1
                attempt.commands_before = True
                queued = commit_of.wait_elsewhere(
                    attempt, expect=expect, at=at, new_run=new_run, detail=admission.detail
                )
                # The rejection gave our place on the thread back: take it again (or
                # queue for it) so no run of ours starts on it meanwhile.
                if not gate.try_acquire(thread_id, attempt):
                    attempt.gate_waiter = gate.enqueue(thread_id, attempt)
                if on_commit is None:
                    on_commit = functools.partial(self._admitted_effect, admission)
                result = await mailbox.commit(queued, on_commit)
            if isinstance(result, Accepted):
                # The actor is spawned by the admitting task, so its body starts only after
                # that task next yields: a cancel delivered before then is a pre-start
                # cancel. An inline commit never yielded, so this is still the commit's
                # step; through the mailbox the task spawns once it has its answer (its
                # wait cannot be interrupted, and the reservation holds the nursery).
                self._spawn(admission, nursery)
            return result
        except BaseException:
            if not attempt.started and run_id not in kernel.queued:
                kernel.free_thread(attempt)  # nothing was committed: give the thread back
            raise
        finally:
            self._unreserve(attempt.parent)

    def admit_posted(self, admission: Admission, done: Callable[[Answer], None]) -> None:
        """`admit` without a task of its own, for admissions made side by side (a serving
        loop's, of the runs a look found): the commit is handed to the mailbox
        (`CommitMailbox.post`), and in the commit's step the attempt is registered and
        its actor spawned (or its thread given back), then ``done`` is called with the
        store's answer, or what the store or the commit's effect raised. Sync. For an
        admission that refuses a thread busy elsewhere (``when_busy_elsewhere="refuse"``).

        Raises:
            RuntimeClosed: the runtime is shutting down (nothing was handed over).
        """
        assert admission.when_busy_elsewhere == "refuse"
        kernel = self._kernel
        attempt = admission.attempt
        commit, nursery, _ = self._prepare(admission)

        def answered(answer: CommitResult | StoreError) -> None:
            outcome: Answer = answer
            try:
                if not isinstance(answer, StoreError):
                    try:
                        self._admitted(admission, answer)
                    except Exception as exc:  # (as `admit`'s effect: the admitter's to raise)
                        outcome = exc
                    else:
                        if isinstance(answer, Accepted):
                            self._spawn(admission, nursery)
                if (
                    isinstance(outcome, Exception)
                    and not attempt.started
                    and attempt.run_id not in kernel.queued
                ):
                    kernel.free_thread(attempt)  # nothing was committed
            finally:
                self._unreserve(attempt.parent)
            done(outcome)

        try:
            kernel.mailbox.post(commit, answered)
        except BaseException:
            # Not handed over: nothing was committed.
            if not attempt.started and attempt.run_id not in kernel.queued:
                kernel.free_thread(attempt)
            self._unreserve(attempt.parent)
            raise

    def _prepare(self, admission: Admission) -> tuple[Commit, trio.Nursery, float]:
        """An admission up to its commit: the clock read, the actor's place reserved, the
        thread taken (or queued for), and the commit; with the reserved nursery and the
        time. Nothing yields; the caller unreserves once the commit is answered.

        Raises:
            RuntimeClosed: the runtime is shutting down (top-level runs).
            NotActive: the parent's attempt has begun to end (children).
        """
        kernel = self._kernel
        attempt, new_run = admission.attempt, admission.new_run
        at = kernel.now()
        nursery = self.reserve(attempt.parent)
        if nursery is None:
            raise refusal(attempt)
        thread_id, generation = attempt.thread_id, attempt.generation
        gate = kernel.gate
        is_running = gate.try_acquire(thread_id, attempt)
        if is_running:
            # Made Running by this very commit: no command can be stored for it before.
            attempt.commands_before = new_run is None
        else:
            attempt.gate_waiter = gate.enqueue(thread_id, attempt)
            attempt.queued_generation = generation - 1
        if admission.fence is not None:
            attempt.fence = admission.fence
        commit = commit_of.start(
            attempt,
            running_now=is_running,
            expect=admission.expect,
            at=at,
            new_run=new_run,
            detail=admission.detail,
            under=kernel.claims.start_under(attempt) if is_running else None,
        )
        return commit, nursery, at

    def _spawn(self, admission: Admission, nursery: trio.Nursery) -> None:
        """The admission's commit was accepted: its actor, in its reserved place."""
        attempt = admission.attempt
        nursery.start_soon(run_attempt, self._host, attempt)
        if attempt.deadline is not None and not attempt.started and admission.new_run is None:
            # Queued here: no scope carries its deadline while it waits, so the timer does
            # (a new run's limits are its `_begin`'s).
            self._kernel.on_limits(run_id=attempt.run_id, limits=Deadlines(attempt.deadline))

    def _admitted(self, admission: Admission, result: CommitResult) -> None:
        """The effect of an admission's commit: register the attempt (or queue it, if it
        was committed ``Queued``), or give its thread back if the store refused it."""
        kernel = self._kernel
        attempt = admission.attempt
        if isinstance(result, Rejected):
            kernel.free_thread(attempt)
            return
        run_id = attempt.run_id
        attempt.start_seq = result.last_seq
        if result.superseded:
            kernel.superseded(result.superseded, run_id)
        if attempt.queued_generation is None:  # committed Running
            if admission.take_handover:
                attempt.resume_value = result.resume_value
                attempt.ticket = result.resume_ticket
            self._started(attempt, result)
        else:
            if attempt.phase == "admitting":  # not waiting on another runtime's thread
                attempt.phase = "queued"
            kernel.queued[run_id] = attempt
        if kernel.awaiting_bodies:
            kernel.awaiting_bodies.pop(run_id, None)
        if attempt.parent is not None:
            attempt.parent.add_child(run_id, attempt)

    def _started(self, attempt: Attempt, result: Accepted) -> None:
        """The attempt's commit made it ``Running``: it holds its claim, takes what the
        store handed over, and is registered (the one effect of both ways in)."""
        attempt.started = True
        attempt.phase = "running"
        if result.taken_messages:
            attempt.carry(result.taken_messages)
        if result.taken_pause:
            attempt.pause_requested = True
        kernel = self._kernel
        kernel.claims.hold(attempt, result.epoch)
        kernel.registry.register(attempt)
        if kernel.observer is not None:
            attempt.span = kernel.observer.started(attempt)
        if result.commands is not None:
            # The commands stored for its run came with the start, read in its own
            # transaction: applied here (its span open), in the commit's step, before the
            # body can run, and nothing is left to read (`load_commands`).
            attempt.commands_before = False
            for command in result.commands:
                attempt.load_stored(command.id, command.kind, command.payload, command.reason)

    async def begin_queued(self, attempt: Attempt) -> bool:
        """The queued attempt got its thread: commit ``Running`` and register it.

        False if the thread is still busy in another runtime (durable stores): the attempt
        stays queued and tries again when the store changes.
        """
        busy = False
        kernel = self._kernel

        def on_commit(result: CommitResult) -> None:
            nonlocal busy
            if isinstance(result, Rejected):
                if result.reason is RejectReason.THREAD_BUSY:
                    busy = True
                    return
                assert result.state is not None
                self._finish.settle(attempt, Committed(result.state))
                return
            kernel.queued.pop(attempt.run_id, None)
            self._started(attempt, result)

        at, clock_error = kernel.now_for_end()
        commit = commit_of.begin_queued(
            attempt,
            at=at,
            detail=with_clock_error(_DETAIL_THREAD_FREE, clock_error),
            under=kernel.claims.start_under(attempt),
        )
        try:
            await kernel.mailbox.commit(commit, on_commit)
        except (StoreError, RuntimeClosed) as exc:
            self._finish.settle(attempt, CommitFailed.of(exc))
        return not busy

    async def load_commands(self, attempt: Attempt) -> None:
        """Durable stores: commands stored for the run before this attempt began (sent
        while it was queued, or to a lost attempt) apply to it as they would have, before
        its body runs: a cancel ends it first, a pause pauses it at its first boundary,
        messages reach that boundary; a wake had no attempt to wake and is dropped."""
        if attempt.commands_before:
            # (Its own admission created the run otherwise: nothing could be stored before.)
            await self._kernel.claims.load_commands(attempt)


def thread_busy(thread_id: str, rejected: Rejected) -> ThreadBusy:
    """The error of a start refused because its thread is busy (``if_busy="reject"``)."""
    assert rejected.holder is not None
    assert rejected.state is not None
    return ThreadBusy(thread_id, rejected.holder, rejected.state)


def refusal(attempt: Attempt) -> Exception:
    parent = attempt.parent
    if parent is None:
        return _closed()
    return refusal_of_child(parent, attempt.run_id)


def _closed() -> RuntimeClosed:
    return RuntimeClosed(
        "the runtime is shutting down and starts no new attempts;"
        " start runs inside the 'async with open_runtime()' block"
    )


def resume_detail(correlation_id: str) -> FrozenDict:
    return freeze_detail({"source": "resume", "correlation_id": correlation_id}, "detail")


def with_clock_error(detail: FrozenDict, clock_error: str | None) -> FrozenDict:
    if clock_error is None:
        return detail
    return freeze_detail({**detail, "clock_error": clock_error}, "detail")
