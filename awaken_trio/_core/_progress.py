"""A running attempt's own commits: progress at a boundary, the receipt of stored messages,
a body's events, its journaled steps (and the read of those at its first step); and what
happens when the store refuses one (the attempt has lost its run)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn, final

import trio

from . import _commit_of as commit_of
from ._attempt import lost
from ._errors import RunAlreadyEnded, RuntimeClosed, StoreError
from ._journal import read_steps, step_detail
from ._json import FrozenDict, JsonValue, freeze_detail
from ._state import Ended, RunEvent
from ._storage import CommitResult, Rejected, RejectReason

if TYPE_CHECKING:
    from ._attempt import Attempt
    from ._kernel import Kernel
    from ._streams import StreamOutbox

# Fenced commits: an attempt that lost its claim (logger "awaken_trio"; the run id in extra).
logger = logging.getLogger("awaken_trio")

_DETAIL_BOUNDARY = freeze_detail({"source": "boundary"}, "detail")


@final
class Progress:
    """The commits a running attempt makes between its start and its end."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    async def commit_progress(self, attempt: Attempt, progress: JsonValue, steps: int) -> None:
        """Commit ``Running`` with new progress, fenced by the attempt's generation."""
        kernel = self._kernel
        commit = commit_of.progress(
            attempt, progress, steps, at=kernel.now(), detail=_DETAIL_BOUNDARY
        )
        result = await kernel.mailbox.commit(commit)
        if isinstance(result, Rejected):
            await refused(kernel, attempt, result, "progress")
        attempt.checkpoint = progress

    async def hand_over(self, attempt: Attempt) -> list[JsonValue]:
        """The messages not yet read, for a boundary to return, when the store holds some
        of them (sent with ``send``): their receipt is committed first (its event lists
        them as ``received``), so each is either received or, if the run ends elsewhere
        before that commit, discarded by that end, never both. Received messages stay
        stored until the attempt's next commit consumes them: if the attempt is lost
        before it, the attempt that replaces it starts from the checkpoint taken before
        they were read and is handed them again. A run ended elsewhere or a lost claim
        cancels the attempt right here, with the messages left unread."""
        kernel = self._kernel
        at = kernel.now()
        taken = attempt.take_messages()
        received = taken.stored_ids()
        consumed = attempt.take_consumed()
        try:
            detail = freeze_detail(
                {"source": "boundary", "received": list(taken.stored_messages())}, "detail"
            )
            commit = commit_of.receive(
                attempt, at=at, detail=detail, consumed=consumed, delivered=received
            )
            result = await kernel.mailbox.commit(commit)
            if isinstance(result, Rejected):
                await refused(kernel, attempt, result, "taking messages")
        except BaseException:
            attempt.put_back(taken)
            for command_id in consumed:
                attempt.consume(command_id)
            raise
        for command_id in received:
            attempt.consume(command_id)  # by the attempt's next commit
        return taken.messages()

    async def emit(self, attempt: Attempt, kind: str, detail: FrozenDict) -> None:
        """Commit a body's own event; no state changes. Fenced like any commit of the
        attempt, so an attempt that has lost its run commits nothing."""
        kernel = self._kernel
        result = await kernel.mailbox.commit(commit_of.emit(attempt, kind, detail, at=kernel.now()))
        if isinstance(result, Rejected):
            await refused(kernel, attempt, result, "an event")

    async def flush_chunks(self, attempt: Attempt) -> None:
        """Commit every chunk the attempt's stream writers hold, and wait for the answer
        (`StreamWriter.flush`). Fenced like every commit of the attempt: refused, the
        attempt stops as `refused` says, and the chunks are dropped."""
        box = attempt.streams
        assert box is not None
        kernel = self._kernel
        at = kernel.now()
        drafts, count = box.take()
        try:
            result = await kernel.mailbox.commit(commit_of.stream(attempt, drafts, at=at))
        except StoreError as exc:
            box.land(count, exc)
            raise
        except BaseException:
            box.land(count)
            raise
        box.land(count)
        if isinstance(result, Rejected):
            await refused(kernel, attempt, result, "stream chunks")

    def post_chunks(self, box: StreamOutbox) -> None:
        """Hand every chunk ``box`` holds to the mailbox as one commit, without waiting
        (the stream flusher's). Its answer is taken in the commit's step: a refusal stops
        the attempt as `refused` would (the chunks are dropped), a store failure is kept
        for the writers' next `StreamWriter.flush`."""
        kernel = self._kernel
        attempt = box.attempt
        at, _ = kernel.now_for_end()  # (a clock that fails dates the chunks as last read)
        drafts, count = box.take()
        commit = commit_of.stream(attempt, drafts, at=at)

        def answered(answer: CommitResult | StoreError) -> None:
            if isinstance(answer, StoreError):
                box.land(count, answer)
                return
            box.land(count)
            if isinstance(answer, Rejected):
                stop_refused(kernel, attempt, answer, "stream chunks", box)

        try:
            kernel.mailbox.post(commit, answered)
        except RuntimeClosed:
            box.land(count)  # the runtime has closed: its attempts are gone

    async def load_steps(self, attempt: Attempt) -> list[RunEvent]:
        """The run's committed ``step`` events, for the attempt's journal (a read)."""
        return await read_steps(self._kernel.store, attempt.run_id)

    async def commit_step(self, attempt: Attempt, name: str, result: JsonValue) -> None:
        """Journal a step's result under the next index of its name. The index is taken in
        the same step as the commit is handed to the mailbox, which applies commits in the
        order they are handed over: indexes of one name are in the order their commits
        land. Fenced like any commit of the attempt: an attempt that has lost its run
        journals nothing and stops here."""
        kernel = self._kernel
        journal = attempt.journal
        assert journal is not None, "a step loads its attempt's journal first"
        detail = step_detail(name, journal.take_index(name), result)
        answer = await kernel.mailbox.commit(commit_of.step(attempt, detail, at=kernel.now()))
        if isinstance(answer, Rejected):
            await refused(kernel, attempt, answer, f"step {name!r}")


def stop_refused(
    kernel: Kernel, attempt: Attempt, result: Rejected, what: str, box: StreamOutbox
) -> None:
    """`refused`, for a commit nobody awaits: the attempt is stopped the same way, and a
    refusal that is neither a fence nor an end is kept for the writers' next flush."""
    if result.reason is RejectReason.FENCED:
        fenced(attempt, what)
        kernel.lose_attempt(attempt, "its claim is no longer current (superseded or lapsed)")
    elif isinstance(result.state, Ended):
        why = f"the run was ended elsewhere: {result.state!r}"
        attempt.request_end(lost(why, claim_lost=False))
    else:
        box.land(
            0,
            StoreError(
                f"{what} of run {attempt.run_id!r} attempt {attempt.generation} were fenced"
                f" off: the run moved on to {result.state!r}",
                outcome_unknown=False,
            ),
        )


async def refused(kernel: Kernel, attempt: Attempt, result: Rejected, what: str) -> NoReturn:
    """A commit of a running attempt was refused. Its claim superseded or lapsed, or its run
    ended by another runtime (``cancel_run``/``stop_run`` from elsewhere, or its parent's
    end there): the attempt stops at once, the cancellation reaching the body right here
    (never a store error), and commits nothing more. Only a body that shields the call
    hears why instead; so does one whose run moved on otherwise."""
    if result.reason is RejectReason.FENCED:
        fenced(attempt, what)
        kernel.lose_attempt(attempt, "its claim is no longer current (superseded or lapsed)")
        await trio.lowlevel.checkpoint()  # raises the cancellation just requested
    assert result.state is not None
    if isinstance(result.state, Ended):
        # What the relay does once it sees the end; this commit saw it first.
        why = f"the run was ended elsewhere: {result.state!r}"
        attempt.request_end(lost(why, claim_lost=False))
        await trio.lowlevel.checkpoint()
        raise RunAlreadyEnded(attempt.run_id, result.state)
    raise StoreError(
        f"{what} of run {attempt.run_id!r} attempt {attempt.generation} was fenced off:"
        f" the run moved on to {result.state!r}",
        outcome_unknown=False,
    )


def fenced(attempt: Attempt, what: str) -> None:
    logger.warning(
        "run %r attempt %d: %s was fenced off (its claim is another runtime's now, or"
        " lapsed): the attempt commits nothing more here",
        attempt.run_id,
        attempt.generation,
        what,
        extra={"run_id": attempt.run_id},
    )
