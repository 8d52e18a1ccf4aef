"""The supervisor: the one writer of committed state.

Every commit (start, progress, pause, await, terminal) goes through `Supervisor.commit`.
The supervisor task takes all commits waiting in its mailbox, hands them to the store as
one batch (group commit: one transaction for many runs), and then, still in the same
synchronous step, runs each commit's ``on_commit`` effect: register an attempt, deregister
it, free its thread, release ``wait()``. So a commit and its effects are one step, and
nothing can observe one without the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import attrs
import trio

from ._errors import RuntimeClosed, StoreError
from .store import Commit, CommitResult, Store

OnCommit = Callable[[CommitResult], None]


@attrs.define(eq=False)
class _Pending:
    commit: Commit
    on_commit: OnCommit | None
    result: CommitResult | None = None
    error: BaseException | None = None
    done: trio.Event = attrs.field(factory=trio.Event)


@final
@attrs.frozen
class SupervisorStatistics:
    """Counters for monitoring group commit."""

    commits: int
    batches: int
    largest_batch: int
    waiting: int


@final
@attrs.define(eq=False)
class Supervisor:
    """Owns the mailbox of commits and the store's write side."""

    store: Store
    max_batch: int = 1024
    _queue: list[_Pending] = attrs.field(factory=list, init=False)
    _wakeup: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _stopped: bool = attrs.field(default=False, init=False)
    _commits: int = attrs.field(default=0, init=False)
    _batches: int = attrs.field(default=0, init=False)
    _largest: int = attrs.field(default=0, init=False)
    events_changed: trio.Event = attrs.field(factory=trio.Event, init=False)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The supervisor task: apply batches until closed and drained."""
        task_status.started()
        try:
            while True:
                if not self._queue:
                    if self._closing:
                        return
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
                    continue
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                await self._apply(batch)
        finally:
            self._stopped = True
            self._publish()

    async def _apply(self, batch: list[_Pending]) -> None:
        try:
            results = await self.store.apply([p.commit for p in batch])
            if len(results) != len(batch):
                raise StoreError(f"store returned {len(results)} results for {len(batch)} commits")
        except Exception as exc:
            for pending in batch:
                pending.error = exc
                pending.done.set()
        else:
            self._commits += len(batch)
            self._batches += 1
            self._largest = max(self._largest, len(batch))
            for pending, result in zip(batch, results, strict=True):
                pending.result = result
                if pending.on_commit is not None:
                    pending.on_commit(result)
                pending.done.set()
        self._publish()

    def _publish(self) -> None:
        self.events_changed.set()
        self.events_changed = trio.Event()

    async def commit(self, commit: Commit, on_commit: OnCommit | None = None) -> CommitResult:
        """Commit through the mailbox and return the store's answer.

        The wait is shielded: once handed over, a commit lands, and its effects run, even if
        the caller is being cancelled; the caller learns the answer either way.
        """
        if self._stopped:
            raise RuntimeClosed("the runtime's supervisor has stopped; open a new runtime")
        pending = _Pending(commit, on_commit)
        self._queue.append(pending)
        self._wakeup.set()
        with trio.CancelScope(shield=True):
            await pending.done.wait()
        if pending.error is not None:
            raise StoreError(
                f"the store failed to apply a commit for run {commit.run_id!r}:"
                f" {pending.error!r}; committed truth is unchanged"
            ) from pending.error
        assert pending.result is not None
        return pending.result

    @property
    def stopped(self) -> bool:
        """Whether the supervisor has stopped (the runtime is closed)."""
        return self._stopped

    def close(self) -> None:
        """Stop once the mailbox is drained."""
        self._closing = True
        self._wakeup.set()

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            commits=self._commits,
            batches=self._batches,
            largest_batch=self._largest,
            waiting=len(self._queue),
        )
