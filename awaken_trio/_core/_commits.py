"""The commit mailbox: how the supervisor writes to the store.

Every commit (start, progress, pause, await, terminal) goes through `CommitMailbox.commit`.
The mailbox task takes all commits waiting, hands them to the store as one batch (group
commit: one transaction for many runs), and then, still in the same synchronous step, runs
each commit's ``on_commit`` effect: register an attempt, deregister it, free its thread,
release ``wait()``. So a commit and its effects are one step, and nothing can observe one
without the other. A store that needs no I/O is applied inline instead, in the committing
task's own step, with the same effects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple, final

import attrs
import outcome
import trio

from ._errors import RuntimeClosed, StoreError
from ._storage import Commit, CommitResult, InlineStore, Store
from ._util import safe_repr

# Store errors (DESIGN §3.6): one record per commit a store failed to apply.
logger = logging.getLogger("awaken_trio.store")

OnCommit = Callable[[CommitResult], None]
OnAnswer = Callable[[CommitResult | StoreError], None]
OnInterrupt = Callable[[BaseException], None]


class _Pending(NamedTuple):
    """A commit handed to the mailbox, its effect, and the task waiting for the answer (or,
    for a commit nobody waits for, `CommitMailbox.post`, the callback that takes it).
    A tuple (one is made per commit): the answer goes back as the value the task is
    rescheduled with, so nothing else needs a place to hold it."""

    commit: Commit
    on_commit: OnCommit | None
    task: trio.lowlevel.Task | OnAnswer


def _cannot_abort(_: object) -> trio.lowlevel.Abort:
    # A commit handed over lands, and its effects run, even if its caller is cancelled:
    # the wait for it cannot be interrupted (as a shielded wait, without a cancel scope per
    # commit).
    return trio.lowlevel.Abort.FAILED


@final
@attrs.frozen
class CommitStatistics:
    """Counters for monitoring group commit."""

    commits: int
    batches: int
    largest_batch: int
    waiting: int


@final
@attrs.define(eq=False)
class CommitMailbox:
    """Owns the store's write side: the mailbox of commits and the task that applies them."""

    store: Store
    max_batch: int = 1024
    # Told about a KeyboardInterrupt or SystemExit raised by the store: the runtime shuts
    # down and raises it when it closes, instead of losing it in the mailbox task.
    on_interrupt: OnInterrupt | None = None
    _queue: list[_Pending] = attrs.field(factory=list, init=False)
    _wakeup: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _stopped: bool = attrs.field(default=False, init=False)
    _commits: int = attrs.field(default=0, init=False)
    _batches: int = attrs.field(default=0, init=False)
    # Commits applied right here (`commit_now`): each one a batch of its own, counted once.
    _inline: int = attrs.field(default=0, init=False)
    _largest: int = attrs.field(default=0, init=False)
    events_changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _listening: bool = attrs.field(default=False, init=False)
    _apply_now: Callable[[Sequence[Commit]], list[CommitResult]] | None = attrs.field(
        default=None, init=False
    )

    def __attrs_post_init__(self) -> None:
        if isinstance(self.store, InlineStore) and self.store.inline:
            self._apply_now = self.store.apply_now

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The mailbox task: apply batches until closed and drained."""
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
            self._listening = True
            self.publish()

    async def _apply(self, batch: list[_Pending]) -> None:
        try:
            results = await self.store.apply([pending.commit for pending in batch])
            if len(results) != len(batch):
                raise StoreError(
                    f"the store answered {len(results)} results for a batch of {len(batch)}"
                    " commits; whether they landed is unknown"
                )
        except trio.Cancelled:  # pragma: no cover - the mailbox task runs shielded
            raise
        except BaseException as exc:
            self._note_interrupt(exc)
            for commit, _, task in batch:
                error = _store_error(commit, exc, len(batch))
                if type(task) is trio.lowlevel.Task:
                    trio.lowlevel.reschedule(task, outcome.Error(error))
                else:
                    _answer(task, error)
            self.publish()
            return
        for (_, on_commit, task), result in zip(batch, results, strict=True):
            # Each commit's effect runs in the commit's step. An effect never takes the
            # mailbox down with it: what it raised goes to the committer alone.
            if type(task) is not trio.lowlevel.Task:
                _answer(task, result)
                continue
            answer: outcome.Outcome[CommitResult] = outcome.Value(result)
            if on_commit is not None:
                try:
                    on_commit(result)
                except Exception as exc:
                    answer = outcome.Error(exc)
            trio.lowlevel.reschedule(task, answer)
        self._count(len(batch))

    def _note_interrupt(self, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | SystemExit) and self.on_interrupt is not None:
            self.on_interrupt(exc)

    def _count(self, size: int) -> None:
        self._commits += size
        self._batches += 1
        self._largest = max(self._largest, size)
        self.publish()

    def publish(self) -> None:
        """Wake whoever took `changed_event`: a commit landed here, or (called by the
        relay) the store changed elsewhere."""
        if self._listening:
            self._listening = False
            self.events_changed.set()
            self.events_changed = trio.Event()

    def changed_event(self) -> trio.Event:
        """An event set at the next commit (for followers of the event log)."""
        self._listening = True
        return self.events_changed

    def commit_now(self, commit: Commit, on_commit: OnCommit | None = None) -> CommitResult | None:
        """Apply ``commit`` right here if the store needs no I/O and nothing is waiting
        ahead of it; None if it must go through the mailbox (`commit`).

        The commit and its ``on_commit`` effect happen in the caller's step, with no task
        switch (so this is not a checkpoint: its callers are).
        """
        if self._apply_now is None or self._queue:
            return None
        if self._stopped:
            raise RuntimeClosed(
                "the runtime has closed and commits nothing more; open a new runtime"
            )
        try:
            result = self._apply_now((commit,))[0]
        except BaseException as exc:
            self._note_interrupt(exc)
            raise _store_error(commit, exc) from exc
        self._inline += 1
        if self._listening:
            self.publish()
        if on_commit is not None:
            on_commit(result)  # runs in the caller: what it raises is the caller's
        return result

    async def commit(self, commit: Commit, on_commit: OnCommit | None = None) -> CommitResult:
        """Commit and return the store's answer; ``on_commit`` runs in the commit's step.

        A store that needs no I/O (``inline``) is applied right here, synchronously
        (`commit_now`); otherwise the commit joins the mailbox and the mailbox task applies
        it with everything else waiting (group commit). Either way the call cannot be
        interrupted once made: a commit handed over lands, and its effects run, even if
        the caller is being cancelled.
        """
        if self._apply_now is not None:
            applied = self.commit_now(commit, on_commit)
            if applied is not None:
                return applied
        if self._stopped:
            raise RuntimeClosed(
                "the runtime has closed and commits nothing more; open a new runtime"
            )
        self._queue.append(_Pending(commit, on_commit, trio.lowlevel.current_task()))
        self._wakeup.set()
        # The mailbox task reschedules us with the store's answer, or with the error.
        answer: CommitResult = await trio.lowlevel.wait_task_rescheduled(_cannot_abort)
        return answer

    def post(self, commit: Commit, on_answer: OnAnswer) -> None:
        """Hand ``commit`` over without waiting for it: ``on_answer`` is called with the
        store's answer, or the `StoreError` it failed with, in the commit's step (right
        here, on a store that needs no I/O; else in the mailbox task's, with whatever else
        waits). Sync. ``on_answer`` must not raise (what it raises is logged).

        Raises:
            RuntimeClosed: the mailbox has stopped (nothing was handed over).
        """
        if self._stopped:
            raise RuntimeClosed(
                "the runtime has closed and commits nothing more; open a new runtime"
            )
        if self._apply_now is not None and not self._queue:
            try:
                applied = self.commit_now(commit)
            except StoreError as exc:
                _answer(on_answer, exc)
                return
            assert applied is not None  # (nothing waits ahead of it)
            _answer(on_answer, applied)
            return
        self._queue.append(_Pending(commit, None, on_answer))
        self._wakeup.set()

    @property
    def applies_now(self) -> bool:
        """Whether `commit_now` would apply a commit right here: the store needs no I/O and
        nothing waits in the mailbox ahead of it."""
        return self._apply_now is not None and not self._queue

    @property
    def inline(self) -> bool:
        """Whether commits apply in the committing task's own step (no task switch)."""
        return self._apply_now is not None

    @property
    def stopped(self) -> bool:
        """Whether the mailbox has stopped (the runtime is closed)."""
        return self._stopped

    def close(self) -> None:
        """Stop once the mailbox is drained."""
        self._closing = True
        self._wakeup.set()

    def statistics(self) -> CommitStatistics:
        commits = self._commits + self._inline
        return CommitStatistics(
            commits=commits,
            batches=self._batches + self._inline,
            largest_batch=max(self._largest, 1 if commits else 0),
            waiting=len(self._queue),
        )


def _answer(on_answer: OnAnswer, answer: CommitResult | StoreError) -> None:
    """Give a posted commit's answer to its callback; it never takes the mailbox down."""
    try:
        on_answer(answer)
    except Exception:
        logger.exception("a posted commit's answer could not be taken")


def _store_error(commit: Commit, exc: BaseException, size: int = 1) -> StoreError:
    """The error a committer gets for a commit the store failed to apply; logged once here
    (store errors at ERROR, with the run id: DESIGN §3.6), whoever receives it."""
    known = isinstance(exc, StoreError) and not exc.outcome_unknown
    if known:
        outcome = "nothing was committed"
    else:
        outcome = (
            "whether it was committed is unknown: read the run's committed state before"
            " acting on it"
        )
    batch = f" (in a batch of {size})" if size > 1 else ""
    error = StoreError(
        f"the store failed to apply a commit for run {commit.run_id!r}{batch}:"
        f" {safe_repr(exc)}; {outcome}",
        outcome_unknown=not known,
    )
    error.__cause__ = exc
    if not isinstance(exc, KeyboardInterrupt | SystemExit):
        logger.error("%s", error, extra={"run_id": commit.run_id})
    return error
