"""Commits the store tests build by hand."""

from __future__ import annotations

from typing import Any

from awaken_trio import RunState
from awaken_trio.store import Claim, Commit, Expect, Fence, IfBusy, NewRun


def new_commit(
    run_id: str,
    *,
    thread_id: str | None = None,
    state: RunState | None = None,
    name: str | None = "job",
    parent: str | None = None,
    root: str | None = None,
    if_busy: IfBusy = "queue",
    claim: Claim | None = None,
    fence: Fence | None = None,
    thread_guard: bool = False,
    take_messages: bool = False,
) -> Commit:
    """The commit that creates ``run_id``: ``Queued`` (a submit), or ``state`` at its first
    generation (a start), on ``t-<run_id>`` unless ``thread_id`` says otherwise, taking
    ``claim`` or made under ``fence``."""
    return Commit(
        run_id=run_id,
        state=RunState.Queued() if state is None else state,
        generation=0 if state is None else 1,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(
            thread_id=f"t-{run_id}" if thread_id is None else thread_id,
            parent_run_id=parent,
            root_run_id=root,
            name=name,
            if_busy=if_busy,
        ),
        claim=claim,
        fence=fence,
        thread_guard=thread_guard,
        take_messages=take_messages,
    )


def new_queued(run_id: str, *, thread_id: str | None = None, name: str = "job") -> Commit:
    """The commit that creates ``run_id`` queued, a named root run (on ``t-<run_id>``
    unless ``thread_id`` says otherwise)."""
    return new_commit(run_id, thread_id=thread_id, name=name)


def still_running(
    run_id: str, *, expect: Expect, at: float, fence: Fence | None = None, **fields: Any
) -> Commit:
    """A commit of the existing run ``run_id`` that leaves it ``Running`` at its first
    generation (a start from the queue, a step, a commit under a claim), as ``expect``
    says it finds it, made under ``fence``, with ``fields``."""
    return Commit(
        run_id=run_id,
        state=RunState.Running(1),
        generation=1,
        expect=expect,
        at=at,
        fence=fence,
        **fields,
    )
