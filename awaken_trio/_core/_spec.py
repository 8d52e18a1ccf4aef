"""`RunSpec`: a new run as its caller asked for it, checked once."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._json import JsonValue, check_payload
from ._policy import NO_DEADLINES, Deadlines, RetryPolicy, check_retry
from ._storage import IfBusy
from ._validate import (
    check_body,
    check_id,
    check_if_busy,
    check_max_steps,
    check_name,
    new_run_id,
)

if TYPE_CHECKING:
    from ._attempt import Attempt, Body


_NULL_BYTES = len("null")


def check_run_arguments(
    body: Body, run_id: str | None, thread_id: str | None, name: str | None, max_steps: int | None
) -> None:
    """Check what a caller gave a new run besides its input and its policies.

    Raises:
        InvalidBody, InvalidArgument: the argument named is bad.
    """
    check_body(body)
    if run_id is not None:
        check_id(run_id, "run_id")
    if thread_id is not None:
        check_id(thread_id, "thread_id")
    if name is not None:
        check_name(name)
    if max_steps is not None:
        check_max_steps(max_steps)


def checked_input(input: JsonValue, run_id: str, max_payload_bytes: int) -> JsonValue:
    """The run's input, checked and frozen.

    Raises:
        InvalidPayload: it is not JSON, or it is too large.
    """
    if input is None and max_payload_bytes >= _NULL_BYTES:
        # (The common input, None, fits any limit of at least its own 4 bytes: no
        # description of it is made for an error that cannot happen.)
        return None
    return check_payload(input, f"input of run {run_id!r}", max_payload_bytes)


@final
@attrs.frozen(kw_only=True)
class RunSpec:
    """What a run is started with: its body, input, ids, name, step budget, parent, and
    what its start does on a busy thread.

    Invariant: built by `checked` from a caller's arguments, or from a record the store
    holds (whose values were checked when they were committed): every field has passed its
    check, ``input`` is frozen JSON, and ``run_id`` and ``thread_id`` are set (a fresh id,
    and the run's own thread, by default).
    """

    body: Body
    input: JsonValue
    run_id: str
    thread_id: str
    name: str | None = None
    max_steps: int | None = None
    # The attempt a child run lives in (None: a top-level run).
    parent: Attempt | None = None
    # What its first commit does when its thread is busy (DESIGN §3.8).
    if_busy: IfBusy = "queue"
    # Its time limits, absolute (a child's deadline already the earlier of its own and
    # its parent's).
    deadlines: Deadlines = NO_DEADLINES
    # How it is tried again when its body fails (None: it is not).
    retry: RetryPolicy | None = None

    @classmethod
    def checked(
        cls,
        body: Body,
        *,
        input: JsonValue,
        run_id: str | None,
        thread_id: str | None,
        name: str | None,
        max_steps: int | None,
        parent: Attempt | None,
        max_payload_bytes: int,
        if_busy: IfBusy = "queue",
        deadlines: Deadlines = NO_DEADLINES,
        retry: RetryPolicy | None = None,
    ) -> RunSpec:
        """Check a caller's arguments for a new run (nothing is committed if one is bad).

        Raises:
            InvalidBody, InvalidArgument, InvalidPayload: the argument named is bad.
        """
        check_run_arguments(body, run_id, thread_id, name, max_steps)
        if if_busy != "queue":
            check_if_busy(if_busy)
        if retry is not None:
            check_retry(retry, "the run")
        run_id = run_id or new_run_id()
        input = checked_input(input, run_id, max_payload_bytes)
        if parent is not None and parent.deadline is not None:
            deadlines = deadlines.within(parent.deadline)
        spec = object.__new__(cls)  # (a class called with keywords costs twice as much)
        cls.__init__(
            spec,
            body=body,
            input=input,
            run_id=run_id,
            thread_id=thread_id or run_id,
            name=name,
            max_steps=max_steps,
            parent=parent,
            if_busy=if_busy,
            deadlines=deadlines,
            retry=retry,
        )
        return spec
