"""Commits by intent, as the store contract suites hand them to a store under test.

The suites play the supervisor's part against a bare store, with no runtime: they build
the commits an attempt's start, progress, pause or end would make (the runtime's own
builders, ``_core/_commit_of.py``, build them from attempts), each named for what it
commits, with the fields a check varies given by name. ``expect`` defaults to no
expectation (`ANY`): only the store's own rules decide, unless a check names one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypedDict, Unpack

from .. import EndCause, JsonValue, ResumeTicket, RunState
from ..store import (
    Claim,
    Commit,
    DescendantsEnd,
    EventDraft,
    Expect,
    Fence,
    IfBusy,
    NewRun,
)

Running = RunState.Running
Queued = RunState.Queued
Awaiting = RunState.Awaiting
Ended = RunState.Ended

CANCELLED: Final = Ended(EndCause.Cancelled())
DONE: Final = Ended(EndCause.NaturalEnd())

ANY: Final = Expect()
"""No expectation: only the store's own rules (its fences, its claims) decide."""


class Fields(TypedDict, total=False):
    """The fields of a `Commit` past its run, state, generation, expectation and time (see
    `Commit` for each)."""

    result: JsonValue
    checkpoint: JsonValue
    steps: int | None
    carried_messages: tuple[JsonValue, ...]
    carried_pause: bool
    take_messages: bool
    discarded_messages: tuple[JsonValue, ...]
    events: tuple[EventDraft, ...]
    detail: Mapping[str, JsonValue]
    announce: bool
    resume_value: JsonValue
    resume_ticket: ResumeTicket | None
    fence: Fence | None
    claim: Claim | None
    release: bool
    thread_guard: bool
    consumed: tuple[int, ...]
    delivered: tuple[int, ...]
    end_descendants: DescendantsEnd | None
    body_version: str | None
    not_before: float | None


def asking(run_id: str, correlation_id: str = "c1") -> ResumeTicket:
    """A ticket of ``run_id`` (on its own thread) waiting for an answer."""
    return ResumeTicket(
        correlation_id=correlation_id,
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        reason="user_input",
        payload={"question": "?"},
    )


def scheduled(run_id: str, wake_at: float) -> ResumeTicket:
    """A ticket of ``run_id`` its store hands out as due at ``wake_at`` (a sleep)."""
    return ResumeTicket(
        correlation_id=f"sleep-{run_id}",
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        reason="scheduled_action",
        payload={"wake_at": wake_at},
    )


def create(
    run_id: str,
    state: RunState | None = None,
    *,
    generation: int = 1,
    parent: str | None = None,
    name: str | None = None,
    input: JsonValue = None,
    max_steps: int | None = None,
    at: float = 1.0,
    detail: dict[str, JsonValue] | None = None,
    thread: str | None = None,
    root: str | None = None,
    claim: Claim | None = None,
    fence: Fence | None = None,
    thread_guard: bool = False,
    if_busy: IfBusy = "queue",
    not_before: float | None = None,
    deadline: float | None = None,
    queue_deadline: float | None = None,
) -> Commit:
    """A run created (``Running(generation)`` unless ``state`` says otherwise), on a
    thread of its own unless ``thread`` is given; a queued one not to start before
    ``not_before`` if given; with its time limits if given."""
    return Commit(
        run_id=run_id,
        state=Running(generation) if state is None else state,
        generation=generation,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(
            thread or f"thread-{run_id}",
            parent,
            name,
            input,
            max_steps,
            root,
            deadline=deadline,
            queue_deadline=queue_deadline,
            if_busy=if_busy,
        ),
        detail={"source": "start"} if detail is None else detail,
        claim=claim,
        fence=fence,
        thread_guard=thread_guard,
        not_before=not_before,
    )


def create_child(
    run_id: str,
    parent: str,
    root: str,
    fence: Fence | None,
    state: RunState | None = None,
    *,
    at: float = 2.0,
    thread: str | None = None,
) -> Commit:
    """A child run (unnamed) created under its root's claim."""
    return Commit(
        run_id=run_id,
        state=Running(1) if state is None else state,
        generation=0 if isinstance(state, Queued) else 1,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(thread or f"thread-{run_id}", parent, None, None, None, root),
        fence=fence,
    )


def commit(
    run_id: str,
    state: RunState,
    generation: int = 1,
    *,
    expect: Expect = ANY,
    at: float = 2.0,
    **fields: Unpack[Fields],
) -> Commit:
    """A commit of any ``state``: for the checks that hold one rule across every state
    (the terminal fence, the result kept only by an end, the step count)."""
    return Commit(run_id=run_id, state=state, generation=generation, expect=expect, at=at, **fields)


def run(
    run_id: str,
    generation: int = 1,
    *,
    expect: Expect = ANY,
    at: float = 2.0,
    **fields: Unpack[Fields],
) -> Commit:
    """The attempt of ``generation`` runs: its start (``take_messages``, a ``claim``, the
    answer it resumes with), its progress (``checkpoint``, ``steps``, ``events``), or a
    commit under its fence."""
    return commit(run_id, Running(generation), generation, expect=expect, at=at, **fields)


def answer(
    run_id: str,
    answered: ResumeTicket,
    value: JsonValue,
    generation: int,
    *,
    at: float = 2.0,
    claim: Claim | None = None,
) -> Commit:
    """The run awaiting ``answered`` (since ``generation - 1``) is answered with ``value``
    by the attempt of ``generation`` it starts here (under a new ``claim``): it takes what
    was carried, and keeps the answer for every attempt that starts before the run next
    awaits."""
    return run(
        run_id,
        generation,
        expect=Expect(
            generation=generation - 1, state=Awaiting, correlation_id=answered.correlation_id
        ),
        at=at,
        take_messages=True,
        resume_value=value,
        resume_ticket=answered,
        claim=claim,
    )


def pause(
    run_id: str,
    awaited: ResumeTicket,
    generation: int = 1,
    *,
    expect: Expect = ANY,
    at: float = 2.0,
    **fields: Unpack[Fields],
) -> Commit:
    """The run awaits ``awaited`` (what it keeps for its next attempt: ``carried_*``)."""
    return commit(run_id, Awaiting(awaited), generation, expect=expect, at=at, **fields)


def queue(
    run_id: str,
    generation: int = 1,
    *,
    expect: Expect = ANY,
    at: float = 2.0,
    **fields: Unpack[Fields],
) -> Commit:
    """The run goes back to the queue: released, behind its thread, or resumed there
    (``resume_value``, ``resume_ticket``)."""
    return commit(run_id, Queued(), generation, expect=expect, at=at, **fields)


def end(
    run_id: str,
    state: RunState,
    generation: int = 1,
    *,
    expect: Expect = ANY,
    at: float = 2.0,
    **fields: Unpack[Fields],
) -> Commit:
    """The run ends in ``state`` (an `Ended`: its ``result``, the messages it discards)."""
    return commit(run_id, state, generation, expect=expect, at=at, **fields)
