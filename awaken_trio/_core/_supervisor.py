"""The supervisor: admissions, the active-attempt registry and the finish boundary.

The supervisor is the only writer of committed state. It admits attempts (commits
``Running`` or ``Queued`` and spawns the actor), commits their progress, and ends them at
the finish boundary: one commit that, in the same step, deregisters the attempt, frees its
thread and releases everyone waiting for it. It owns the nursery the top-level actors live
in; only runtime shutdown cancels that nursery, never the code that opened the runtime.

Two rules keep every committed state backed by an actor. An admission reserves its place
in the nursery before it commits, and a nursery closes only after the admissions under way
have spawned (`Attempt.close_children`, `Supervisor.host_actors`). And the finish boundary
never raises: whatever fails on the way (the clock, the store, a child's commit), the
attempt is let go and every waiter is answered.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, NoReturn, final

import attrs
import trio
from trio_util import RepeatedEvent

from ._actor import run_attempt
from ._admission import Admission
from ._attempt import (
    HAND_BACK,
    HANDED_BACK_WITH_PARENT,
    SHUTDOWN,
    Attempt,
    Body,
    EndRequest,
    OwnershipVerifier,
    ParkedChild,
    lost,
)
from ._commits import CommitMailbox
from ._errors import (
    InvalidArgument,
    NotActive,
    RunAlreadyEnded,
    RunExists,
    RuntimeClosed,
    StoreError,
)
from ._host import Claims, ClaimSettings, HeardEnd, ServedRun, Watched
from ._json import DEFAULT_MAX_PAYLOAD_BYTES, FrozenDict, JsonValue, check_payload, freeze_detail
from ._registry import AttemptRegistry, ThreadGate
from ._spec import RunSpec
from ._state import (
    Awaiting,
    Ended,
    EventKind,
    Queued,
    ResumeTicket,
    Running,
    RunRecord,
    RunState,
    wake_at,
)
from ._storage import (
    UNSET,
    Accepted,
    Claim,
    Commit,
    CommitResult,
    DescendantsEnd,
    DurableStore,
    EventDraft,
    Expect,
    Fence,
    NewRun,
    Rejected,
    RejectReason,
    Store,
    StoredCommand,
    read_store,
)
from ._stored import StoredCommandLoads
from ._util import safe_repr
from ._validate import check_body, check_id
from ._verdict import (
    HANDED_BACK,
    QUEUED,
    CommitFailed,
    Committed,
    Lost,
    Settlement,
    Verdict,
)

if TYPE_CHECKING:
    from ._handle import RunHandle
    from ._observe import AttemptObserver

Clock = Callable[[], float]
VerifierFactory = Callable[[str, str, int], OwnershipVerifier | None]
HandleFactory = Callable[[Attempt], "RunHandle"]


_DETAIL_START = freeze_detail({"source": "start"}, "detail")
_DETAIL_THREAD_FREE = freeze_detail({"source": "thread_free"}, "detail")
_DETAIL_BOUNDARY = freeze_detail({"source": "boundary"}, "detail")
_DETAIL_SUBMIT = freeze_detail({"source": "submit"}, "detail")
_DETAIL_FORK = freeze_detail({"source": "fork"}, "detail")
_DETAIL_SERVED = freeze_detail({"source": "serve"}, "detail")
_DETAIL_SCHEDULED = freeze_detail({"source": "scheduled"}, "detail")
_DETAIL_RECOVERED = freeze_detail({"source": "recovery"}, "detail")
_DETAIL_TAKEN_BACK = freeze_detail({"source": "taken_back"}, "detail")
_TAKEN_IF_A_CHILD = (RejectReason.EXISTS, RejectReason.ENDED)
_RUNNING = tuple(Running(generation) for generation in range(17))  # shared, frozen

# Built by their own __init__: the objects made on every run's path (its attempt, its
# admission, its two commits) are made as ``obj = object.__new__(C); C.__init__(obj, ...)``
# rather than ``C(...)``. In CPython 3.11 a class called with keyword arguments packs them
# into a dict and unpacks it again for ``__init__`` (``type.__call__`` has no vectorcall),
# which costs as much as the ``__init__`` of a dozen fields itself; calling ``__init__``
# passes them as they are. The instance is the same (none of these classes has a
# ``__new__``); with the same done for its spec and its memory-store row, a trivial run
# executes 5% fewer instructions (benchmarks/bench_instructions.py).


# Fenced commits: an attempt that lost its claim (logger "awaken_trio"; the run id in extra).
logger = logging.getLogger("awaken_trio")
_DEFAULT_POLL = 0.05
_EXPECT_NEW = Expect(new=True)
_EXPECT_RUNNING = tuple(Expect(generation=g, state=Running) for g in range(17))


def running(generation: int) -> RunState:
    return _RUNNING[generation] if generation < len(_RUNNING) else Running(generation)


def expect_running(generation: int) -> Expect:
    """The fence of a commit by the attempt of ``generation`` (shared for small ones)."""
    if generation < len(_EXPECT_RUNNING):
        return _EXPECT_RUNNING[generation]
    return Expect(generation=generation, state=Running)


@final
class Supervisor:
    """Owns the registry, the thread gate and every commit (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        mailbox: CommitMailbox,
        clock: Clock,
        verifier_factory: VerifierFactory | None,
        claims: Claims,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.store = store
        # The most characters of compact JSON text any one payload may take.
        self.max_payload_bytes = max_payload_bytes
        # The claims this runtime holds (a no-op book on a store without claims).
        self.claim_book = claims
        # Set on a durable store: root attempts are claimed and every commit is fenced.
        self.claims: ClaimSettings | None = claims.settings
        self.durable_store: DurableStore | None = (
            store if self.claims is not None and isinstance(store, DurableStore) else None
        )
        self._command_loads: StoredCommandLoads | None = None  # made on first use
        # Bodies by name (`register`): what lets a run be submitted, served and recovered.
        self.named: dict[str, Body] = {}
        # Set whenever the store may have changed elsewhere (durable stores: polled), so
        # waiters on other runtimes' doings look again.
        self.store_changed = RepeatedEvent()
        # Told about every scheduled resume (``ctx.sleep``) an attempt here commits.
        self.on_scheduled: Callable[[float, str, str], None] | None = None
        self.mailbox = mailbox
        self.clock = clock
        self.verifier_factory = verifier_factory
        self.registry = AttemptRegistry()
        self.gate = ThreadGate()
        self.queued: dict[str, Attempt] = {}
        # The bodies of runs committed Awaiting here, for their resume.
        self.bodies: dict[str, Body] = {}
        # Messages of attempts whose last commit failed: discarded, with an event, by
        # whichever commit ends the run later, so an accepted message never vanishes.
        self.stranded: dict[str, tuple[JsonValue, ...]] = {}
        self.shutdown_request: EndRequest | None = None
        self.interrupt: BaseException | None = None
        self.make_handle: HandleFactory | None = None
        # A handle on a run that has no attempt here and holds its state (a child taken
        # back ended or awaiting).
        self.make_settled_handle: Callable[[RunRecord], RunHandle] | None = None
        # Told of every attempt that starts here (tracing); None costs one test per attempt.
        self.observer: AttemptObserver | None = None
        self._actors: trio.Nursery | None = None
        self._system_scope: trio.CancelScope | None = None
        # Shutdown has begun: every actor's scope is being cancelled.
        self.closing = False
        self._admitting = 0
        self._admissions_closed = trio.Event()
        self._last_at = 0.0
        self.actors_done = trio.Event()
        mailbox.on_interrupt = self.interrupted
        # The checkpoint of a call that commits next. Through the mailbox, the commit's wait
        # is the schedule point (the task sleeps until its answer), so only the cancel point
        # is taken before it, which saves a trip through the scheduler; an inline commit
        # yields nowhere, so the checkpoint is a full one. (The mailbox's mode is fixed.)
        self.checkpoint_before_commit: Callable[[], Awaitable[None]] = (
            trio.lowlevel.checkpoint if mailbox.inline else trio.lowlevel.checkpoint_if_cancelled
        )
        # The commit effects, bound once: each commit's partial holds no method of its own.
        self._admitted_effect = self._admitted
        self._ended_effect = self._ended

    # ------------------------------------------------------------------ the clock

    def now(self) -> float:
        """The runtime clock, checked. Admissions read it before they take anything, so a
        clock that fails leaves nothing behind."""
        at = self.clock()
        if type(at) is not float:
            if type(at) is not int:
                raise InvalidArgument(
                    f"the runtime's clock returned {safe_repr(at)}; it must return wall-clock"
                    " seconds as a float (time.time() scale)"
                )
            at = float(at)
        if not math.isfinite(at):
            raise InvalidArgument(f"the runtime's clock returned {at!r}; it must be finite")
        self._last_at = at
        return at

    def now_for_end(self) -> tuple[float, str | None]:
        """The clock for a commit that must land anyway: on failure, the last good reading
        and what went wrong (a KeyboardInterrupt from the clock shuts the runtime down)."""
        try:
            return self.now(), None
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                self.interrupted(exc)
            elif isinstance(exc, trio.Cancelled):  # pragma: no cover - the clock is sync
                raise
            return self._last_at, f"the clock failed: {safe_repr(exc)}"

    # ------------------------------------------------------------------ admissions

    async def start_run(self, spec: RunSpec) -> RunHandle:
        """Commit a new run and start (or queue) its first attempt; for a child whose run
        id its parent's run already has (rule 22), take that child back instead."""
        attempt = await self._begin(spec)
        if isinstance(attempt, Rejected):
            # (A run that exists is refused ENDED if it has ended, EXISTS otherwise.)
            if spec.parent is None or attempt.reason not in _TAKEN_IF_A_CHILD:
                raise RunExists(spec.run_id)
            return await self._take_back(spec, spec.parent)
        assert self.make_handle is not None
        return self.make_handle(attempt)

    async def begin_run(
        self,
        spec: RunSpec,
        *,
        checkpoint: JsonValue = None,
        forked_from: JsonValue = None,
        detail: FrozenDict = _DETAIL_START,
    ) -> Attempt:
        """`start_run`, returning the first attempt itself rather than a handle to it.

        A fork (``forked_from``) starts from ``checkpoint``, its source's.

        Raises:
            RunExists: the store holds a run of that id.
        """
        attempt = await self._begin(
            spec, checkpoint=checkpoint, forked_from=forked_from, detail=detail
        )
        if isinstance(attempt, Rejected):
            raise RunExists(spec.run_id)
        return attempt

    async def _begin(
        self,
        spec: RunSpec,
        *,
        checkpoint: JsonValue = None,
        forked_from: JsonValue = None,
        detail: FrozenDict = _DETAIL_START,
    ) -> Attempt | Rejected:
        await self.checkpoint_before_commit()
        parent = spec.parent
        if spec.name is None and parent is None and self.named:
            # A run started with a registered body carries its name (what lets it be
            # recovered, resumed and forked by name).
            name = self.name_of(spec.body)
            if name is not None:
                spec = attrs.evolve(spec, name=name)
        attempt = self.new_attempt(spec, generation=1, steps=0, checkpoint=checkpoint)
        new_run = NewRun(
            spec.thread_id,
            None if parent is None else parent.run_id,
            spec.name,
            spec.input,
            spec.max_steps,
            attempt.root_run_id,
            checkpoint,
            forked_from,
        )
        admission = object.__new__(Admission)  # (see "Built by their own __init__")
        Admission.__init__(
            admission, attempt=attempt, expect=_EXPECT_NEW, detail=detail, new_run=new_run
        )
        result = await self.admit(admission)
        return result if isinstance(result, Rejected) else attempt

    async def _take_back(self, spec: RunSpec, parent: Attempt) -> RunHandle:
        """Rule 22: ``parent``'s run already has a child of ``spec.run_id`` (an earlier
        attempt of the parent started it, and it was handed back with that attempt, or it
        ended): a child of this run with the same input is taken back rather than refused.
        An ended one answers its end, an awaiting one keeps its ticket (and is ended with
        this attempt, as its own parked children are), a queued one starts its next
        attempt here, under ``parent``; one this attempt already runs is that attempt.

        Raises:
            RunExists: the id is not a child of this run, or it was started with another
                input, or another attempt of it runs.
            NotActive: ``parent``'s attempt has begun to end.
        """
        assert self.make_handle is not None
        assert self.make_settled_handle is not None
        run_id = spec.run_id
        # A run moves on only a few times (queued, then running or ended), so a look that
        # keeps finding it moved means something else is wrong: it is refused then.
        for _ in range(4):
            here = self._attempt_here(run_id)
            if here is not None:
                if here.parent is parent:
                    return self.make_handle(here)
                raise RunExists(run_id, f"another attempt of run {run_id!r} runs here")
            record = await read_store(self.store.load(run_id), f"run {run_id!r}")
            if record is None or record.parent_run_id != parent.run_id:
                raise RunExists(
                    run_id,
                    f"run {run_id!r} exists and is not a child of run {parent.run_id!r}:"
                    " give the child a run id of its own",
                )
            if record.input != spec.input:
                raise RunExists(
                    run_id,
                    f"run {run_id!r} is a child of run {parent.run_id!r} started with another"
                    " input; a child is taken back only with the input it was started with",
                )
            state = record.state
            if isinstance(state, Ended):
                return self.make_settled_handle(record)
            if isinstance(state, Awaiting):
                if parent.phase != "running":
                    raise self._refusal_of_child(parent, run_id)
                # This attempt's now: resumed through it, ended with it.
                parent.add_child(run_id, ParkedChild(record.generation))
                self.bodies[run_id] = spec.body
                wake = wake_at(state.ticket)
                if wake is not None and self.on_scheduled is not None:
                    self.on_scheduled(wake, run_id, state.ticket.correlation_id)
                return self.make_settled_handle(record)
            if isinstance(state, Queued):
                attempt = self.stored_attempt(record, spec.body, parent=parent)
                result = await self.admit(
                    Admission(
                        attempt=attempt,
                        expect=Expect(generation=record.generation, state=Queued),
                        detail=_DETAIL_TAKEN_BACK,
                        # The answer a resume left for it, if it had one.
                        take_handover=True,
                    )
                )
                if isinstance(result, Accepted):
                    return self.make_handle(attempt)
                if result.reason is RejectReason.FENCED:
                    await self._refused(parent, result, "taking back a child")
                continue  # it moved on meanwhile (ended elsewhere): look again
            break
        raise RunExists(
            run_id,
            f"run {run_id!r} is a child of run {parent.run_id!r} that another attempt runs;"
            " it can be taken back once that attempt has stopped",
        )

    def new_attempt(
        self,
        spec: RunSpec,
        *,
        generation: int,
        steps: int,
        checkpoint: JsonValue,
        resume_value: JsonValue = None,
        ticket: ResumeTicket | None = None,
    ) -> Attempt:
        """The attempt ``generation`` of the run ``spec`` describes (not yet admitted)."""
        run_id, thread_id, parent = spec.run_id, spec.thread_id, spec.parent
        verifier = None
        if self.verifier_factory is not None:
            verifier = self.verifier_factory(run_id, thread_id, generation)
        attempt = object.__new__(Attempt)  # (see "Built by their own __init__")
        Attempt.__init__(
            attempt,
            run_id=run_id,
            thread_id=thread_id,
            generation=generation,
            parent=parent,
            body=spec.body,
            input=spec.input,
            checkpoint=checkpoint,
            resume_value=resume_value,
            max_steps=spec.max_steps,
            steps=steps,
            ticket=ticket,
            verifier=verifier,
            name=spec.name,
            # A child lives on its root's claim.
            root_run_id=run_id if parent is None else parent.root_run_id,
            fence=None if parent is None else parent.fence,
        )
        return attempt

    def stored_attempt(
        self,
        record: RunRecord,
        body: Body,
        *,
        parent: Attempt | None = None,
        resume_value: JsonValue = None,
        ticket: ResumeTicket | None = None,
    ) -> Attempt:
        """The next attempt (generation + 1) of a run the store holds, from its record."""
        spec = RunSpec(
            body=body,
            input=record.input,
            run_id=record.run_id,
            thread_id=record.thread_id,
            name=record.name,
            max_steps=record.max_steps,
            parent=parent,
        )
        return self.new_attempt(
            spec,
            generation=record.generation + 1,
            steps=record.steps,
            checkpoint=record.checkpoint,
            resume_value=resume_value,
            ticket=ticket,
        )

    def checked_input(self, input: JsonValue, run_id: str) -> JsonValue:
        return check_payload(input, f"input of run {run_id!r}", self.max_payload_bytes)

    async def commit_queued_run(
        self, run_id: str, new_run: NewRun, source: Literal["submit", "fork"]
    ) -> CommitResult:
        """Create the run ``Queued`` for any serving runtime that has its body by name
        (`Runtime.submit`, or a fork whose body is not here)."""
        return await self.mailbox.commit(
            Commit(
                run_id=run_id,
                state=QUEUED,
                generation=0,
                expect=_EXPECT_NEW,
                at=self.now(),
                new_run=new_run,
                detail=_DETAIL_SUBMIT if source == "submit" else _DETAIL_FORK,
            )
        )

    async def commit_queued_resume(
        self, record: RunRecord, ticket: ResumeTicket, value: JsonValue
    ) -> CommitResult:
        """Answer the awaiting run's ticket by committing it ``Queued`` with ``value``, for
        a serving runtime that has its body (durable stores)."""
        return await self.mailbox.commit(
            Commit(
                run_id=record.run_id,
                state=QUEUED,
                generation=record.generation,
                expect=_expect_awaiting(record.generation, ticket),
                at=self.now(),
                resume_value=value,
                resume_ticket=ticket,
                detail=_resume_detail(ticket.correlation_id),
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
        attempt = self.stored_attempt(
            record, body, parent=parent, resume_value=value, ticket=ticket
        )
        expect = _expect_awaiting(record.generation, ticket)
        detail = _resume_detail(ticket.correlation_id)
        result = await self.admit(Admission(attempt=attempt, expect=expect, detail=detail))
        return result if isinstance(result, Rejected) else attempt

    @property
    def poll_interval(self) -> float:
        return _DEFAULT_POLL if self.claims is None else self.claims.poll

    def register(self, name: str, body: Body) -> None:
        """Give ``body`` a name runs can be submitted, served and recovered by."""
        check_id(name, "a body's name")
        check_body(body)
        known = self.named.get(name)
        if known is not None and not _same_body(known, body):
            raise InvalidArgument(
                f"the name {name!r} is registered for another body ({safe_repr(known)});"
                " register each body under a name of its own"
            )
        self.named[name] = body

    # ------------------------------------------------------------------ other runtimes

    def lose(self, run_id: str, why: str) -> bool:
        """This runtime's claim on the root run is lost: its attempt (and every child of
        it) stops at once and commits nothing. False when there was no attempt to stop."""
        self.claim_book.forget(run_id)
        attempt = self.registry.get(run_id) or self.queued.get(run_id)
        if attempt is None or attempt.phase == "sealed":
            return False
        attempt.request_end(lost(why, claim_lost=True))
        return True

    def lose_attempt(self, attempt: Attempt, why: str) -> None:
        """A commit of ``attempt`` was fenced: its whole tree has lost the root's claim."""
        root = attempt
        while root.parent is not None:
            root = root.parent
        self.lose(root.run_id, why)

    # ------------------------------------------------------------------ serving (ServingHost)

    def names(self) -> list[str]:
        return list(self.named)

    def changed_event(self) -> trio.Event:
        return self.mailbox.changed_event()

    def thread_taken(self, thread_id: str) -> bool:
        return self.gate.holder(thread_id) is not None

    def watched(self) -> Watched:
        return Watched(
            tuple(a for a in (*self.registry.all(), *self.queued.values()) if a.phase != "sealed")
        )

    def _attempt_here(self, run_id: str) -> Attempt | None:
        """The run's attempt here that control may still reach: running, or waiting for
        its thread."""
        attempt = self.registry.get(run_id) or self.queued.get(run_id)
        return None if attempt is None or attempt.phase == "sealed" else attempt

    def apply_stored(self, command: StoredCommand) -> None:
        attempt = self._attempt_here(command.run_id)
        if attempt is not None:
            attempt.apply_stored(command.id, command.kind, command.payload, command.reason)

    def ended_elsewhere(self, run_id: str, state: Ended) -> None:
        attempt = self.registry.get(run_id)
        if attempt is not None and attempt.phase != "sealed":
            # The store holds the truth: the attempt commits nothing; then it lets its
            # claim go, which frees the run's thread.
            attempt.request_end(lost(f"the run was ended elsewhere: {state!r}", claim_lost=False))

    def heard_end(self, end: HeardEnd) -> None:
        attempt = self.registry.get(end.run_id)
        # The end was committed against the attempt whose claim epoch the run was marked
        # live with; an attempt here under another claim, or admitted after the end's
        # commit (a later run of the same id), is not the one it ended.
        if (
            attempt is not None
            and attempt.fence is not None
            and attempt.fence.epoch == end.epoch
            and attempt.start_seq <= end.after_seq
        ):
            self.ended_elsewhere(end.run_id, end.state)

    async def start_stored(self, record: RunRecord, *, fence: Fence | None) -> ServedRun | None:
        """Start an attempt of a root run found in the store (serving): queued, due for its
        scheduled resume, or recovered from a lost owner (``fence``: the claim recovery
        took for it). None if it is not this runtime's to start after all: no body here,
        another runtime took it first, or its thread is busy elsewhere."""
        body = self.body_for(record.run_id, record.name)
        state = record.state
        if body is None:
            await self._drop_recovered(record.run_id, fence)
            return None
        ticket = None
        if fence is not None:
            expect = Expect(generation=record.generation, state=Running)
            detail = _DETAIL_RECOVERED
        elif isinstance(state, Awaiting):
            ticket = state.ticket
            expect = _expect_awaiting(record.generation, ticket)
            detail = _DETAIL_SCHEDULED
        else:
            expect = Expect(generation=record.generation, state=Queued)
            detail = _DETAIL_SERVED
        attempt = self.stored_attempt(record, body, ticket=ticket)
        admission = Admission(
            attempt=attempt,
            expect=expect,
            detail=detail,
            fence=fence,
            # A queued run, or a recovered one, is handed the answer the store keeps for it
            # (a scheduled resume answers its own ticket, with None).
            take_handover=ticket is None,
            when_busy_elsewhere="refuse",
        )
        result = await self.admit(admission)
        if isinstance(result, Rejected) or not attempt.started:
            if (
                fence is not None
                and isinstance(result, Rejected)
                and result.reason is RejectReason.THREAD_BUSY
            ):
                await self._queue_recovered(record, fence)
            else:
                await self._drop_recovered(record.run_id, fence)
            return None
        return attempt

    async def _queue_recovered(self, record: RunRecord, fence: Fence) -> None:
        """A run recovered onto a thread another run's attempt holds: it waits ``Queued``
        (its claim released) and runs, generation + 1, when the thread frees."""
        with trio.CancelScope(shield=True), contextlib.suppress(StoreError, RuntimeClosed):
            await self.mailbox.commit(
                Commit(
                    run_id=record.run_id,
                    state=Queued(),
                    generation=record.generation,
                    expect=Expect(generation=record.generation, state=Running),
                    at=self.now_for_end()[0],
                    detail=_DETAIL_RECOVERED,
                    fence=fence,
                    release=True,
                )
            )

    async def _drop_recovered(self, run_id: str, fence: Fence | None) -> None:
        # A claim recovery took for a run that cannot start here goes back at once.
        if fence is not None and self.claims is not None:
            await self.claim_book.release(run_id)

    async def load_commands(self, attempt: Attempt) -> None:
        """Durable stores: commands stored for the run before this attempt began (sent
        while it was queued, or to a lost attempt) apply to it as they would have, before
        its body runs: a cancel ends it first, a pause pauses it at its first boundary,
        messages reach that boundary; a wake had no attempt to wake and is dropped."""
        store = self.durable_store
        if store is None or not attempt.commands_before:
            return  # its own admission created the run: nothing can be stored before it
        loads = self._command_loads
        if loads is None:
            loads = self._command_loads = StoredCommandLoads(store)
        await loads.load(attempt)  # with the other attempts beginning now, in one read

    async def changed(self, local: trio.Event, *, interval: float | None = None) -> bool:
        """Wait until something may have changed: a commit here or, on a durable store, a
        change made by another runtime (`store_changed_elsewhere` sets ``local`` too), an
        event the caller took from the mailbox before it looked; at most ``interval``
        seconds (on a durable store by default one poll interval: a lapsed lease changes
        nothing in the store). True if something changed, False if the wait timed out.

        One event and no nursery of its own: a KeyboardInterrupt delivered while a caller
        waits here comes out as itself, not wrapped in a group."""
        if interval is None:
            interval = math.inf if self.claims is None else self.poll_interval
        with trio.move_on_after(interval):
            await local.wait()
            return True
        return False

    def store_changed_elsewhere(self) -> None:
        """Another runtime changed the store: wake everything that waits on it."""
        self.store_changed.set()
        self.mailbox.publish()

    def wake_servers(self) -> None:
        """Something may have become runnable: serving loops look again."""
        self.store_changed_elsewhere()

    def name_of(self, body: Body) -> str | None:
        """The name ``body`` is registered under, if any (the first, if several)."""
        for name, known in self.named.items():
            if _same_body(known, body):
                return name
        return None

    def body_for(self, run_id: str, name: str | None) -> Body | None:
        """The body to run a run with here: the one it awaits a resume with, or the one
        registered under its name."""
        body = self.bodies.get(run_id)
        if body is None and name is not None:
            body = self.named.get(name)
        return body

    def reserve(self, parent: Attempt | None) -> trio.Nursery | None:
        """A place for an actor: in the parent attempt's nursery, or the runtime's. None
        once that nursery has begun to close (the caller raises its own error)."""
        if parent is not None:
            return parent.admit_child()
        if self.closing or self._actors is None:
            return None
        self._admitting += 1
        return self._actors

    def _unreserve(self, parent: Attempt | None) -> None:
        if parent is not None:
            parent.child_admitted()
        else:
            self._admitting -= 1
            if self.closing:
                self._maybe_close_admissions()

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
        attempt, expect, new_run = admission.attempt, admission.expect, admission.new_run
        at = self.now()
        parent = attempt.parent
        nursery = self.reserve(parent)
        if nursery is None:
            raise self._refusal(attempt)
        run_id, thread_id, generation = attempt.run_id, attempt.thread_id, attempt.generation
        is_running = self.gate.try_acquire(thread_id, attempt)
        if is_running:
            state = running(generation)
            committed_generation = generation
            # Made Running by this very commit: no command can be stored for it before.
            attempt.commands_before = new_run is None
        else:
            attempt.gate_waiter = self.gate.enqueue(thread_id, attempt)
            attempt.queued_generation = committed_generation = generation - 1
            state = Queued()
        if admission.fence is not None:
            attempt.fence = admission.fence
        # The effect of the commit, in its step: a partial rather than a closure, as it lives
        # as long as the commit waits for the mailbox.
        on_commit = functools.partial(self._admitted_effect, admission)
        claims = self.claims
        commit = object.__new__(Commit)  # (see "Built by their own __init__")
        Commit.__init__(
            commit,
            run_id=run_id,
            state=state,
            generation=committed_generation,
            expect=expect,
            at=at,
            new_run=new_run,
            take_messages=is_running,
            # The answer is committed with the attempt it starts (or the Queued state it
            # waits in), so an attempt that replaces this one is handed it too.
            resume_value=attempt.resume_value,
            resume_ticket=attempt.ticket,
            detail=admission.detail,
        )
        if claims is not None and is_running:
            self._claim_fields(commit, attempt)
        try:
            # Applied here if the store needs no I/O (no coroutine for a call that never
            # yields), else through the mailbox: the same commit, effects and answer.
            result = self.mailbox.commit_now(commit, on_commit)
            if result is None:
                result = await self.mailbox.commit(commit, on_commit)
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
                queued = Commit(
                    run_id=run_id,
                    state=Queued(),
                    generation=generation - 1,
                    expect=expect,
                    at=at,
                    new_run=new_run,
                    resume_value=attempt.resume_value,
                    resume_ticket=attempt.ticket,
                    fence=None if parent is None else attempt.fence,
                    detail=admission.detail,
                )
                # The rejection gave our place on the thread back: take it again (or
                # queue for it) so no run of ours starts on it meanwhile.
                if not self.gate.try_acquire(thread_id, attempt):
                    attempt.gate_waiter = self.gate.enqueue(thread_id, attempt)
                result = await self.mailbox.commit(queued, on_commit)
            if isinstance(result, Accepted):
                # The actor is spawned by the admitting task, so its body starts only after
                # that task next yields: a cancel delivered before then is a pre-start
                # cancel. An inline commit never yielded, so this is still the commit's
                # step; through the mailbox the task spawns once it has its answer (its
                # wait cannot be interrupted, and the reservation holds the nursery).
                nursery.start_soon(run_attempt, self, attempt)
            return result
        except BaseException:
            if not attempt.started and run_id not in self.queued:
                self._free_thread(attempt)  # nothing was committed: give the thread back
            raise
        finally:
            self._unreserve(parent)

    def _admitted(self, admission: Admission, result: CommitResult) -> None:
        """The effect of an admission's commit: register the attempt (or queue it, if it
        was committed ``Queued``), or give its thread back if the store refused it."""
        attempt = admission.attempt
        if isinstance(result, Rejected):
            self._free_thread(attempt)
            return
        run_id = attempt.run_id
        attempt.start_seq = result.last_seq
        if attempt.queued_generation is None:  # committed Running
            attempt.started = True
            attempt.phase = "running"
            if result.taken_messages:
                attempt.carry(result.taken_messages)
            if result.taken_pause:
                attempt.pause_requested = True
            if admission.take_handover:
                attempt.resume_value = result.resume_value
                attempt.ticket = result.resume_ticket
            if self.claims is not None:  # (without claims there is nothing to hold)
                self._hold(attempt, result.epoch)
            self.registry.register(attempt)
            if self.observer is not None:
                attempt.span = self.observer.started(attempt)
        else:
            if attempt.phase == "admitting":  # not waiting on another runtime's thread
                attempt.phase = "queued"
            self.queued[run_id] = attempt
        if self.bodies:
            self.bodies.pop(run_id, None)
        if attempt.parent is not None:
            attempt.parent.add_child(run_id, attempt)

    def _claim_fields(self, commit: Commit, attempt: Attempt) -> None:
        """Durable stores: a root attempt takes its run's claim (unless it comes with one),
        a child commits under its root's; both start only on a thread no runtime uses.
        The claim names a lease duration: the store's clock decides when it ends."""
        claims = self.claims
        assert claims is not None
        if attempt.parent is None and attempt.fence is None:
            commit.claim = Claim(claims.owner, claims.lease)
        else:
            commit.fence = attempt.fence
        # Every attempt that starts checks its thread, a recovered one included: the
        # thread may have been taken while the run's owner was gone.
        commit.thread_guard = True

    def _hold(self, attempt: Attempt, epoch: int | None) -> None:
        if epoch is not None and self.claims is not None:
            attempt.fence = Fence(attempt.run_id, self.claims.owner, epoch)
        if attempt.parent is None and attempt.fence is not None:
            self.claim_book.hold(attempt.run_id, attempt.fence.epoch)

    def _refusal(self, attempt: Attempt) -> Exception:
        parent = attempt.parent
        if parent is None:
            return RuntimeClosed(
                "the runtime is shutting down and starts no new attempts;"
                " start runs inside the 'async with open_runtime()' block"
            )
        return self._refusal_of_child(parent, attempt.run_id)

    @staticmethod
    def _refusal_of_child(parent: Attempt, run_id: str) -> NotActive:
        return NotActive(
            parent.run_id,
            f"its attempt {parent.generation} has begun to end, so run {run_id!r}"
            " cannot be started or resumed as its child",
        )

    async def begin_queued(self, attempt: Attempt) -> bool:
        """The queued attempt got its thread: commit ``Running`` and register it.

        False if the thread is still busy in another runtime (durable stores): the attempt
        stays queued and tries again when the store changes.
        """
        assert attempt.queued_generation is not None
        busy = False

        def on_commit(result: CommitResult) -> None:
            nonlocal busy
            if isinstance(result, Rejected):
                if result.reason is RejectReason.THREAD_BUSY:
                    busy = True
                    return
                self.settle(attempt, _committed(result))
                return
            attempt.started = True
            attempt.phase = "running"
            attempt.carry(result.taken_messages)
            if result.taken_pause:
                attempt.pause_requested = True
            self._hold(attempt, result.epoch)
            self.queued.pop(attempt.run_id, None)
            self.registry.register(attempt)
            if self.observer is not None:
                attempt.span = self.observer.started(attempt)

        at, clock_error = self.now_for_end()
        commit = Commit(
            run_id=attempt.run_id,
            state=running(attempt.generation),
            generation=attempt.generation,
            expect=Expect(generation=attempt.queued_generation, state=Queued),
            at=at,
            take_messages=True,
            detail=_with_clock_error(_DETAIL_THREAD_FREE, clock_error),
        )
        if self.claims is not None:
            self._claim_fields(commit, attempt)
        try:
            await self.mailbox.commit(commit, on_commit)
        except (StoreError, RuntimeClosed) as exc:
            self.settle(attempt, CommitFailed.of(exc))
        return not busy

    async def commit_progress(self, attempt: Attempt, progress: JsonValue, steps: int) -> None:
        """Commit ``Running`` with new progress, fenced by the attempt's generation."""
        result = await self.mailbox.commit(
            Commit(
                run_id=attempt.run_id,
                state=running(attempt.generation),
                generation=attempt.generation,
                expect=expect_running(attempt.generation),
                at=self.now(),
                checkpoint=progress,
                steps=steps,
                detail=_DETAIL_BOUNDARY,
                fence=attempt.fence,
                consumed=attempt.take_consumed(),
            )
        )
        if isinstance(result, Rejected):
            await self._refused(attempt, result, "progress")
        attempt.checkpoint = progress

    async def hand_over(self, attempt: Attempt) -> list[JsonValue]:
        """The messages not yet read, for a boundary to return, when the store holds some
        of them (sent with ``send``): their receipt is committed first (its event lists
        them as ``received``), so each is either received or, if the run ends elsewhere
        before that commit, discarded by that end, never both. Received messages stay
        stored until the attempt's next commit consumes them: if the attempt is lost
        before it, the attempt that replaces it starts from the checkpoint taken before
        they were read and is handed them again. A run ended elsewhere or a lost claim
        cancels the attempt right here, with the messages left unread."""
        at = self.now()
        taken = attempt.take_messages()
        received = taken.stored_ids()
        consumed = attempt.take_consumed()
        try:
            result = await self.mailbox.commit(
                Commit(
                    run_id=attempt.run_id,
                    state=running(attempt.generation),
                    generation=attempt.generation,
                    expect=expect_running(attempt.generation),
                    at=at,
                    detail=freeze_detail(
                        {"source": "boundary", "received": list(taken.stored_messages())},
                        "detail",
                    ),
                    fence=attempt.fence,
                    consumed=consumed,
                    delivered=received,
                )
            )
            if isinstance(result, Rejected):
                await self._refused(attempt, result, "taking messages")
        except BaseException:
            attempt.put_back(taken)
            for command_id in consumed:
                attempt.consume(command_id)
            raise
        for command_id in received:
            attempt.consume(command_id)  # by the attempt's next commit
        return taken.messages()

    async def emit(self, attempt: Attempt, kind: str, detail: FrozenDict) -> None:
        """Commit a body's own event; no state changes. Fenced like any commit of the
        attempt, so an attempt that has lost its run commits nothing."""
        result = await self.mailbox.commit(
            Commit(
                run_id=attempt.run_id,
                state=running(attempt.generation),
                generation=attempt.generation,
                expect=expect_running(attempt.generation),
                at=self.now(),
                events=(EventDraft(kind, detail),),
                announce=False,
                fence=attempt.fence,
            )
        )
        if isinstance(result, Rejected):
            await self._refused(attempt, result, "an event")

    async def _refused(self, attempt: Attempt, result: Rejected, what: str) -> NoReturn:
        """A commit of a running attempt was refused. Its claim superseded or lapsed, or
        its run ended by another runtime (``cancel_run``/``stop_run`` from elsewhere, or
        its parent's end there): the attempt stops at once, the cancellation reaching the
        body right here (never a store error), and commits nothing more. Only a body that
        shields the call hears why instead; so does one whose run moved on otherwise."""
        if result.reason is RejectReason.FENCED:
            _fenced(attempt, what)
            self.lose_attempt(attempt, "its claim is no longer current (superseded or lapsed)")
            await trio.lowlevel.checkpoint()  # raises the cancellation just requested
        assert result.state is not None
        if isinstance(result.state, Ended):
            # What the relay does once it sees the end; this commit saw it first.
            why = f"the run was ended elsewhere: {result.state!r}"
            attempt.request_end(lost(why, claim_lost=False))
            await trio.lowlevel.checkpoint()
            raise RunAlreadyEnded(attempt.run_id, result.state)
        raise StoreError(
            f"{what} of run {attempt.run_id!r} attempt {attempt.generation} was fenced off:"
            f" the run moved on to {result.state!r}",
            outcome_unknown=False,
        )

    # ------------------------------------------------------------------ the finish boundary

    async def finish(self, attempt: Attempt, verdict: Verdict) -> None:
        """Commit the attempt's end, after ending its parked children. Never raises.

        The attempt's span (tracing) ends with it, whatever the commit did.
        """
        span = attempt.span
        if span is None:
            await self._finish(attempt, verdict)
            return
        try:
            for event in verdict.events:
                if event.kind == EventKind.LATE_RESULT_DISCARDED:
                    span.event("awaken.late_result", {})
            await self._finish(attempt, verdict)
        finally:
            span.ended(attempt.completion.state, verdict.detail)

    async def _finish(self, attempt: Attempt, verdict: Verdict) -> None:
        """`finish` itself.

        Nothing here can be interrupted: the children's commits run shielded and
        `CommitMailbox.commit` cannot be cancelled once called. If the store fails, the
        attempt is let go with its messages kept for whoever ends the run later. An attempt
        that lost its run (``verdict.state`` is None) commits nothing; on a durable store a
        root attempt's end drops its claim.
        """
        if attempt.children:
            await self._end_parked_children(attempt)
        attempt.phase = "sealed"
        if verdict.state is None:
            request = attempt.request
            lost = Lost(claim_kept=request is None or not request.claim_lost)
            self.settle(attempt, lost)
            if lost.claim_kept:
                await self._drop_claim(attempt)
            else:
                self.claim_book.forget(attempt.run_id)  # lapsed or taken: left for recovery
            return
        if isinstance(verdict.state, Queued) and not attempt.started:
            # Handed back at shutdown while it waited for its thread: the store holds it
            # Queued already, in its place in the queue.
            self.settle(attempt, HANDED_BACK)
            return
        # Messages the store holds (sent from anywhere) stay there: for the run's next
        # attempt, or for the messages_discarded event of its end.
        messages = tuple(attempt.unread_local()) if attempt.has_messages() else ()
        ending = isinstance(verdict.state, Ended)
        if attempt.started:
            expect = expect_running(attempt.generation)
            generation = attempt.generation
        else:
            assert attempt.queued_generation is not None
            expect = Expect(generation=attempt.queued_generation, state=Queued)
            generation = attempt.queued_generation
        at, clock_error = self.now_for_end()
        stranded = self.stranded.pop(attempt.run_id, ()) if self.stranded else ()
        commit = object.__new__(Commit)  # (see "Built by their own __init__")
        Commit.__init__(
            commit,
            run_id=attempt.run_id,
            state=verdict.state,
            generation=generation,
            expect=expect,
            at=at,
            result=verdict.result,
            checkpoint=attempt.suspension_checkpoint if not ending else UNSET,
            steps=attempt.steps if attempt.started else None,
            carried_messages=() if ending else (*stranded, *messages),
            # A pause the attempt could not honour (it ended at an await) waits for the
            # next attempt's first boundary, as its unread messages do.
            carried_pause=(
                attempt.pause_requested
                and isinstance(verdict.state, Awaiting)
                and verdict.state.ticket.reason != "manual_pause"
            ),
            discarded_messages=(*stranded, *messages) if ending else (),
            events=verdict.events,
            detail=verdict.detail
            if clock_error is None
            else _with_clock_error(verdict.detail, clock_error),
            # Children an earlier attempt handed back (rule 22) that this one did not take
            # back end with it, first; its own have all ended by now. Only a later attempt
            # of a durable run can have any.
            end_descendants=(
                "not_resumed"
                if attempt.generation > 1
                and self.claims is not None
                and not isinstance(verdict.state, Queued)
                else None
            ),
        )
        if self.claims is not None:
            commit.fence = attempt.fence
            commit.consumed = attempt.take_consumed()
            commit.release = attempt.parent is None and attempt.started
        # The span counts the messages this end discards that the runtime held; those only
        # the store holds (sent from another runtime, not yet relayed here) are added to
        # the terminal event by the store itself, and are not in this count.
        if attempt.span is not None and commit.discarded_messages:
            attempt.span.event(
                "awaken.messages_discarded", {"awaken.count": len(commit.discarded_messages)}
            )
        try:
            effect = functools.partial(self._ended_effect, attempt, verdict.state)
            result = self.mailbox.commit_now(commit, effect)  # as in `admit`
            if result is None:
                result = await self.mailbox.commit(commit, effect)
        except (StoreError, RuntimeClosed) as exc:
            self.settle(attempt, CommitFailed.of(exc, (*stranded, *messages)))
            return
        except Exception as exc:  # an effect of the commit failed: still answer everyone
            error = StoreError(f"ending run {attempt.run_id!r} failed: {exc!r}")
            self.settle(attempt, CommitFailed.of(error))
            return
        if verdict.error is not None and isinstance(result, Accepted):
            _log_failure(attempt, verdict.error)
        if isinstance(result, Rejected) and result.reason is RejectReason.FENCED:
            _fenced(attempt, "its end")
            self.claim_book.forget(attempt.run_id)  # another runtime's claim now: hands off
        elif self.claims is not None and (isinstance(result, Rejected) or not commit.release):
            await self._drop_claim(attempt)
        elif commit.release:
            self.claim_book.forget(attempt.run_id)

    def _ended(self, attempt: Attempt, state: RunState, result: CommitResult) -> None:
        """The effect of an attempt's end commit (``state``): it is let go, and its waiters
        are answered."""
        if isinstance(result, Rejected) and result.reason is RejectReason.FENCED:
            # The claim is no longer ours: another runtime holds the truth now.
            self.settle(attempt, _LOST_CLAIM)
        elif isinstance(state, Queued) and isinstance(result, Accepted):
            # Handed back for another runtime at shutdown.
            self.settle(attempt, HANDED_BACK)
        else:
            assert result.state is not None
            self.settle(attempt, Committed(result.state))

    async def _drop_claim(self, attempt: Attempt) -> None:
        """A root attempt on a durable store is over: let its claim go (best effort: if the
        store cannot be reached, the lease lapses on its own)."""
        if self.claims is None or attempt.parent is not None:
            return
        if attempt.fence is None:
            self.claim_book.forget(attempt.run_id)
            return
        await self.claim_book.release(attempt.run_id)

    async def _end_parked_children(self, attempt: Attempt) -> None:
        assert attempt.children is not None
        if attempt.request is not None and attempt.request.disposition != "end":
            # Handed back or lost: the awaiting children stay as the store holds them,
            # for the parent's next attempt to take back (rule 22); a run ended elsewhere
            # has had its tree ended with it.
            return
        parked = [
            (child_id, child.generation)
            for child_id, child in attempt.children.entries.items()
            if isinstance(child, ParkedChild)
        ]
        if not parked:
            return
        if attempt.request is not None:
            request = attempt.request.for_child(attempt.run_id)
        else:
            request = self.shutdown_request or EndRequest.parent_ended(attempt.run_id)
        with trio.CancelScope(shield=True):
            for child_id, generation in parked:
                # A store failure leaves the child Awaiting; it can never be resumed without
                # its parent's attempt, and cancel_run/stop_run still end it.
                with contextlib.suppress(StoreError, RuntimeClosed):
                    await self.commit_end(child_id, generation, Awaiting, request)
                attempt.children.entries.pop(child_id, None)

    def settle(self, attempt: Attempt, how: Settlement) -> None:
        """Let the attempt go as ``how`` says, in one step: it is deregistered, its thread
        freed, its parent's child map updated, and every waiter answered (with its
        committed state, the store's truth to follow, or the store's error).

        A failed commit (`CommitFailed`) leaves the run its last committed state (an
        orphaned ``Running`` or ``Queued`` that ``cancel_run``/``stop_run`` can end later,
        discarding the kept messages with an event). On a durable store a root attempt's
        claim is then no longer renewed: nothing runs the run here any more, so its lease
        lapses and recovery takes the run up again, as for any lost owner.
        """
        if type(how) is Committed:
            state = how.state
            self._let_go(attempt, state)
            if isinstance(state, Awaiting):
                self.bodies[attempt.run_id] = attempt.body
                wake = wake_at(state.ticket)
                if wake is not None and self.on_scheduled is not None:
                    self.on_scheduled(wake, attempt.run_id, state.ticket.correlation_id)
            attempt.completion.set(state)
            return
        if type(how) is CommitFailed:
            if self.claims is not None and attempt.parent is None:
                self.claim_book.forget(attempt.run_id)
            if how.messages:
                self.stranded[attempt.run_id] = how.messages
            self._let_go(attempt, None)
            logger.error(
                "run %r attempt %d could not be committed: %s"
                " (the run keeps its last committed state)",
                attempt.run_id,
                attempt.generation,
                how.error,
                extra={"run_id": attempt.run_id},
            )
            attempt.completion.fail(how.error)
            return
        # Lost or handed back: no state of its own.
        self._let_go(attempt, None)
        attempt.completion.defer_to_store()

    def _let_go(self, attempt: Attempt, state: RunState | None) -> None:
        attempt.phase = "sealed"
        self.registry.deregister(attempt)
        self._free_thread(attempt)
        run_id = attempt.run_id
        if self.queued.get(run_id) is attempt:
            del self.queued[run_id]
        parent = attempt.parent
        siblings = None if parent is None or parent.children is None else parent.children.entries
        if siblings is not None and siblings.get(run_id) is attempt:
            if isinstance(state, Awaiting):
                # Still the parent's, to be ended with it.
                siblings[run_id] = ParkedChild(attempt.generation)
            else:
                del siblings[run_id]

    def _free_thread(self, attempt: Attempt) -> None:
        if attempt.gate_waiter is not None:
            self.gate.withdraw(attempt.gate_waiter)
        else:
            self.gate.free(attempt.thread_id, attempt)

    async def commit_end(
        self,
        run_id: str,
        generation: int,
        state: type[RunState],
        request: EndRequest,
        *,
        parent_run_id: str | None = None,
        end_descendants: DescendantsEnd | None = None,
    ) -> CommitResult:
        """End a run that has no attempt here (awaiting, or queued or orphaned elsewhere).

        Fenced by the generation and state kind that were read, so a run that moved on
        in the meantime is left alone (the result is then `Rejected`).
        """
        stranded = self.stranded.pop(run_id, ()) if self.stranded else ()

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Accepted):
                self.bodies.pop(run_id, None)
                parent = None if parent_run_id is None else self.registry.get(parent_run_id)
                children = None if parent is None else parent.children
                siblings = None if children is None else children.entries
                if siblings is not None and isinstance(siblings.get(run_id), ParkedChild):
                    del siblings[run_id]
            elif stranded:
                self.stranded[run_id] = stranded

        at, clock_error = self.now_for_end()
        try:
            return await self.mailbox.commit(
                Commit(
                    run_id=run_id,
                    state=Ended(request.cause),
                    generation=generation,
                    expect=Expect(generation=generation, state=state),
                    at=at,
                    discarded_messages=stranded,
                    detail=_with_clock_error(request.detail, clock_error),
                    end_descendants=end_descendants,
                ),
                on_commit,
            )
        except BaseException:
            if stranded:
                self.stranded[run_id] = stranded
            raise

    # ------------------------------------------------------------------ lifetime

    def actors_nursery(self) -> trio.Nursery:
        """The nursery for top-level actors; refuses once shutdown has begun."""
        if self.closing or self._actors is None:
            raise RuntimeClosed(
                "the runtime is shutting down and starts no new attempts;"
                " start runs inside the 'async with open_runtime()' block"
            )
        return self._actors

    def begin_shutdown(self) -> None:
        """Refuse new attempts, tell every attempt why it ends, and cancel every actor
        (sync: safe from any task). Telling each attempt first makes shutdown the cause
        it records, whatever request arrives while it unwinds."""
        if self.closing:
            return
        self.closing = True
        self.shutdown_request = SHUTDOWN
        for attempt in (*self.registry.all(), *self.queued.values()):
            attempt.request_end(self._leaving(attempt))
        if self._actors is not None:
            self._actors.cancel_scope.cancel(reason="runtime shutdown")
        self._maybe_close_admissions()

    def _leaving(self, attempt: Attempt) -> EndRequest:
        """Why ``attempt`` ends at shutdown. On a durable store a named root run goes back
        to Queued for another runtime, and its descendants with it (rule 22: its next
        attempt takes them back); anything else ends Stopped, children first."""
        root = attempt
        while root.parent is not None:
            root = root.parent
        if self.claims is None or not root.name:
            return SHUTDOWN
        return HAND_BACK if attempt.parent is None else HANDED_BACK_WITH_PARENT

    def interrupted(self, exc: BaseException) -> None:
        """A KeyboardInterrupt or SystemExit reached runtime code or a run's task: shut
        down, stop the block that opened the runtime, and raise it when the runtime closes."""
        if self.interrupt is None:
            self.interrupt = exc
        self.begin_shutdown()
        if self._system_scope is not None:
            self._system_scope.cancel(reason="interrupted")

    def _maybe_close_admissions(self) -> None:
        if self.closing and self._admitting == 0:
            self._admissions_closed.set()

    async def host_actors(
        self, system_scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]
    ) -> None:
        """Own the actors' nursery. Only shutdown cancels it, never the caller's scopes."""
        self._system_scope = system_scope
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as actors:
                    self._actors = actors
                    task_status.started()
                    # Stay open for admissions already under way; shutdown cancels the rest.
                    await self._admissions_closed.wait()
        finally:
            self.actors_done.set()
            self.mailbox.close()


def _fenced(attempt: Attempt, what: str) -> None:
    logger.warning(
        "run %r attempt %d: %s was fenced off (its claim is another runtime's now, or"
        " lapsed): the attempt commits nothing more here",
        attempt.run_id,
        attempt.generation,
        what,
        extra={"run_id": attempt.run_id},
    )


def _log_failure(attempt: Attempt, error: BaseException) -> None:
    """A body's error, once its run's ``Failed`` end is committed: never silent (DESIGN §3)."""
    logger.error(
        "run %r attempt %d failed: %s",
        attempt.run_id,
        attempt.generation,
        safe_repr(error),
        exc_info=error,
        extra={"run_id": attempt.run_id},
    )


_LOST_CLAIM = Lost(claim_kept=False)


def _committed(result: CommitResult) -> Committed:
    """An end the store answered: the state it committed, or the one it holds instead."""
    assert result.state is not None
    return Committed(result.state)


def _expect_awaiting(generation: int, ticket: ResumeTicket) -> Expect:
    """The fence of a commit that answers ``ticket`` of a run awaiting at ``generation``."""
    return Expect(generation=generation, state=Awaiting, correlation_id=ticket.correlation_id)


def _resume_detail(correlation_id: str) -> FrozenDict:
    return freeze_detail({"source": "resume", "correlation_id": correlation_id}, "detail")


def _with_clock_error(detail: FrozenDict, clock_error: str | None) -> FrozenDict:
    if clock_error is None:
        return detail
    return freeze_detail({**detail, "clock_error": clock_error}, "detail")


def _same_body(known: Body, body: Body) -> bool:
    # A bound method is a new object at every attribute access; it compares equal to
    # another for the same function and instance.
    if known is body:
        return True
    try:
        return bool(known == body)
    except Exception:
        return False
