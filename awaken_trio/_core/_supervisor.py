"""The supervisor: admissions, the active-attempt registry and the finish boundary.

The supervisor is the only writer of committed state. It admits attempts (commits
``Running`` or ``Queued`` and spawns the actor), commits their progress, and ends them at
the finish boundary: one commit that, in the same step, deregisters the attempt, frees its
thread and releases everyone waiting for it. It owns the nursery the top-level actors live
in; only runtime shutdown cancels that nursery, never the code that opened the runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any, final

import trio

from ._actor import run_attempt
from ._attempt import Attempt, Body, EndRequest, OwnershipVerifier
from ._commits import CommitMailbox
from ._context import RunContext
from ._errors import RunAlreadyEnded, RunExists, RuntimeClosed, StoreError
from ._handle import RunHandle
from ._json import JsonValue, check_json
from ._registry import AttemptRegistry, ThreadGate
from ._state import Awaiting, Cancelled, Ended, Queued, Running, RunRecord, RunState, Stopped
from ._storage import Accepted, Commit, CommitResult, Expect, NewRun, Rejected, Store
from ._validate import check_body, check_id, check_max_steps, check_name, new_run_id

Clock = Callable[[], float]
VerifierFactory = Callable[[str, str, int], OwnershipVerifier | None]


@final
class RunSpec:
    """What a later attempt of the same run needs and the store does not hold."""

    __slots__ = ("body", "max_steps")

    def __init__(self, body: Body, max_steps: int | None) -> None:
        self.body = body
        self.max_steps = max_steps


@final
class Supervisor:
    """Owns the registry, the thread gate and every commit (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        mailbox: CommitMailbox,
        clock: Clock,
        verifier_factory: VerifierFactory | None,
    ) -> None:
        self.store = store
        self.mailbox = mailbox
        self.clock = clock
        self.verifier_factory = verifier_factory
        self.registry = AttemptRegistry()
        self.gate = ThreadGate()
        self.queued: dict[str, Attempt] = {}
        self.specs: dict[str, RunSpec] = {}
        self.shutdown_request: EndRequest | None = None
        self._actors: trio.Nursery | None = None
        self._closing = False
        self._inflight = 0
        self._admissions_closed = trio.Event()
        self.actors_done = trio.Event()

    # ------------------------------------------------------------------ admissions

    async def start_run(
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
        """Check the arguments, commit a new run and start (or queue) its first attempt."""
        check_body(body)
        if run_id is not None:
            check_id(run_id, "run_id")
        if thread_id is not None:
            check_id(thread_id, "thread_id")
        check_name(name)
        max_steps = check_max_steps(max_steps)
        run_id = run_id or new_run_id()
        input = check_json(input, f"input of run {run_id!r}")
        thread_id = thread_id or run_id
        await trio.lowlevel.checkpoint()
        nursery = self.actors_nursery() if parent is None else parent.children_nursery
        assert nursery is not None
        attempt = self.new_attempt(run_id, thread_id, 1, parent, body, max_steps, input, None, None)
        result = await self.admit(
            attempt,
            nursery,
            Expect(new=True),
            NewRun(thread_id, None if parent is None else parent.run_id, name, input),
            {"source": "start"},
        )
        if isinstance(result, Rejected):
            raise RunExists(run_id)
        return RunHandle(run_id, thread_id, 1, completion=attempt.completion)

    def new_attempt(
        self,
        run_id: str,
        thread_id: str,
        generation: int,
        parent: Attempt | None,
        body: Body,
        max_steps: int | None,
        input: JsonValue,
        checkpoint: JsonValue,
        resume_value: JsonValue,
    ) -> Attempt:
        verifier = None
        if self.verifier_factory is not None:
            verifier = self.verifier_factory(run_id, thread_id, generation)
        attempt = Attempt(
            run_id=run_id,
            thread_id=thread_id,
            generation=generation,
            parent=parent,
            body=body,
            input=input,
            checkpoint=checkpoint,
            resume_value=resume_value,
            max_steps=max_steps,
            verifier=verifier,
        )
        attempt.context = RunContext(self, attempt)
        return attempt

    async def admit(
        self,
        attempt: Attempt,
        nursery: trio.Nursery,
        expect: Expect,
        new_run: NewRun | None,
        detail: dict[str, JsonValue],
    ) -> CommitResult:
        """Commit ``Running`` (thread free) or ``Queued`` (thread busy) and spawn the actor.

        The thread's place is taken before the commit, so FIFO order is call order. The
        registration and the spawn happen in the commit's own step.
        """
        run_id, thread_id, generation = attempt.run_id, attempt.thread_id, attempt.generation
        running = self.gate.try_acquire(thread_id, attempt)
        if running:
            state: RunState = Running(generation)
            committed_generation = generation
        else:
            attempt.gate_waiter = self.gate.enqueue(thread_id, attempt)
            attempt.queued_generation = committed_generation = generation - 1
            state = Queued()
        spec = RunSpec(attempt.body, attempt.max_steps)

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Rejected):
                self._release_thread(attempt)
                return
            if running:
                attempt.started = True
                attempt.carried = list(result.taken_messages)
                self.registry.register(attempt)
            else:
                self.queued[run_id] = attempt
            self.specs[run_id] = spec
            if attempt.parent is not None:
                attempt.parent.children[run_id] = attempt
            nursery.start_soon(run_attempt, self, attempt)

        commit = Commit(
            run_id=run_id,
            state=state,
            generation=committed_generation,
            expect=expect,
            at=self.clock(),
            new_run=new_run,
            take_messages=running,
            resume_value=None if running else attempt.resume_value,
            detail=detail,
        )
        if not self.mailbox.inline:
            attempt.handed_over = trio.Event()
        self._inflight += 1
        try:
            return await self.mailbox.commit(commit, on_commit)
        except StoreError:
            self._release_thread(attempt)  # nothing was committed: give the thread back
            raise
        finally:
            self._inflight -= 1
            self._maybe_close_admissions()
            if attempt.handed_over is not None:
                attempt.handed_over.set()

    async def begin_queued(self, attempt: Attempt) -> None:
        """The queued attempt got its thread: commit ``Running`` and register it."""
        assert attempt.queued_generation is not None

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Rejected):
                self._retire(attempt, result)
                return
            attempt.started = True
            attempt.carried = list(result.taken_messages)
            self.queued.pop(attempt.run_id, None)
            self.registry.register(attempt)

        try:
            await self.mailbox.commit(
                Commit(
                    run_id=attempt.run_id,
                    state=Running(attempt.generation),
                    generation=attempt.generation,
                    expect=Expect(generation=attempt.queued_generation, state=Queued),
                    at=self.clock(),
                    take_messages=True,
                    detail={"source": "thread_free"},
                ),
                on_commit,
            )
        except StoreError as exc:
            self._abandon(attempt, exc)

    async def commit_progress(self, attempt: Attempt, progress: JsonValue) -> None:
        """Commit ``Running`` with new progress, fenced by the attempt's generation."""
        result = await self.mailbox.commit(
            Commit(
                run_id=attempt.run_id,
                state=Running(attempt.generation),
                generation=attempt.generation,
                expect=Expect(generation=attempt.generation, state=Running),
                at=self.clock(),
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

    # ------------------------------------------------------------------ the finish boundary

    async def finish(
        self,
        attempt: Attempt,
        state: RunState,
        result: JsonValue,
        events: list[Any],
        detail: dict[str, JsonValue],
    ) -> None:
        """Commit the attempt's end, after ending its awaiting children.

        Nothing here can be interrupted: the children's commits run shielded and
        `CommitMailbox.commit` cannot be cancelled once called.
        """
        awaiting = (
            [child_id for child_id, child in attempt.children.items() if child is None]
            if attempt.children
            else None
        )
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
            at=self.clock(),
            result=result,
            carried_messages=() if ending else messages,
            discarded_messages=messages if ending else (),
            events=tuple(events),
            detail=detail,
        )
        try:
            await self.mailbox.commit(commit, partial(self._retire, attempt))
        except StoreError as exc:
            self._abandon(attempt, exc)

    def _abandon(self, attempt: Attempt, error: StoreError) -> None:
        """The store refused the attempt's commit: let go of it without a new state.

        The run keeps its last committed state (an orphaned ``Running`` or ``Queued``
        that ``cancel_run``/``stop_run`` can end later); whoever waits gets the error.
        """
        self._let_go(attempt, None)
        attempt.completion.fail(error)

    def _retire(self, attempt: Attempt, result: CommitResult) -> None:
        """Deregister, free the thread and release waiters: the commit's own step."""
        state = result.record.state if isinstance(result, Accepted) else result.state
        assert state is not None
        self._let_go(attempt, state)
        if isinstance(state, Ended):
            self.specs.pop(attempt.run_id, None)
        attempt.completion.set(state)

    def _let_go(self, attempt: Attempt, state: RunState | None) -> None:
        attempt.sealed = True
        self.registry.deregister(attempt)
        self._release_thread(attempt)
        run_id = attempt.run_id
        if self.queued.get(run_id) is attempt:
            del self.queued[run_id]
        parent = attempt.parent
        if parent is not None and parent.children.get(run_id) is attempt:
            if isinstance(state, Awaiting):
                parent.children[run_id] = None  # still the parent's, to end with it
            else:
                del parent.children[run_id]
        attempt.context = None  # break the attempt <-> context cycle early

    def _release_thread(self, attempt: Attempt) -> None:
        if attempt.gate_waiter is not None:
            self.gate.withdraw(attempt.gate_waiter)
        else:
            self.gate.release(attempt.thread_id, attempt)

    async def _end_awaiting_child(self, child_id: str, parent: Attempt) -> None:
        record = await self.store.load(child_id)
        if record is not None and isinstance(record.state, Awaiting | Queued):
            if self.shutdown_request is not None:
                request = self.shutdown_request
            else:
                request = EndRequest(Cancelled(), "parent", f"parent run {parent.run_id!r} ended")
            # A store failure leaves the child Awaiting (ended later by the committed
            # path); the parent's own end must still be committed.
            with contextlib.suppress(StoreError):
                await self.commit_end(record, request)
        parent.children.pop(child_id, None)

    async def commit_end(self, record: RunRecord, request: EndRequest) -> CommitResult:
        """End a run that has no attempt here (awaiting, or queued or orphaned elsewhere).

        Fenced by the generation and state kind that were read, so a run that moved on
        in the meantime is left alone (the result is then `Rejected`).
        """
        run_id = record.run_id

        def on_commit(result: CommitResult) -> None:
            if isinstance(result, Accepted):
                self.specs.pop(run_id, None)
                parent_id = record.parent_run_id
                parent = None if parent_id is None else self.registry.get(parent_id)
                if parent is not None and parent.children.get(run_id, False) is None:
                    del parent.children[run_id]

        return await self.mailbox.commit(
            Commit(
                run_id=run_id,
                state=Ended(request.cause),
                generation=record.generation,
                expect=Expect(generation=record.generation, state=type(record.state)),
                at=self.clock(),
                detail=request.detail(),
            ),
            on_commit,
        )

    # ------------------------------------------------------------------ lifetime

    def actors_nursery(self) -> trio.Nursery:
        """The nursery for top-level actors; refuses once shutdown has begun."""
        if self._closing:
            raise RuntimeClosed(
                "the runtime is shutting down and starts no new attempts;"
                " start runs inside the 'async with open_runtime()' block"
            )
        assert self._actors is not None
        return self._actors

    def shutdown_end_request(self) -> EndRequest:
        if self.shutdown_request is None:
            self.shutdown_request = EndRequest(
                Stopped("runtime shutdown"), "shutdown", "runtime shutdown"
            )
        return self.shutdown_request

    def begin_shutdown(self) -> None:
        """Refuse new attempts and cancel every actor (sync: safe from any task)."""
        self._closing = True
        self.shutdown_end_request()
        if self._actors is not None:
            self._actors.cancel_scope.cancel(reason="runtime shutdown")
        self._maybe_close_admissions()

    def _maybe_close_admissions(self) -> None:
        if self._closing and self._inflight == 0:
            self._admissions_closed.set()

    async def host_actors(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Own the actors' nursery. Only shutdown cancels it, never the caller's scopes."""
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as actors:
                    self._actors = actors
                    task_status.started()
                    # Stay open for admissions already committed; shutdown cancels the rest.
                    with trio.CancelScope(shield=True):
                        await self._admissions_closed.wait()
        finally:
            self.actors_done.set()
            self.mailbox.close()
