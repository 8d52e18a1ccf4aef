"""The Runtime facade and `open_runtime`."""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import AsyncIterator, Mapping
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
    RunExists,
    RuntimeClosed,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
)
from ._events import EventStream
from ._handle import RunHandle
from ._json import DEFAULT_MAX_PAYLOAD_BYTES, FrozenDict, JsonValue, check_payload, freeze_detail
from ._observe import AttemptObserver
from ._schema import check_value
from ._state import (
    CANCELLED_CAUSE,
    Awaiting,
    Ended,
    EventKind,
    ResumeTicket,
    RunEvent,
    Running,
    RunRecord,
    RunState,
    Stopped,
)
from ._storage import (
    DURABLE_METHODS,
    STATE_KINDS,
    STORE_METHODS,
    Accepted,
    CommandKind,
    Commit,
    DurableStore,
    Expect,
    ForkingStore,
    ListingStore,
    NewRun,
    PruningStore,
    Rejected,
    StateKind,
    Store,
    read_store,
)
from ._supervisor import ClaimSettings, Clock, Supervisor, VerifierFactory
from ._util import NoPublicConstructor, safe_repr
from ._validate import check_body, check_id, new_run_id
from ._validate import new_run_id as fresh_run_id
from ._verdict import QUEUED

_COMMANDS = frozenset((Cancel, Pause, Wake, Message))


@final
@attrs.frozen
class RuntimeStatistics:
    """A snapshot of the runtime's process-local bookkeeping."""

    active_attempts: int
    queued_runs: int
    busy_threads: int
    awaiting_bodies: int
    supervisor: CommitStatistics


@final
class Runtime(metaclass=NoPublicConstructor):
    """Runs bodies as actors, one attempt at a time per thread. Get one from `open_runtime`."""

    _obtained_from = "open a runtime with 'async with open_runtime() as runtime'"

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._store = supervisor.store
        self._registry = supervisor.registry
        # Its tasks, scopes and events live in the trio.run that opened it, and only there.
        self._trio_token = trio.lowlevel.current_trio_token()
        # Bound once: every handle shares them instead of holding two method objects.
        self._read_record = self.record
        self._follow = self._follow_end
        supervisor.make_handle = self._handle

    def _handle(self, attempt: Attempt) -> RunHandle:
        return RunHandle._create(
            attempt.run_id,
            attempt.thread_id,
            attempt.generation,
            attempt.completion,
            self._read_record,
            self._follow,
            attempt.start_seq,
        )

    def _in_own_run(self) -> None:
        """Refuse a call made outside the trio.run that opened this runtime (a runtime
        kept after its run ended, or handed to another thread's run)."""
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:  # not in any trio.run
            token = None
        if token is not self._trio_token:
            raise RuntimeClosed(
                "this runtime belongs to another trio.run (the one whose open_runtime()"
                " opened it, which may have ended); use a runtime only inside its"
                " 'async with open_runtime()' block, and open a runtime in each trio.run"
                " that needs one"
            )

    async def _follow_end(self, run_id: str, since: int) -> RunState:
        """The first ``Awaiting`` or ``Ended`` the store commits for the run after event
        ``since``, whichever runtime commits it."""
        supervisor = self._supervisor
        while True:
            # Take the notifications before reading, so a commit in between is not missed.
            local = supervisor.mailbox.changed_event()
            for event in await self._read_events(since, run_id):
                since = event.seq
                if event.kind == EventKind.COMMITTED and isinstance(event.state, Awaiting | Ended):
                    return event.state
            await supervisor.changed(local)

    async def _read_events(self, since: int, run_id: str) -> list[RunEvent]:
        return await read_store(
            self._store.events_after(since, run_id), f"the events of run {run_id!r}"
        )

    # ------------------------------------------------------------------ starting runs

    @trio.lowlevel.enable_ki_protection
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
            max_steps: the run's budget of ``boundary()`` calls, across all its attempts;
                the call that would exceed it ends the run ``Ended(MaxSteps())``.

        Raises:
            RunExists: ``run_id`` is taken. InvalidArgument, InvalidBody, InvalidPayload:
            a bad argument (nothing is committed). RuntimeClosed: the runtime is closing.
        """
        return self._handle(await self._begin(body, input, run_id, thread_id, name, max_steps))

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
        attempt = await self._begin(body, input, run_id, thread_id, name, max_steps)
        # What `RunHandle.wait` does, without a handle nobody would see.
        state = await attempt.completion.wait()
        if state is not None:
            return state
        return await self._follow_end(attempt.run_id, attempt.start_seq)

    @trio.lowlevel.enable_ki_protection
    async def _begin(
        self,
        body: Body,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
    ) -> Attempt:
        """Commit a new top-level run and start (or queue) its first attempt."""
        self._in_own_run()
        return await self._supervisor.begin_run(
            body,
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            parent=None,
        )

    # ------------------------------------------------------------------ durable runs

    def register(self, name: str, body: Body) -> None:
        """Register ``body`` under ``name``: runs can then be submitted by that name,
        served here, and recovered here when their owner is lost. A run started with a
        registered body carries its name.

        Raises:
            InvalidArgument: the name is registered for another body, or is not a valid id.
            InvalidBody: ``body`` is not an async callable.
        """
        self._supervisor.register(name, body)

    @trio.lowlevel.enable_ki_protection
    async def submit(
        self,
        name: str,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
    ) -> RunHandle:
        """Commit a run ``Queued`` for any serving runtime that has a body named ``name``.

        Idempotent by run id: submitting an existing ``run_id`` with the same name, input
        and thread (``thread_id=None`` meaning the run's own) returns a handle to that run.
        The handle's ``wait()`` returns the first ``Awaiting`` or ``Ended`` the run commits
        after the handle was made, whichever runtime runs it (at once the end of a run
        that had already ended).

        Raises:
            RunExists: ``run_id`` is taken by a different run.
        """
        self._in_own_run()
        check_id(name, "name")
        if run_id is not None:
            check_id(run_id, "run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        supervisor = self._supervisor
        supervisor.actors_nursery()  # refuses once shutdown has begun
        run_id = run_id or new_run_id()
        input = check_payload(input, f"input of run {run_id!r}", supervisor.max_payload_bytes)
        thread_id = thread_id or run_id
        await trio.lowlevel.checkpoint()
        result = await supervisor.mailbox.commit(
            Commit(
                run_id=run_id,
                state=QUEUED,
                generation=0,
                expect=Expect(new=True),
                at=supervisor.now(),
                new_run=NewRun(thread_id, None, name, input, None, run_id),
                detail=_DETAIL_SUBMIT,
            )
        )
        if isinstance(result, Rejected):
            record = await self._load(run_id)
            if (record.name, record.input, record.thread_id, record.parent_run_id) != (
                name,
                input,
                thread_id,
                None,
            ):
                raise RunExists(run_id)
            return await self._handle_from_now(run_id, thread_id)
        supervisor.wake_servers()
        return self._remote_handle(run_id, thread_id, 1, 0)

    async def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        new_run_id: str | None = None,
        thread_id: str | None = None,
    ) -> RunHandle:
        """Commit a new run with ``run_id``'s name and input whose first attempt starts from
        the checkpoint ``run_id`` had committed as of its event ``at`` (a ``seq`` of that
        run's events; its last by default). The source is untouched, whatever its state.

        The new run is on ``thread_id`` (a thread of its own by default); its
        `RunRecord.forked_from` is ``{"run_id": run_id, "seq": at}``. It starts here if
        this runtime has the body, else it waits ``Queued`` for a serving runtime that has.

        Raises:
            UnknownRun: the store does not hold ``run_id``.
            InvalidArgument: the source has no name (nothing could find its body), ``at``
                is not one of its events, or the store keeps no checkpoint history.
            RunExists: ``new_run_id`` is taken.

        Nothing is committed when it raises.
        """
        self._in_own_run()
        check_id(run_id, "run_id")
        if new_run_id is not None:
            check_id(new_run_id, "new_run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        if at is not None and (type(at) is not int or at < 1):
            raise InvalidArgument(
                f"at must be the seq of one of run {run_id!r}'s events (a positive int), not {at!r}"
            )
        supervisor = self._supervisor
        supervisor.actors_nursery()  # refuses once shutdown has begun
        store = self._store
        if not isinstance(store, ForkingStore):
            raise InvalidArgument(
                f"the store {type(store).__name__} keeps no checkpoint history, so it cannot"
                " fork a run: use the memory or SQLite store"
            )
        await trio.lowlevel.checkpoint()
        source = await self._load(run_id)
        if source.name is None:
            raise InvalidArgument(
                f"run {run_id!r} has no name, so no runtime could find the body to run a"
                " fork of it with: start runs by a registered name (register(), submit())"
                " to fork them"
            )
        found = await read_store(
            store.checkpoint_at(run_id, at), f"the checkpoints of run {run_id!r}"
        )
        if found is None:
            raise InvalidArgument(
                f"{at!r} is not the seq of one of run {run_id!r}'s events: pick one from"
                f" runtime.events({run_id!r}) or leave at= out for its last"
            )
        forked_from = FrozenDict({"run_id": run_id, "seq": found.seq})
        new_id = new_run_id or fresh_run_id()
        thread = thread_id or new_id
        body = supervisor.body_for(new_id, source.name)
        if body is not None:
            attempt = await supervisor.begin_run(
                body,
                input=source.input,
                run_id=new_id,
                thread_id=thread,
                name=source.name,
                max_steps=source.max_steps,
                parent=None,
                checkpoint=found.checkpoint,
                forked_from=forked_from,
                detail=_DETAIL_FORK,
            )
            return self._handle(attempt)
        result = await supervisor.mailbox.commit(
            Commit(
                run_id=new_id,
                state=QUEUED,
                generation=0,
                expect=Expect(new=True),
                at=supervisor.now(),
                new_run=NewRun(
                    thread,
                    None,
                    source.name,
                    source.input,
                    source.max_steps,
                    new_id,
                    found.checkpoint,
                    forked_from,
                ),
                detail=_DETAIL_FORK,
            )
        )
        if isinstance(result, Rejected):
            raise RunExists(new_id)
        supervisor.wake_servers()
        return self._remote_handle(new_id, thread, 1, 0)

    async def prune(self, *, ended_before: float, dry_run: bool = False) -> int:
        """Delete the runs that ended more than ``ended_before`` seconds ago (by the
        runtime's clock, which dates every event), with their events, tickets, stored
        messages and checkpoints; how many. Never a run that has not ended, nor any run of
        a tree whose root has not ended (or ended more recently). ``dry_run`` counts them
        and deletes nothing.

        Raises:
            InvalidArgument: ``ended_before`` is not a number of seconds >= 0, or the
                store cannot delete runs.
        """
        self._in_own_run()
        if type(ended_before) not in (int, float) or not ended_before >= 0:
            raise InvalidArgument(
                f"ended_before must be a number of seconds >= 0, not {safe_repr(ended_before)}"
            )
        store = self._store
        if not isinstance(store, PruningStore):
            raise InvalidArgument(
                f"the store {type(store).__name__} cannot delete runs: use the memory or"
                " SQLite store"
            )
        cutoff = self._supervisor.now() - ended_before
        what = "the ended runs to delete"
        return await read_store(store.prune(cutoff, dry_run=dry_run), what)

    async def _handle_from_now(self, run_id: str, thread_id: str) -> RunHandle:
        """A handle on an existing run whose ``wait()`` returns the first ``Awaiting`` or
        ``Ended`` committed from now on, or the run's end if it has ended: what it awaited
        and was answered before is history."""
        last: RunEvent | None = None  # the last committed event: the run's state now
        since = 0
        while events := await self._read_events(since, run_id):
            since = events[-1].seq
            for event in events:
                if event.kind == EventKind.COMMITTED:
                    last = event
        if last is None:  # pragma: no cover - every commit writes one; forgotten meanwhile
            raise UnknownRun(run_id)
        if isinstance(last.state, Ended):
            # Followed from just before its terminal event, the handle returns it at once.
            return self._remote_handle(run_id, thread_id, last.generation, last.seq - 1)
        # Running is its attempt's generation; Queued and Awaiting keep the generation of
        # the attempt before the one they wait for.
        generation = last.generation + (not isinstance(last.state, Running))
        return self._remote_handle(run_id, thread_id, generation, since)

    async def serve(
        self,
        *,
        concurrency: int = 8,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Claim and run runs whose body is registered here, at most ``concurrency`` root
        attempts at once (children do not count): queued runs, due scheduled resumes, and
        on a durable store runs whose owner was lost (re-executed from their checkpoint,
        or ended if they can never run again). Returns only when cancelled; with
        ``await nursery.start(runtime.serve)`` once it is claiming.
        """
        from ..worker._serve import serve

        self._in_own_run()
        if type(concurrency) is not int or concurrency < 1:
            raise InvalidArgument(
                f"concurrency must be a positive int, not {safe_repr(concurrency)}"
            )
        if not self._supervisor.named:
            raise InvalidArgument(
                "serve() has nothing to run: register bodies by name first"
                " (open_runtime(bodies=...) or runtime.register(name, body))"
            )
        self._supervisor.actors_nursery()  # refuses once shutdown has begun
        await serve(self._supervisor, concurrency, task_status=task_status)

    async def _scheduled_resume(self, run_id: str, correlation_id: str) -> None:
        await self.resume(run_id, None, correlation_id=correlation_id)

    # ------------------------------------------------------------------ live commands

    @trio.lowlevel.enable_ki_protection
    async def send(self, command: LiveCommand) -> None:
        """Send a live command to the run's current attempt, wherever it executes.

        On a durable store the command is stored before ``send`` returns and is applied by
        the current attempt (within a few ``poll`` intervals when it runs in another
        process), or, if the run is queued or its owner is lost, by the run's next attempt:
        messages reach its first boundary, a pause pauses it there, a cancel ends it before
        its body runs, and a wake (there was no attempt to wake) is dropped. On a store
        that is not durable it is `deliver`.

        Raises:
            NotActive: the run is neither ``Running`` nor ``Queued`` (awaiting, ended or
                unknown), or (not durable) has no active attempt here.
        """
        self._check_command(command)
        supervisor = self._supervisor
        store = supervisor.durable_store
        if store is None:
            await trio.lowlevel.checkpoint()
            self.deliver(command)
            return
        kind, payload, reason = _stored_form(command)
        run_id = command.run_id
        result = await store.post_command(run_id, kind, payload, reason, supervisor.now())
        if isinstance(result, Rejected):
            why = "it is unknown" if result.state is None else f"it is {result.state!r}"
            raise NotActive(run_id, why)
        # Here: no need to wait for the relay. An attempt still waiting for its thread takes
        # a cancel at once, and the rest when it starts.
        attempt = self._registry.get(run_id) or supervisor.queued.get(run_id)
        if attempt is not None and not attempt.sealed:
            attempt.apply_stored(result, kind, payload, reason)

    @trio.lowlevel.enable_ki_protection
    def deliver(self, command: LiveCommand) -> None:
        """Deliver a live command to the run's active attempt in this process.

        Raises:
            NotActive: nothing controllable here (unknown, queued, awaiting, ended, or
                another process's). Read the committed state; see `NotActive`.
            InvalidArgument: not a `LiveCommand`.
        """
        self._check_command(command)
        attempt = self._registry.get(command.run_id)
        if attempt is None or attempt.sealed:
            raise NotActive(command.run_id)
        _apply(attempt, command)

    @trio.lowlevel.enable_ki_protection
    async def deliver_to_current_attempt(self, command: LiveCommand) -> None:
        """Like `deliver`, but first ask the attempt's ownership verifier.

        The verifier (a durable claim check) runs outside the registry; afterwards the
        attempt must still be the registered generation, or the command is refused.
        """
        self._check_command(command)
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
                raise NotActive(
                    run_id, f"its ownership could not be verified: {safe_repr(exc)}"
                ) from exc
            if current is not True:
                raise NotActive(run_id, "this process no longer owns its attempt")
        again = self._registry.get(run_id)
        if again is not attempt or again.generation != generation or again.sealed:
            raise NotActive(run_id, "its attempt changed while ownership was being checked")
        _apply(attempt, command)

    def _check_command(self, command: LiveCommand) -> None:
        self._in_own_run()
        kind = type(command)
        if kind not in _COMMANDS:
            raise InvalidArgument(
                f"unknown command {safe_repr(command)}; deliver one of LiveCommand.Cancel,"
                " LiveCommand.Pause, LiveCommand.Wake or LiveCommand.Message"
            )
        if kind is Message:
            # Checked as JSON when the command was built; its size is this runtime's rule.
            assert isinstance(command, Message)
            check_payload(
                command.payload,
                f"message payload for run {command.run_id!r}",
                self._supervisor.max_payload_bytes,
            )

    # ------------------------------------------------------------------ committed control

    async def cancel_run(
        self, run_id: str, *, thread_id: str | None = None, reason: str | None = None
    ) -> RunState:
        """End the run ``Ended(Cancelled())`` wherever it is: active, queued or awaiting.

        An active attempt's scope is cancelled and the attempt commits; a queued run never
        runs; an awaiting run's ticket is deleted in the same commit. ``reason`` is
        recorded with the source (``cancel_run``) in the terminal event's detail.

        Raises:
            RunAlreadyEnded: it had ended another way (``.state`` is how).
            UnknownRun: no such run (or not on ``thread_id``).
            InvalidArgument: ``reason`` is neither a str nor None.
        """
        if reason is not None and type(reason) is not str:
            raise InvalidArgument(
                f"cancel_run() of run {run_id!r} takes a str reason or None,"
                f" not {safe_repr(reason)}"
            )
        return await self._end_run(
            run_id, EndRequest(CANCELLED_CAUSE, "cancel_run", reason), thread_id
        )

    async def stop_run(self, run_id: str, reason: str, *, thread_id: str | None = None) -> RunState:
        """End the run ``Ended(Stopped(reason))``: a host decision (budget, policy, operator)."""
        if type(reason) is not str:
            raise InvalidArgument(
                f"stop_run() of run {run_id!r} needs a str reason, not {safe_repr(reason)}"
            )
        return await self._end_run(
            run_id, EndRequest(Stopped(reason), "stop_run", reason), thread_id
        )

    @trio.lowlevel.enable_ki_protection
    async def _end_run(self, run_id: str, request: EndRequest, thread_id: str | None) -> RunState:
        self._in_own_run()
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
            record = await self._load(run_id)
            if thread_id is not None and record.thread_id != thread_id:
                raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
            if isinstance(record.state, Ended):
                raise RunAlreadyEnded(run_id, record.state)
            if self._registry.get(run_id) or self._supervisor.queued.get(run_id):
                continue  # an attempt appeared while we read
            # A run Running with no attempt here runs elsewhere (or its owner is gone): its
            # end is committed at once, its descendants' first, which fences its owner; the
            # owner sees it and stops.
            result = await self._supervisor.commit_end(
                run_id,
                record.generation,
                type(record.state),
                request,
                parent_run_id=record.parent_run_id,
                end_descendants=isinstance(record.state, RunState.Running),
            )
            if isinstance(result, Accepted):
                return result.state
            # The run moved on between the read and the commit: look again.

    @trio.lowlevel.enable_ki_protection
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
        ``boundary()``. On a busy thread the run is committed ``Queued`` instead. A child
        run is resumed inside its parent's attempt, which must still be running here.

        Args:
            correlation_id: must match the live ticket; None answers whatever is live.
            body: the body to run; defaults to the run's body in this runtime.

        Raises:
            NotAwaiting, TicketMismatch, TicketExpired, UnknownRun: nothing is committed.
            InvalidPayload: ``value`` is not JSON, or does not match the ticket's
                ``accepts`` schema (the ticket stays live).
            InvalidArgument: no runtime could run the new attempt: this one has no body
                for the run, and the run has no name a serving runtime could find its
                body by (or the store is not durable). Nothing is committed.
        """
        self._in_own_run()
        check_id(run_id, "run_id")
        if correlation_id is not None:
            check_id(correlation_id, "correlation_id")
        value = check_payload(
            value, f"resume value for run {run_id!r}", self._supervisor.max_payload_bytes
        )
        if body is not None:
            check_body(body)
        self._supervisor.actors_nursery()  # refuses once shutdown has begun
        await trio.lowlevel.checkpoint()
        record = await self._load(run_id)
        ticket = self._check_ticket(record, correlation_id)
        if ticket.accepts is not None:
            check_value(ticket.accepts, value, f"the resume value for run {run_id!r}")
        if body is None:
            body = self._supervisor.body_for(run_id, record.name)
            if body is None:
                if record.name is None:
                    # No runtime can ever find its body by name: queued, it would wait forever.
                    raise InvalidArgument(
                        f"run {run_id!r} has no name, so only a runtime that has its body can"
                        " run it: resume it from the runtime that started it, or pass body="
                        " to resume(); its ticket is still live"
                    )
                if self._supervisor.claims is not None and record.parent_run_id is None:
                    return await self._queue_resume(record, ticket, value)
                raise InvalidArgument(
                    f"no body is known for run {run_id!r} in this runtime; pass body= to"
                    " resume(), or register its body by name"
                )
        parent = None
        if record.parent_run_id is not None:
            parent = self._registry.get(record.parent_run_id)
            if parent is None or parent.children_closed or parent.sealed:
                raise NotAwaiting(
                    run_id,
                    record.state,
                    f"its parent run {record.parent_run_id!r} has no running attempt here,"
                    " and a child never outlives its parent's attempt",
                )
        attempt = self._supervisor.new_attempt(
            run_id,
            record.thread_id,
            record.generation + 1,
            parent,
            body,
            record.max_steps,
            record.steps,
            record.input,
            record.checkpoint,
            value,
            ticket,
            name=record.name,
        )
        try:
            result = await self._supervisor.admit(
                attempt,
                Expect(
                    generation=record.generation,
                    state=Awaiting,
                    correlation_id=ticket.correlation_id,
                ),
                None,
                _resume_detail(ticket.correlation_id),
            )
        except NotActive:
            raise NotAwaiting(
                run_id, record.state, "its parent's attempt began to end meanwhile"
            ) from None
        if isinstance(result, Rejected):
            assert result.state is not None
            latest = await self._load(run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(run_id, latest.state)
        return self._handle(attempt)

    async def _queue_resume(
        self, record: RunRecord, ticket: ResumeTicket, value: JsonValue
    ) -> RunHandle:
        """Durable stores: the body is not here, so the resume is committed ``Queued`` (with
        its value and ticket) for a serving runtime that has the body."""
        supervisor = self._supervisor
        result = await supervisor.mailbox.commit(
            Commit(
                run_id=record.run_id,
                state=QUEUED,
                generation=record.generation,
                expect=Expect(
                    generation=record.generation,
                    state=Awaiting,
                    correlation_id=ticket.correlation_id,
                ),
                at=supervisor.now(),
                resume_value=value,
                resume_ticket=ticket,
                detail=_resume_detail(ticket.correlation_id),
            )
        )
        if isinstance(result, Rejected):
            latest = await self._load(record.run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(record.run_id, latest.state)
        supervisor.wake_servers()
        return self._remote_handle(
            record.run_id, record.thread_id, record.generation + 1, result.last_seq
        )

    def _remote_handle(self, run_id: str, thread_id: str, generation: int, since: int) -> RunHandle:
        """A handle on a run whose attempt runs wherever a runtime picks it up."""
        return RunHandle._create(
            run_id, thread_id, generation, None, self._read_record, self._follow, since
        )

    def _check_ticket(self, record: RunRecord, correlation_id: str | None) -> ResumeTicket:
        state = record.state
        if not isinstance(state, Awaiting):
            raise NotAwaiting(record.run_id, state)
        ticket = state.ticket
        if correlation_id is not None and correlation_id != ticket.correlation_id:
            raise TicketMismatch(record.run_id, ticket.correlation_id, correlation_id)
        if ticket.deadline is not None:
            now = self._supervisor.now()
            if now > ticket.deadline:
                raise TicketExpired(record.run_id, ticket.correlation_id, ticket.deadline, now)
        return ticket

    # ------------------------------------------------------------------ reading

    async def state(self, run_id: str) -> RunState:
        """The run's committed state."""
        return (await self.record(run_id)).state

    async def record(self, run_id: str) -> RunRecord:
        """The run's committed record (its payloads are frozen)."""
        self._in_own_run()
        check_id(run_id, "run_id")
        return await self._load(run_id)

    async def _load(self, run_id: str) -> RunRecord:
        record = await read_store(self._store.load(run_id), f"run {run_id!r}")
        if record is None:
            raise UnknownRun(run_id)
        return record

    async def list_runs(
        self,
        *,
        state: StateKind | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Committed records of the store's runs, newest first (the order they were
        created in), at most ``limit``.

        Args:
            state: only runs whose committed state is of this kind: ``"queued"``,
                ``"running"``, ``"awaiting"`` or ``"ended"``.
            thread_id: only runs on this thread.
            name: only runs with this name.
            limit: at most this many (a positive int).
            before: only runs created before this one: pass the last run of a page to get
                the next.

        Raises:
            InvalidArgument: a filter is malformed, or the store cannot list its runs (it
                has no ``list_runs``; see `awaken_trio.store.ListingStore`).
            UnknownRun: ``before`` names a run the store does not hold.
        """
        if state is not None and state not in STATE_KINDS:
            raise InvalidArgument(
                f"unknown state {safe_repr(state)}; list runs by one of {', '.join(STATE_KINDS)}"
            )
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        if name is not None:
            check_id(name, "name")
        if type(limit) is not int or limit < 1:
            raise InvalidArgument(f"limit must be a positive int, not {safe_repr(limit)}")
        if before is not None:
            check_id(before, "before")
        store = self._store
        if not isinstance(store, ListingStore):
            raise InvalidArgument(
                f"{safe_repr(store)} cannot list its runs: it has no list_runs() method"
                " (see awaken_trio.store.ListingStore)"
            )
        if before is not None:
            await self._load(before)  # raises UnknownRun
        return await read_store(
            store.list_runs(
                state=state, thread_id=thread_id, name=name, limit=limit, before=before
            ),
            "the list of runs",
        )

    def active_attempt_run_id(self, thread_id: str) -> str | None:
        """The run whose attempt is active on ``thread_id`` in this runtime, or None."""
        attempt = self._registry.on_thread(thread_id)
        return None if attempt is None or attempt.sealed else attempt.run_id

    def events(self, run_id: str | None = None, *, follow: bool = True) -> EventStream:
        """Committed events, oldest first, then (``follow``) new ones as they commit.

        For one run, following ends after its terminal event; for all runs, when the
        runtime closes. An unknown ``run_id`` raises `UnknownRun` from the first step.
        """
        self._in_own_run()
        if run_id is not None:
            check_id(run_id, "run_id")
        return EventStream._create(self._store, self._supervisor, run_id, follow)

    def statistics(self) -> RuntimeStatistics:
        """Counts of what this runtime holds right now (attempts, queued runs, busy threads, the
        supervisor's mailbox); sync, for monitoring.
        """
        return RuntimeStatistics(
            active_attempts=len(self._registry),
            queued_runs=len(self._supervisor.queued),
            busy_threads=len(self._supervisor.gate),
            awaiting_bodies=len(self._supervisor.bodies),
            supervisor=self._supervisor.mailbox.statistics(),
        )


def _apply(attempt: Attempt, command: LiveCommand) -> None:
    """Apply a live command delivered in this process."""
    kind = type(command)
    if kind is Cancel:
        assert isinstance(command, Cancel)
        attempt.request_end(EndRequest(CANCELLED_CAUSE, "deliver", command.reason))
        return
    if kind is Pause:
        attempt.pause_requested = True
    elif kind is Wake:
        attempt.wake_pending = True
    else:
        assert isinstance(command, Message)
        attempt.add_message(command.payload)
    attempt.notify()


_DETAIL_SUBMIT = freeze_detail({"source": "submit"}, "detail")
_DETAIL_FORK = freeze_detail({"source": "fork"}, "detail")


def _stored_form(command: LiveCommand) -> tuple[CommandKind, JsonValue, str | None]:
    if isinstance(command, Cancel):
        return "cancel", None, command.reason
    if isinstance(command, Pause):
        return "pause", None, None
    if isinstance(command, Wake):
        return "wake", None, command.reason
    assert isinstance(command, Message)
    return "message", command.payload, None


def _resume_detail(correlation_id: str) -> FrozenDict:
    return freeze_detail({"source": "resume", "correlation_id": correlation_id}, "detail")


def _resolve_store(store: str | os.PathLike[str] | Store) -> tuple[Store, bool]:
    if isinstance(store, str | os.PathLike):
        from ..store import open_store  # backends load on first use of their scheme

        return open_store(store), True
    for method in STORE_METHODS:
        if not callable(getattr(store, method, None)):
            raise InvalidArgument(f"{safe_repr(store)} is not a Store: it has no {method}() method")
    return store, False


@asynccontextmanager
async def open_runtime(
    store: str | os.PathLike[str] | Store = "memory://",
    *,
    clock: Clock = time.time,
    bodies: Mapping[str, Body] | None = None,
    lease: float = 30.0,
    poll: float = 0.05,
    max_recoveries: int = 3,
    ownership_verifier: VerifierFactory | None = None,
    max_batch: int = 1024,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    tracer_provider: object | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime: a supervisor, a store and a nursery for the run actors.

    Leaving the block ends every active or queued run of a non-durable store with
    ``Ended(Stopped("runtime shutdown"))`` (each commit shielded) and returns once they are
    committed; on a durable store it releases this runtime's claims instead: a named run
    goes back to ``Queued`` for another runtime (its children end ``Stopped`` first), a run
    with no name ends ``Stopped``. An exception from the block comes out unwrapped;
    KeyboardInterrupt and SystemExit, from the block, from a body or from anything the
    runtime calls (the clock, the store), shut down the same way and are re-raised.

    Args:
        store: ``"memory://"`` (the default), ``"sqlite:///path.db"``, the path of an
            SQLite file (``pathlib.Path("runs.db")``), or a `Store`.
        clock: wall clock for ticket deadlines, leases and event times (``time.time``
            scale); every runtime sharing a store must agree on it.
        bodies: run bodies by name (also `Runtime.register`): what lets runs be
            submitted, served and recovered.
        lease: seconds a claim on a run lasts unless renewed (every third of it); a
            runtime that misses it loses its runs to another. Durable stores only.
        poll: seconds between looks at the store for what other runtimes did (commands
            sent, runs ended elsewhere, threads freed); a signal takes effect within a few.
        max_recoveries: how many times a run is re-executed after losing its owner.
        ownership_verifier: ``f(run_id, thread_id, generation) -> OwnershipVerifier | None``
            called for every attempt; `Runtime.deliver_to_current_attempt` asks it.
        max_batch: most commits the supervisor hands the store in one transaction.
        max_payload_bytes: the largest payload (input, progress, result, ticket payload,
            resume value, message, event detail) a run may hand over, as the length of its
            compact JSON text; a larger one is refused with `InvalidPayload` by the call
            that hands it over (a result that large ends the run
            ``Failed("invalid_result")``). 4 MiB by default.
        tracer_provider: an OpenTelemetry ``TracerProvider`` (the ``[otel]`` extra): a
            span ``awaken_trio.attempt`` per attempt (DESIGN §3.6). None: no tracing.
    """
    if ownership_verifier is not None and not callable(ownership_verifier):
        raise InvalidArgument(
            "ownership_verifier must be a callable (run_id, thread_id, generation) ->"
            f" OwnershipVerifier | None, not {safe_repr(ownership_verifier)}"
        )
    if not callable(clock):
        raise InvalidArgument(
            f"clock must be a callable returning wall-clock seconds, not {safe_repr(clock)}"
        )
    if type(max_batch) is not int or max_batch < 1:
        raise InvalidArgument(f"max_batch must be a positive int, not {safe_repr(max_batch)}")
    if type(max_payload_bytes) is not int or max_payload_bytes < 1:
        raise InvalidArgument(
            "max_payload_bytes must be a positive int (bytes of JSON text),"
            f" not {safe_repr(max_payload_bytes)}"
        )
    for option, value in (("lease", lease), ("poll", poll)):
        if type(value) not in (int, float) or not 0 < value < math.inf:
            raise InvalidArgument(f"{option} must be a positive number of seconds, not {value!r}")
    if type(max_recoveries) is not int or max_recoveries < 0:
        raise InvalidArgument(
            f"max_recoveries must be an int >= 0, not {safe_repr(max_recoveries)}"
        )
    if bodies is not None and not isinstance(bodies, Mapping):
        raise InvalidArgument(f"bodies must map names to run bodies, not {safe_repr(bodies)}")
    store_obj, owned = _resolve_store(store)
    claims = None
    if store_obj.durable:
        if not isinstance(store_obj, DurableStore):
            missing = [m for m in DURABLE_METHODS if not callable(getattr(store_obj, m, None))]
            raise InvalidArgument(
                f"{safe_repr(store_obj)} says it is durable but has no {', '.join(missing)}"
            )
        claims = ClaimSettings(_new_owner(), float(lease), float(poll), max_recoveries)
    observer = None if tracer_provider is None else _observer_for(tracer_provider)
    mailbox = CommitMailbox(store_obj, max_batch=max_batch)
    supervisor = Supervisor(
        store_obj, mailbox, clock, ownership_verifier, claims, max_payload_bytes=max_payload_bytes
    )
    supervisor.observer = observer
    runtime = Runtime._create(supervisor)
    for name, body in (bodies or {}).items():
        supervisor.register(name, body)
    caller_error: BaseException | None = None
    internal_error: BaseException | None = None
    try:
        # A store named by a URL opens here, so a file that cannot be used is refused by
        # open_runtime itself (nothing written); inside the try, so a cancel landing just
        # after it opened still closes it.
        opener = getattr(store_obj, "open", None) if owned else None
        if opener is not None:
            await opener()
        async with trio.open_nursery() as system:
            await system.start(_run_mailbox, mailbox)
            await system.start(supervisor.host_actors, system.cancel_scope)
            services = await system.start(_host_services, supervisor, runtime)
            try:
                yield runtime
            except BaseException as exc:  # re-raised below, outside the nursery, unwrapped
                caller_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    # The services (claim renewals, control from other runtimes) keep
                    # running while the attempts drain, whatever cancelled the block, then
                    # stop.
                    supervisor.begin_shutdown()
                    await supervisor.actors_done.wait()
                    services.cancel(reason="runtime closed")
    except BaseExceptionGroup as group:
        # The system tasks never raise; what reaches here is a cancel of the caller's that
        # the nursery's exit met, or an interrupt.
        internal_error = group
    finally:
        if owned:
            with trio.CancelScope(shield=True):
                await store_obj.aclose()
    raise_block_exit(supervisor.interrupt, caller_error, internal_error)


def raise_block_exit(
    interrupt: BaseException | None,
    caller_error: BaseException | None,
    internal_error: BaseException | None,
) -> None:
    """Raise what leaving `open_runtime` comes out as (rule 12), or return for nothing.

    In order: a KeyboardInterrupt or SystemExit, as itself, wherever it was raised and
    whatever nursery it crossed (the runtime's own, or one of the caller's in the block);
    else the caller's own exception, unwrapped; else, when an enclosing scope was
    cancelled, one plain `trio.Cancelled` (the nursery exits met it; it says nothing about
    the runtime). A real failure of the runtime's own tasks (never expected) is raised
    itself, or noted on the caller's exception.
    """
    if interrupt is None:
        interrupt = _first_interrupt(caller_error) or _first_interrupt(internal_error)
    if interrupt is not None:
        if interrupt is caller_error or isinstance(caller_error, trio.Cancelled):
            # The interrupt stopped the block: a Cancelled it caused is not the caller's.
            raise interrupt from None
        raise interrupt
    failure = internal_error
    if isinstance(failure, BaseExceptionGroup):
        _, failure = failure.split(trio.Cancelled)
    if caller_error is not None:
        if failure is not None:  # pragma: no cover - the system tasks never raise
            caller_error.add_note(f"awaken_trio also failed while closing: {failure!r}")
        raise caller_error
    if failure is not None:  # pragma: no cover
        raise failure
    if internal_error is not None:
        cancelled = _leaves(internal_error)[0]
        raise cancelled from None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _first_interrupt(exc: BaseException | None) -> BaseException | None:
    if exc is None:
        return None
    for leaf in _leaves(exc):
        if isinstance(leaf, KeyboardInterrupt | SystemExit):
            return leaf
    return None


async def _host_services(
    supervisor: Supervisor,
    runtime: Runtime,
    *,
    task_status: trio.TaskStatus[trio.CancelScope],
) -> None:
    """Run the runtime's services until the scope handed back is cancelled. Shielded: a
    cancel of the caller's block must not stop claim renewals while attempts drain."""
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as services:
            await _start_services(services, supervisor, runtime)
            task_status.started(scope)
            await trio.sleep_forever()


async def _start_services(services: trio.Nursery, supervisor: Supervisor, runtime: Runtime) -> None:
    """The runtime's own background tasks: scheduled resumes on every store; on a durable
    store also claim renewals and the relay of what other runtimes do."""
    from ..worker._schedule import Scheduler

    scheduler = Scheduler(supervisor.now, runtime._scheduled_resume)
    supervisor.on_scheduled = scheduler.schedule
    await services.start(scheduler.run)
    store = supervisor.durable_store
    if store is not None:
        from ..worker._claims import ClaimKeeper
        from ..worker._relay import StoreRelay

        await services.start(ClaimKeeper(supervisor, store).run)
        await services.start(StoreRelay(supervisor, store).run)


def _new_owner() -> str:
    # Unique across machines, processes and runtimes in one process.
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"


@trio.lowlevel.enable_ki_protection
async def _run_mailbox(mailbox: CommitMailbox, *, task_status: trio.TaskStatus[None]) -> None:
    # The mailbox must outlive every actor: only its close() ends it.
    with trio.CancelScope(shield=True):
        await mailbox.run(task_status=task_status)


def _observer_for(provider: object) -> AttemptObserver:
    """The tracing observer, imported only when a provider is given (the ``[otel]`` extra)."""
    try:
        from .._otel import observer_for
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        raise InvalidArgument(
            "tracer_provider needs the OpenTelemetry API (the [otel] extra):"
            " pip install -e '.[otel]' in the checkout"
        ) from None
    return observer_for(provider)
