"""The store contract: the values the runtime commits and the protocol a store implements.

A store holds committed truth. The runtime's supervisor is its only writer: it hands the
store a batch of `Commit` values and the store applies them in one transaction, in order,
each one accepted or rejected on its own (a rejected commit changes nothing). Inside that
transaction every store enforces the same four rules:

* terminal fence: a run whose state is `Ended` accepts no further commit;
* expectation fence: a commit names what it expects to find (`Expect`: the generation,
  the kind of state, the live ticket), and is rejected when the run has moved on, so a
  stale attempt or a lost race can never overwrite newer truth;
* ticket slot: an `Awaiting` commit stores the ticket (inside the state) together with
  the messages it carries; any other commit deletes the ticket;
* resume: an answered ticket and its value stay with the run while it is queued or
  running, handed to every attempt that starts (a recovered one too), until an
  `Awaiting` or `Ended` commit deletes them.

A store shared by several runtimes (``durable``: SQLite, PostgreSQL, or a memory store
shared in one process) also keeps claims, and enforces two more rules in the same
transaction:

* claim fence: a commit made under a claim (`Fence`) is accepted only while the root run's
  claim is still that owner's, at that epoch, with its lease unexpired; epochs strictly
  increase per run, so a stalled or partitioned owner can commit nothing once it is
  superseded;
* thread guard: a commit that starts an attempt on a thread is refused while another run's
  attempt on that thread is live (its claim current), so one attempt per thread holds
  across every runtime sharing the store.

Lease times are the store's own: the store reads its clock inside the transaction
(SQLite: the machine's wall clock, which every process on it shares; a database server:
its ``now()``; the shared memory store: Trio's clock) to decide whether a lease has expired
and when a new or renewed one ends. The runtime hands it lease *durations* only, never a
time of its own, so a runtime whose clock is off can neither take a live claim nor miss a
dead one. (A commit's ``at`` is the runtime's clock: it dates the commit's events.)

The rules are written once, as functions over one store transaction: ``awaken_trio.store``'s
``_rules`` module, whose ``RunTx`` protocol each store (memory, SQLite, PostgreSQL)
implements over its own representation, keeping only its reads, indexes and I/O (the two
that keep text rows share that half, ``_textrows``). `awaken_trio.testing` ships
these rules as a test suite any store can run.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Literal, Protocol, TypeVar, final, runtime_checkable

import attrs
import trio

from ._errors import AwakenError, StoreError
from ._json import EMPTY_DICT, FrozenDict, JsonValue
from ._policy import RetryPolicy, TimeLimit
from ._state import CauseKind, Ended, ResumeTicket, RunEvent, RunRecord, RunState, StreamChunk
from ._util import safe_repr

T = TypeVar("T")


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""A commit's ``checkpoint`` when it keeps the committed one."""


class RejectReason(enum.StrEnum):
    """Why a store refused a commit (nothing changed)."""

    ENDED = "ended"
    """The run has ended: the terminal fence."""
    EXISTS = "exists"
    """The commit creates a run whose id is taken."""
    UNKNOWN = "unknown"
    """The commit names a run the store has never seen."""
    STALE = "stale"
    """The run moved on: its generation, state or ticket is not what the commit expects."""
    FENCED = "fenced"
    """The commit was made under a claim that is no longer current (superseded, released,
    or its lease expired), or asks for a claim another owner holds."""
    THREAD_BUSY = "thread_busy"
    """Another run's attempt is live on the run's thread."""
    BUSY = "busy"
    """The commit creates a run with ``if_busy="reject"`` (`NewRun.if_busy`) and another
    run on its thread is running or queued (`Rejected.holder` names it)."""


@final
@attrs.frozen
class Expect:
    """What a commit expects to find; anything else rejects it.

    Attributes:
        new: the run must not exist yet (the commit creates it).
        generation: the run's committed generation must equal this.
        state: the committed state must be of this variant (``RunState.Queued`` ...).
        correlation_id: the live ticket's correlation id must equal this.
    """

    new: bool = False
    generation: int | None = None
    state: type[RunState] | None = None
    correlation_id: str | None = None


@final
@attrs.frozen
class EventDraft:
    """An extra event that rides a commit, written before the commit's own event."""

    kind: str
    detail: Mapping[str, JsonValue]


@final
@attrs.define
class NewRun:
    """The identity of a run a commit creates (with ``Expect(new=True)``); part of the
    commit message, read-only like it.

    ``root_run_id`` is the top of the run's tree (its own id for a run without a parent):
    a child lives on its root's claim.
    """

    thread_id: str
    parent_run_id: str | None
    name: str | None
    input: JsonValue = None
    max_steps: int | None = None
    root_run_id: str | None = None
    # A forked run (`Runtime.fork`) starts from its source's checkpoint and its source's
    # journaled steps up to the same event (the details of its ``step`` events, in the
    # order they were committed, written as the new run's own first events), and says
    # where it came from (`RunRecord.forked_from`).
    checkpoint: JsonValue = None
    forked_from: JsonValue = None
    step_events: tuple[Mapping[str, JsonValue], ...] = ()
    # The run's time limits (`RunRecord.deadline`; the time its first attempt must have
    # started by), wall-clock seconds of the runtime's clock, fixed at its creation.
    deadline: float | None = None
    queue_deadline: float | None = None
    # What the commit does when the run's thread is busy (another run on it is running or
    # queued): ``"queue"`` nothing (the run waits its turn), ``"reject"`` refuse the commit
    # (`RejectReason.BUSY`), ``"supersede"`` end every other unended run of the thread
    # ``Stopped("superseded")`` in the same transaction (`Accepted.superseded`).
    if_busy: IfBusy = "queue"
    # The version of the body its first attempt runs with, when it is created Running or
    # queued here (`RunRecord.body_version`).
    body_version: str | None = None
    # How the run is tried again when its body fails (`RunRecord.retry`), fixed at its
    # creation; None: it is not.
    retry: RetryPolicy | None = None


@final
@attrs.frozen
class StreamDraft:
    """Chunks an attempt sent on one channel, for the store to write with a commit.

    They take the channel's next offsets, in order, at the commit's generation and ``at``.
    When another attempt wrote the channel last, the store first writes a ``"reset"``
    chunk of this generation, so a reader knows to drop that attempt's partial output.
    ``keep`` is the writer's (`RunContext.stream`): a channel whose last writer said
    ``keep=False`` keeps only its ``"end"`` chunk once the run ends.
    """

    channel: str
    values: tuple[JsonValue, ...]
    keep: bool = True


@final
@attrs.frozen
class StreamPage:
    """What one read of a run's stream found (`StreamingStore.read_chunks`).

    Attributes:
        chunks: the channel's chunks after the offset asked for, in offset order, at most
            the limit asked for. The first one's offset is the next one asked for, unless
            the chunks in between are no longer kept (a reader then raises `StreamGap`).
        last: the offset of the channel's last chunk (0: the run never wrote it).
        ended: the run had ended when the chunks were read (read first, or in the same
            snapshot: an ended run's chunks are all there, its ``"end"`` chunks
            included).
    """

    chunks: tuple[StreamChunk, ...]
    last: int
    ended: bool


@final
@attrs.frozen
class Fence:
    """The claim a commit is made under: ``root_run_id``'s claim must be ``owner``'s, at
    ``epoch``, with its lease not expired by the store's clock."""

    root_run_id: str
    owner: str
    epoch: int


@final
@attrs.frozen
class Claim:
    """A claim a commit takes on its (root) run: the next epoch, held by ``owner`` for
    ``lease`` seconds of the store's clock from the commit, unless renewed. Refused
    (`RejectReason.FENCED`) while another owner's claim on the run is live."""

    owner: str
    lease: float


@final
@attrs.define
class Commit:
    """One atomic change to one run.

    The runtime builds commits from values it has already checked and frozen (payloads
    are `FrozenDict`, `FrozenList` or scalars), so a store may keep them as they are.

    A commit is a message: built once per state change, handed to one store call, never
    changed. It is not a frozen attrs class only because it is built on the hot path, where
    a frozen instance of this many fields costs several times as much to build (every field
    goes through ``object.__setattr__``); treat it as read-only.

    Attributes:
        run_id: the run.
        state: the state to commit.
        generation: the generation to record (the attempt's, or the upcoming one's).
        expect: the fence.
        at: the runtime clock reading stamped on the events (never a lease time: leases
            are measured by the store's clock).
        new_run: identity of a run this commit creates.
        result: the run's result (NaturalEnd commits).
        checkpoint: new progress, or `UNSET` to keep the committed one.
        steps: the run's boundary count so far, or None to keep the committed one.
        carried_messages: messages an `Awaiting` commit keeps for the next attempt.
        carried_pause: an `Awaiting` commit keeps a pause that was asked of the attempt
            and not yet honoured (it ended at an await); the next attempt pauses at its first
            boundary.
        take_messages: hand the committed carried messages to the committer (an attempt
            start); they are cleared.
        discarded_messages: inbox messages a terminal commit throws away; the store adds
            its own carried messages and writes one ``messages_discarded`` event.
        events: extra events written before the commit's own event.
        detail: the detail of the commit's own event.
        announce: write the commit's own ``committed`` event. A commit that only records
            a body's events (``ctx.emit``) changes no state and announces nothing.
        resume_value: the value of an answered ticket: a ``Queued`` or ``Running`` commit
            with a value or a ticket (a queued resume, or the attempt a resume starts)
            makes it the run's resume, which the store keeps until the run next awaits
            or ends and hands to every attempt that starts meanwhile (``take_messages``),
            a recovered one included.
        resume_ticket: the ticket that resume answered, kept and handed over with it.
        fence: the claim the commit is made under (durable stores).
        claim: a claim the commit takes on its run (durable stores).
        release: the commit drops its run's claim (the attempt that held it is over).
        thread_guard: refuse the commit (`RejectReason.THREAD_BUSY`) while another run's
            attempt on the run's thread is live (durable stores).
        consumed: ids of stored commands (`StoredCommand.id`) the attempt has applied;
            deleted with the commit.
        delivered: ids of stored messages the attempt has just handed to its body. They
            stay stored until the attempt's next commit consumes them, so an attempt that
            replaces this one, if it is lost first, is handed them again (its checkpoint
            is from before they were read); an end of the run no longer lists them as
            discarded: they were received.
        end_descendants: before the commit's own change, end every descendant of the run
            that has not ended, each with its events, in the same transaction, children
            first: ``"parent_ended"`` ends them ``Ended(Cancelled())`` (detail ``source:
            "parent"``; a run ended while its attempt runs elsewhere, or while it has no
            attempt, takes its tree with it); ``"not_resumed"`` ends them
            ``Ended(Stopped("not resumed by parent"))`` (the end of a later attempt of a
            run whose earlier attempt handed children back that this one did not take
            back, DESIGN rule 22: every child this attempt had has ended by then);
            ``"deadline"`` ends them ``Ended(Stopped("deadline"))`` (detail ``source:
            "deadline"``: the run's deadline came, and a descendant's is never later). None
            leaves them to their attempts.
        chunks: stream chunks the attempt sent (`StreamDraft`, one or more per channel, in
            the order they were sent), written with the commit at each channel's next
            offsets: fenced like the commit, so a rejected commit writes none of them.
        body_version: the version of the body the run's first attempt runs with, pinned
            on the run (`RunRecord.body_version`) by the commit that starts that attempt;
            `UNSET` for every other commit.
        not_before: a ``Queued`` commit's earliest start: no runtime starts the run's next
            attempt before this time (the runtime's clock, as a scheduled ticket's
            ``wake_at``); `Store.runnable` leaves the run out until then. It is the one
            "not eligible before" mark of a queued run: a delayed start
            (``submit(not_before=T)``) sets it, and so does a run waiting to retry (its
            ``retry_at``). Every other commit of the run clears it (None: no wait).
        retries: the run's count of retries scheduled (`RunRecord.retries`), set by the
            commit that puts a failed attempt's run back ``Queued`` to try it again; None
            keeps the committed count.
    """

    run_id: str
    state: RunState
    generation: int
    expect: Expect
    at: float
    new_run: NewRun | None = None
    result: JsonValue = None
    checkpoint: JsonValue = UNSET
    steps: int | None = None
    carried_messages: tuple[JsonValue, ...] = ()
    carried_pause: bool = False
    take_messages: bool = False
    discarded_messages: tuple[JsonValue, ...] = ()
    events: tuple[EventDraft, ...] = ()
    detail: Mapping[str, JsonValue] = EMPTY_DICT
    announce: bool = True
    resume_value: JsonValue = None
    resume_ticket: ResumeTicket | None = None
    fence: Fence | None = None
    claim: Claim | None = None
    release: bool = False
    thread_guard: bool = False
    consumed: tuple[int, ...] = ()
    delivered: tuple[int, ...] = ()
    end_descendants: DescendantsEnd | None = None
    chunks: tuple[StreamDraft, ...] = ()
    not_before: float | None = None
    body_version: str | _Unset | None = UNSET
    retries: int | None = None


IfBusy = Literal["queue", "reject", "supersede"]
"""What a start or submit does when its run's thread is busy (DESIGN §3.8)."""

IF_BUSY: Final[tuple[IfBusy, ...]] = ("queue", "reject", "supersede")

DescendantsEnd = Literal["parent_ended", "not_resumed", "deadline"]
"""How a commit ends the run's unended descendants (`Commit.end_descendants`)."""


@final
@attrs.define
class Accepted:
    """The commit landed (a read-only message, not frozen for the reason `Commit` gives).

    Attributes:
        state: the run's committed state now (the commit's own state).
        last_seq: the seq of the last event the commit wrote (0 if it wrote none).
        taken_messages: the carried messages the commit took (``take_messages``).
        taken_pause: the commit took a carried pause (``take_messages``).
        resume_value: the run's resume value, for the attempt this commit starts
            (``take_messages``): what a queued resume left, or the answer the attempt it
            replaces was running with.
        resume_ticket: the ticket that resume answered.
        epoch: the epoch of the claim the commit took (``claim``), else None.
        superseded: the runs the commit ended ``Stopped("superseded")`` (a new run
            created with ``if_busy="supersede"``), in the order they were ended.
        commands: the commands stored for the run, oldest first, read in the commit's
            own transaction, for an attempt that starts on an existing run
            (``take_messages``): what was sent while it was queued, or to an attempt that
            was lost. None when the store did not read them (the runtime then reads
            them itself, `DurableStore.commands`, before the body runs).

    A store answers with what the runtime needs, not with the whole record or the
    events (read them with `Store.load` and `Store.events_after`), so a commit never
    costs a read-back.
    """

    state: RunState
    last_seq: int
    # Keyword-only: seven optional values of which three may be None side by side, so a store
    # names each one it gives.
    taken_messages: tuple[JsonValue, ...] = attrs.field(default=(), kw_only=True)
    resume_value: JsonValue = attrs.field(default=None, kw_only=True)
    resume_ticket: ResumeTicket | None = attrs.field(default=None, kw_only=True)
    epoch: int | None = attrs.field(default=None, kw_only=True)
    taken_pause: bool = attrs.field(default=False, kw_only=True)
    superseded: tuple[str, ...] = attrs.field(default=(), kw_only=True)
    commands: tuple[StoredCommand, ...] | None = attrs.field(default=None, kw_only=True)


@final
@attrs.frozen
class Rejected:
    """The commit was fenced off; nothing changed. ``state`` is the committed state that
    fenced it (None for an unknown run); for `RejectReason.BUSY`, the state of the run
    that keeps the thread busy, ``holder``."""

    reason: RejectReason
    state: RunState | None
    holder: str | None = attrs.field(default=None, kw_only=True)


CommitResult = Accepted | Rejected
"""What the store did with one commit of a batch: `Accepted` or `Rejected` (with why)."""


class Store(Protocol):
    """Committed truth for runs, their tickets and their events.

    ``apply`` is called only by the runtime's supervisor. Reads may come from any task.
    All methods are checkpoints. A store that fails raises; it raises `StoreError` with
    ``outcome_unknown=False`` when it knows the failed batch left nothing behind.
    """

    @property
    def durable(self) -> bool:
        """Whether the store is shared beyond this runtime (other processes, or other
        runtimes in this one): then it is a `DurableStore`, runs are claimed, and leaving a
        runtime releases its claims instead of stopping its runs."""
        ...

    async def apply(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` in one transaction, in order; one result per commit."""
        ...

    async def load(self, run_id: str) -> RunRecord | None:
        """The run's record, or None if the store does not hold it."""
        ...

    async def events_after(
        self, seq: int, run_id: str | None = None, limit: int = 1000
    ) -> list[RunEvent]:
        """Committed events with ``seq`` greater than ``seq``, oldest first, at most
        ``limit`` of them; an empty list means there are none yet.

        Seqs show in order: once a read of every run's events showed a seq, no smaller one
        shows later, and the same holds for the reads of one run's. A read of one run's
        events shows every event of it committed before the read started; a read of every
        run's may hold back the newest until every smaller seq is final
        (`SettlingStore`)."""
        ...

    async def runnable(self, names: Collection[str], now: float, limit: int) -> list[RunRecord]:
        """Root runs (no parent) named in ``names`` that could start an attempt now, oldest
        first, at most ``limit``: ``Queued`` runs whose thread is free and that nobody
        holds a live claim on (leases by the store's clock), and ``Awaiting`` runs whose
        ``scheduled_action`` ticket is due (``payload["wake_at"] <= now``, ``now`` being the
        runtime's clock, which ticket times are read from). A queued run whose
        ``not_before`` (`Commit.not_before`) is later than ``now`` is not runnable yet."""
        ...

    async def aclose(self) -> None:
        """Release the store's resources."""
        ...


@final
@attrs.frozen
class StoredCommand:
    """A live command stored for a run's attempt (`DurableStore.post_command`).

    ``kind`` is ``"message"``, ``"pause"``, ``"wake"`` or ``"cancel"``; ``id`` increases in
    the order commands were stored.
    """

    id: int
    run_id: str
    kind: CommandKind
    payload: JsonValue
    reason: str | None
    at: float


CommandKind = Literal["message", "pause", "wake", "cancel"]


@final
@attrs.frozen
class Recovered:
    """A run whose owner was lost, claimed for a new attempt at ``epoch``."""

    record: RunRecord
    epoch: int


@final
@attrs.frozen(kw_only=True)
class ControlLook:
    """What one look at a durable store finds for the runs whose attempts one runtime runs,
    read in one call by a store that can (``look_at_control``; the relay makes three calls
    of a store that cannot): the store's `version`, the commands stored for the runs after
    a command id, and which of the running ones have ended. A store may leave the last two
    empty when its version has not moved since the last look, unless asked to read anyway.
    """

    version: int
    commands: tuple[StoredCommand, ...] = ()
    ended: Mapping[str, Ended] = attrs.field(factory=dict)


@runtime_checkable
class DurableStore(Store, Protocol):
    """A store several runtimes share: claims with leases and epochs, stored commands, and
    a version that tells a runtime something changed elsewhere."""

    async def renew(self, owner: str, held: Mapping[str, int], lease: float) -> list[str]:
        """Extend ``owner``'s claims (root run id -> epoch) to ``lease`` seconds from now
        (the store's clock); return the run ids whose claim is no longer that owner's at
        that epoch, or had already expired (those are lost: their attempts must stop)."""
        ...

    async def release(self, owner: str, run_id: str) -> None:
        """Drop ``owner``'s claim on ``run_id`` (its attempt is over), whatever its epoch.
        A run still ``Running`` (its attempt never committed its end) keeps the claim,
        lapsed: its owner is lost, and ``recover`` must find it."""
        ...

    async def recover(
        self,
        owner: str,
        names: Collection[str],
        at: float,
        lease: float,
        max_recoveries: int,
        limit: int,
    ) -> list[Recovered]:
        """Deal with runs whose claim's lease has expired (the store's clock), those lost
        longest ago first, at most ``limit`` of them (a run left for a runtime with its
        body does not count toward it).

        Each in one transaction: a root still ``Running`` that has no name is ended
        ``Indeterminate("owner lost")``, one that has been lost more than
        ``max_recoveries`` times ``Indeterminate("owner lost <n> times")`` (either way its
        unended descendants are ended ``Indeterminate("owner lost")`` first), and one whose
        name is in ``names`` is claimed by ``owner`` at the next epoch for ``lease``
        seconds, its loss counted, its unended descendants handed back with it (rule 22:
        a running one back to ``Queued``, at its generation, with its checkpoint; a queued
        or awaiting one as it is), and returned for a new attempt. A root that is not
        running just loses the stale claim (a queued one hands its running descendants
        back, any other ends them ``Indeterminate("owner lost")``). A recoverable root
        whose name is not in ``names`` is left for a runtime that has its body. The events
        written are dated ``at`` (the runtime's clock, as every event is).
        """
        ...

    async def post_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int | Rejected:
        """Store a command for the run's current or next attempt; its id, or `Rejected`
        when the run is neither ``Running`` nor ``Queued`` (unknown, awaiting, ended). A
        queued run's commands wait in the store for its next attempt."""
        ...

    async def commands(self, run_ids: Collection[str], after: int = 0) -> list[StoredCommand]:
        """Stored commands of these runs with an id greater than ``after``, oldest first."""
        ...

    async def states(self, run_ids: Collection[str]) -> dict[str, RunState]:
        """The committed states of these runs (runs the store does not hold are left out):
        how an owner learns that a run it executes was ended by another runtime."""
        ...

    async def version(self) -> int:
        """A number that changes whenever another connection (another runtime) commits."""
        ...


@runtime_checkable
class InlineStore(Store, Protocol):
    """A store whose commits need no I/O, so the supervisor may apply them synchronously
    in the committing task's own step (``inline`` says whether to)."""

    @property
    def inline(self) -> bool: ...

    def apply_now(self, batch: Sequence[Commit]) -> list[CommitResult]:
        """Apply ``batch`` as `Store.apply` does, without yielding."""
        ...


StateKind = Literal["queued", "running", "awaiting", "ended"]
"""A `RunState` variant by the name the stores and the JSON shapes give it."""

STATE_KINDS: Final[tuple[StateKind, ...]] = ("queued", "running", "awaiting", "ended")

RunFilter = StateKind | CauseKind
"""What `ListingStore.list_runs` selects runs by: the kind of their committed state, or,
among ended runs, the kind of their end cause."""


@runtime_checkable
class ListingStore(Store, Protocol):
    """A store that can list its runs (`Runtime.list_runs`): the memory and SQLite stores
    are; a store without `list_runs` still serves every other call."""

    async def list_runs(
        self,
        *,
        state: RunFilter | None = None,
        thread_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (in the order they were created), at most ``limit``; only
        those whose committed state is of kind ``state`` (or that ended with a cause of
        that kind), on ``thread_id``, with ``name``, when given; with ``before``, only
        runs created before that run (a page after the one that ended with it; none when
        the store does not hold it)."""
        ...


WorkerState = Literal["serving", "draining", "stopped", "lost"]
"""A worker's state (`WorkerRecord.state`): ``lost`` is decided when the row is read."""

WORKER_STATES: Final[tuple[WorkerState, ...]] = ("serving", "draining", "stopped", "lost")

LOST_AFTER_LEASES: Final = 3
"""A worker not seen for this many of its leases (the store's clock) reads ``lost``."""

WORKERS_KEPT: Final = 86400.0
"""Seconds an ended worker's row is kept (stopped, or lost for that long) before a serving
runtime deletes it."""


def _bodies(value: Mapping[str, str | None]) -> FrozenDict:
    return FrozenDict(dict(value))


@final
@attrs.frozen
class WorkerRecord:
    """One worker (a runtime that serves) as the store holds it (`Runtime.list_workers`).

    ``worker_id`` is new each time a runtime starts serving; ``host`` and ``pid`` say
    where it runs; ``started_at`` and ``last_seen`` are the store's clock, as leases are
    (``last_seen`` renewed with its claims, at least every third of its lease);
    ``bodies`` maps each body name it serves to that body's version (None for none);
    ``concurrency`` is its limit, ``active`` the root attempts it ran when last seen;
    ``state`` is ``"serving"``, ``"draining"`` (asked to claim nothing new), ``"stopped"``,
    or ``"lost"`` (not seen for 3 leases: crashed, killed or cut off).
    """

    worker_id: str
    host: str
    pid: int
    state: WorkerState
    started_at: float
    last_seen: float
    bodies: FrozenDict = attrs.field(converter=_bodies)
    concurrency: int
    active: int


@final
@attrs.frozen
class WorkerInfo:
    """What a serving runtime registers about itself (`WorkerStore.register_worker`)."""

    worker_id: str
    host: str
    pid: int
    bodies: FrozenDict = attrs.field(converter=_bodies)
    concurrency: int
    lease: float


@runtime_checkable
class WorkerStore(Store, Protocol):
    """A store that keeps a row per serving runtime (DESIGN §3.11): every store this
    package ships does. Times are the store's clock; a row's ``lease`` decides when it
    reads ``lost`` (`LOST_AFTER_LEASES`). ``DurableStore.renew`` also marks the owner's
    row seen (its ``last_seen``, and ``active`` the claims it renewed), in the same
    transaction: a worker holding claims writes nothing more to be seen."""

    async def register_worker(self, worker: WorkerInfo) -> None:
        """Insert the worker's row, ``serving``, started and seen now (a row with its id
        is replaced)."""
        ...

    async def worker_seen(self, worker_id: str, active: int) -> WorkerState | None:
        """Mark the worker seen now with ``active`` root attempts; its stored state
        (``serving``, ``draining`` or ``stopped``), or None when it has no row."""
        ...

    async def worker_state(self, worker_id: str) -> WorkerState | None:
        """The worker's stored state (never ``lost``: that is decided by readers), or None
        when it has no row."""
        ...

    async def list_workers(self, *, ended: bool = False) -> list[WorkerRecord]:
        """The workers, the most recently started first: those serving, draining or lost,
        and with ``ended`` the stopped ones too."""
        ...

    async def drain_worker(self, worker_id: str) -> WorkerRecord | None:
        """Ask a ``serving`` worker to drain (its state becomes ``draining``); any other
        is left as it is. The worker's record after, or None when it has no row."""
        ...

    async def end_worker(self, worker_id: str) -> None:
        """Mark the worker ``stopped``, seen now, with no active attempt."""
        ...

    async def forget_workers(self, age: float) -> int:
        """Delete the rows of workers stopped, or last seen, more than ``age`` seconds
        ago; how many."""
        ...


@runtime_checkable
class CountingStore(Store, Protocol):
    """A store that counts its runs by state and end cause (`Runtime.count_runs`): every
    store this package ships does."""

    async def count_runs(self) -> Mapping[str, int]:
        """How many runs the store holds of each state kind (``"queued"``, ``"running"``,
        ``"awaiting"``, ``"ended"``) and each end cause kind (``"natural_end"``, ...);
        a kind with no run may be left out."""
        ...


@runtime_checkable
class ForkingStore(Store, Protocol):
    """A store that keeps the checkpoint as of each of a run's events (`Runtime.fork`):
    the memory and SQLite stores do."""

    async def checkpoint_at(self, run_id: str, seq: int | None) -> CheckpointAt | None:
        """The checkpoint ``run_id`` had committed as of its event ``seq`` (its last event
        when None): the one written by its last commit that wrote it with an event at or
        before ``seq`` (None before any did). None when ``seq`` is not one of the run's
        events, or the store does not hold the run."""
        ...


@runtime_checkable
class PruningStore(Store, Protocol):
    """A store that can delete ended runs (`Runtime.prune`): the memory and SQLite stores
    can."""

    async def prune(self, ended_before: float, *, dry_run: bool = False) -> int:
        """Delete, with their events, tickets, stored commands, claims and checkpoints, the
        runs of every tree whose root's terminal event is dated at or before
        ``ended_before`` (the runtime's clock, as event times are) and all of whose runs
        have ended; how many runs that is. ``dry_run`` counts them and deletes nothing."""
        ...


@runtime_checkable
class StreamingStore(Store, Protocol):
    """A store that keeps runs' streams (`RunContext.stream`, `Runtime.read_stream`): the
    memory, SQLite and PostgreSQL stores do.

    It writes the chunks of every commit it accepts (``Commit.chunks``) in the commit's
    transaction, at each channel's next offsets (1, 2, ... per run and channel), a
    ``"reset"`` chunk first when another generation wrote the channel last; and in the
    transaction that ends a run (however it ends: a commit, its parent's end, recovery),
    an ``"end"`` chunk on every channel the run wrote, deleting the other chunks of a
    channel whose last writer said ``keep=False``. A run's chunks are deleted with it
    (`PruningStore.prune`, or a memory store forgetting it).
    """

    async def read_chunks(
        self, run_id: str, channel: str, after: int, limit: int
    ) -> StreamPage | None:
        """The chunks of ``run_id``'s ``channel`` after offset ``after``, oldest first, at
        most ``limit`` (`StreamPage`); None when the store does not hold the run."""
        ...

    async def stream_channels(self, run_id: str) -> list[str] | None:
        """The channels ``run_id`` has written, in the order of their first kept chunk
        (then by name); None when the store does not hold the run."""
        ...


@runtime_checkable
class StepStore(Store, Protocol):
    """A store that reads a run's journaled steps by their kind, through an index
    (`RunContext.step` loads them once per attempt): the memory, SQLite and PostgreSQL
    stores do. For a store without it the runtime reads the run's events and keeps the
    ``step`` ones, once per attempt."""

    async def step_events(self, run_id: str) -> list[RunEvent]:
        """The run's committed events of kind ``"step"``, oldest first (none for a run the
        store does not hold)."""
        ...


@final
@attrs.frozen
class Overdue:
    """A run past one of its time limits (`DeadlineStore.overdue`): ``limit`` says which."""

    record: RunRecord
    limit: TimeLimit


@final
@attrs.frozen
class OverdueLook:
    """What one look for runs past their time limits found (`DeadlineStore.overdue`): the
    runs, and the earliest limit after ``now`` of a run it would find (None: none)."""

    runs: tuple[Overdue, ...] = ()
    next_at: float | None = None


@runtime_checkable
class DeadlineStore(Store, Protocol):
    """A store that finds the runs past their time limits through an index (every serving
    loop turn asks it): the memory, SQLite and PostgreSQL stores do. On a store without
    it, a run's limits are kept by the runtimes that hold it alone."""

    async def overdue(self, now: float, limit: int) -> OverdueLook:
        """Root runs no attempt runs that are past a time limit by ``now`` (the runtime's
        clock, which deadlines are read from), at most ``limit``, each once: ``Queued`` or
        ``Awaiting`` ones whose ``deadline`` is at or before ``now`` (`Overdue.limit`
        ``"deadline"``), and ``Queued`` ones whose first attempt has not started
        (generation 0) whose queue deadline is (``"queue_timeout"``; a run past both is
        found for its deadline); and the earliest such limit still to come, so a serving
        loop can look again then."""
        ...


@runtime_checkable
class LookingStore(Store, Protocol):
    """A store whose look for work can hold the runs it finds for the runtime that looked,
    and write their starts in the look's own transaction (the PostgreSQL store: one
    transaction, and two round trips fewer, for a look and the starts it leads to). A
    serving loop looks through it where a store has it, `runnable` elsewhere."""

    def looking(
        self, names: Collection[str], now: float, limit: int
    ) -> AbstractAsyncContextManager[list[RunRecord]]:
        """`runnable`, as a block: the runs found are held for this runtime until the
        block exits (no other look finds them; a write of another transaction that
        touches them waits), and the next batch of commits the store applies, whatever it
        holds, is written in the look's transaction and commits it. A look no batch took
        by the time the block exits is let go: its runs are free again for any look.
        Entering the block raises what `runnable` raises; the block's own errors pass
        through."""
        ...


@runtime_checkable
class SettlingStore(Store, Protocol):
    """A store whose writers do not wait for each other (the PostgreSQL store): a commit is
    answered as soon as it is durable, while a smaller seq another writer took may still be
    committing. A read of one run's events shows every one committed at once (one run's
    commits are numbered in their order); a read of every run's shows them up to the
    point below which every seq is final. A seq taken from an answer is therefore safe to
    read one run from, and to read every run from only once `settle` returned for it.

    A store without it answers a commit only once every smaller seq is final."""

    async def settle(self, seq: int) -> None:
        """Return once every seq at or below ``seq`` is final: committed and shown to every
        read that starts afterwards, or never to be."""
        ...


@final
@attrs.frozen
class CheckpointAt:
    """A run's checkpoint as of its event ``seq``."""

    seq: int
    checkpoint: JsonValue


STORE_METHODS = ("apply", "load", "events_after", "runnable", "aclose")
DURABLE_METHODS = (
    "renew",
    "release",
    "recover",
    "post_command",
    "commands",
    "states",
    "version",
)


async def read_store(call: Awaitable[T], what: str) -> T:
    """Await a store read; anything but a cancellation or our own error becomes a
    `StoreError` naming ``what`` was being read (a read changes nothing)."""
    try:
        return await call
    except (AwakenError, trio.Cancelled):
        raise
    except Exception as exc:
        raise StoreError(
            f"the store failed to read {what}: {safe_repr(exc)}", outcome_unknown=False
        ) from exc
