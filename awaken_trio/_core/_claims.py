"""The claim policy: what being on a store several runtimes share means for the kernel.

On a durable store (SQLite, PostgreSQL, a shared memory store) a root attempt runs under a
claim: it takes one when it starts, every commit of its tree is fenced by it, it is released
when the attempt is over, and what other runtimes sent is stored. On a store only this
runtime uses none of that happens. The kernel asks the one `ClaimPolicy` it is given and
never asks which kind it has: `NoClaims` (here) answers for a store without claims, and the
worker's claim book (``awaken_trio.worker``) for a durable one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol, final

import trio

from ._commands import LiveCommand
from ._storage import Fence

if TYPE_CHECKING:
    from ._host import ClaimSettings
    from ._json import JsonValue
    from ._state import RunRecord
    from ._storage import (
        Claim,
        CommandKind,
        CommitResult,
        DescendantsEnd,
        Rejected,
        StoredCommand,
    )

DEFAULT_POLL = 0.05
"""How often a waiter looks at a store again when nothing signals (a store without claims
signals every change itself)."""


class ClaimedAttempt(Protocol):
    """What the claim policy sees of an attempt (an ``Attempt`` is one)."""

    @property
    def run_id(self) -> str: ...
    @property
    def parent(self) -> object | None:
        """The attempt it is a child of (None for a root)."""
        ...

    @property
    def name(self) -> str | None: ...
    @property
    def generation(self) -> int: ...
    @property
    def started(self) -> bool:
        """It committed ``Running``."""
        ...

    # The claim every commit of its tree is made under (set once its root's start took it).
    fence: Fence | None

    def load_stored(
        self, command_id: int, kind: CommandKind, payload: JsonValue, reason: str | None
    ) -> None:
        """Apply a command stored for the run before this attempt began."""
        ...


class ClaimPolicy(Protocol):
    """How the kernel's commits and attempts relate to claims (see the module docstring).

    Invariant: a root run's claim is held (with its epoch) from the commit that took or
    recovered it until its attempt is over here; `forget` and `release` are the only ways
    out, and both are idempotent.
    """

    @property
    def settings(self) -> ClaimSettings | None:
        """How claims are taken (owner, lease, poll, recoveries); None without claims."""
        ...

    @property
    def poll(self) -> float:
        """How often a waiter looks at the store again even if nothing signalled."""
        ...

    @property
    def idle_wait(self) -> float:
        """How long a wait for a change waits by default: a poll interval on a store other
        runtimes change (a lapsed lease changes nothing in it), else for ever."""
        ...

    @property
    def quiet_ends(self) -> bool:
        """Whether no attempt's end needs anything of this policy: `releases_at_end` is
        False, `descendants_at_end` None and `after_end` does nothing, for every attempt
        (the finish boundary then commits a common end in one step,
        `FinishBoundary.end_plainly`)."""
        ...

    def hands_back(self, root: ClaimedAttempt) -> bool:
        """Whether the tree of ``root`` goes back to ``Queued`` for another runtime when
        this one closes (a named root on a durable store), rather than ending."""
        ...

    def start_under(self, attempt: ClaimedAttempt) -> Fence | Claim | None:
        """What a commit that starts ``attempt`` is made under: a new claim (a root that
        has none yet), its tree's claim (a child, or a recovered root), or nothing. Such a
        commit also guards the run's thread against other runtimes."""
        ...

    def hold(self, attempt: ClaimedAttempt, epoch: int | None) -> None:
        """``attempt`` started; ``epoch`` is the claim its start took, if it took one."""
        ...

    def releases_at_end(self, attempt: ClaimedAttempt) -> bool:
        """Whether the commit that ends ``attempt`` also drops its run's claim."""
        ...

    def descendants_at_end(self, attempt: ClaimedAttempt) -> DescendantsEnd | None:
        """What the commit that ends ``attempt`` (awaiting or ended) does with the run's
        descendants left unended: children an earlier attempt handed back that this one
        did not take back (rule 22) end with it."""
        ...

    async def after_end(
        self, attempt: ClaimedAttempt, result: CommitResult, released: bool
    ) -> None:
        """The end of ``attempt`` was committed (or refused, ``result``): let its claim go
        as that calls for (shielded, best effort)."""
        ...

    def end_answered(self, attempt: ClaimedAttempt, result: CommitResult, released: bool) -> None:
        """`after_end` for an end nobody waits for (a root attempt's, handed to the
        mailbox with no task waiting), in its commit's step: sync, so a claim still to let
        go is let go soon after by the policy's own task (best effort, as `after_end`)."""
        ...

    def commit_failed(self, attempt: ClaimedAttempt) -> None:
        """The store failed to take ``attempt``'s end: its claim is no longer renewed (the
        lease lapses, and recovery takes the run up)."""
        ...

    def forget(self, run_id: str) -> None:
        """Stop renewing the claim without telling the store: it lapsed, another runtime
        holds it, or the commit that ended the run released it."""
        ...

    async def release(self, run_id: str) -> None:
        """Hand the claim back to the store (shielded, best effort), and stop renewing it."""
        ...

    def others_may_run(self, record: RunRecord) -> bool:
        """Whether another runtime sharing the store may run ``record``'s next attempt
        (a root on a durable store), so it can be left ``Queued`` for one."""
        ...

    async def post(self, command: LiveCommand, at: float) -> StoredCommand | Rejected | None:
        """Store ``command`` for its run's attempt, wherever it runs: the stored command,
        or the refusal (the run is not running or queued); None when the store keeps no
        commands (the command is then delivered here, or nowhere)."""
        ...

    async def load_commands(self, attempt: ClaimedAttempt) -> None:
        """Apply to ``attempt`` the commands stored for its run before it began."""
        ...


@final
class NoClaims:
    """The policy of a store only this runtime uses: no claims, nothing stored."""

    __slots__ = ()

    settings: None = None
    poll = DEFAULT_POLL
    idle_wait = math.inf
    quiet_ends = True

    def hands_back(self, root: ClaimedAttempt) -> bool:
        return False

    def start_under(self, attempt: ClaimedAttempt) -> Fence | Claim | None:
        return None

    def hold(self, attempt: ClaimedAttempt, epoch: int | None) -> None:
        pass

    def releases_at_end(self, attempt: ClaimedAttempt) -> bool:
        return False

    def descendants_at_end(self, attempt: ClaimedAttempt) -> DescendantsEnd | None:
        # Without a release or a loss nothing is ever handed back: every child has ended.
        return None

    async def after_end(
        self, attempt: ClaimedAttempt, result: CommitResult, released: bool
    ) -> None:
        pass  # the finish boundary is not a checkpoint of its own here

    def end_answered(self, attempt: ClaimedAttempt, result: CommitResult, released: bool) -> None:
        pass

    def commit_failed(self, attempt: ClaimedAttempt) -> None:
        pass

    def forget(self, run_id: str) -> None:
        pass

    async def release(self, run_id: str) -> None:
        await trio.lowlevel.checkpoint()

    def others_may_run(self, record: RunRecord) -> bool:
        return False

    async def post(self, command: LiveCommand, at: float) -> StoredCommand | Rejected | None:
        await trio.lowlevel.checkpoint()
        return None

    async def load_commands(self, attempt: ClaimedAttempt) -> None:
        pass  # nothing is ever stored before an attempt begins
