"""Committed control: where a run is, and what to do about it.

`Runtime`'s public methods check their arguments and make one call here; this module decides
where the run is (an attempt here, queued here, awaiting, elsewhere), validates tickets,
finds bodies and parents, and asks the supervisor to commit. It builds no `Commit`: the
supervisor is the only writer, and every commit is made by one of its methods.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, final

import trio

from ._attempt import Attempt, Body, Completion, EndRequest
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
)
from ._follow import EndFollowers
from ._handle import RunHandle
from ._json import FrozenDict, JsonValue, freeze_detail
from ._schema import check_value
from ._spec import RunSpec
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
)
from ._storage import (
    Accepted,
    CommandKind,
    ForkingStore,
    ListingStore,
    NewRun,
    PruningStore,
    Rejected,
    StateKind,
    StoredCommand,
    read_store,
)
from ._supervisor import Supervisor
from ._util import safe_repr
from ._validate import new_run_id
from ._validate import new_run_id as fresh_run_id

ReadRecord = Callable[[str], Coroutine[Any, Any, RunRecord]]

_DETAIL_FORK = freeze_detail({"source": "fork"}, "detail")


@final
class Control:
    """The decisions behind `Runtime`'s methods, over one supervisor."""

    def __init__(self, supervisor: Supervisor, read_record: ReadRecord) -> None:
        self.supervisor = supervisor
        self._store = supervisor.store
        self._registry = supervisor.registry
        # Bound once: every handle shares them instead of holding two method objects.
        self._read_record = read_record
        self._followers = EndFollowers(supervisor)
        self._follow = self.follow_end
        supervisor.make_handle = self.handle
        supervisor.make_settled_handle = self.settled_handle

    # ------------------------------------------------------------------ handles and reads

    def handle(self, attempt: Attempt) -> RunHandle:
        return RunHandle._create(
            attempt.run_id,
            attempt.thread_id,
            attempt.generation,
            attempt.completion,
            self._read_record,
            self._follow,
            attempt.start_seq,
        )

    def settled_handle(self, record: RunRecord) -> RunHandle:
        """A handle on a run that has no attempt here, whose ``wait()`` answers the state
        ``record`` holds (an ``Awaiting`` or ``Ended`` child taken back by its parent)."""
        return RunHandle._create(
            record.run_id,
            record.thread_id,
            record.generation,
            Completion(state=record.state, done=True),
            self._read_record,
            self._follow,
            0,
        )

    def remote_handle(self, run_id: str, thread_id: str, generation: int, since: int) -> RunHandle:
        """A handle on a run whose attempt runs wherever a runtime picks it up."""
        return RunHandle._create(
            run_id, thread_id, generation, None, self._read_record, self._follow, since
        )

    async def follow_end(self, run_id: str, since: int) -> RunState:
        """The first ``Awaiting`` or ``Ended`` the store commits for the run after event
        ``since``, whichever runtime commits it (`EndFollowers`: one read per change for
        every waiter)."""
        return await self._followers.follow_end(run_id, since)

    async def _read_events(self, since: int, run_id: str) -> list[RunEvent]:
        return await read_store(
            self._store.events_after(since, run_id), f"the events of run {run_id!r}"
        )

    async def load(self, run_id: str) -> RunRecord:
        record = await read_store(self._store.load(run_id), f"run {run_id!r}")
        if record is None:
            raise UnknownRun(run_id)
        return record

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
        if isinstance(last.state, Ended):
            # Followed from just before its terminal event, the handle returns it at once.
            return self.remote_handle(run_id, thread_id, last.generation, last.seq - 1)
        # Running is its attempt's generation; Queued and Awaiting keep the generation of
        # the attempt before the one they wait for.
        generation = last.generation + (not isinstance(last.state, Running))
        return self.remote_handle(run_id, thread_id, generation, since)

    async def list_runs(
        self,
        *,
        state: StateKind | None,
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

    def active_attempt_run_id(self, thread_id: str) -> str | None:
        attempt = self._registry.on_thread(thread_id)
        return None if attempt is None or attempt.phase == "sealed" else attempt.run_id

    # ------------------------------------------------------------------ starting runs

    @trio.lowlevel.enable_ki_protection
    async def execute(self, spec: RunSpec) -> RunState:
        """Start the run, then wait: the committed state (``Awaiting`` or ``Ended``) of its
        first attempt."""
        attempt = await self.supervisor.begin_run(spec)
        # What `RunHandle.wait` does, without a handle nobody would see.
        state = await attempt.completion.wait()
        if state is not None:
            return state
        return await self.follow_end(attempt.run_id, attempt.start_seq)

    # ------------------------------------------------------------------ durable runs

    async def submit(
        self, name: str, *, input: JsonValue, run_id: str | None, thread_id: str | None
    ) -> RunHandle:
        supervisor = self.supervisor
        supervisor.actors_nursery()  # refuses once shutdown has begun
        run_id = run_id or new_run_id()
        input = supervisor.checked_input(input, run_id)
        thread_id = thread_id or run_id
        await trio.lowlevel.checkpoint()
        new_run = NewRun(thread_id, None, name, input, None, run_id)
        result = await supervisor.commit_queued_run(run_id, new_run, "submit")
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
        supervisor.wake_servers()
        return self.remote_handle(run_id, thread_id, 1, 0)

    async def fork(
        self, run_id: str, *, at: int | None, new_run_id: str | None, thread_id: str | None
    ) -> RunHandle:
        supervisor = self.supervisor
        supervisor.actors_nursery()  # refuses once shutdown has begun
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
        forked_from = FrozenDict({"run_id": run_id, "seq": found.seq})
        new_id = new_run_id or fresh_run_id()
        thread = thread_id or new_id
        body = supervisor.body_for(new_id, source.name)
        if body is not None:
            spec = RunSpec.checked(
                body,
                input=source.input,
                run_id=new_id,
                thread_id=thread,
                name=source.name,
                max_steps=source.max_steps,
                parent=None,
                max_payload_bytes=supervisor.max_payload_bytes,
            )
            attempt = await supervisor.begin_run(
                spec, checkpoint=found.checkpoint, forked_from=forked_from, detail=_DETAIL_FORK
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
        )
        result = await supervisor.commit_queued_run(new_id, new_run, "fork")
        if isinstance(result, Rejected):
            raise RunExists(new_id)
        supervisor.wake_servers()
        return self.remote_handle(new_id, thread, 1, 0)

    async def prune(self, ended_before: float, *, dry_run: bool) -> int:
        store = self._store
        if not isinstance(store, PruningStore):
            raise InvalidArgument(
                f"the store {type(store).__name__} cannot delete runs: use the memory or"
                " SQLite store"
            )
        cutoff = self.supervisor.now() - ended_before
        what = "the ended runs to delete"
        return await read_store(store.prune(cutoff, dry_run=dry_run), what)

    # ------------------------------------------------------------------ live commands

    async def send(self, command: LiveCommand) -> None:
        supervisor = self.supervisor
        store = supervisor.durable_store
        if store is None:
            await trio.lowlevel.checkpoint()
            self.deliver(command)
            return
        kind, payload, reason = _stored_form(command)
        run_id = command.run_id
        at = supervisor.now()
        result = await store.post_command(run_id, kind, payload, reason, at)
        if isinstance(result, Rejected):
            why = "it is unknown" if result.state is None else f"it is {result.state!r}"
            raise NotActive(run_id, why)
        # Here: no need to wait for the relay. An attempt still waiting for its thread takes
        # a cancel at once, and the rest when it starts.
        supervisor.apply_stored(StoredCommand(result, run_id, kind, payload, reason, at))

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
        queued) is asked to end; a run with no attempt here is ended by one commit."""
        supervisor = self.supervisor
        # An attempt here when the call is made answers it, even one whose end is committed
        # during the checkpoint (it may have been asked to end just before this call).
        live = self._registry.get(run_id) or supervisor.queued.get(run_id)
        await trio.lowlevel.checkpoint()
        wanted = Ended(request.cause)
        while True:
            attempt = self._registry.get(run_id) or supervisor.queued.get(run_id)
            if attempt is None and live is not None and live.completion.done:
                attempt = live
            live = None
            if attempt is not None:
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
            record = await self.load(run_id)
            if thread_id is not None and record.thread_id != thread_id:
                raise UnknownRun(run_id, f"run {run_id!r} is not on thread {thread_id!r}")
            if isinstance(record.state, Ended):
                raise RunAlreadyEnded(run_id, record.state)
            if self._registry.get(run_id) or supervisor.queued.get(run_id):
                continue  # an attempt appeared while we read
            # A run Running with no attempt here runs elsewhere (or its owner is gone): its
            # end is committed at once, its descendants' first, which fences its owner; the
            # owner sees it and stops. A queued run may have descendants too (handed back
            # with it, rule 22): they end with it.
            result = await supervisor.commit_end(
                run_id,
                record.generation,
                type(record.state),
                request,
                parent_run_id=record.parent_run_id,
                end_descendants="parent_ended",
            )
            if isinstance(result, Accepted):
                return result.state
            # The run moved on between the read and the commit: look again.

    async def resume(
        self, run_id: str, value: JsonValue, *, correlation_id: str | None, body: Body | None
    ) -> RunHandle:
        supervisor = self.supervisor
        supervisor.actors_nursery()  # refuses once shutdown has begun
        await trio.lowlevel.checkpoint()
        record = await self.load(run_id)
        ticket = self._check_ticket(record, correlation_id)
        if ticket.accepts is not None:
            check_value(ticket.accepts, value, f"the resume value for run {run_id!r}")
        if body is None:
            body = supervisor.body_for(run_id, record.name)
            if body is None:
                if record.name is None:
                    # No runtime can ever find its body by name: queued, it would wait forever.
                    raise InvalidArgument(
                        f"run {run_id!r} has no name, so only a runtime that has its body can"
                        " run it: resume it from the runtime that started it, or pass body="
                        " to resume(); its ticket is still live"
                    )
                if supervisor.claims is not None and record.parent_run_id is None:
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
            started = await supervisor.resume_here(record, ticket, value, body, parent)
        except NotActive:
            raise NotAwaiting(
                run_id, record.state, "its parent's attempt began to end meanwhile"
            ) from None
        if isinstance(started, Rejected):
            assert started.state is not None
            latest = await self.load(run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(run_id, latest.state)
        return self.handle(started)

    async def _queue_resume(
        self, record: RunRecord, ticket: ResumeTicket, value: JsonValue
    ) -> RunHandle:
        """Durable stores: the body is not here, so the resume is committed ``Queued`` (with
        its value and ticket) for a serving runtime that has the body."""
        supervisor = self.supervisor
        result = await supervisor.commit_queued_resume(record, ticket, value)
        if isinstance(result, Rejected):
            latest = await self.load(record.run_id)
            self._check_ticket(latest, ticket.correlation_id)
            raise NotAwaiting(record.run_id, latest.state)
        supervisor.wake_servers()
        return self.remote_handle(
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
            now = self.supervisor.now()
            if now > ticket.deadline:
                raise TicketExpired(record.run_id, ticket.correlation_id, ticket.deadline, now)
        return ticket


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


def _stored_form(command: LiveCommand) -> tuple[CommandKind, JsonValue, str | None]:
    if isinstance(command, Cancel):
        return "cancel", None, command.reason
    if isinstance(command, Pause):
        return "pause", None, None
    if isinstance(command, Wake):
        return "wake", None, command.reason
    assert isinstance(command, Message)
    return "message", command.payload, None
