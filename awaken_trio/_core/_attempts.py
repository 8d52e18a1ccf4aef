"""The attempts admissions are made of: a new run's first, a stored run's next.

Each is built by its own ``__init__`` (see `_commit_of`, "Built by their own __init__"),
positionally, in the order of `Attempt`'s fields, and is not yet admitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._attempt import Attempt, Body, OwnershipVerifier, RetryPlan
from ._json import JsonValue
from ._policy import NO_DEADLINES, Deadlines
from ._spec import RunSpec
from ._state import ResumeTicket, RunRecord
from ._storage import Fence, NewRun

if TYPE_CHECKING:
    from ._kernel import Kernel


def new_attempt(
    kernel: Kernel,
    spec: RunSpec,
    *,
    generation: int,
    steps: int,
    checkpoint: JsonValue,
    resume_value: JsonValue = None,
    ticket: ResumeTicket | None = None,
    retries: int = 0,
) -> Attempt:
    """The attempt ``generation`` of the run ``spec`` describes, after ``retries`` retries
    of the run."""
    run_id, thread_id, parent = spec.run_id, spec.thread_id, spec.parent
    factory = kernel.verifier_factory
    return _attempt(
        run_id,
        thread_id,
        generation,
        parent,
        spec.body,
        spec.input,
        checkpoint,
        resume_value,
        spec.max_steps,
        steps,
        ticket,
        None if factory is None else factory(run_id, thread_id, generation),
        spec.name,
        # A child lives on its root's claim.
        run_id if parent is None else parent.root_run_id,
        None if parent is None else parent.fence,
        spec.deadlines.deadline,
        None if spec.retry is None else RetryPlan(spec.retry, retries),
    )


def stored_attempt(
    kernel: Kernel,
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
        deadlines=NO_DEADLINES if record.deadline is None else Deadlines(record.deadline),
        retry=record.retry,
    )
    return new_attempt(
        kernel,
        spec,
        generation=record.generation + 1,
        steps=record.steps,
        checkpoint=record.checkpoint,
        resume_value=resume_value,
        ticket=ticket,
        retries=record.retries,
    )


def first_attempt(
    kernel: Kernel,
    body: Body,
    input: JsonValue,
    run_id: str,
    thread_id: str,
    name: str | None,
    max_steps: int | None,
) -> tuple[Attempt, NewRun]:
    """The first attempt of a new top-level run with no time limits, no retry policy and
    the default busy-thread policy, checked already (`Admissions.start_root`), and the run
    its commit creates. A run started with a registered body carries its name, and pins
    its version."""
    if name is None and kernel.named:
        name = kernel.name_of(body)
    version = kernel.version_for(name, body) if kernel.versions else None
    factory = kernel.verifier_factory
    attempt = _attempt(
        run_id,
        thread_id,
        1,
        None,
        body,
        input,
        None,
        None,
        max_steps,
        0,
        None,
        None if factory is None else factory(run_id, thread_id, 1),
        name,
        run_id,
        None,
        None,
        None,
    )
    new_run = NewRun(
        thread_id,
        None,
        name,
        input,
        max_steps,
        run_id,
        None,
        None,
        (),
        None,
        None,
        "queue",
        version,
        None,
    )
    return attempt, new_run


def _attempt(
    run_id: str,
    thread_id: str,
    generation: int,
    parent: Attempt | None,
    body: Body,
    input: JsonValue,
    checkpoint: JsonValue,
    resume_value: JsonValue,
    max_steps: int | None,
    steps: int,
    ticket: ResumeTicket | None,
    verifier: OwnershipVerifier | None,
    name: str | None,
    root_run_id: str,
    fence: Fence | None,
    deadline: float | None,
    retry: RetryPlan | None,
) -> Attempt:
    attempt = object.__new__(Attempt)
    Attempt.__init__(
        attempt,
        run_id,
        thread_id,
        generation,
        parent,
        body,
        input,
        checkpoint,
        resume_value,
        max_steps,
        steps,
        ticket,
        verifier,
        name,
        root_run_id,
        fence,
        deadline,
        retry,
    )
    return attempt
