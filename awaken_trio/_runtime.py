"""The Runtime facade and `open_runtime`."""

from __future__ import annotations

import contextlib
import inspect
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, final

import attrs
import trio

from ._actor import run_attempt
from ._attempt import Attempt, Body, EndRequest, OwnershipVerifier
from ._commands import Cancel, LiveCommand, Message, Pause, Wake
from ._context import RunContext
from ._errors import (
    InvalidArgument,
    InvalidBody,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunExists,
    RuntimeClosed,
    StoreError,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
)
from ._events import EventStream
from ._handle import RunHandle
from ._json import JsonValue, check_json
from ._registry import AttemptRegistry, ThreadGate
from ._state import Awaiting, Cancelled, Ended, Queued, Running, RunRecord, RunState, Stopped
from ._supervisor import Supervisor, SupervisorStatistics
from .store import Accepted, Commit, CommitResult, Expect, MemoryStore, NewRun, Rejected, Store

Clock = Callable[[], float]
VerifierFactory = Callable[[str, str, int], OwnershipVerifier | None]


@final
@attrs.frozen
class RuntimeStatistics:
    """A snapshot of the runtime's process-local bookkeeping."""

    active_attempts: int
    queued_runs: int
    busy_threads: int
    known_bodies: int
    supervisor: SupervisorStatistics


@attrs.frozen
class _RunSpec:
    # What a later attempt of the same run needs and the store does not hold.
    body: Body
    max_steps: int | None


def _new_run_id() -> str:
    return os.urandom(12).hex()


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what} must be a non-empty str, not {value!r}")
    return value


_ASYNC_BODIES: weakref.WeakSet[Any] = weakref.WeakSet()


def _check_body(body: object) -> Body:
    try:
        if body in _ASYNC_BODIES:
            return body  # type: ignore[return-value]
    except TypeError:  # unhashable callable: check it every time
        pass
    target = body
    while isinstance(target, partial):
        target = target.func
    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004  (an async __call__ counts)
    ):
        with contextlib.suppress(TypeError):
            _ASYNC_BODIES.add(body)
        return body  # type: ignore[return-value]
    raise InvalidBody(
        f"a run body must be an async function taking a RunContext, not {body!r};"
        " define it with 'async def body(ctx): ...'"
    )


def _check_max_steps(max_steps: object) -> int | None:
    if max_steps is None:
        return None
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InvalidArgument(f"max_steps must be a positive int or None, not {max_steps!r}")
    return max_steps


@final
class Runtime:
    """Runs bodies as actors, one attempt at a time per thread. Get one from `open_runtime`."""

    def __init__(
        self,
        store: Store,
        supervisor: Supervisor,
        clock: Clock,
        verifier_factory: VerifierFactory | None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor
        self._clock = clock
        self._verifier_factory = verifier_factory
        self._registry = AttemptRegistry()
        self._gate = ThreadGate()
        self._queued: dict[str, Attempt] = {}
        self._specs: dict[str, _RunSpec] = {}
        self._actors: trio.Nursery | None = None
        self._closing = False
        self._shutdown_request: EndRequest | None = None
        self._inflight = 0
        self._admissions_closed = trio.Event()
        self._actors_done = trio.Event()

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
        return await self._start(
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
        """`start`, then wait: the committed state (``Awaiting`` or ``Ended``) of the attempt."""
        handle = await self.start(
            body, input=input, run_id=run_id, thread_id=thread_id, name=name, max_steps=max_steps
        )
        return await handle.wait()

    async def _start(
        self,
        body: Body,
        *,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
        parent: Attempt | None,
    ) -> RunHandle:
        await trio.lowlevel.checkpoint()
        _check_body(body)
        if run_id is not None:
            _check_id(run_id, "run_id")
        if thread_id is not None:
            _check_id(thread_id, "thread_id")
        if name is not None and not isinstance(name, str):
            raise InvalidArgument(f"name must be a str or None, not {name!r}")
        max_steps = _check_max_steps(max_steps)
        run_id = run_id or _new_run_id()
        input = check_json(input, f"input of run {run_id!r}")
        thread_id = thread_id or run_id
        nursery: trio.Nursery | None
        if parent is None:
            self._check_open()
            nursery = self._actors
        else:
            nursery = parent.children_nursery
        assert nursery is not None
        attempt = self._new_attempt(
            run_id, thread_id, 1, parent, _RunSpec(body, max_steps), input, None, None
        )
        result = await self._admit(
            attempt,
            nursery,
            Expect(new=True),
            NewRun(thread_id, None if parent is None else parent.run_id, name, input),
            {"source": "start"},
        )
        if isinstance(result, Rejected):
            raise RunExists(run_id)
        return RunHandle(run_id, thread_id, 1, completion=attempt.completion)

    def _new_attempt(
        self,
        run_id: str,
        thread_id: str,
        generation: int,
        parent: Attempt | None,
        spec: _RunSpec,
        input: JsonValue,
        checkpoint: JsonValue,
        resume_value: JsonValue,
    ) -> Attempt:
        verifier = None
        if self._verifier_factory is not None:
            verifier = self._verifier_factory(run_id, thread_id, generation)
        attempt = Attempt(
            run_id=run_id,
            thread_id=thread_id,
            generation=generation,
            parent=parent,
            body=spec.body,
            input=input,
            checkpoint=checkpoint,
            resume_value=resume_value,
            max_steps=spec.max_steps,
            verifier=verifier,
        )
        attempt.context = RunContext(self, attempt)
        return attempt

    async def _admit(
        self,
        attempt: Attempt,
        nursery: trio.Nursery,
        expect: Expect,
        new_run: NewRun | None,
        detail: dict[str, JsonValue],
    ) -> CommitResult:
        """Commit ``Running`` (thread free) or ``Queued`` (thread busy) and spawn the actor.

        The thread's place is taken before the commit, so FIFO order is call order. The
        registration and the spawn happen in the commit's own supervisor step.
        """
        run_id, thread_id, generation = attempt.run_id, attempt.thread_id, attempt.generation
        running = self._gate.try_acquire(thread_id, attempt)
        if running:
            state: RunState = Running(generation)
            committed_generation = generation
        else:
            attempt.gate_waiter = self._gate.enqueue(thread_id, attempt)
            attempt.queued_generation = committed_generation = generation - 1
            state = Queued()
        spec = _RunSpec(attempt.body, attempt.max_steps)

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Rejected):
                self._release_thread(attempt)
                return
            if running:
                attempt.started = True
                attempt.carried = list(result.taken_messages)
                self._registry.register(attempt)
            else:
                self._queued[run_id] = attempt
            self._specs[run_id] = spec
            if attempt.parent is not None:
                attempt.parent.children[run_id] = attempt
            nursery.start_soon(run_attempt, self, attempt)

        commit = Commit(
            run_id=run_id,
            state=state,
            generation=committed_generation,
            expect=expect,
            at=self._clock(),
            new_run=new_run,
            take_messages=running,
            resume_value=None if running else attempt.resume_value,
            detail=detail,
        )
        self._inflight += 1
        try:
            return await self._supervisor.commit(commit, on_commit)
        finally:
            self._inflight -= 1
            self._maybe_close_admissions()

    async def _begin_queued(self, attempt: Attempt) -> None:
        """The queued attempt got its thread: commit ``Running`` and register it."""
        assert attempt.queued_generation is not None

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Rejected):
                self._retire(attempt, result)
                return
            attempt.started = True
            attempt.carried = list(result.taken_messages)
            self._queued.pop(attempt.run_id, None)
            self._registry.register(attempt)

        await self._supervisor.commit(
            Commit(
                run_id=attempt.run_id,
                state=Running(attempt.generation),
                generation=attempt.generation,
                expect=Expect(generation=attempt.queued_generation, state=Queued),
                at=self._clock(),
                take_messages=True,
                detail={"source": "thread_free"},
            ),
            on_commit,
        )

    # ------------------------------------------------------------------ the finish boundary

    async def _commit_progress(self, attempt: Attempt, progress: JsonValue) -> None:
        result = await self._supervisor.commit(
            Commit(
                run_id=attempt.run_id,
                state=Running(attempt.generation),
                generation=attempt.generation,
                expect=Expect(generation=attempt.generation, state=Running),
                at=self._clock(),
                checkpoint=progress,
                detail={"source": "boundary"},
            )
        )
        if isinstance(result, Rejected):
            assert result.state is not None
            if isinstance(result.state, Ended):
                raise RunAlreadyEnded(attempt.run_id, result.state)
            raise StoreError(
                f"progress of run {attempt.run_id!r} attempt {attempt.generation} was fenced"
                f" off: the run moved on to {result.state!r}"
            )
        attempt.checkpoint = progress

    async def _finish(
        self,
        attempt: Attempt,
        state: RunState,
        result: JsonValue,
        events: list[Any],
        detail: dict[str, JsonValue],
    ) -> None:
        """Commit the attempt's end, after ending its awaiting children.

        Nothing here can be interrupted: the children's commits run shielded and
        `Supervisor.commit` cannot be cancelled once called.
        """
        awaiting = [child_id for child_id, child in attempt.children.items() if child is None]
        if awaiting:
            with trio.CancelScope(shield=True):
                for child_id in awaiting:
                    await self._end_awaiting_child(child_id, attempt)
        attempt.sealed = True
        messages = tuple(attempt.drain())
        ending = isinstance(state, Ended)
        if attempt.started:
            expect = Expect(generation=attempt.generation, state=Running)
            generation = attempt.generation
        else:
            assert attempt.queued_generation is not None
            expect = Expect(generation=attempt.queued_generation, state=Queued)
            generation = attempt.queued_generation
        commit = Commit(
            run_id=attempt.run_id,
            state=state,
            generation=generation,
            expect=expect,
            at=self._clock(),
            result=result,
            carried_messages=() if ending else messages,
            discarded_messages=messages if ending else (),
            events=tuple(events),
            detail=detail,
        )
        await self._supervisor.commit(commit, partial(self._retire, attempt))

    def _retire(self, attempt: Attempt, result: CommitResult) -> None:
        """Deregister, free the thread and release waiters: the commit's own step."""
        state = result.record.state if isinstance(result, Accepted) else result.state
        assert state is not None
        attempt.sealed = True
        self._registry.deregister(attempt)
        self._release_thread(attempt)
        run_id = attempt.run_id
        if self._queued.get(run_id) is attempt:
            del self._queued[run_id]
        parent = attempt.parent
        if parent is not None and parent.children.get(run_id) is attempt:
            if isinstance(state, Awaiting):
                parent.children[run_id] = None
            else:
                del parent.children[run_id]
        if isinstance(state, Ended):
            self._specs.pop(run_id, None)
        attempt.completion.set(state)

    def _release_thread(self, attempt: Attempt) -> None:
        if attempt.gate_waiter is not None:
            self._gate.withdraw(attempt.gate_waiter)
        else:
            self._gate.release(attempt.thread_id, attempt)

    async def _end_awaiting_child(self, child_id: str, parent: Attempt) -> None:
        record = await self._store.load(child_id)
        if record is None or not isinstance(record.state, Awaiting | Queued):
            parent.children.pop(child_id, None)
            return
        if self._shutdown_request is not None:
            request = self._shutdown_request
        else:
            request = EndRequest(Cancelled(), "parent", f"parent run {parent.run_id!r} ended")
        await self._commit_end(record, request)
        parent.children.pop(child_id, None)

    async def _commit_end(self, record: RunRecord, request: EndRequest) -> CommitResult:
        """End a run that has no attempt here (queued elsewhere, awaiting, orphaned)."""
        run_id = record.run_id

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Accepted):
                self._specs.pop(run_id, None)
                parent_id = record.parent_run_id
                parent = None if parent_id is None else self._registry.get(parent_id)
                if parent is not None and parent.children.get(run_id, False) is None:
                    del parent.children[run_id]

        return await self._supervisor.commit(
            Commit(
                run_id=run_id,
                state=Ended(request.cause),
                generation=record.generation,
                expect=Expect(generation=record.generation, state=type(record.state)),
                at=self._clock(),
                detail=request.detail(),
            ),
            on_commit,
        )

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
    def _check_command(command: object) -> JsonValue:
        if not isinstance(command, Cancel | Pause | Wake | Message):
            raise InvalidArgument(
                f"unknown command {command!r}; deliver one of LiveCommand.Cancel,"
                " LiveCommand.Pause, LiveCommand.Wake or LiveCommand.Message"
            )
        _check_id(command.run_id, "the command's run_id")
        if isinstance(command, Message):
            return check_json(command.payload, f"message for run {command.run_id!r}")
        return None

    @staticmethod
    def _apply(attempt: Attempt, command: LiveCommand, payload: JsonValue) -> None:
        match command:
            case Cancel(reason=reason):
                attempt.request_end(EndRequest(Cancelled(), "deliver", reason))
            case Pause():
                attempt.pause_requested = True
                attempt.notify()
            case Wake():
                attempt.wake_pending = True
                attempt.notify()
            case Message():
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
        _check_id(run_id, "run_id")
        if thread_id is not None:
            _check_id(thread_id, "thread_id")
        await trio.lowlevel.checkpoint()
        wanted = Ended(request.cause)
        while True:
            attempt = self._registry.get(run_id) or self._queued.get(run_id)
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
            if self._registry.get(run_id) or self._queued.get(run_id):
                continue  # an attempt appeared while we read
            result = await self._commit_end(record, request)
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
        _check_id(run_id, "run_id")
        if correlation_id is not None:
            _check_id(correlation_id, "correlation_id")
        value = check_json(value, f"resume value for run {run_id!r}")
        if body is not None:
            _check_body(body)
        self._check_open()
        await trio.lowlevel.checkpoint()
        record = await self._store.load(run_id)
        if record is None:
            raise UnknownRun(run_id)
        ticket = self._check_ticket(record, correlation_id)
        spec = self._specs.get(run_id)
        if body is not None:
            spec = _RunSpec(body, None if spec is None else spec.max_steps)
        if spec is None:
            raise InvalidArgument(
                f"no body is known for run {run_id!r} in this runtime; pass body= to resume()"
            )
        parent = None if record.parent_run_id is None else self._registry.get(record.parent_run_id)
        nursery: trio.Nursery | None
        if parent is not None and not parent.sealed and parent.children_nursery is not None:
            nursery = parent.children_nursery
        else:
            parent = None
            self._check_open()
            nursery = self._actors
        assert nursery is not None
        attempt = self._new_attempt(
            run_id,
            record.thread_id,
            record.generation + 1,
            parent,
            spec,
            record.input,
            record.checkpoint,
            value,
        )
        result = await self._admit(
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

    def _check_ticket(self, record: RunRecord, correlation_id: str | None) -> Any:
        state = record.state
        if not isinstance(state, Awaiting):
            raise NotAwaiting(record.run_id, state)
        ticket = state.ticket
        if correlation_id is not None and correlation_id != ticket.correlation_id:
            raise TicketMismatch(record.run_id, ticket.correlation_id, correlation_id)
        if ticket.deadline is not None:
            now = self._clock()
            if now > ticket.deadline:
                raise TicketExpired(record.run_id, ticket.correlation_id, ticket.deadline, now)
        return ticket

    # ------------------------------------------------------------------ reading

    async def state(self, run_id: str) -> RunState:
        """The run's committed state."""
        return (await self.record(run_id)).state

    async def record(self, run_id: str) -> RunRecord:
        """The run's committed record."""
        _check_id(run_id, "run_id")
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
            _check_id(run_id, "run_id")
        return EventStream(self._store, self._supervisor, run_id, follow)

    def statistics(self) -> RuntimeStatistics:
        return RuntimeStatistics(
            active_attempts=len(self._registry),
            queued_runs=len(self._queued),
            busy_threads=len(self._gate),
            known_bodies=len(self._specs),
            supervisor=self._supervisor.statistics(),
        )

    # ------------------------------------------------------------------ lifetime

    def _check_open(self) -> None:
        if self._closing:
            raise RuntimeClosed(
                "the runtime is shutting down and starts no new attempts;"
                " start runs inside the 'async with open_runtime()' block"
            )

    def _shutdown_end_request(self) -> EndRequest:
        if self._shutdown_request is None:
            self._shutdown_request = EndRequest(
                Stopped("runtime shutdown"), "shutdown", "runtime shutdown"
            )
        return self._shutdown_request

    def _begin_shutdown(self) -> None:
        """Refuse new attempts and cancel every actor (sync: safe from any task)."""
        self._closing = True
        self._shutdown_end_request()
        if self._actors is not None:
            self._actors.cancel_scope.cancel(reason="runtime shutdown")
        self._maybe_close_admissions()

    def _maybe_close_admissions(self) -> None:
        if self._closing and self._inflight == 0:
            self._admissions_closed.set()

    async def _host_actors(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Own the actors' nursery. Only runtime shutdown cancels it, never the caller."""
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as actors:
                    self._actors = actors
                    task_status.started()
                    # Stay open for admissions already committed; shutdown cancels the rest.
                    with trio.CancelScope(shield=True):
                        await self._admissions_closed.wait()
        finally:
            self._actors_done.set()
            self._supervisor.close()


def _resolve_store(store: str | Store) -> tuple[Store, bool]:
    if isinstance(store, str):
        if store in ("memory://", "memory:"):
            return MemoryStore(), True
        raise InvalidArgument(
            f"unsupported store URL {store!r}; this version supports 'memory://'"
            " or a Store instance"
        )
    for method in ("apply", "load", "events_after", "aclose"):
        if not callable(getattr(store, method, None)):
            raise InvalidArgument(f"{store!r} is not a Store: it has no {method}() method")
    return store, False


_OPTIONS = {"ownership_verifier", "max_batch"}


@asynccontextmanager
async def open_runtime(
    store: str | Store = "memory://",
    *,
    clock: Clock = time.time,
    **options: Any,
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
    unknown = set(options) - _OPTIONS
    if unknown:
        raise InvalidArgument(
            f"unknown open_runtime() options {sorted(unknown)}; known: {sorted(_OPTIONS)}"
        )
    if not callable(clock):
        raise InvalidArgument(
            f"clock must be a callable returning wall-clock seconds, not {clock!r}"
        )
    max_batch = options.get("max_batch", 1024)
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InvalidArgument(f"max_batch must be a positive int, not {max_batch!r}")
    store_obj, owned = _resolve_store(store)
    supervisor = Supervisor(store_obj, max_batch=max_batch)
    runtime = Runtime(store_obj, supervisor, clock, options.get("ownership_verifier"))
    caller_error: BaseException | None = None
    try:
        async with trio.open_nursery() as system:
            await system.start(_supervise, supervisor)
            await system.start(runtime._host_actors)
            try:
                yield runtime
            except BaseException as exc:  # re-raised below, outside the nursery, unwrapped
                caller_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    runtime._begin_shutdown()
                    await runtime._actors_done.wait()
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


async def _supervise(supervisor: Supervisor, *, task_status: trio.TaskStatus[None]) -> None:
    # The supervisor must outlive every actor: only its own close() ends it.
    with trio.CancelScope(shield=True):
        await supervisor.run(task_status=task_status)


def _find_interrupt(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    for exc in group.exceptions:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _find_interrupt(exc)
            if found is not None:
                return found
    return None
