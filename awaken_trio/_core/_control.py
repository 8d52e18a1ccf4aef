"""Committed control: where a run is, and what to do about it.

`Runtime`'s public methods check their arguments and make one call here; this module asks
where the run is once per decision (`Admissions.locate`: an attempt here, or only the
store's record) and acts on the answer, validates tickets, finds bodies and parents, and
asks the supervisor's parts to commit. It builds no `Commit` and writes nothing to the store
itself: every commit, and every stored command, goes through the supervisor's parts.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, final

import attrs
import trio

from ._admit import DETAIL_FORK, Here, Stored
from ._attempt import Attempt, Body, EndRequest
from ._commands import Cancel, LiveCommand, Message, Pause, Wake
from ._errors import (
    InvalidArgument,
    NotActive,
    NotAwaiting,
    RunAlreadyEnded,
    RunExists,
    TicketExpired,
    TicketMismatch,
    UnknownRun,
    UnknownWorker,
)
from ._handle import RunHandle
from ._journal import read_steps
from ._json import FrozenDict, JsonValue
from ._policy import NO_DEADLINES, Deadlines, RetryPolicy
from ._schema import check_value
from ._spec import RunSpec
from ._state import (
    CANCELLED_CAUSE,
    Awaiting,
    Ended,
    EventKind,
    ResumeTicket,
    RunCounts,
    RunEvent,
    Running,
    RunRecord,
    RunState,
)
from ._storage import (
    Accepted,
    CountingStore,
    ForkingStore,
    IfBusy,
    ListingStore,
    NewRun,
    PruningStore,
    Rejected,
    RunFilter,
    WorkerRecord,
    WorkerStore,
    read_store,
)
from ._supervisor import Supervisor
from ._util import safe_repr
from ._validate import new_run_id
from ._validate import new_run_id as fresh_run_id

ReadRecord = Callable[[str], Coroutine[Any, Any, RunRecord]]


@final
class Control:
    """The decisions behind `Runtime`'s methods, over one supervisor."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._kernel = kernel = supervisor.kernel
        self._admissions = supervisor.admissions
        self._finish = supervisor.finish_boundary
        self._handles = supervisor.handles
        self._store = kernel.store
        self._registry = kernel.registry
        self._scheduler = supervisor.scheduler
        self._expiry = supervisor.expiry
        self.handle = self._handles.handle
        self.load = kernel.load

    # ------------------------------------------------------------------ handles and reads

    async def _read_events(self, since: int, run_id: str) -> list[RunEvent]:
        return await read_store(
            self._store.events_after(since, run_id), f"the events of run {run_id!r}"
        )

    async def handle_from_now(self, run_id: str, thread_id: str) -> RunHandle:
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
        remote = self._handles.remote
        if isinstance(last.state, Ended):
            # Followed from just before its terminal event, the handle returns it at once.
            return remote(run_id, thread_id, last.generation, last.seq - 1)
        # Running is its attempt's generation; Queued and Awaiting keep the generation of
        # the attempt before the one they wait for.
        generation = last.generation + (not isinstance(last.state, Running))
        return remote(run_id, thread_id, generation, since)

    async def list_runs(
        self,
        *,
        state: RunFilter | None,
        thread_id: str | None,
        name: str | None,
        limit: int,
        before: str | None,
    ) -> list[RunRecord]:
        store = self._store
        if not isinstance(store, ListingStore):
            raise InvalidArgument(
                f"{safe_repr(store)} cannot list its runs: it has no list_runs() method"
                " (see awaken_trio.store.ListingStore)"
            )
        if before is not None:
            await self.load(before)  # raises UnknownRun
        return await read_store(
            store.list_runs(
                state=state, thread_id=thread_id, name=name, limit=limit, before=before
            ),
            "the list of runs",
        )

    def _workers(self) -> WorkerStore:
        store = self._store
        if not isinstance(store, WorkerStore):
            raise InvalidArgument(
                f"{safe_repr(store)} keeps no workers: it has no list_workers() method"
                " (see awaken_trio.store.WorkerStore)"
            )
        return store

    async def list_workers(self, *, ended: bool) -> list[WorkerRecord]:
        return await read_store(self._workers().list_workers(ended=ended), "the workers")

    async def drain_worker(self, worker_id: str) -> WorkerRecord:
        found = await read_store(self._workers().drain_worker(worker_id), f"worker {worker_id!r}")
        if found is None:
            raise UnknownWorker(worker_id)
        return found

    async def count_runs(self) -> RunCounts:
        store = self._store
        if not isinstance(store, CountingStore):
            raise InvalidArgument(
                f"{safe_repr(store)} cannot count its runs: it has no count_runs() method"
                " (see awaken_trio.store.CountingStore)"
            )
        found = await read_store(store.count_runs(), "the counts of runs")
        return RunCounts(**{a.name: int(found.get(a.name, 0)) for a in attrs.fields(RunCounts)})

    def active_attempt_run_id(self, thread_id: str) -> str | None:
        attempt = self._registry.on_thread(thread_id)
        return None if attempt is None or attempt.phase == "sealed" else attempt.run_id

    # ------------------------------------------------------------------ starting runs

    @trio.lowlevel.enable_ki_protection
    async def execute(self, spec: RunSpec) -> RunState:
        """Start the run, then wait: the committed state (``Awaiting`` or ``Ended``) of its
        first attempt."""
        attempt = await self._admissions.begin_run(spec)
        # What `RunHandle.wait` does, without a handle nobody would see.
        state = await attempt.completion.wait()
        if state is not None:
            return state
        return await self._handles.follow_end(attempt.run_id, attempt.start_seq)

    @trio.lowlevel.enable_ki_protection
    async def execute_root(
        self,
        body: Body,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
    ) -> RunState:
        """`execute` of the common start (`Admissions.start_root`)."""
        attempt = await self._admissions.start_root(body, input, run_id, thread_id, name, max_steps)
        state = await attempt.completion.wait()
        if state is not None:
            return state
        return await self._handles.follow_end(attempt.run_id, attempt.start_seq)

    # ------------------------------------------------------------------ durable runs

    async def submit(
        self,
        name: str,
        *,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        not_before: float | None,
        limits: Deadlines = NO_DEADLINES,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
    ) -> RunHandle:
        admissions = self._admissions
        admissions.actors_nursery()  # refuses once shutdown has begun
        run_id = run_id or new_run_id()
        input = admissions.checked_input(input, run_id)
        thread_id = thread_id or run_id
        await trio.lowlevel.checkpoint()
        new_run = NewRun(
            thread_id,
            None,
            name,
            input,
            None,
            run_id,
            deadline=limits.deadline,
            queue_deadline=limits.queue_deadline,
            if_busy=if_busy,
            retry=retry,
        )
        result = await admissions.commit_queued_run(
            run_id, new_run, "submit", not_before=not_before
        )
        if isinstance(result, Rejected):
            record = await self.load(run_id)
            if (record.name, record.input, record.thread_id, record.parent_run_id) != (
                name,
                input,
                thread_id,
                None,
            ):
                raise RunExists(run_id)
            return await self.handle_from_now(run_id, thread_id)
        if not_before is None:
            self._kernel.store_changed_elsewhere()  # serving loops look again
        else:
            # Serving loops here look again when its time comes (one timer for them all).
            self._scheduler.eligible_at(not_before)
        handle = self._handles.remote(run_id, thread_id, 1, 0)
        if limits is not NO_DEADLINES:
            self._scheduler.limits(run_id=run_id, limits=limits)
            if limits.deadline is not None and limits.deadline <= self._kernel.now():
                # Already past at the call: committed, and ended at once.
                await self._expiry.expire(run_id, "deadline")
        return handle

    async def fork(
        self, run_id: str, *, at: int | None, new_run_id: str | None, thread_id: str | None
    ) -> RunHandle:
        admissions = self._admissions
        admissions.actors_nursery()  # refuses once shutdown has begun
        store = self._store
        if not isinstance(store, ForkingStore):
            raise InvalidArgument(
                f"the store {type(store).__name__} keeps no checkpoint history, so it cannot"
                " fork a run: use the memory or SQLite store"
            )
        await trio.lowlevel.checkpoint()
        source = await self.load(run_id)
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
        # The fork keeps its source's journaled steps up to the same event: copied into
        # it, so it owns them (a source pruned later takes nothing of the fork's with it,
        # and the fork's attempts read one run's steps, as any run's do).
        steps = tuple(
            event.detail for event in await read_steps(store, run_id) if event.seq <= found.seq
        )
        forked_from = FrozenDict({"run_id": run_id, "seq": found.seq})
        new_id = new_run_id or fresh_run_id()
        thread = thread_id or new_id
        body = self._kernel.body_for(new_id, source.name)
        if body is not None:
            spec = RunSpec.checked(
                body,
                input=source.input,
                run_id=new_id,
                thread_id=thread,
                name=source.name,
                max_steps=source.max_steps,
                parent=None,
                max_payload_bytes=self._kernel.max_payload_bytes,
                retry=source.retry,
            )
            attempt = await admissions.begin_run(
                spec,
                checkpoint=found.checkpoint,
                forked_from=forked_from,
                step_events=steps,
                detail=DETAIL_FORK,
            )
            return self.handle(attempt)
        new_run = NewRun(
            thread,
            None,
            source.name,
            source.input,
            source.max_steps,
            new_id,
            found.checkpoint,
            forked_from,
            steps,
            retry=source.retry,
        )
        result = await admissions.commit_queued_run(new_id, new_run, "fork")
        if isinstance(result, Rejected):
            raise RunExists(new_id)
        self._kernel.store_changed_elsewhere()  # serving loops look again
        return self._handles.remote(new_id, thread, 1, 0)

    async def prune(self, ended_before: float, *, dry_run: bool) -> int:
        store = self._store
        if not isinstance(store, PruningStore):
            raise InvalidArgument(
                f"the store {type(store).__name__} cannot delete runs: use the memory or"
                " SQLite store"
            )
        cutoff = self._kernel.now() - ended_before
        what = "the ended runs to delete"
        return await read_store(store.prune(cutoff, dry_run=dry_run), what)

    # ------------------------------------------------------------------ live commands

    async def send(self, command: LiveCommand) -> None:
        stored = await self._admissions.post(command)
        if stored is None:
            # The store keeps no commands: a live command reaches an attempt here, or none.
            self.deliver(command)
        elif isinstance(stored, Rejected):
            run_id = command.run_id
            why = "it is unknown" if stored.state is None else f"it is {stored.state!r}"
            raise NotActive(run_id, why)

    def deliver(self, command: LiveCommand) -> None:
        attempt = self._registry.get(command.run_id)
        if attempt is None or attempt.phase == "sealed":
            raise NotActive(command.run_id)
        _apply(attempt, command)

    async def deliver_to_current_attempt(self, command: LiveCommand) -> None:
        run_id = command.run_id
        attempt = self._registry.get(run_id)
        if attempt is None or attempt.phase == "sealed":
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
        if again is not attempt or again.generation != generation or again.phase == "sealed":
            raise NotActive(run_id, "its attempt changed while ownership was being checked")
        _apply(attempt, command)

    # ------------------------------------------------------------------ committed control

    async def end_run(self, run_id: str, request: EndRequest, thread_id: str | None) -> RunState:
        """End the run as ``request`` says wherever it is: its attempt here (running or
        queued) is asked to end and its end awaited; a run with no attempt here is ended by
        one commit (its descendants' ends first, which fences an owner elsewhere: it sees
        them and stops). A run that paused or awaited first, or moved on between the look
        and the commit, is looked at again."""
        wanted = Ended(request.cause)
        # An attempt here when the call is made answers it, even one whose end is committed
        # during the look (it may have been asked to end just before this call).
        live = self._registry.get(run_id) or self._kernel.queued.get(run_id)
        while True:
            where = await self._admissions.locate(run_id)
            if isinstance(where, Stored) and live is not None and live.completion.done:
                where = Here(live)
            live = None
            if isinstance(where, Here):
                attempt = where.attempt
                if thread_id is not None and attempt.thread_id != thread_id:
                    raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
                if attempt.phase != "sealed":
                    attempt.request_end(request)
                state = await attempt.completion.wait()
                if state == wanted:
                    return state
                if isinstance(state, Ended):
                    raise RunAlreadyEnded(run_id, state)
                continue  # it paused or awaited first: end it through the committed path
            record = where.record
            if thread_id is not None and record.thread_id != thread_id:
                raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
            if isinstance(record.state, Ended):
                raise RunAlreadyEnded(run_id, record.state)
            # A queued run may have descendants too (handed back with it, rule 22): they
            # end with it.
            result = await self._finish.commit_end(
                run_id,
                record.generation,
                type(record.state),
                request,
                parent_run_id=record.parent_run_id,
                descendants="parent_ended",
            )
            if isinstance(result, Accepted):
                return result.state
            # The run moved on between the look and the commit: look again.

    async def resume(
        self, run_id: str, value: JsonValue, *, correlation_id: str | None, body: Body | None
    ) -> RunHandle:
        admissions = self._admissions
        admissions.actors_nursery()  # refuses once shutdown has begun
        await trio.lowlevel.checkpoint()
        record = await self.load(run_id)
        if (
            record.deadline is not None
            and isinstance(record.state, Awaiting)
            and record.deadline <= self._kernel.now()
        ):
            # Past its deadline: it has ended, or ends now (nothing had yet), as any run
            # that has ended answers a resume.
            await self._expiry.expire(run_id, "deadline")
            raise NotAwaiting(run_id, (await self.load(run_id)).state)
        ticket = self._check_ticket(record, correlation_id)
        if ticket.accepts is not None:
            check_value(ticket.accepts, value, f"the resume value for run {run_id!r}")
        if body is None:
            body = self._kernel.body_for_record(record)
            if body is None:
                if record.name is None:
                    # No runtime can ever find its body by name: queued, it would wait forever.
                    raise InvalidArgument(
                        f"run {run_id!r} has no name, so only a runtime that has its body can"
                        " run it: resume it from the runtime that started it, or pass body="
                        " to resume(); its ticket is still live"
                    )
                if self._kernel.claims.others_may_run(record):
                    return await self._queue_resume(record, ticket, value)
                raise InvalidArgument(
                    f"no body is known for run {run_id!r} in this runtime; pass body= to"
                    " resume(), or register its body by name"
                )
        parent = None
        if record.parent_run_id is not None:
            parent = self._registry.get(record.parent_run_id)
            if parent is None or parent.phase != "running":
                raise NotAwaiting(
                    run_id,
                    record.state,
                    f"its parent run {record.parent_run_id!r} has no running attempt here,"
                    " and a child never outlives its parent's attempt",
                )
        try:
            started = await admissions.resume_here(record, ticket, value, body, parent)
        except NotActive:
            raise NotAwaiting(
                run_id, record.state, "its parent's attempt began to end meanwhile"
            ) from None
        if isinstance(started, Rejected):
            assert started.state is not None
            latest = await self.load(run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(run_id, latest.state)
        return self._handles.handle(started)

    async def _queue_resume(
        self, record: RunRecord, ticket: ResumeTicket, value: JsonValue
    ) -> RunHandle:
        """Durable stores: the body is not here, so the resume is committed ``Queued`` (with
        its value and ticket) for a serving runtime that has the body."""
        result = await self._admissions.commit_queued_resume(record, ticket, value)
        if isinstance(result, Rejected):
            latest = await self.load(record.run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(record.run_id, latest.state)
        self._kernel.store_changed_elsewhere()  # serving loops look again
        return self._handles.remote(
            record.run_id, record.thread_id, record.generation + 1, result.last_seq
        )

    def _check_ticket(self, record: RunRecord, correlation_id: str | None) -> ResumeTicket:
        state = record.state
        if not isinstance(state, Awaiting):
            raise NotAwaiting(record.run_id, state)
        ticket = state.ticket
        if correlation_id is not None and correlation_id != ticket.correlation_id:
            raise TicketMismatch(record.run_id, ticket.correlation_id, correlation_id)
        if ticket.deadline is not None:
            now = self._kernel.now()
            if now > ticket.deadline:
                raise TicketExpired(record.run_id, ticket.correlation_id, ticket.deadline, now)
        return ticket


_DELIVERED = EndRequest(CANCELLED_CAUSE, "deliver")
"""A live cancel with no reason: one request for all of them (a value; its detail is made once)."""


def _apply(attempt: Attempt, command: LiveCommand) -> None:
    """Apply a live command delivered in this process."""
    kind = type(command)
    if kind is Cancel:
        assert isinstance(command, Cancel)
        reason = command.reason
        attempt.request_end(
            _DELIVERED if reason is None else EndRequest(CANCELLED_CAUSE, "deliver", reason)
        )
        return
    if kind is Pause:
        attempt.pause_requested = True
    elif kind is Wake:
        attempt.wake_pending = True
    else:
        assert isinstance(command, Message)
        attempt.add_message(command.payload)
    attempt.notify()
