"""Commits by intent: the one module that builds a `Commit`.

Each function says what a commit is for (an attempt starting, progress, an end, a queued
resume, ...) and takes the one claim value the claim policy decided for it (``under``:
a new `Claim`, the tree's `Fence`, or None). A commit is built whole here and never changed
afterwards: nothing outside this module assigns a `Commit` attribute
(``tests/test_layering.py`` says so), so what a store reads is what its intent said.

Built by their own ``__init__``: the commits made on every run's path (its start, its
progress, its end) are made as ``c = object.__new__(Commit); Commit.__init__(c, ...)``
rather than ``Commit(...)``. In CPython 3.11 a class called with keyword arguments packs
them into a dict and unpacks it again for ``__init__`` (``type.__call__`` has no
vectorcall), which costs as much as the ``__init__`` of a dozen fields itself; calling
``__init__`` passes them as they are. The instance is the same (`Commit` has no
``__new__``); with the same done for the attempt, its spec and its memory-store row, a
trivial run executes 5% fewer instructions (``benchmarks/bench_instructions.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._json import FrozenDict, JsonValue
from ._state import Awaiting, Ended, EventKind, Queued, ResumeTicket, Running, RunState
from ._storage import (
    UNSET,
    Claim,
    Commit,
    DescendantsEnd,
    EventDraft,
    Expect,
    Fence,
    NewRun,
    StreamDraft,
)
from ._verdict import NATURAL_END

if TYPE_CHECKING:
    from ._attempt import Attempt, EndRequest
    from ._verdict import Verdict

Under = Fence | Claim | None
"""What a commit is made under (`ClaimPolicy.start_under`): a claim it takes, the claim it
is fenced by, or none (a store without claims)."""

QUEUED: RunState = Queued()
_RUNNING = tuple(Running(generation) for generation in range(17))  # shared, frozen
_EXPECT_RUNNING = tuple(Expect(generation=g, state=Running) for g in range(17))
EXPECT_NEW = Expect(new=True)


def running(generation: int) -> RunState:
    return _RUNNING[generation] if generation < len(_RUNNING) else Running(generation)


def expect_running(generation: int) -> Expect:
    """The fence of a commit by the attempt of ``generation`` (shared for small ones)."""
    if generation < len(_EXPECT_RUNNING):
        return _EXPECT_RUNNING[generation]
    return Expect(generation=generation, state=Running)


def expect_awaiting(generation: int, ticket: ResumeTicket) -> Expect:
    """The fence of a commit that answers ``ticket`` of a run awaiting at ``generation``."""
    return Expect(generation=generation, state=Awaiting, correlation_id=ticket.correlation_id)


def _split(under: Under) -> tuple[Fence | None, Claim | None]:
    if under is None:
        return None, None
    if type(under) is Fence:
        return under, None
    assert isinstance(under, Claim)
    return None, under


# ---------------------------------------------------------------- attempts starting


def start(
    attempt: Attempt,
    *,
    running_now: bool,
    expect: Expect,
    at: float,
    new_run: NewRun | None,
    detail: FrozenDict,
    under: Under,
) -> Commit:
    """An admission: the attempt commits ``Running`` (its thread is free here) or its run
    waits ``Queued`` behind the thread. The answer a resume gave is committed with the
    attempt it starts (or the Queued state it waits in), so an attempt that replaces this
    one is handed it too. A start made under a claim guards the thread across runtimes."""
    fence, claim = _split(under if running_now else None)
    commit = object.__new__(Commit)  # (see "Built by their own __init__")
    Commit.__init__(
        commit,
        attempt.run_id,
        running(attempt.generation) if running_now else QUEUED,
        attempt.generation if running_now else attempt.generation - 1,
        expect,
        at,
        new_run,
        None,
        UNSET,
        None,
        (),
        False,
        running_now,  # take_messages
        (),
        (),
        detail,
        True,
        attempt.resume_value,
        attempt.ticket,
        fence,
        claim,
        False,
        running_now and under is not None,  # thread_guard
        (),
        (),
        None,
        (),
        None,  # not_before
        # The first attempt of a run that never started pins its body's version.
        UNSET if attempt.pin is None or not running_now else attempt.pin.version,
    )
    return commit


def root_start(attempt: Attempt, new_run: NewRun, *, at: float, detail: FrozenDict) -> Commit:
    """The common start (`Admissions.start_root`): a new top-level run's first attempt
    commits ``Running``, its thread free, under no claim, with no answer to carry and no
    pinned version. What `start` builds for that case, with nothing left to decide."""
    # (take_messages: it is the attempt that starts)
    return _plain(
        attempt.run_id, _RUNNING[1], 1, EXPECT_NEW, at, new_run, None, None, True, detail, None
    )


def wait_elsewhere(
    attempt: Attempt, *, expect: Expect, at: float, new_run: NewRun | None, detail: FrozenDict
) -> Commit:
    """The run's thread is busy in another runtime: it waits ``Queued`` here instead (a
    child under its tree's claim)."""
    return Commit(
        run_id=attempt.run_id,
        state=QUEUED,
        generation=attempt.generation - 1,
        expect=expect,
        at=at,
        new_run=new_run,
        resume_value=attempt.resume_value,
        resume_ticket=attempt.ticket,
        fence=None if attempt.parent is None else attempt.fence,
        detail=detail,
    )


def begin_queued(attempt: Attempt, *, at: float, detail: FrozenDict, under: Under) -> Commit:
    """A queued attempt got its thread: ``Running``, fenced by the generation it waited at."""
    assert attempt.queued_generation is not None
    fence, claim = _split(under)
    return Commit(
        run_id=attempt.run_id,
        state=running(attempt.generation),
        generation=attempt.generation,
        expect=Expect(generation=attempt.queued_generation, state=Queued),
        at=at,
        take_messages=True,
        detail=detail,
        fence=fence,
        claim=claim,
        thread_guard=under is not None,
        body_version=UNSET if attempt.pin is None else attempt.pin.version,
    )


def queue_new(
    run_id: str,
    new_run: NewRun,
    *,
    at: float,
    detail: FrozenDict,
    not_before: float | None = None,
) -> Commit:
    """A new run ``Queued`` for any serving runtime with its body (`submit`, a fork whose
    body is not here), not to start before ``not_before`` (a delayed start) if given."""
    return Commit(
        run_id=run_id,
        state=QUEUED,
        generation=0,
        expect=EXPECT_NEW,
        at=at,
        new_run=new_run,
        detail=detail,
        not_before=not_before,
    )


def queue_resume(
    record_generation: int,
    run_id: str,
    ticket: ResumeTicket,
    value: JsonValue,
    *,
    at: float,
    detail: FrozenDict,
) -> Commit:
    """Answer an awaiting run's ticket by committing it ``Queued`` with ``value``, for a
    serving runtime that has its body."""
    return Commit(
        run_id=run_id,
        state=QUEUED,
        generation=record_generation,
        expect=expect_awaiting(record_generation, ticket),
        at=at,
        resume_value=value,
        resume_ticket=ticket,
        detail=detail,
    )


def queue_recovered(
    run_id: str, generation: int, fence: Fence, *, at: float, detail: FrozenDict
) -> Commit:
    """A recovered run whose thread another run holds: back to ``Queued``, its claim
    released, to run when the thread frees."""
    return Commit(
        run_id=run_id,
        state=QUEUED,
        generation=generation,
        expect=Expect(generation=generation, state=Running),
        at=at,
        detail=detail,
        fence=fence,
        release=True,
    )


# ---------------------------------------------------------------- a running attempt


def progress(
    attempt: Attempt, checkpoint: JsonValue, steps: int, *, at: float, detail: FrozenDict
) -> Commit:
    """New progress (``boundary``): the run's checkpoint and step count."""
    generation = attempt.generation
    commit = object.__new__(Commit)  # (see "Built by their own __init__")
    Commit.__init__(
        commit,
        attempt.run_id,
        running(generation),
        generation,
        expect_running(generation),
        at,
        None,
        None,
        checkpoint,
        steps,
        detail=detail,
        fence=attempt.fence,
        consumed=attempt.take_consumed(),
    )
    return commit


def receive(
    attempt: Attempt,
    *,
    at: float,
    detail: FrozenDict,
    consumed: tuple[int, ...],
    delivered: tuple[int, ...],
) -> Commit:
    """The receipt of stored messages a boundary hands to the body."""
    return Commit(
        run_id=attempt.run_id,
        state=running(attempt.generation),
        generation=attempt.generation,
        expect=expect_running(attempt.generation),
        at=at,
        detail=detail,
        fence=attempt.fence,
        consumed=consumed,
        delivered=delivered,
    )


def emit(attempt: Attempt, kind: str, detail: FrozenDict, *, at: float) -> Commit:
    """A body's own event; no state changes and nothing is announced."""
    return _event_of(attempt, EventDraft(kind, detail), at)


def step(attempt: Attempt, detail: FrozenDict, *, at: float) -> Commit:
    """A journaled step's result (``ctx.step``): one ``step`` event; no state changes and
    nothing is announced. Fenced like every commit of the attempt, so a step of an attempt
    that has lost its run is never journaled."""
    return _event_of(attempt, EventDraft(EventKind.STEP, detail), at)


def _event_of(attempt: Attempt, event: EventDraft, at: float) -> Commit:
    """An event of the running attempt, alone: its state and generation as they are."""
    return Commit(
        run_id=attempt.run_id,
        state=running(attempt.generation),
        generation=attempt.generation,
        expect=expect_running(attempt.generation),
        at=at,
        events=(event,),
        announce=False,
        fence=attempt.fence,
    )


def stream(attempt: Attempt, chunks: tuple[StreamDraft, ...], *, at: float) -> Commit:
    """Chunks the attempt's writers sent (`StreamWriter`): no state changes, no event is
    written, and it is fenced like every commit of the attempt, so an attempt that has
    lost its run writes none."""
    return Commit(
        run_id=attempt.run_id,
        state=running(attempt.generation),
        generation=attempt.generation,
        expect=expect_running(attempt.generation),
        at=at,
        announce=False,
        fence=attempt.fence,
        chunks=chunks,
    )


# ---------------------------------------------------------------- ends


def end(
    attempt: Attempt,
    verdict: Verdict,
    *,
    at: float,
    detail: Mapping[str, JsonValue],
    messages: tuple[JsonValue, ...],
    release: bool,
    descendants: DescendantsEnd | None,
    chunks: tuple[StreamDraft, ...] = (),
    not_before: float | None = None,
    retries: int | None = None,
) -> Commit:
    """The attempt's end at the finish boundary: ``verdict.state`` (``Awaiting``,
    ``Ended``, or ``Queued`` for a hand-back, or for a retry: not before ``not_before``,
    the run's count of retries set to ``retries``). ``messages`` are the ones it held and did not
    read: carried to the next attempt by a suspension or a hand-back, discarded (with an
    event) by a terminal end. A pause the attempt could not honour (it ended at an await)
    waits for the next attempt's first boundary, as its unread messages do. ``chunks`` are
    what its stream writers still held: written before the end (and, on a terminal end,
    before the store's ``"end"`` chunks)."""
    state = verdict.state
    assert state is not None
    ending = type(state) is Ended
    if attempt.started:
        generation = attempt.generation
        expect = (
            _EXPECT_RUNNING[generation]
            if generation < len(_EXPECT_RUNNING)
            else expect_running(generation)
        )
    else:
        assert attempt.queued_generation is not None
        generation = attempt.queued_generation
        expect = Expect(generation=generation, state=Queued)
    commit = object.__new__(Commit)  # (see "Built by their own __init__")
    Commit.__init__(
        commit,
        attempt.run_id,
        state,
        generation,
        expect,
        at,
        None,
        verdict.result,
        attempt.suspension_checkpoint if not ending else UNSET,
        attempt.steps if attempt.started else None,
        () if ending else messages,
        (
            attempt.pause_requested
            and isinstance(state, Awaiting)
            and state.ticket.reason != "manual_pause"
        ),
        False,
        messages if ending else (),
        verdict.events,
        detail,
        True,
        None,
        None,
        attempt.fence,
        None,
        release,
        False,
        () if attempt.inbox is None else attempt.inbox.take_consumed(),
        (),
        descendants,
        chunks,
        not_before,
        UNSET,
        retries,
    )
    return commit


def natural_end(attempt: Attempt, result: JsonValue, *, at: float, detail: FrozenDict) -> Commit:
    """The common end (`FinishBoundary.end_plainly`): the body of a started attempt
    returned ``result`` and its run ends ``NaturalEnd``, the attempt holding no message,
    no stream chunk, no child and no retry plan. What `end` builds for that case, with
    nothing left to decide. (It releases nothing: its claim policy has nothing to drop,
    `ClaimPolicy.quiet_ends`; and it keeps the committed checkpoint.)"""
    generation = attempt.generation
    expect = (
        _EXPECT_RUNNING[generation]
        if generation < len(_EXPECT_RUNNING)
        else expect_running(generation)
    )
    return _plain(
        attempt.run_id,
        NATURAL_END,
        generation,
        expect,
        at,
        None,
        result,
        attempt.steps,
        False,
        detail,
        attempt.fence,
    )


def _plain(
    run_id: str,
    state: RunState,
    generation: int,
    expect: Expect,
    at: float,
    new_run: NewRun | None,
    result: JsonValue,
    steps: int | None,
    take_messages: bool,
    detail: FrozenDict,
    fence: Fence | None,
) -> Commit:
    """A commit of the common start or end: these fields, and every other one at its
    default (no message, event, claim, release, child, chunk or retry; the checkpoint
    kept). Positional, as the builders above are (see "Built by their own __init__")."""
    commit = object.__new__(Commit)
    Commit.__init__(
        commit,
        run_id,
        state,
        generation,
        expect,
        at,
        new_run,
        result,
        UNSET,
        steps,
        (),
        False,
        take_messages,
        (),
        (),
        detail,
        True,
        None,
        None,
        fence,
        None,
        False,
        False,
        (),
        (),
        None,
        (),
        None,
        UNSET,
        None,
    )
    return commit


def end_elsewhere(
    run_id: str,
    generation: int,
    state: type[RunState],
    request: EndRequest,
    *,
    at: float,
    detail: Mapping[str, JsonValue],
    discarded: tuple[JsonValue, ...],
    descendants: DescendantsEnd | None,
) -> Commit:
    """End a run that has no attempt here (awaiting, queued, or running elsewhere), fenced
    by the generation and state kind that were read."""
    return Commit(
        run_id=run_id,
        state=Ended(request.cause),
        generation=generation,
        expect=Expect(generation=generation, state=state),
        at=at,
        discarded_messages=discarded,
        detail=detail,
        end_descendants=descendants,
    )
