"""Commits the store tests build by hand."""

from __future__ import annotations

from awaken_trio import RunState
from awaken_trio.store import Commit, Expect, NewRun


def new_queued(run_id: str, *, thread_id: str | None = None, name: str = "job") -> Commit:
    """The commit that creates ``run_id`` queued, a named root run (on ``t-<run_id>``
    unless ``thread_id`` says otherwise)."""
    return Commit(
        run_id=run_id,
        state=RunState.Queued(),
        generation=0,
        expect=Expect(new=True),
        at=1.0,
        new_run=NewRun(
            thread_id=f"t-{run_id}" if thread_id is None else thread_id,
            parent_run_id=None,
            name=name,
        ),
    )
