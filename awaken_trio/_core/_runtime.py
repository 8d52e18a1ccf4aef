"""The Runtime facade (``awaken_trio._open`` composes it with a store and the worker)."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs
import trio

from ._attempt import Body, EndRequest
from ._commands import Cancel, LiveCommand, Message, Pause, Wake
from ._commits import CommitMailbox
from ._control import Control
from ._errors import (
    InvalidArgument,
    RuntimeClosed,
    UnknownRun,
)
from ._events import EventStream
from ._handle import RunHandle
from ._host import Serve
from ._json import JsonValue, check_payload
from ._operator import OperatorCalls
from ._policy import (
    NO_DEADLINES,
    Deadlines,
    RetryPolicy,
    check_deadlines,
    check_not_before,
    check_retry,
    refuse_not_before,
)
from ._spec import RunSpec
from ._state import (
    CANCELLED_CAUSE,
    CAUSE_KINDS,
    RunRecord,
    RunState,
    Stopped,
)
from ._storage import (
    STATE_KINDS,
    IfBusy,
    RunFilter,
    StreamingStore,
    read_store,
)
from ._streams import StreamReader, check_read
from ._supervisor import Supervisor
from ._util import NoPublicConstructor, safe_repr
from ._validate import check_body, check_id, check_if_busy

if TYPE_CHECKING:
    from ._kernel import Kernel

_COMMANDS = frozenset((Cancel, Pause, Wake, Message))


@final
class Runtime(OperatorCalls, metaclass=NoPublicConstructor):
    """Runs bodies as actors, one attempt at a time per thread. Get one from `open_runtime`."""

    _obtained_from = "open a runtime with 'async with open_runtime() as runtime'"

    def __init__(self, supervisor: Supervisor, serve: Serve) -> None:
        self._supervisor = supervisor
        self._kernel = supervisor.kernel
        self._admissions = supervisor.admissions
        # The decisions behind the methods: each method checks its arguments and makes one
        # call there (or to the supervisor's admissions).
        self._control = Control(supervisor)
        self._handle = self._control.handle
        # The serving loop (the worker's), given by whoever composed the runtime.
        self._serve = serve
        # Its tasks, scopes and events live in the trio.run that opened it, and only there.
        self._trio_token = trio.lowlevel.current_trio_token()

    def _in_own_run(self) -> None:
        _in_run(self._trio_token)

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
        timeout: float | None = None,  # noqa: ASYNC109 - the run's deadline, not this call's
        deadline: float | None = None,
        queue_timeout: float | None = None,
        not_before: float | None = None,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
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
            timeout: the run's deadline in seconds from now: it ends
                ``Stopped("deadline")`` then, in whatever state (`RunRecord.deadline`).
            deadline: the same as a wall-clock time (give one of the two).
            queue_timeout: seconds its first attempt may wait for its thread; it ends
                ``Stopped("queue_timeout")`` if it has not started by then.
            not_before: `submit`'s alone: refused here.
            if_busy: when another run on the thread is running or queued: ``"queue"``
                waits for it, ``"reject"`` raises `ThreadBusy`, ``"supersede"`` ends the
                thread's other unended runs ``Stopped("superseded")`` in the same commit
                (this run starts once the old attempt has stopped).
            retry: how the run is tried again when its body fails (`RetryPolicy`; the
                policy is stored with the run). A failed attempt with tries left commits a
                ``retry_scheduled`` event and waits ``Queued`` for its backoff, then runs
                again from its last checkpoint; ``wait()`` waits through the retries.

        Raises:
            RunExists: ``run_id`` is taken. ThreadBusy: ``if_busy="reject"`` on a busy
            thread. InvalidArgument, InvalidBody, InvalidPayload: a bad argument (nothing
            is committed). RuntimeClosed: the runtime is closing.
        """
        if not_before is not None:
            refuse_not_before(not_before, "start()")
        _in_run(self._trio_token)
        if _no_policy(timeout, deadline, queue_timeout, retry, if_busy):
            # The common start: no policy to check or carry.
            attempt = await self._admissions.start_root(
                body, input, run_id, thread_id, name, max_steps
            )
            return self._handle(attempt)
        spec = _root_spec(
            self._kernel,
            body,
            "start()",
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            if_busy=if_busy,
            limits=(timeout, deadline, queue_timeout),
            retry=retry,
        )
        return self._handle(await self._admissions.begin_run(spec))

    async def execute(
        self,
        body: Body,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        max_steps: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the run's deadline, not this call's
        deadline: float | None = None,
        queue_timeout: float | None = None,
        not_before: float | None = None,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
    ) -> RunState:
        """`start`, then wait: the committed state (``Awaiting`` or ``Ended``) of the attempt.

        The run belongs to the runtime, not to the caller: cancelling this call stops the
        waiting, not the run (use `deliver` or `cancel_run` for that).
        """
        if not_before is not None:
            refuse_not_before(not_before, "execute()")
        _in_run(self._trio_token)
        if _no_policy(timeout, deadline, queue_timeout, retry, if_busy):  # as in `start`
            return await self._control.execute_root(body, input, run_id, thread_id, name, max_steps)
        spec = _root_spec(
            self._kernel,
            body,
            "execute()",
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            if_busy=if_busy,
            limits=(timeout, deadline, queue_timeout),
            retry=retry,
        )
        return await self._control.execute(spec)

    # ------------------------------------------------------------------ durable runs

    def register(
        self,
        name: str,
        body: Body,
        *,
        version: str | None = None,
        compatible: tuple[str | None, ...] = (),
    ) -> None:
        """Register ``body`` under ``name`` (at ``version``): runs can then be submitted by
        that name, served and recovered here; a run started with it carries its name. A
        run's first attempt pins the version (`RunRecord.body_version`); a later attempt
        starts only with a body of that version or listing it in ``compatible``.

        Raises:
            InvalidArgument: the name is registered for another body or at another
                version, or is not a valid id; a bad version.
            InvalidBody: ``body`` is not an async callable.
        """
        self._kernel.register(name, body, version=version, compatible=compatible)

    @trio.lowlevel.enable_ki_protection
    async def submit(
        self,
        name: str,
        *,
        input: JsonValue = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the run's deadline, not this call's
        deadline: float | None = None,
        queue_timeout: float | None = None,
        not_before: float | None = None,
        if_busy: IfBusy = "queue",
        retry: RetryPolicy | None = None,
    ) -> RunHandle:
        """Commit a run ``Queued`` for any serving runtime that has a body named ``name``.

        Idempotent by run id: submitting an existing ``run_id`` with the same name, input
        and thread (``thread_id=None`` meaning the run's own) returns a handle to that run.
        The handle's ``wait()`` returns the first ``Awaiting`` or ``Ended`` the run commits
        after the handle was made, whichever runtime runs it (at once the end of a run
        that had already ended).

        ``not_before`` delays the start: the run is committed ``Queued`` now and no
        runtime starts it before that time (wall-clock seconds, the runtime's clock).
        Cancel and stop end it as any queued run. ``timeout``, ``deadline`` and
        ``queue_timeout`` are `start`'s (a queue timeout counts from now, not from
        ``not_before``); any serving runtime ends the run at them.

        ``if_busy`` and ``retry`` are as for `start` (a run waiting to retry is tried
        again by any serving runtime with its body); a repeated submit of the same run
        never supersedes nor is rejected.

        Raises:
            RunExists: ``run_id`` is taken by a different run.
            ThreadBusy: ``if_busy="reject"`` and another run on the thread is running or
                queued (nothing is committed).
            InvalidArgument: a bad argument (nothing is committed).
        """
        _in_run(self._trio_token)
        check_id(name, "name")
        if run_id is not None:
            check_id(run_id, "run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        if if_busy != "queue":
            check_if_busy(if_busy)
        what = f"submit() of {name!r}"
        check_retry(retry, what)
        when = check_not_before(not_before, what)
        limits = _limits(self._kernel, timeout, deadline, queue_timeout, what)
        return await self._control.submit(
            name,
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            not_before=when,
            limits=limits,
            if_busy=if_busy,
            retry=retry,
        )

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
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        if new_run_id is not None:
            check_id(new_run_id, "new_run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        if at is not None and (type(at) is not int or at < 1):
            raise InvalidArgument(
                f"at must be the seq of one of run {run_id!r}'s events (a positive int), not {at!r}"
            )
        return await self._control.fork(run_id, at=at, new_run_id=new_run_id, thread_id=thread_id)

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
        _in_run(self._trio_token)
        if type(ended_before) not in (int, float) or not ended_before >= 0:
            raise InvalidArgument(
                f"ended_before must be a number of seconds >= 0, not {safe_repr(ended_before)}"
            )
        return await self._control.prune(ended_before, dry_run=dry_run)

    async def serve(
        self,
        *,
        concurrency: int = 8,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Claim and run runs whose body is registered here, at most ``concurrency`` root
        attempts at once (children do not count): queued runs, due scheduled resumes, and
        on a durable store runs whose owner was lost (re-executed from their checkpoint,
        or ended if they can never run again). Returns when cancelled, or once drained
        (`drain_worker`: its runs finished); with ``await nursery.start(runtime.serve)``
        once it is claiming. On a durable store it keeps a worker row while it serves.
        """
        _in_run(self._trio_token)
        if type(concurrency) is not int or concurrency < 1:
            raise InvalidArgument(
                f"concurrency must be a positive int, not {safe_repr(concurrency)}"
            )
        if not self._kernel.named:
            raise InvalidArgument(
                "serve() has nothing to run: register bodies by name first"
                " (open_runtime(bodies=...) or runtime.register(name, body))"
            )
        self._admissions.actors_nursery()  # refuses once shutdown has begun
        await self._serve(self._supervisor.serving, concurrency, task_status=task_status)

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
        await self._control.send(command)

    @trio.lowlevel.enable_ki_protection
    def deliver(self, command: LiveCommand) -> None:
        """Deliver a live command to the run's active attempt in this process.

        Raises:
            NotActive: nothing controllable here (unknown, queued, awaiting, ended, or
                another process's). Read the committed state; see `NotActive`.
            InvalidArgument: not a `LiveCommand`.
        """
        self._check_command(command)
        self._control.deliver(command)

    @trio.lowlevel.enable_ki_protection
    async def deliver_to_current_attempt(self, command: LiveCommand) -> None:
        """Like `deliver`, but first ask the attempt's ownership verifier.

        The verifier (a durable claim check) runs outside the registry; afterwards the
        attempt must still be the registered generation, or the command is refused.
        """
        self._check_command(command)
        await self._control.deliver_to_current_attempt(command)

    def _check_command(self, command: LiveCommand) -> None:
        _in_run(self._trio_token)
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
                self._kernel.max_payload_bytes,
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
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        return await self._control.end_run(run_id, request, thread_id)

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
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        if correlation_id is not None:
            check_id(correlation_id, "correlation_id")
        value = check_payload(
            value, f"resume value for run {run_id!r}", self._kernel.max_payload_bytes
        )
        if body is not None:
            check_body(body)
        return await self._control.resume(run_id, value, correlation_id=correlation_id, body=body)

    # ------------------------------------------------------------------ reading

    async def state(self, run_id: str) -> RunState:
        """The run's committed state."""
        return (await self.record(run_id)).state

    async def record(self, run_id: str) -> RunRecord:
        """The run's committed record (its payloads are frozen)."""
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        return await self._control.load(run_id)

    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Committed records of the store's runs, newest first (the order they were
        created in), at most ``limit``.

        Args:
            state: only runs whose committed state is of this kind: ``"queued"``,
                ``"running"``, ``"awaiting"`` or ``"ended"``; or only ended runs whose
                cause is of this kind: ``"natural_end"``, ``"max_steps"``,
                ``"cancelled"``, ``"stopped"``, ``"failed"``, ``"indeterminate"``.
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
        if state is not None and state not in STATE_KINDS and state not in CAUSE_KINDS:
            raise InvalidArgument(
                f"unknown state {safe_repr(state)}; list runs by a state"
                f" ({', '.join(STATE_KINDS)}) or an end cause ({', '.join(CAUSE_KINDS)})"
            )
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        if name is not None:
            check_id(name, "name")
        if type(limit) is not int or limit < 1:
            raise InvalidArgument(f"limit must be a positive int, not {safe_repr(limit)}")
        if before is not None:
            check_id(before, "before")
        return await self._control.list_runs(
            state=state, thread_id=thread_id, name=name, limit=limit, before=before
        )

    def active_attempt_run_id(self, thread_id: str) -> str | None:
        """The run whose attempt is active on ``thread_id`` in this runtime, or None."""
        return self._control.active_attempt_run_id(thread_id)

    def events(
        self, run_id: str | None = None, *, after: int = 0, follow: bool = True
    ) -> EventStream:
        """Committed events, oldest first, from the first whose ``seq`` is greater than
        ``after``, then (``follow``) new ones as they commit.

        For one run, following ends after its terminal event; for all runs, when the
        runtime closes. An unknown ``run_id`` raises `UnknownRun` from the first step.
        One run's events include every one committed; on a store whose writers do not wait
        for each other (PostgreSQL, `SettlingStore`), all runs' events show a commit's
        once every transaction that numbered events before it has ended too.

        Raises:
            InvalidArgument: ``after`` is not an int >= 0.
        """
        _in_run(self._trio_token)
        if run_id is not None:
            check_id(run_id, "run_id")
        if type(after) is not int or after < 0:
            raise InvalidArgument(
                f"after must be the seq of an event, an int >= 0 (0: from the first), not"
                f" {safe_repr(after)}"
            )
        return EventStream._create(self._kernel, run_id, after=after, follow=follow)

    def read_stream(
        self, run_id: str, channel: str = "output", *, after: int = 0, follow: bool = True
    ) -> StreamReader:
        """A run's stream on ``channel``: its `StreamChunk` values from the first whose
        ``offset`` is greater than ``after``, in offset order, whichever runtime wrote them;
        with ``follow``, then new ones as they are committed, until the channel's ``"end"``
        chunk (the run's end). Without ``follow``, what is committed now.

        A ``"reset"`` chunk says a later attempt starts the channel's output over: drop
        what earlier attempts sent that you have not kept as final. An ended run's
        channel whose writer said ``keep=False`` keeps only its ``"end"`` chunk.

        Raises (from the iteration):
            UnknownRun: the store does not hold the run (never did, or it was pruned).
            StreamGap: the chunks after ``after`` are no longer kept (``.oldest`` is the
                oldest kept one after it).
            InvalidArgument: the run has ended without ever writing ``channel``.

        Raises (from the call):
            InvalidArgument: ``after`` is not an int >= 0, ``channel`` is not a channel
                name, or the store keeps no streams.
        """
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        check_read(run_id, channel, after, follow)
        store = self._streaming_store(f"read_stream() of run {run_id!r}")
        return StreamReader._create(
            self._kernel, store, run_id, channel, after=after, follow=follow
        )

    async def stream_channels(self, run_id: str) -> list[str]:
        """The channels of ``run_id``'s stream it has written so far, in the order of their
        first kept chunk (a channel whose chunks were not kept counts from its end chunk).

        Raises:
            UnknownRun: the store does not hold the run.
            InvalidArgument: the store keeps no streams.
        """
        _in_run(self._trio_token)
        check_id(run_id, "run_id")
        store = self._streaming_store(f"stream_channels() of run {run_id!r}")
        found = await read_store(store.stream_channels(run_id), f"the streams of run {run_id!r}")
        if found is None:
            raise UnknownRun(run_id)
        return found

    def _streaming_store(self, what: str) -> StreamingStore:
        store = self._kernel.store
        if not isinstance(store, StreamingStore):
            raise InvalidArgument(
                f"{what}: the store {safe_repr(store)} keeps no streams (it is not a"
                " StreamingStore); the memory, SQLite and PostgreSQL stores do"
            )
        return store


def _in_run(own: trio.lowlevel.TrioToken) -> None:
    """Refuse a call made outside the trio.run that opened the runtime (``own`` is its
    token): a runtime kept after its run ended, or handed to another thread's run."""
    try:
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:  # not in any trio.run
        token = None
    if token is not own:
        raise RuntimeClosed(
            "this runtime belongs to another trio.run (the one whose open_runtime()"
            " opened it, which may have ended); use a runtime only inside its"
            " 'async with open_runtime()' block, and open a runtime in each trio.run"
            " that needs one"
        )


def _limits(
    kernel: Kernel, timeout: object, deadline: object, queue_timeout: object, what: str
) -> Deadlines:
    """The time limits asked for, absolute by the runtime's clock; checked first."""
    if timeout is None and deadline is None and queue_timeout is None:
        return NO_DEADLINES
    return check_deadlines(
        timeout=timeout,
        deadline=deadline,
        queue_timeout=queue_timeout,
        now=kernel.now(),
        what=what,
    )


def _no_policy(
    timeout: object, deadline: object, queue_timeout: object, retry: object, if_busy: object
) -> bool:
    """Whether a start asks for no run policy (the common start, `Admissions.start_root`):
    no time limit, no retry policy, and the default busy-thread policy."""
    return (
        timeout is None
        and deadline is None
        and queue_timeout is None
        and retry is None
        and if_busy == "queue"
    )


def _root_spec(
    kernel: Kernel,
    body: Body,
    what: str,
    *,
    input: JsonValue,
    run_id: str | None,
    thread_id: str | None,
    name: str | None,
    max_steps: int | None,
    if_busy: IfBusy,
    limits: tuple[object, object, object],
    retry: RetryPolicy | None,
) -> RunSpec:
    """The checked spec of a root run `Runtime.start` or `Runtime.execute` (``what``)
    begins, with its time limits (``timeout``, ``deadline``, ``queue_timeout`` as given),
    checked first."""
    deadlines = _limits(kernel, *limits, what)
    spec = RunSpec.checked(
        body,
        input=input,
        run_id=run_id,
        thread_id=thread_id,
        name=name,
        max_steps=max_steps,
        parent=None,
        max_payload_bytes=kernel.max_payload_bytes,
        if_busy=if_busy,
        retry=retry,
    )
    return spec if deadlines is NO_DEADLINES else attrs.evolve(spec, deadlines=deadlines)


def request_end_here(runtime: Runtime, run_id: str, request: EndRequest) -> bool:
    """Ask the run's attempt here to end as ``request`` says, in this very step (what
    `Runtime.cancel_run` and `Runtime.stop_run` ask once they have yielded), for tools that
    place a request at an exact schedule point (``awaken_trio.testing``). False when no
    attempt of the run is here to ask."""
    attempt = runtime._kernel.attempt_here(run_id)
    if attempt is None:
        return False
    attempt.request_end(request)
    return True


async def start_kernel_services(services: trio.Nursery, runtime: Runtime) -> None:
    """The kernel's own background tasks, on every store: the timer of scheduled resumes
    (``ctx.sleep``), delayed starts, retries and time limits, and the stream flusher."""
    supervisor = runtime._supervisor
    await services.start(
        supervisor.scheduler.run,
        runtime._scheduled_resume,
        supervisor.kernel.store_changed_elsewhere,
        supervisor.expiry.expire,
        supervisor.retries.retry,
    )
    await services.start(runtime._supervisor.flusher.run)


@trio.lowlevel.enable_ki_protection
async def run_mailbox(mailbox: CommitMailbox, *, task_status: trio.TaskStatus[None]) -> None:
    """Run the commit mailbox until it is closed (after the last actor)."""
    # The mailbox must outlive every actor: only its close() ends it.
    with trio.CancelScope(shield=True):
        await mailbox.run(task_status=task_status)


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
