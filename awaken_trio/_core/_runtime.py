"""The Runtime facade and `open_runtime`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from ._attempt import Attempt, Body, EndRequest
from ._commands import Cancel, LiveCommand, Message, Pause, Wake
from ._commits import CommitMailbox, CommitStatistics
from ._errors import (
    InvalidArgument,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
)
from ._events import EventStream
from ._handle import RunHandle
from ._json import JsonValue, check_json
from ._state import Awaiting, Cancelled, Ended, ResumeTicket, RunRecord, RunState, Stopped
from ._storage import Accepted, Expect, Rejected, Store
from ._supervisor import Clock, Supervisor, VerifierFactory
from ._validate import check_body, check_id

_COMMANDS = frozenset((Cancel, Pause, Wake, Message))


@final
@attrs.frozen
class RuntimeStatistics:
    """A snapshot of the runtime's process-local bookkeeping."""

    active_attempts: int
    queued_runs: int
    busy_threads: int
    known_bodies: int
    supervisor: CommitStatistics


@final
class Runtime:
    """Runs bodies as actors, one attempt at a time per thread. Get one from `open_runtime`."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._store = supervisor.store
        self._registry = supervisor.registry

    # ------------------------------------------------------------------ starting runs

    async def start(
        self,
        body: Body,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        max_steps: int | None = None,
    ) -> RunHandle:
        """Commit a new run and start its first attempt.

        Returns once the run is committed: ``Running`` (its attempt is registered, so a
        live command works right away) or ``Queued`` behind a busy thread.

        Args:
            body: ``async def body(ctx: RunContext) -> JSON``.
            input: a JSON value the body reads as ``ctx.input``.
            run_id: the run's id; a fresh one by default.
            thread_id: the thread the run belongs to; one attempt per thread runs at a
                time. Defaults to the run's own id.
            name: a label kept with the record.
            max_steps: end the run ``Ended(MaxSteps())`` at this many ``boundary()`` calls.
        """
        return await self._supervisor.start_run(
            body,
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            parent=None,
        )

    async def execute(
        self,
        body: Body,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        max_steps: int | None = None,
    ) -> RunState:
        """`start`, then wait: the committed state (``Awaiting`` or ``Ended``) of the attempt.

        The run belongs to the runtime, not to the caller: cancelling this call stops the
        waiting, not the run (use `deliver` or `cancel_run` for that).
        """
        handle = await self.start(
            body, input=input, run_id=run_id, thread_id=thread_id, name=name, max_steps=max_steps
        )
        return await handle.wait()

    # ------------------------------------------------------------------ live commands

    def deliver(self, command: LiveCommand) -> None:
        """Deliver a live command to the run's active attempt in this process.

        Raises:
            NotActive: nothing controllable here (unknown, queued, awaiting, ended, or
                another process's). Read the committed state; see `NotActive`.
            InvalidArgument: not a `LiveCommand`, or a `Message` payload that is not JSON.
        """
        payload = self._check_command(command)
        attempt = self._registry.get(command.run_id)
        if attempt is None or attempt.sealed:
            raise NotActive(command.run_id)
        self._apply(attempt, command, payload)

    async def deliver_to_current_attempt(self, command: LiveCommand) -> None:
        """Like `deliver`, but first ask the attempt's ownership verifier.

        The verifier (a durable claim check) runs outside the registry; afterwards the
        attempt must still be the registered generation, or the command is refused.
        """
        payload = self._check_command(command)
        run_id = command.run_id
        attempt = self._registry.get(run_id)
        if attempt is None or attempt.sealed:
            await trio.lowlevel.checkpoint()
            raise NotActive(run_id)
        generation = attempt.generation
        if attempt.verifier is None:
            await trio.lowlevel.checkpoint()
        else:
            try:
                current = await attempt.verifier.verify_current()
            except Exception as exc:
                raise NotActive(run_id, f"its ownership could not be verified: {exc!r}") from exc
            if not current:
                raise NotActive(run_id, "this process no longer owns its attempt")
        again = self._registry.get(run_id)
        if again is not attempt or again.generation != generation or again.sealed:
            raise NotActive(run_id, "its attempt changed while ownership was being checked")
        self._apply(attempt, command, payload)

    @staticmethod
    def _check_command(command: LiveCommand) -> JsonValue:
        if type(command) not in _COMMANDS:
            raise InvalidArgument(
                f"unknown command {command!r}; deliver one of LiveCommand.Cancel,"
                " LiveCommand.Pause, LiveCommand.Wake or LiveCommand.Message"
            )
        check_id(command.run_id, "the command's run_id")
        if isinstance(command, Message):
            return check_json(command.payload, f"message for run {command.run_id!r}")
        return None

    @staticmethod
    def _apply(attempt: Attempt, command: LiveCommand, payload: JsonValue) -> None:
        kind = type(command)
        if kind is Cancel:
            assert isinstance(command, Cancel)
            attempt.request_end(EndRequest(Cancelled(), "deliver", command.reason))
            return
        if kind is Pause:
            attempt.pause_requested = True
        elif kind is Wake:
            attempt.wake_pending = True
        else:
            attempt.inbox.append(payload)
        attempt.notify()

    # ------------------------------------------------------------------ committed control

    async def cancel_run(self, run_id: str, *, thread_id: str | None = None) -> RunState:
        """End the run ``Ended(Cancelled())`` wherever it is: active, queued or awaiting.

        An active attempt's scope is cancelled and the attempt commits; a queued run never
        runs; an awaiting run's ticket is deleted in the same commit.

        Raises:
            RunAlreadyEnded: it had ended another way (``.state`` is how).
            UnknownRun: no such run (or not on ``thread_id``).
        """
        return await self._end_run(run_id, EndRequest(Cancelled(), "cancel_run"), thread_id)

    async def stop_run(self, run_id: str, reason: str, *, thread_id: str | None = None) -> RunState:
        """End the run ``Ended(Stopped(reason))``: a host decision (budget, policy, operator)."""
        if not isinstance(reason, str):
            raise InvalidArgument(
                f"stop_run() of run {run_id!r} needs a str reason, not {reason!r}"
            )
        return await self._end_run(
            run_id, EndRequest(Stopped(reason), "stop_run", reason), thread_id
        )

    async def _end_run(self, run_id: str, request: EndRequest, thread_id: str | None) -> RunState:
        check_id(run_id, "run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        await trio.lowlevel.checkpoint()
        wanted = Ended(request.cause)
        while True:
            attempt = self._registry.get(run_id) or self._supervisor.queued.get(run_id)
            if attempt is not None:
                if thread_id is not None and attempt.thread_id != thread_id:
                    raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
                if not attempt.sealed:
                    attempt.request_end(request)
                state = await attempt.completion.wait()
                if state == wanted:
                    return state
                if isinstance(state, Ended):
                    raise RunAlreadyEnded(run_id, state)
                continue  # it paused or awaited first: end it through the committed path
            record = await self._store.load(run_id)
            if record is None:
                raise UnknownRun(run_id)
            if thread_id is not None and record.thread_id != thread_id:
                raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
            if isinstance(record.state, Ended):
                raise RunAlreadyEnded(run_id, record.state)
            if self._registry.get(run_id) or self._supervisor.queued.get(run_id):
                continue  # an attempt appeared while we read
            result = await self._supervisor.commit_end(record, request)
            if isinstance(result, Accepted):
                return result.record.state
            # The run moved on between the read and the commit: look again.

    async def resume(
        self,
        run_id: str,
        value: JsonValue = None,
        *,
        correlation_id: str | None = None,
        body: Body | None = None,
    ) -> RunHandle:
        """Answer an ``Awaiting`` run's ticket and start its next attempt (generation + 1).

        The new attempt sees ``ctx.resume_value == value`` and ``ctx.checkpoint`` = the
        last committed progress; messages carried by the pause come first from its first
        ``boundary()``. On a busy thread the run is committed ``Queued`` instead.

        Args:
            correlation_id: must match the live ticket; None answers whatever is live.
            body: the body to run; defaults to the run's body in this runtime.

        Raises:
            NotAwaiting, TicketMismatch, TicketExpired, UnknownRun: nothing is committed.
        """
        check_id(run_id, "run_id")
        if correlation_id is not None:
            check_id(correlation_id, "correlation_id")
        value = check_json(value, f"resume value for run {run_id!r}")
        if body is not None:
            check_body(body)
        self._supervisor.actors_nursery()  # refuses once shutdown has begun
        await trio.lowlevel.checkpoint()
        record = await self._store.load(run_id)
        if record is None:
            raise UnknownRun(run_id)
        ticket = self._check_ticket(record, correlation_id)
        spec = self._supervisor.specs.get(run_id)
        max_steps = None if spec is None else spec.max_steps
        if body is None:
            if spec is None:
                raise InvalidArgument(
                    f"no body is known for run {run_id!r} in this runtime; pass body= to resume()"
                )
            body = spec.body
        parent = None if record.parent_run_id is None else self._registry.get(record.parent_run_id)
        nursery: trio.Nursery | None
        if parent is not None and not parent.sealed and parent.children_nursery is not None:
            nursery = parent.children_nursery
        else:
            parent = None
            nursery = self._supervisor.actors_nursery()
        attempt = self._supervisor.new_attempt(
            run_id,
            record.thread_id,
            record.generation + 1,
            parent,
            body,
            max_steps,
            record.input,
            record.checkpoint,
            value,
        )
        result = await self._supervisor.admit(
            attempt,
            nursery,
            Expect(
                generation=record.generation, state=Awaiting, correlation_id=ticket.correlation_id
            ),
            None,
            {"source": "resume", "correlation_id": ticket.correlation_id},
        )
        if isinstance(result, Rejected):
            latest = await self._store.load(run_id)
            assert latest is not None
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(run_id, latest.state)  # pragma: no cover - defensive
        return RunHandle(
            run_id, record.thread_id, attempt.generation, completion=attempt.completion
        )

    def _check_ticket(self, record: RunRecord, correlation_id: str | None) -> ResumeTicket:
        state = record.state
        if not isinstance(state, Awaiting):
            raise NotAwaiting(record.run_id, state)
        ticket = state.ticket
        if correlation_id is not None and correlation_id != ticket.correlation_id:
            raise TicketMismatch(record.run_id, ticket.correlation_id, correlation_id)
        if ticket.deadline is not None:
            now = self._supervisor.clock()
            if now > ticket.deadline:
                raise TicketExpired(record.run_id, ticket.correlation_id, ticket.deadline, now)
        return ticket

    # ------------------------------------------------------------------ reading

    async def state(self, run_id: str) -> RunState:
        """The run's committed state."""
        return (await self.record(run_id)).state

    async def record(self, run_id: str) -> RunRecord:
        """The run's committed record."""
        check_id(run_id, "run_id")
        record = await self._store.load(run_id)
        if record is None:
            raise UnknownRun(run_id)
        return record

    def active_attempt_run_id(self, thread_id: str) -> str | None:
        """The run whose attempt is active on ``thread_id`` in this runtime, or None."""
        attempt = self._registry.on_thread(thread_id)
        return None if attempt is None or attempt.sealed else attempt.run_id

    def events(self, run_id: str | None = None, *, follow: bool = True) -> EventStream:
        """Committed events, oldest first, then (``follow``) new ones as they commit.

        For one run, following ends after its terminal event; for all runs, when the
        runtime closes. An unknown ``run_id`` raises `UnknownRun` from the first step.
        """
        if run_id is not None:
            check_id(run_id, "run_id")
        return EventStream(self._store, self._supervisor.mailbox, run_id, follow)

    def statistics(self) -> RuntimeStatistics:
        return RuntimeStatistics(
            active_attempts=len(self._registry),
            queued_runs=len(self._supervisor.queued),
            busy_threads=len(self._supervisor.gate),
            known_bodies=len(self._supervisor.specs),
            supervisor=self._supervisor.mailbox.statistics(),
        )


def _resolve_store(store: str | Store) -> tuple[Store, bool]:
    if isinstance(store, str):
        from ..store import open_store  # backends load on first use of their scheme

        return open_store(store), True
    for method in ("apply", "load", "events_after", "aclose"):
        if not callable(getattr(store, method, None)):
            raise InvalidArgument(f"{store!r} is not a Store: it has no {method}() method")
    return store, False


@asynccontextmanager
async def open_runtime(
    store: str | Store = "memory://",
    *,
    clock: Clock = time.time,
    ownership_verifier: VerifierFactory | None = None,
    max_batch: int = 1024,
    **options: object,
) -> AsyncIterator[Runtime]:
    """Open a runtime: a supervisor, a store and a nursery for the run actors.

    Leaving the block ends every active or queued run of a non-durable store with
    ``Ended(Stopped("runtime shutdown"))`` (each commit shielded) and returns once they are
    committed. An exception from the block comes out unwrapped; KeyboardInterrupt and
    SystemExit, from the block or from a body, shut down the same way and are re-raised.

    Args:
        store: ``"memory://"`` (the default) or a `Store` instance.
        clock: wall clock for ticket deadlines and event times (``time.time`` scale).
        ownership_verifier: ``f(run_id, thread_id, generation) -> OwnershipVerifier | None``
            called for every attempt; `Runtime.deliver_to_current_attempt` asks it.
        max_batch: most commits the supervisor hands the store in one transaction.
    """
    if options:
        raise InvalidArgument(
            f"unknown open_runtime() options {sorted(options)};"
            " known: clock, ownership_verifier, max_batch"
        )
    if ownership_verifier is not None and not callable(ownership_verifier):
        raise InvalidArgument(
            "ownership_verifier must be a callable (run_id, thread_id, generation) ->"
            f" OwnershipVerifier | None, not {ownership_verifier!r}"
        )
    if not callable(clock):
        raise InvalidArgument(
            f"clock must be a callable returning wall-clock seconds, not {clock!r}"
        )
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InvalidArgument(f"max_batch must be a positive int, not {max_batch!r}")
    store_obj, owned = _resolve_store(store)
    mailbox = CommitMailbox(store_obj, max_batch=max_batch)
    supervisor = Supervisor(store_obj, mailbox, clock, ownership_verifier)
    runtime = Runtime(supervisor)
    caller_error: BaseException | None = None
    try:
        async with trio.open_nursery() as system:
            await system.start(_run_mailbox, mailbox)
            await system.start(supervisor.host_actors)
            try:
                yield runtime
            except BaseException as exc:  # re-raised below, outside the nursery, unwrapped
                caller_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    supervisor.begin_shutdown()
                    await supervisor.actors_done.wait()
    except BaseExceptionGroup as group:
        interrupt = _find_interrupt(group)
        if interrupt is not None:
            raise interrupt from None
        raise
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await store_obj.aclose()
    if caller_error is not None:
        raise caller_error


async def _run_mailbox(mailbox: CommitMailbox, *, task_status: trio.TaskStatus[None]) -> None:
    # The mailbox must outlive every actor: only its close() ends it.
    with trio.CancelScope(shield=True):
        await mailbox.run(task_status=task_status)


def _find_interrupt(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    for exc in group.exceptions:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _find_interrupt(exc)
            if found is not None:
                return found
    return None
