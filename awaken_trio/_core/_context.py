"""RunContext: the attempt's own view, handed to the body."""

from __future__ import annotations

import contextvars
import inspect
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, NoReturn, ParamSpec, TypeVar, final, overload

import trio

from ._attempt import Attempt, Body, StepCeiling, SuspendAttempt
from ._errors import ContextMisuse, InvalidArgument, NotActive, NotInRun
from ._journal import MISSING, Journal
from ._json import JsonValue, check_payload, freeze_detail
from ._policy import NO_DEADLINES, RetryPolicy, check_deadlines, refuse_not_before
from ._schema import check_schema
from ._spec import RunSpec
from ._state import Awaiting, EventKind, ResumeTicket, RunState
from ._storage import IfBusy
from ._streams import StreamOutbox, StreamWriter, check_channel
from ._util import NoPublicConstructor, safe_repr
from ._validate import check_deadline, check_id, is_async_callable

if TYPE_CHECKING:
    from ._handle import RunHandle
    from ._host import AttemptHost

_EVENT_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_RUNTIME_KINDS = frozenset(EventKind)

P = ParamSpec("P")
T = TypeVar("T")

# The context of the run whose body (or a task that body started, or a thread a sync step
# of it runs on) is running: Trio copies a task's context into the tasks it spawns, and
# `trio.to_thread.run_sync` into its thread. Set and reset by the run's actor. It is the
# one variable a run sets (each one set costs every parked run a token and a copy of the
# context's map): the attempt a task belongs to is its context's (`attempt_in`).
current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "awaken_trio_current_run", default=None
)


def attempt_in(context: contextvars.Context) -> Attempt | None:
    """The attempt a task whose context is ``context`` belongs to (its body's task, or a
    task that body started), or None."""
    ctx = context.get(current_run)
    return None if ctx is None else ctx._attempt


@final
class _ReturnedAwaitable:
    """What a sync step's function returned instead of a value: an awaitable (closed, if
    a coroutine, so it is never left un-awaited)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


def _call_sync(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    """A sync step's call, on its worker thread."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        what = safe_repr(value)
        if inspect.iscoroutine(value):
            value.close()  # never awaited, on purpose: no warning about it
        return _ReturnedAwaitable(what)
    return value


def current_context() -> RunContext:
    """The `RunContext` of the run the calling task belongs to: the run body's own, in
    the body, in every task it starts inside its attempt, and in the worker thread of a
    sync `RunContext.step`. For code that runs inside a run but was not handed its
    ``ctx`` (an adapter a framework calls, a tool).

    A context whose attempt has ended is still returned to a task that outlived it (an
    abandoned sync step's thread); using it then raises `NotActive`.

    Raises:
        NotInRun: the calling task belongs to no run.
    """
    ctx = current_run.get()
    if ctx is None:
        raise NotInRun()
    return ctx


@final
class RunContext(metaclass=NoPublicConstructor):
    """What a run body sees of its attempt.

    The attempt's ``cancel_scope`` is its cancellation token: every checkpoint of the body
    (any ``await`` on Trio) is a cancellation point, and so is `boundary`. The context
    belongs to its attempt: the body and tasks it starts inside the attempt may use it;
    another run's task, or any task after the attempt ended, gets an error.
    """

    _obtained_from = "a run body receives its RunContext as its argument"

    __slots__ = ("_attempt", "_host")

    def __init__(self, host: AttemptHost, attempt: Attempt) -> None:
        self._host = host
        self._attempt = attempt

    def __repr__(self) -> str:
        a = self._attempt
        return f"<RunContext run_id={a.run_id!r} generation={a.generation}>"

    @property
    def run_id(self) -> str:
        return self._attempt.run_id

    @property
    def thread_id(self) -> str:
        return self._attempt.thread_id

    @property
    def parent_run_id(self) -> str | None:
        parent = self._attempt.parent
        return None if parent is None else parent.run_id

    @property
    def generation(self) -> int:
        return self._attempt.generation

    @property
    def input(self) -> JsonValue:
        """The run's input (frozen: copy it to change it)."""
        return self._attempt.input

    @property
    def checkpoint(self) -> JsonValue:
        """The last committed progress, carried over from earlier attempts (frozen)."""
        return self._attempt.checkpoint

    @property
    def resume_value(self) -> JsonValue:
        """The value the resume that started this attempt passed (None on a first attempt).

        An attempt that replaces one whose owner was lost, or that was handed back at
        shutdown, is handed the same value, until the run next awaits."""
        return self._attempt.resume_value

    @property
    def resumed_ticket(self) -> ResumeTicket | None:
        """The ticket the resume that started this attempt answered (its reason,
        correlation id and payload), or None on a first attempt; like `resume_value`,
        the same for an attempt that replaces a lost or handed-back one."""
        return self._attempt.ticket

    @property
    def steps(self) -> int:
        """The boundaries the run has passed, in all its attempts."""
        return self._attempt.steps

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The attempt's scope: the token. Cancelling it yourself ends the run Cancelled."""
        scope = self._attempt.scope
        assert scope is not None, "the body runs inside its attempt's scope"
        return scope

    @property
    def is_cancelled(self) -> bool:
        """Whether this attempt, or an ancestor of it, has been cancelled."""
        a = self._attempt
        return a.cancel_called or a.ancestor_cancelled() or self._host.shutdown_request is not None

    def _live(self, action: str) -> Attempt:
        """The attempt, if ``action`` may be taken on it from the calling task."""
        a = self._attempt
        if a.phase != "running":
            raise NotActive(
                a.run_id,
                f"its attempt {a.generation} has ended; {action} is only"
                " possible while the attempt runs",
            )
        caller_ctx = current_run.get()
        caller = None if caller_ctx is None else caller_ctx._attempt
        if caller is not a:
            where = (
                "a task outside any run"
                if caller is None
                else f"run {caller.run_id!r} (attempt {caller.generation})"
            )
            raise ContextMisuse(
                f"{action} was called on the context of run {a.run_id!r} (attempt"
                f" {a.generation}) from {where}; each body must use the ctx it was given"
            )
        return a

    async def boundary(self, progress: JsonValue = None, *, wait: bool = False) -> list[JsonValue]:
        """A safe point: commit progress, drain the inbox, honour a pending pause.

        Args:
            progress: if not None, committed as the run's checkpoint (``Running``); a
                resumed attempt sees it as `checkpoint`.
            wait: block until a message or a ``Wake`` arrives (a pending pause or cancel
                still takes effect, and a cancel that arrives with messages wins over
                them: they are recorded as discarded). Only one task may wait at a time;
                a second raises ``trio.BusyResourceError``.

        Returns:
            The inbox messages, in send order (messages carried over from a paused
            attempt first).

        A pending pause ends the attempt here: ``Awaiting`` is committed with a
        ``manual_pause`` ticket and the messages not yet returned ride with it. A boundary
        that would take the run past its ``max_steps`` ends it ``Ended(MaxSteps())``
        without committing its progress.
        """
        a = self._live("boundary()")
        if progress is not None:
            progress = check_payload(
                progress, f"progress of run {a.run_id!r}", self._host.max_payload_bytes
            )
            await self._host.checkpoint_before_commit()
        else:
            await trio.lowlevel.checkpoint()
        if a.max_steps is not None and a.steps >= a.max_steps:
            raise StepCeiling(f"run {a.run_id!r} has used its max_steps={a.max_steps}")
        a.steps += 1
        if progress is not None:
            await self._host.commit_progress(a, progress, a.steps)
        if wait and not a.has_news():
            await a.wait_for_news()
        if wait or progress is not None:
            # The boundary may have yielded since its first checkpoint (waiting, or its
            # commit's answer): a cancel that came meanwhile, even in the step that brought
            # the messages, wins over them and over a pause. The messages stay unread, so
            # the attempt's end records them as discarded.
            await trio.lowlevel.checkpoint_if_cancelled()
        if a.pause_requested:
            # Cancel wins over pause: a pending cancel raises here.
            await trio.lowlevel.checkpoint_if_cancelled()
            a.pause_honoured()
            a.suspension = Awaiting(
                ResumeTicket(
                    correlation_id=f"{a.run_id}/pause/{a.generation}",
                    run_id=a.run_id,
                    thread_id=a.thread_id,
                    reason="manual_pause",
                )
            )
            raise SuspendAttempt(f"run {a.run_id!r} paused")
        a.wake_pending = False
        if a.holds_stored_messages():
            # Messages sent from anywhere are received once their consumption commits.
            return await self._host.hand_over(a)
        return a.drain()

    async def await_input(
        self,
        reason: str,
        *,
        correlation_id: str | None = None,
        payload: JsonValue = None,
        deadline: float | None = None,
        accepts: JsonValue = None,
        progress: JsonValue = None,
    ) -> NoReturn:
        """Commit ``Awaiting`` with a ticket and end this attempt.

        `Runtime.resume` answers the ticket and starts the next attempt, whose
        ``resume_value`` is the answer and whose ``checkpoint`` is the last progress.

        Args:
            reason: what the run waits for (``"user_input"``, ``"tool_permission"``, ...).
            correlation_id: the ticket's id; defaults to ``"<run_id>/input/<generation>"``.
            payload: a JSON value for whoever answers (a question, a tool call).
            deadline: absolute wall-clock seconds after which resumes are refused.
            accepts: a JSON Schema the resume value must match; `Runtime.resume` checks
                it before committing anything and raises `InvalidPayload` on a mismatch.
            progress: if not None, committed as the run's checkpoint in the same commit
                as the ``Awaiting`` state (no boundary is passed: no pause is honoured, no
                message is drained, no step is counted).
        """
        a = self._live("await_input()")
        what = f"await_input() of run {a.run_id!r}"
        if type(reason) is not str or not reason:
            raise InvalidArgument(f"{what} needs a non-empty str reason, not {safe_repr(reason)}")
        if correlation_id is not None:
            check_id(correlation_id, f"{what}: correlation_id")
        deadline = check_deadline(deadline, what)
        limit = self._host.max_payload_bytes
        payload = check_payload(payload, f"ticket payload of run {a.run_id!r}", limit)
        if accepts is not None:
            accepts = check_schema(accepts, f"{what}: accepts")
        if progress is not None:
            progress = check_payload(progress, f"progress of run {a.run_id!r}", limit)
        await trio.lowlevel.checkpoint()
        if progress is not None:
            a.suspension_checkpoint = progress
        a.suspension = Awaiting(
            ResumeTicket(
                correlation_id=correlation_id or f"{a.run_id}/input/{a.generation}",
                run_id=a.run_id,
                thread_id=a.thread_id,
                reason=reason,
                payload=payload,
                deadline=deadline,
                accepts=accepts,
            )
        )
        raise SuspendAttempt(f"run {a.run_id!r} awaits {reason}")

    async def sleep_until(self, when: float) -> NoReturn:
        """End this attempt until ``when`` (wall-clock seconds, the runtime's clock): the
        run commits ``Awaiting`` with a ``scheduled_action`` ticket whose payload is
        ``{"wake_at": when}``, and is resumed (value None) when it is due, by this runtime
        while it stays open, else by a serving runtime that has its body. Nothing of the
        attempt stays in memory meanwhile: the resumed attempt continues from its
        checkpoint. ``resume`` may answer the ticket early; a run cancelled or stopped
        before it is due is never resumed."""
        a = self._live("sleep_until()")
        what = f"sleep_until() of run {a.run_id!r}"
        if when is None:
            raise InvalidArgument(f"{what} needs a wake-up time (wall-clock seconds)")
        wake_at = check_deadline(when, what)
        assert wake_at is not None
        await self.await_input(
            "scheduled_action",
            correlation_id=f"{a.run_id}/sleep/{a.generation}",
            payload={"wake_at": wake_at},
        )

    async def sleep(self, seconds: float) -> NoReturn:
        """`sleep_until` ``seconds`` from now (the runtime's clock)."""
        a = self._live("sleep()")
        if type(seconds) not in (int, float) or not 0 <= seconds < float("inf"):
            raise InvalidArgument(
                f"sleep() of run {a.run_id!r} needs a finite number of seconds >= 0,"
                f" not {safe_repr(seconds)}"
            )
        await self.sleep_until(self._host.now() + seconds)

    async def emit(self, kind: str, detail: JsonValue = None) -> None:
        """Commit an event of the body's own ``kind`` (a dotted name such as
        ``"agent.tool_started"``) with a JSON object ``detail``, in order with the run's
        other events. No state changes; an attempt whose run moved on commits nothing: a
        run ended elsewhere, or a lost claim, cancels the attempt (the body sees
        ``trio.Cancelled`` here; inside a shield, `RunAlreadyEnded`), anything else raises
        `StoreError`."""
        a = self._live("emit()")
        if type(kind) is not str or not _EVENT_KIND.fullmatch(kind) or kind in _RUNTIME_KINDS:
            raise InvalidArgument(
                f"emit() of run {a.run_id!r}: kind must be a dotted lowercase name such as"
                f" 'agent.tool_started' (not a runtime kind), not {safe_repr(kind)}"
            )
        frozen = freeze_detail(
            {} if detail is None else detail, f"detail of {kind!r}", self._host.max_payload_bytes
        )
        await self._host.checkpoint_before_commit()
        await self._host.emit(a, kind, frozen)

    def stream(self, channel: str = "output", *, keep: bool = True) -> StreamWriter:
        """The attempt's writer for the run's stream ``channel`` (the same one each time
        for a channel, in this attempt): live output any process can read with
        `Runtime.read_stream` while the run goes on, and resume from an offset.

        `StreamWriter.send` never waits for the store: chunks are written with the
        attempt's commits, fenced like them (an attempt that lost its run writes none),
        within 50 ms of being sent, and what the writer holds when the attempt ends
        is written with its end. Offsets count 1, 2, ... across the run's attempts: the
        first chunk a later attempt writes on the channel comes after a ``"reset"`` chunk,
        and the run's end adds an ``"end"`` chunk.

        Args:
            channel: 1 to 128 letters, digits, ``_``, ``.``, ``:`` or ``-``.
            keep: keep the channel's chunks once the run ends (with the run, until it is
                pruned); False deletes them when the run ends, keeping only the ``"end"``
                chunk (readers then get `StreamGap` for what they had not read).

        Raises:
            InvalidArgument: a bad channel or ``keep``; the channel is open in this
                attempt with the other ``keep``; or the store keeps no streams.
        """
        a = self._live("stream()")
        check_channel(channel, f"stream() of run {a.run_id!r}")
        if type(keep) is not bool:
            raise InvalidArgument(
                f"stream() of run {a.run_id!r}: keep must be a bool, not {safe_repr(keep)}"
            )
        box = a.streams
        if box is None:
            if not self._host.keeps_streams:
                raise InvalidArgument(
                    f"stream() of run {a.run_id!r}: the runtime's store keeps no streams (it"
                    " is not a StreamingStore); the memory, SQLite and PostgreSQL stores do"
                )
            box = a.streams = StreamOutbox(a, self._host)
        return box.writer(channel, keep)

    @overload
    async def step(
        self, name: str, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    @overload
    async def step(
        self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    async def step(
        self, name: str, fn: Callable[..., object], /, *args: object, **kwargs: object
    ) -> object:
        """Run ``fn(*args, **kwargs)`` as a journaled step, and return its result.

        The result must be a JSON value; it is committed (an event of kind ``"step"``,
        detail ``{"name", "index", "result"}``) before ``step`` returns it. A later
        attempt of the run (recovery after a crash, a retry, a resume) whose call of
        ``step(name, ...)`` finds a committed result for that name and index gets it back
        without calling ``fn``: an effect between two boundaries (a paid model call, a sent
        email) happens once per committed step.

        ``index`` counts the calls of ``name`` that returned, in the attempt, from 0: the
        k-th such call gets the result committed under index k. A body whose calls of a
        name change order between attempts gets results by name and index, not by
        arguments; give steps that may move (or are conditional) names of their own, such
        as ``f"tool:{call_id}"``. Steps of one name raced from two tasks of one attempt
        take their indexes in the order their commits land, so on replay the first call
        gets the result that landed first: race only steps of different names if the
        pairing matters.

        ``fn`` is either:

        - async: awaited in the calling task, inside the attempt's scope; a cancel
          reaches it as ``trio.Cancelled``, and nothing is committed;
        - sync: run on a worker thread (``trio.to_thread.run_sync`` with
          ``abandon_on_cancel=True``), so it never blocks the event loop, and it sees
          this run as `current_context` there. A cancel does not wait for it: the step
          raises ``trio.Cancelled`` at once and the thread is abandoned. It keeps running
          to its end (Python cannot stop a thread), but its result is never committed, so
          the next attempt runs the step again.

        A step that raises is not journaled (the next attempt runs it again) and
        ``step`` re-raises. The result is returned frozen (read-only lists and dicts),
        the same value a later attempt gets. Each step is one commit: the commits of
        steps taken at once share a transaction (group commit), and an attempt whose run
        has moved on (its claim lost, its run ended elsewhere) commits nothing and stops
        right here, as at any commit.

        The journal is read once per attempt, at its first step, from the run's ``step``
        events (by their kind, through the store's index); a fork starts with its
        source's steps up to the event it was forked at.

        Raises:
            InvalidArgument: ``name`` is not a non-empty str, or ``fn`` is not callable
                (or is sync and returned a coroutine: pass the async function itself).
            InvalidPayload: the result is not a JSON value, or is larger than the
                runtime's ``max_payload_bytes``; nothing is committed.
        """
        a = self._live("step()")
        what = f"step() of run {a.run_id!r}"
        check_id(name, f"{what}: the step name")
        if not callable(fn):
            raise InvalidArgument(
                f"{what}: {name!r} needs a callable to run (a sync function, run on a worker"
                f" thread, or an async one), not {safe_repr(fn)}"
            )
        host = self._host
        journal = a.journal
        if journal is None:
            journal = a.journal = Journal()
        await journal.load(partial(host.load_steps, a))
        found = journal.replay(name)
        if found is not MISSING:
            await trio.lowlevel.checkpoint()
            return found
        if is_async_callable(fn):
            value = await fn(*args, **kwargs)  # type: ignore[misc]
        else:
            value = await trio.to_thread.run_sync(
                partial(_call_sync, fn, args, kwargs), abandon_on_cancel=True
            )
            if type(value) is _ReturnedAwaitable:
                raise InvalidArgument(
                    f"{what}: {name!r} ran {safe_repr(fn)} on a worker thread and it returned"
                    f" an awaitable ({value.what}); pass the async function itself"
                    " (ctx.step(name, async_fn, *args)) so it is awaited in the run"
                )
        result = check_payload(
            value, f"the result of step {name!r} of run {a.run_id!r}", host.max_payload_bytes
        )
        await host.checkpoint_before_commit()
        await host.commit_step(a, name, result)
        return result

    async def start_child(
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
        """Start a child run inside this attempt's cancel scope.

        Cancelling this attempt (or its ending for any reason) cancels the child; the
        child's own cancel or failure never reaches this attempt. The child runs on a
        thread of its own unless ``thread_id`` is given; a child given a busy thread
        (its parent's, say) is queued, and if its turn has not come when this attempt
        ends, it is ended with it without ever running. ``timeout``, ``deadline`` and
        ``queue_timeout`` are `Runtime.start`'s; the child's deadline is the earlier of
        its own and this run's. A child starts now: ``not_before`` is refused
        (`InvalidArgument`). ``if_busy`` is as for `Runtime.start` (a child never
        supersedes its own ancestors: `ThreadBusy`). ``retry`` is as for
        `Runtime.start`: a child waiting to retry is this attempt's still (it is tried
        again under it, and ended with it), and its handle's ``wait()`` waits through its
        retries.
        """
        a = self._live("start_child()")
        refuse_not_before(not_before, "start_child()", child=True)
        limits = NO_DEADLINES
        if timeout is not None or deadline is not None or queue_timeout is not None:
            limits = check_deadlines(
                timeout=timeout,
                deadline=deadline,
                queue_timeout=queue_timeout,
                now=self._host.now(),
                what=f"start_child() in run {a.run_id!r}",
            )
        spec = RunSpec.checked(
            body,
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            parent=a,
            max_payload_bytes=self._host.max_payload_bytes,
            if_busy=if_busy,
            deadlines=limits,
            retry=retry,
        )
        return await self._host.start_run(spec)

    async def run_child(
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
        """Start a child run and wait for it; its committed state comes back as a value."""
        handle = await self.start_child(
            body,
            input=input,
            run_id=run_id,
            thread_id=thread_id,
            name=name,
            max_steps=max_steps,
            timeout=timeout,
            deadline=deadline,
            queue_timeout=queue_timeout,
            not_before=not_before,
            if_busy=if_busy,
            retry=retry,
        )
        return await handle.wait()
