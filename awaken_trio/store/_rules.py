"""The store rules, once: every write the store protocol makes (``awaken_trio._core``'s
`Store` and `DurableStore`), as functions over one transaction of a store (`RunTx`).

A store is two things: where committed truth is kept (dicts, a SQLite file, a PostgreSQL
database) and the rules that decide what a call may write (the fences, the ticket slot,
message hand-over, claims, recovery, ending a tree). This module is the second; a store
implements `RunTx` over its own representation and keeps only its reads, its indexes and
its I/O. The rules never see a representation: they read and write values (states,
tickets, JSON payloads, `ClaimRow`) through the transaction's methods, and a store encodes
inside them (SQLite keeps text, and decodes a payload only when a rule asks for it).

It imports nothing from ``store/`` (``tests/store/test_rules.py`` says so), so a store of
any representation, the package's own or a third party's, can call it without a cycle.

What every rule function assumes of the transaction it is given:

* isolation: from the first read to the end, no other writer changes what the transaction
  has read or will read (the rules check and then write, and a check must still hold when
  the write lands). SQLite holds the file's write lock for the whole transaction; a
  database server locks the rows it returns (``SELECT ... FOR UPDATE``) and must also
  serialise two transactions that guard the same thread (`RunTx.thread_busy`), for example
  with a lock on the thread;
* read-your-writes: every read sees the writes this transaction made before it, in the
  order they were made; writes may be queued and sent together, as long as every read
  answers as if they had been sent;
* atomicity: the caller commits the transaction after the rule function returns, or rolls
  it all back if it raised; a rejected commit has written nothing (every fence is checked
  before the first write), so a batch needs no savepoints;
* one clock reading: ``now`` is the store's clock read once for the transaction (leases
  are measured by it, DESIGN §3.1), ``at`` the runtime's (it only dates events).

The row a read hands out (`StoredRun`) is the transaction's own: it stays valid, and
reflects this transaction's writes, until the transaction ends. The rules never change a
row's fields themselves; every change goes through a `RunTx` method, so a store always
knows what to write.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar, final

import attrs

from .._core import (
    CANCELLED_CAUSE,
    CAUSE_KINDS,
    DEADLINE,
    NOT_RESUMED,
    UNSET,
    Accepted,
    Awaiting,
    BodyVersions,
    CauseKind,
    ChunkKind,
    CommandKind,
    Commit,
    CommitResult,
    DescendantsEnd,
    Ended,
    EndRequest,
    EventKind,
    Fence,
    Indeterminate,
    JsonValue,
    NewRun,
    Queued,
    Recovered,
    Rejected,
    RejectReason,
    ResumeTicket,
    RunFilter,
    Running,
    RunRecord,
    RunState,
    StateKind,
    Stopped,
    StoredCommand,
    cause_kind,
    freeze_detail,
    scalar_dict,
)

# ============================================================================ the protocol


@final
class ClaimRow(NamedTuple):
    """A run's claim as a store keeps it: ``owner`` holds the run at ``epoch`` until
    ``lease_until`` (the store's clock; ``-inf`` for a claim given up while the run was
    still running, lapsed at every reading)."""

    owner: str
    epoch: int
    lease_until: float


@final
class HeldResume(NamedTuple):
    """The resume a run holds for the attempt that starts next: the value that answered a
    ticket, and that ticket (both None when it holds none)."""

    value: JsonValue
    ticket: ResumeTicket | None


NO_RESUME: Final = HeldResume(None, None)


class Carried(Protocol):
    """What an ``Awaiting`` commit left for the next attempt, as `RunTx.take_carried` hands
    it over. Falsy when it holds no message and no pause, so the common case costs no
    decoding."""

    @property
    def pause(self) -> bool:
        """A pause that was asked of the attempt and not yet honoured."""
        ...

    def __bool__(self) -> bool:
        """Whether it holds a message or a pause."""
        ...

    def messages(self) -> tuple[JsonValue, ...]:
        """The messages, oldest first, frozen (decoded only when asked)."""
        ...


@final
@attrs.frozen
class CarriedValues:
    """`Carried` for a store that keeps the frozen values themselves."""

    held: tuple[JsonValue, ...] = ()
    pause: bool = False

    def __bool__(self) -> bool:
        return bool(self.held) or self.pause

    def messages(self) -> tuple[JsonValue, ...]:
        return self.held


NOTHING_CARRIED: Final = CarriedValues()


class StoredRun(Protocol):
    """The columns of a run the rules read, as one transaction sees them (its writes
    included). Read-only to the rules: they change a run only through `RunTx`."""

    @property
    def run_id(self) -> str: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def parent_run_id(self) -> str | None: ...
    @property
    def root_run_id(self) -> str:
        """The top of the run's tree (its own id for a root): a child lives on its root's
        claim."""
        ...

    @property
    def name(self) -> str | None: ...
    @property
    def kind(self) -> StateKind:
        """The kind of `state`, without decoding it."""
        ...

    @property
    def state(self) -> RunState:
        """The committed state (a store that keeps text may decode it here, on demand: the
        rules read it for a rejection's answer and a ticket check)."""
        ...

    @property
    def generation(self) -> int: ...
    @property
    def epoch(self) -> int:
        """The last claim epoch granted on the run (0 before the first claim)."""
        ...

    @property
    def attempt_epoch(self) -> int | None:
        """The epoch of the attempt live on the run, None when none is: the attempt is live
        while it equals the root's claim epoch and that claim's lease has not expired."""
        ...

    @property
    def recoveries(self) -> int:
        """How many times the run's owner was lost."""
        ...

    @property
    def body_version(self) -> str | None:
        """The version of the body its first attempt ran with (None: unversioned, or
        never started)."""
        ...


RowT = TypeVar("RowT", bound=StoredRun)
"""A store's own row type."""


@final
class StreamHead(NamedTuple):
    """Where one channel of a run's stream stands: the offset of its last chunk, the
    generation that wrote it, and whether its last writer keeps its chunks once the run
    ends."""

    last: int
    generation: int
    keep: bool


class RunTx(Protocol[RowT]):
    """One write transaction of a store, as the rules use it (see the module docstring for
    what every method may assume and must provide). ``RowT`` is the store's own row type
    (a `StoredRun`): the rules hand a store back only rows it handed out.

    Reads return what the store holds with this transaction's writes applied. A store that
    locks (PostgreSQL) locks every run row and claim a read returns, until the end of the
    transaction. Writes take effect for later reads at once; the store may queue them and
    send them together when the transaction ends (or before a read that needs them).
    """

    # ------------------------------------------------------------------ reading

    def prefetch(self, batch: Sequence[Commit]) -> None:
        """Read ahead what ``batch`` will read, in as few round trips as the store can: the
        rows of its runs, the claims its fences and claims name (``Commit.fence``'s root,
        the run of a ``Commit.claim``), the live attempts on the threads it guards, the
        stored commands of the runs it ends. Called once, first, before any other method.

        A hint only: every read below must answer correctly whether or not it was read
        ahead, so a store may do nothing here (the memory store) or read a superset.
        """
        ...

    def prefetch_claims(self, run_ids: Iterable[str]) -> None:
        """Likewise, the claims of ``run_ids`` (`renew` reads them all)."""
        ...

    def row(self, run_id: str) -> RowT | None:
        """The run, or None if the store does not hold it. Locked for the transaction."""
        ...

    def claim(self, run_id: str) -> ClaimRow | None:
        """The run's claim (a root's: claims are kept per root), expired or not; None when
        it has none. Locked for the transaction (a missing one too, where the store can:
        the rules may create it)."""
        ...

    def thread_busy(self, thread_id: str, run_id: str, now: float) -> bool:
        """Whether a run on ``thread_id`` other than ``run_id`` may have a live attempt: its
        ``attempt_epoch`` is its root's current claim epoch, and that claim's lease has not
        expired by ``now``. A store shared by no one (the memory store of one runtime)
        answers False: that runtime's own thread gate keeps the rule."""
        ...

    def children(self, parent: str) -> list[str]:
        """The runs created with ``parent`` as their parent, oldest first (in the order
        they were created)."""
        ...

    def unended_on_thread(self, thread_id: str) -> list[RowT]:
        """The runs on ``thread_id`` that have not ended (queued, running or awaiting),
        oldest first (in the order they were created), this transaction's writes included.
        Read only for a new run with a busy-thread policy (`NewRun.if_busy`), so a store
        may answer it with a query of its own; one that locks rows locks these, and
        serialises two transactions that read the same thread (as for `thread_busy`)."""
        ...

    def expired_claims(self, now: float) -> Iterable[str]:
        """The runs whose claim's ``lease_until`` is before ``now``, those lost longest ago
        first (by ``lease_until``, then run id). A snapshot as of the call: `recover` writes
        claims while it iterates, and stops early."""
        ...

    def take_carried(self, row: RowT) -> Carried:
        """Empty the run's carried slot (messages and pause); what it held. A write only
        when it held something."""
        ...

    def held_resume(self, row: RowT) -> HeldResume:
        """The resume the run holds (`NO_RESUME` when none)."""
        ...

    def stored_commands(self, run_id: str) -> list[StoredCommand]:
        """The run's stored commands, oldest first, for an attempt that starts: what was
        sent while it was queued, or to an attempt that was lost. Read after the run's
        row (a command's post locks the row first, so none lands unseen in between)."""
        ...

    def drop_commands(self, run_id: str) -> list[JsonValue]:
        """Delete every stored command of the run; the payloads of its ``message``
        commands that no attempt received (neither consumed nor ``delivered``, this
        transaction's `consume` and `deliver` included), oldest first."""
        ...

    def last_seq(self) -> int:
        """The seq of the last event the store has handed out, this transaction's
        included (0 when none)."""
        ...

    def record(self, run_id: str) -> RunRecord:
        """The run's whole record as it stands in this transaction (the run exists)."""
        ...

    def stream_heads(self, run_id: str) -> Mapping[str, StreamHead]:
        """Every channel the run has written, by name, as this transaction sees it at the
        call (its own `append_chunks` before it included): empty for a run that never
        wrote one. A store reads ahead the heads of the runs a batch streams on or ends
        (`prefetch`)."""
        ...

    # ------------------------------------------------------------------ writing

    def create(
        self,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        result: JsonValue,
        at: float,
        *,
        not_before: float | None = None,
    ) -> RowT:
        """Insert a run (``run_id`` is new to the store): its identity, input, step cap and
        fork origin from ``new`` (``root_run_id`` defaulting to ``run_id``), its state and
        generation, its result (None unless it is created ended), its ``not_before`` (a
        queued run's earliest start, `Commit.not_before`); steps 0, checkpoint None, epoch
        0, no attempt, nothing carried, no resume, no ticket, no worker. Its times
        (`RunRecord.created_at` ...) are ``at``, as `put_state` would set them. The new
        row."""
        ...

    def put_state(
        self,
        row: RowT,
        state: RunState,
        generation: int,
        *,
        at: float,
        steps: int | None = None,
        result: JsonValue = UNSET,
        not_before: float | None = None,
    ) -> None:
        """Set the run's state and generation, and its ``not_before`` (a queued run's
        earliest start, `Commit.not_before`; None for no wait, which every other state
        has); its ``steps`` unless None, its result unless `UNSET`; its times as of ``at``
        (the commit's): ``updated_at``, and ``started_at`` on its first ``Running``,
        ``ended_at`` when it ends. The store keeps its own indexes here (a queued named
        root enters the queue it hands runs out from, an ended run the ones it forgets
        by)."""
        ...

    def put_checkpoint(self, row: RowT, checkpoint: JsonValue, seq: int) -> None:
        """Set the run's checkpoint, and keep it as the run's checkpoint as of its event
        ``seq`` (`ForkingStore.checkpoint_at`): the last event the commit that wrote it
        wrote, or the store's last seq when it wrote none."""
        ...

    def set_ticket(self, row: RowT, ticket: ResumeTicket | None) -> None:
        """Put the run's one live ticket (an ``Awaiting`` state's), or delete it (None). A
        store that finds due tickets by their time uses ``wake_at(ticket)``."""
        ...

    def keep_carried(self, row: RowT, messages: tuple[JsonValue, ...], pause: bool) -> None:
        """Fill the run's carried slot (it replaces what was there)."""
        ...

    def keep_resume(self, row: RowT, resume: HeldResume) -> None:
        """Set the resume the run holds (`NO_RESUME` deletes it)."""
        ...

    def set_epoch(self, row: RowT, epoch: int) -> None:
        """Record ``epoch`` as the last granted on the run."""
        ...

    def set_attempt(self, row: RowT, epoch: int | None) -> None:
        """Mark the run's attempt live at ``epoch``, or not live (None)."""
        ...

    def set_recoveries(self, row: RowT, recoveries: int) -> None:
        """Record how many times the run's owner was lost."""
        ...

    def set_worker(self, row: RowT, worker_id: str) -> None:
        """Record the owner of the claim just granted on the run (`RunRecord.worker_id`);
        it stays after the claim is released."""
        ...

    def set_body_version(self, row: RowT, version: str | None) -> None:
        """Pin the version of the body the run's first attempt runs with."""
        ...

    def set_retries(self, row: RowT, retries: int) -> None:
        """Record how many retries of the run were scheduled (`Commit.retries`)."""
        ...

    def set_claim(self, run_id: str, claim: ClaimRow | None) -> None:
        """Put the run's claim (it replaces any), or drop it (None)."""
        ...

    def consume(self, command_ids: Collection[int]) -> None:
        """Delete stored commands an attempt has applied (ids it no longer holds are
        ignored)."""
        ...

    def deliver(self, command_ids: Collection[int]) -> None:
        """Mark stored messages as handed to an attempt's body: kept until consumed, never
        listed as discarded (ids it no longer holds are ignored)."""
        ...

    def insert_command(
        self, run_id: str, kind: CommandKind, payload: JsonValue, reason: str | None, at: float
    ) -> int:
        """Store a command for the run; its id, greater than every id handed out before."""
        ...

    def event(
        self,
        row: RowT,
        generation: int,
        kind: str,
        detail: Mapping[str, JsonValue],
        at: float,
    ) -> int:
        """Append an event of the run, with the run's state as it is now; its seq, one
        more than `last_seq`. ``detail`` is frozen, and most often one of a few shared
        objects (a store that encodes may keep their text by identity)."""
        ...

    def append_chunks(
        self,
        run_id: str,
        channel: str,
        first: int,
        generation: int,
        kind: ChunkKind,
        values: Sequence[JsonValue],
        at: float,
        keep: bool,
    ) -> None:
        """Write ``values`` (frozen, at least one) as the run's chunks of ``kind`` on
        ``channel``, at offsets ``first``, ``first + 1``, ... (``first`` is one more than
        the channel's last offset); the channel's head is then the last of them, written by
        ``generation``, with ``keep``."""
        ...

    def drop_chunks(self, run_id: str, channel: str, before: int) -> None:
        """Delete the channel's chunks whose offset is lower than ``before``."""
        ...


# ============================================================================ values


KIND_OF: Final[Mapping[type[RunState], StateKind]] = {
    Queued: "queued",
    Running: "running",
    Awaiting: "awaiting",
    Ended: "ended",
}
"""The kind of each `RunState` variant (`state_kind`, as a lookup for the hot paths)."""


def state_kind(state: RunState) -> StateKind:
    """The kind of a committed state."""
    return KIND_OF[type(state)]


def cause_of(state: RunState) -> CauseKind:
    """The kind of an ended state's cause."""
    assert isinstance(state, Ended)
    return cause_kind(state.cause)


def run_matches(kind: StateKind, state: RunState, wanted: RunFilter) -> bool:
    """Whether a run whose committed state is ``state`` (of ``kind``) is one `list_runs`
    selects by ``wanted``: a state kind, or the kind of an end cause."""
    if kind == wanted:
        return True
    return kind == "ended" and wanted in CAUSE_KINDS and cause_of(state) == wanted


def kind_of_variant(variant: type[RunState]) -> StateKind | None:
    """The kind of a `RunState` variant (None for anything else)."""
    return KIND_OF.get(variant)


QUEUED: Final[RunState] = Queued()

COMMITTED: Final = EventKind.COMMITTED
"""The kind of a commit's own event (a member read from its enum class costs a lookup
through the class's metaclass on every read: read once here for every commit's path)."""

LAPSED: Final = -math.inf
"""The lease of a claim given up while its run is still ``Running``: lapsed at every
reading, so recovery finds the run."""

# ---------------------------------------------------------------- store-made end details

OWNER_LOST: Final = "owner lost"

PARENT_ENDED: Final[RunState] = Ended(CANCELLED_CAUSE)
"""How a descendant of a run ended elsewhere ends (``Commit.end_descendants``)."""

NOT_RESUMED_END: Final[RunState] = Ended(NOT_RESUMED.cause)
"""How a handed-back descendant ends when its parent's later attempt ends without having
taken it back (rule 22)."""

DEADLINE_END: Final[RunState] = Ended(DEADLINE.cause)
"""How a descendant of a run ended at its deadline ends: its own deadline has come too."""

HANDED_BACK_DETAIL: Final = scalar_dict(
    {"source": "recovery", "reason": "handed back with its parent"}
)
"""The detail of a running descendant's return to ``Queued`` when its root's owner was lost
(rule 22)."""


def parent_detail(run_id: str) -> Mapping[str, JsonValue]:
    """The detail of a descendant's end when its ancestor ``run_id`` ended elsewhere."""
    return EndRequest.parent_ended(run_id).detail


def descendants_end(how: DescendantsEnd, run_id: str) -> tuple[RunState, Mapping[str, JsonValue]]:
    """The state and detail ``Commit.end_descendants`` ends ``run_id``'s descendants with."""
    if how == "not_resumed":
        return NOT_RESUMED_END, NOT_RESUMED.detail
    if how == "deadline":
        return DEADLINE_END, DEADLINE.detail
    return PARENT_ENDED, parent_detail(run_id)


SUPERSEDED: Final[RunState] = Ended(Stopped("superseded"))
"""How a run ends when a new run of its thread supersedes it (``if_busy="supersede"``)."""


def superseded_detail(run_id: str) -> Mapping[str, JsonValue]:
    """The detail of a run's end when the new run ``run_id`` superseded it."""
    return scalar_dict({"superseded_by": run_id})


def owner_lost(why: str) -> RunState:
    """How a run whose owner was lost ends when it is not recovered."""
    return Ended(Indeterminate(why))


def lost_detail(why: str) -> Mapping[str, JsonValue]:
    """The detail of a run's end when its owner was lost."""
    return scalar_dict({"source": "recovery", "reason": why})


ONE_NONE: Final[tuple[JsonValue, ...]] = (None,)
"""The values of a ``"reset"`` or ``"end"`` chunk: one chunk, whose value is None."""


def discarded_detail(messages: Sequence[JsonValue]) -> Mapping[str, JsonValue]:
    """The detail of a ``messages_discarded`` event: the messages no attempt received."""
    return freeze_detail({"messages": list(messages)}, "discarded messages")


# ============================================================================ the rules
#
# In the order of ``awaken_trio._core._storage``'s docstring: a batch and its commits (the
# fences first, then what an accepted commit writes), ending runs that have no attempt,
# then the claim calls and stored commands of a durable store.


def apply_batch(tx: RunTx[RowT], batch: Sequence[Commit], now: float) -> list[CommitResult]:
    """Apply ``batch`` in order inside ``tx``; one result per commit. ``now`` is the
    store's clock, read once for the transaction: leases are measured by it."""
    tx.prefetch(batch)
    return [apply_one(tx, commit, now) for commit in batch]


def apply_one(tx: RunTx[RowT], commit: Commit, now: float) -> CommitResult:
    """Apply one commit: every fence is checked before anything is written, so a rejected
    commit changes nothing and the commits after it in the batch go on."""
    row = tx.row(commit.run_id)
    if row is None:
        new = commit.new_run
        if not commit.expect.new or new is None:
            return Rejected(RejectReason.UNKNOWN, None)
        if new.if_busy == "queue":  # the common case: the thread's runs are not read
            if commit.thread_guard and tx.thread_busy(new.thread_id, commit.run_id, now):
                return Rejected(RejectReason.THREAD_BUSY, None)
            if commit.fence is not None and not fence_holds(tx, commit.fence, now):
                return Rejected(RejectReason.FENCED, None)
            return create(tx, commit, new, now)
        return create_if_busy(tx, commit, new, now)
    rejected = fence(tx, row, commit, now)
    if rejected is not None:
        return rejected
    return update(tx, row, commit, now)


def create_if_busy(tx: RunTx[RowT], commit: Commit, new: NewRun, now: float) -> CommitResult:
    """Create a run whose busy-thread policy is ``"reject"`` or ``"supersede"`` (DESIGN
    §3.8). Its thread is busy while another run on it is running or queued (an awaiting
    one does not count). ``"reject"`` refuses the commit then (`RejectReason.BUSY`, naming
    the running run, else the first queued one). ``"supersede"`` ends every other unended
    run of the thread (running, queued or awaiting, their descendants first) ``Stopped(
    "superseded")`` before the new run is written, in this transaction; a running one's
    attempt stays marked live, so the thread is busy until its owner has stopped it (the
    new run waits for that as for any busy thread). An ancestor of the new run on the
    thread is never superseded: the commit is refused ``BUSY`` instead. Every fence is
    checked before the first write."""
    run_id, thread_id = commit.run_id, new.thread_id
    others = [row for row in tx.unended_on_thread(thread_id) if row.run_id != run_id]
    if new.if_busy == "reject":
        holder = _holder(others)
        if holder is not None:
            return Rejected(RejectReason.BUSY, holder.state, holder=holder.run_id)
    elif new.parent_run_id is not None:
        ancestors = _ancestors(tx, new.parent_run_id)
        for row in others:
            if row.run_id in ancestors:
                return Rejected(RejectReason.BUSY, row.state, holder=row.run_id)
    if commit.thread_guard and tx.thread_busy(thread_id, run_id, now):
        return Rejected(RejectReason.THREAD_BUSY, None)
    if commit.fence is not None and not fence_holds(tx, commit.fence, now):
        return Rejected(RejectReason.FENCED, None)
    if new.if_busy != "supersede" or not others:
        return create(tx, commit, new, now)
    detail = superseded_detail(run_id)
    superseded: list[str] = []
    for row in others:
        if row.kind == "ended":  # a descendant of one superseded before it
            continue
        end_descendants(tx, row.run_id, commit.at, PARENT_ENDED, parent_detail(row.run_id))
        end_row(tx, row, SUPERSEDED, detail, commit.at, attempt_stops=False)
        superseded.append(row.run_id)
    accepted = create(tx, commit, new, now)
    accepted.superseded = tuple(superseded)
    return accepted


def _holder(others: Sequence[RowT]) -> RowT | None:
    """The run that makes a thread busy: the running one, else the first queued one."""
    queued = None
    for row in others:
        if row.kind == "running":
            return row
        if queued is None and row.kind == "queued":
            queued = row
    return queued


def _ancestors(tx: RunTx[RowT], parent_run_id: str) -> set[str]:
    found: set[str] = set()
    at: str | None = parent_run_id
    while at is not None and at not in found:
        found.add(at)
        row = tx.row(at)
        at = None if row is None else row.parent_run_id
    return found


def fence(tx: RunTx[RowT], row: RowT, commit: Commit, now: float) -> Rejected | None:
    """The first fence ``commit`` fails on the existing run ``row``, in the order every
    store checks them (ENDED, EXISTS, FENCED, a claim another owner holds, STALE,
    THREAD_BUSY), or None when it passes them all."""
    if row.kind == "ended":
        return Rejected(RejectReason.ENDED, row.state)
    expect = commit.expect
    if expect.new:
        return Rejected(RejectReason.EXISTS, row.state)
    if commit.fence is not None and not fence_holds(tx, commit.fence, now):
        return Rejected(RejectReason.FENCED, row.state)
    if commit.claim is not None:
        held = tx.claim(commit.run_id)
        if held is not None and held.owner != commit.claim.owner and held.lease_until >= now:
            return Rejected(RejectReason.FENCED, row.state)
    if (
        (expect.generation is not None and row.generation != expect.generation)
        or (expect.state is not None and KIND_OF.get(expect.state) != row.kind)
        or (expect.correlation_id is not None and not _ticket_is(row, expect.correlation_id))
    ):
        return Rejected(RejectReason.STALE, row.state)
    if commit.thread_guard and tx.thread_busy(row.thread_id, commit.run_id, now):
        return Rejected(RejectReason.THREAD_BUSY, row.state)
    return None


def fence_holds(tx: RunTx[RowT], fence: Fence, now: float) -> bool:
    """Whether the claim ``fence`` names is still current: its root's claim is that owner's,
    at that epoch, its lease not expired by ``now``."""
    held = tx.claim(fence.root_run_id)
    return (
        held is not None
        and held.owner == fence.owner
        and held.epoch == fence.epoch
        and held.lease_until >= now
    )


def _ticket_is(row: RowT, correlation_id: str) -> bool:
    if row.kind != "awaiting":
        return False
    state = row.state
    return isinstance(state, Awaiting) and state.ticket.correlation_id == correlation_id


def create(tx: RunTx[RowT], commit: Commit, new: NewRun, now: float) -> Accepted:
    """Write the run ``commit`` creates. Its steps are 0 and its checkpoint None, unless it
    is a fork, which starts from its source's checkpoint (``NewRun.checkpoint``) and with
    its source's journaled steps (``NewRun.step_events``), written as its own first events,
    in their order, before the commit's."""
    run_id = commit.run_id
    state = commit.state
    kind = KIND_OF[type(state)]
    row = tx.create(
        run_id,
        new,
        state,
        commit.generation,
        commit.result if kind == "ended" else None,
        commit.at,
        not_before=commit.not_before if kind == "queued" else None,
    )
    epoch = claim_effects(tx, row, commit, kind, now)
    stored: Sequence[JsonValue] = ()
    if kind == "awaiting":
        tx.keep_carried(row, commit.carried_messages, commit.carried_pause)
        tx.set_ticket(row, state.ticket)  # type: ignore[attr-defined]
    elif kind == "ended":
        stored = tx.drop_commands(run_id)
    elif commit.resume_ticket is not None or commit.resume_value is not None:  # (`_answers`)
        tx.keep_resume(row, HeldResume(commit.resume_value, commit.resume_ticket))
    for detail in new.step_events:
        tx.event(row, commit.generation, EventKind.STEP, detail, commit.at)
    last_seq = write_events(tx, row, commit, (), stored)
    if commit.chunks:
        write_chunks(tx, commit)
    if new.checkpoint is not None:
        tx.put_checkpoint(row, new.checkpoint, last_seq or tx.last_seq())
    if commit.take_messages or epoch is not None:
        resume = tx.held_resume(row) if commit.take_messages else NO_RESUME
        if resume is not NO_RESUME or epoch is not None:
            return Accepted(
                state,
                last_seq,
                resume_value=resume.value,
                resume_ticket=resume.ticket,
                epoch=epoch,
            )
    # (Positional: a class called with keywords costs twice as much, on every run's path.)
    return Accepted(state, last_seq)


def update(tx: RunTx[RowT], row: RowT, commit: Commit, now: float) -> Accepted:
    """Write an accepted commit to the existing run ``row``."""
    run_id = commit.run_id
    state = commit.state
    kind = KIND_OF[type(state)]
    if commit.end_descendants is not None:
        end_descendants(tx, run_id, commit.at, *descendants_end(commit.end_descendants, run_id))
    # Carried messages (and a carried pause) move to whoever takes them (an attempt start)
    # or are dropped by a terminal commit; a Queued commit keeps them for the queued
    # attempt.
    carried = tx.take_carried(row) if commit.take_messages or kind == "ended" else NOTHING_CARRIED
    was_awaiting = row.kind == "awaiting"
    tx.put_state(
        row,
        state,
        commit.generation,
        at=commit.at,
        steps=commit.steps,
        result=commit.result if kind == "ended" else UNSET,
        not_before=commit.not_before if kind == "queued" else None,
    )
    epoch = claim_effects(tx, row, commit, kind, now)
    if commit.body_version is not UNSET and row.body_version != commit.body_version:
        tx.set_body_version(row, commit.body_version)
    if commit.retries is not None:
        tx.set_retries(row, commit.retries)
    stored: Sequence[JsonValue] = ()
    # The resume (an answered ticket and its value) stays with the run until it next
    # awaits or ends, so every attempt that starts meanwhile, a recovered or released
    # one's successor included, is handed the answer the attempt it replaces had.
    if kind == "awaiting":
        tx.keep_carried(row, commit.carried_messages, commit.carried_pause)
        tx.keep_resume(row, NO_RESUME)
    elif kind == "queued" and commit.carried_messages:
        # An attempt handed back or failed with a retry to come: the messages it held and
        # did not read go to the run's next attempt.
        tx.keep_carried(row, commit.carried_messages, commit.carried_pause)
    elif kind == "ended":
        stored = tx.drop_commands(run_id)
        tx.keep_resume(row, NO_RESUME)
    elif _answers(commit):
        tx.keep_resume(row, HeldResume(commit.resume_value, commit.resume_ticket))
    # The ticket slot: only an Awaiting run has one, and any other commit deletes it.
    if kind == "awaiting":
        tx.set_ticket(row, state.ticket)  # type: ignore[attr-defined]
    elif was_awaiting:
        tx.set_ticket(row, None)
    taken = () if carried is NOTHING_CARRIED else carried.messages()
    last_seq = write_events(tx, row, commit, taken, stored)
    if commit.chunks:
        write_chunks(tx, commit)
    if kind == "ended":
        end_streams(tx, run_id, commit.generation, commit.at)
    if commit.checkpoint is not UNSET:
        tx.put_checkpoint(row, commit.checkpoint, last_seq or tx.last_seq())
    if commit.take_messages or epoch is not None:
        if not commit.take_messages:
            return Accepted(state, last_seq, epoch=epoch)
        resume = tx.held_resume(row)
        # An attempt starts: it is handed the commands stored for its run in the same
        # transaction, so it needs no read of its own before its body runs.
        return Accepted(
            state,
            last_seq,
            taken_messages=taken,
            resume_value=resume.value,
            resume_ticket=resume.ticket,
            epoch=epoch,
            taken_pause=carried.pause,
            commands=tuple(tx.stored_commands(run_id)),
        )
    return Accepted(state, last_seq)


def _answers(commit: Commit) -> bool:
    """Whether a ``Queued`` or ``Running`` commit carries an answered ticket: a queued
    resume, or the attempt it starts."""
    return commit.resume_ticket is not None or commit.resume_value is not None


def claim_effects(
    tx: RunTx[RowT], row: RowT, commit: Commit, kind: StateKind, now: float
) -> int | None:
    """What an accepted commit does to claims: take one at the next epoch, mark the
    attempt live (or not), drop one, delete the commands it consumed, mark the messages it
    delivered. The epoch of the claim it took, else None."""
    epoch = None
    claim = commit.claim
    if claim is not None:
        epoch = row.epoch + 1
        tx.set_epoch(row, epoch)
        tx.set_worker(row, claim.owner)
        tx.set_claim(row.run_id, ClaimRow(claim.owner, epoch, now + claim.lease))
    if kind == "running":
        if epoch is None:
            fence = commit.fence
            live = None if fence is None else fence.epoch
        else:
            live = epoch
        if row.attempt_epoch != live:
            tx.set_attempt(row, live)
    elif (commit.fence is not None or commit.release) and row.attempt_epoch is not None:
        # The attempt itself ended: its thread is free. An end committed by another runtime
        # leaves the mark: the attempt may still be running until its owner releases the
        # claim or the lease lapses.
        tx.set_attempt(row, None)
    if commit.release:
        tx.set_claim(row.run_id, None)
    if commit.consumed:
        tx.consume(commit.consumed)
    if commit.delivered:
        tx.deliver(commit.delivered)
    return epoch


def write_events(
    tx: RunTx[RowT],
    row: RowT,
    commit: Commit,
    taken: Sequence[JsonValue],
    stored: Sequence[JsonValue],
) -> int:
    """Write the commit's events: its drafts, then (a terminal commit that threw messages
    away: the carried ones it ``taken``, the inbox's, the ``stored`` ones) one
    ``messages_discarded`` event, then its own ``committed`` event unless it does not
    announce. The last seq written, or 0."""
    generation, at = commit.generation, commit.at
    if not commit.events and not (taken or stored or commit.discarded_messages):
        # The common commit: its own event alone, or none.
        if commit.announce:
            return tx.event(row, generation, COMMITTED, commit.detail, at)
        return 0
    last_seq = 0
    for draft in commit.events:
        last_seq = tx.event(row, generation, draft.kind, draft.detail, at)
    if row.kind == "ended" and (taken or commit.discarded_messages or stored):
        messages = [*taken, *commit.discarded_messages, *stored]
        last_seq = tx.event(
            row, generation, EventKind.MESSAGES_DISCARDED, discarded_detail(messages), at
        )
    if commit.announce:
        last_seq = tx.event(row, generation, EventKind.COMMITTED, commit.detail, at)
    return last_seq


# ---------------------------------------------------------------- streams


def write_chunks(tx: RunTx[RowT], commit: Commit) -> None:
    """Write an accepted commit's stream chunks, each draft at its channel's next offsets;
    a ``"reset"`` chunk first on a channel another generation wrote last (DESIGN §3.9), so
    a reader drops what an earlier attempt left partial."""
    run_id, generation, at = commit.run_id, commit.generation, commit.at
    for draft in commit.chunks:
        if not draft.values:
            continue
        head = tx.stream_heads(run_id).get(draft.channel)
        last = 0
        if head is not None:
            last = head.last
            if head.generation != generation:
                last += 1
                tx.append_chunks(
                    run_id, draft.channel, last, generation, "reset", ONE_NONE, at, draft.keep
                )
        tx.append_chunks(
            run_id, draft.channel, last + 1, generation, "data", draft.values, at, draft.keep
        )


def end_streams(tx: RunTx[RowT], run_id: str, generation: int, at: float) -> None:
    """The run has ended: an ``"end"`` chunk on every channel it wrote, of the ending
    ``generation``; a channel whose last writer did not keep its chunks keeps that one."""
    heads = tx.stream_heads(run_id)
    if not heads:
        return
    for channel, head in list(heads.items()):
        end = head.last + 1
        tx.append_chunks(run_id, channel, end, generation, "end", ONE_NONE, at, head.keep)
        if not head.keep:
            tx.drop_chunks(run_id, channel, end)


# ---------------------------------------------------------------- runs with no attempt


def end_row(
    tx: RunTx[RowT],
    row: RowT,
    state: RunState,
    detail: Mapping[str, JsonValue],
    at: float,
    *,
    attempt_stops: bool = True,
) -> None:
    """End a run that has no attempt to do it (an owner lost, an ancestor ended elsewhere,
    a new run superseded it): its carried and stored messages are discarded in an event,
    its ticket and whatever a queued resume left are dropped, and its attempt is no longer
    live, unless ``attempt_stops`` is False: an attempt that may still run (a superseded
    run's) keeps its thread busy until its owner lets its claim go or the lease lapses."""
    carried = tx.take_carried(row)
    messages = [*carried.messages(), *tx.drop_commands(row.run_id)]
    was_awaiting = row.kind == "awaiting"
    generation = row.generation
    tx.put_state(row, state, generation, at=at)
    tx.keep_resume(row, NO_RESUME)
    if attempt_stops:
        tx.set_attempt(row, None)
    if was_awaiting:
        tx.set_ticket(row, None)
    if messages:
        tx.event(row, generation, EventKind.MESSAGES_DISCARDED, discarded_detail(messages), at)
    tx.event(row, generation, EventKind.COMMITTED, detail, at)
    end_streams(tx, row.run_id, generation, at)


def end_descendants(
    tx: RunTx[RowT], ancestor: str, at: float, state: RunState, detail: Mapping[str, JsonValue]
) -> None:
    """End every unended descendant of ``ancestor``, deepest first (the reverse of a
    breadth-first walk, children in the order they were created), so every child's
    terminal commit comes before its parent's."""
    for run_id in reversed(_descendants(tx, ancestor)):
        row = tx.row(run_id)
        assert row is not None  # a run is forgotten only with its whole tree
        if row.kind != "ended":
            end_row(tx, row, state, detail, at)


def hand_back_descendants(tx: RunTx[RowT], ancestor: str, at: float) -> None:
    """Hand ``ancestor``'s unended descendants back with it (rule 22), deepest first: a
    running one goes back to ``Queued`` with its checkpoint (the attempt it had was lost
    with its root's), a queued or awaiting one stays as it is. None of them is claimed on
    its own: they wait for the root's next attempt to start them again by their ids."""
    for run_id in reversed(_descendants(tx, ancestor)):
        row = tx.row(run_id)
        assert row is not None  # a run is forgotten only with its whole tree
        if row.kind == "running":
            generation = row.generation
            tx.put_state(row, QUEUED, generation, at=at)
            tx.set_attempt(row, None)
            tx.event(row, generation, EventKind.COMMITTED, HANDED_BACK_DETAIL, at)


def _descendants(tx: RunTx[RowT], ancestor: str) -> list[str]:
    out: list[str] = []
    seen = {ancestor}  # parents are named at creation, so a cycle takes bogus commits
    frontier = [ancestor]
    while frontier:
        level = [
            run_id for parent in frontier for run_id in tx.children(parent) if run_id not in seen
        ]
        seen.update(level)
        out.extend(level)
        frontier = level
    return out


# ---------------------------------------------------------------- claims and commands


def renew(
    tx: RunTx[RowT], owner: str, held: Mapping[str, int], now: float, lease: float
) -> list[str]:
    """`DurableStore.renew`: ``now`` is the store's clock, read inside the transaction."""
    tx.prefetch_claims(held)
    lease_until = now + lease
    lost: list[str] = []
    for run_id, epoch in held.items():
        claim = tx.claim(run_id)
        if claim is None or claim.owner != owner or claim.epoch != epoch or claim.lease_until < now:
            lost.append(run_id)
        else:
            tx.set_claim(run_id, ClaimRow(owner, epoch, lease_until))
    return lost


def release(tx: RunTx[RowT], owner: str, run_id: str) -> None:
    """`DurableStore.release`."""
    claim = tx.claim(run_id)
    if claim is None or claim.owner != owner:
        return
    row = tx.row(run_id)
    if row is not None and row.kind == "running":
        # Given up by an attempt that never committed its end: its owner is lost, so the
        # claim stays, lapsed, where recovery finds the run.
        tx.set_claim(run_id, ClaimRow(owner, claim.epoch, LAPSED))
    else:
        tx.set_claim(run_id, None)


def recover(
    tx: RunTx[RowT],
    owner: str,
    names: Collection[str],
    now: float,
    at: float,
    lease: float,
    max_recoveries: int,
    limit: int,
) -> list[Recovered]:
    """`DurableStore.recover`: deal with at most ``limit`` runs whose claim expired before
    ``now`` (the store's clock), writing events dated ``at``. A recoverable run left for a
    runtime that has its body does not count toward ``limit``, so runs this runtime cannot
    take never hide the ones it can."""
    lease_until = now + lease
    recovered: list[Recovered] = []
    dealt = 0
    for run_id in tx.expired_claims(now):
        if dealt >= limit:
            break
        root = tx.row(run_id)
        if root is None:
            tx.set_claim(run_id, None)
            dealt += 1
            continue
        running = root.kind == "running"
        losses = root.recoveries + 1
        recoverable = running and root.name is not None and losses <= max_recoveries
        if recoverable and not _serves(names, root):
            continue  # left for a runtime that has the body (at a version that may run it)
        dealt += 1
        if not running:
            # A stale claim: nothing to recover. A queued root keeps its tree for its next
            # attempt (rule 22); a descendant still running under a root that awaits or
            # ended has lost its owner with the claim, and ends.
            if root.kind == "queued":
                hand_back_descendants(tx, run_id, at)
            else:
                end_descendants(tx, run_id, at, owner_lost(OWNER_LOST), lost_detail(OWNER_LOST))
            tx.set_claim(run_id, None)
            continue
        tx.set_recoveries(root, losses)
        if not recoverable:
            why = OWNER_LOST if root.name is None else f"owner lost {losses} times"
            tx.set_claim(run_id, None)
            end_descendants(tx, run_id, at, owner_lost(OWNER_LOST), lost_detail(OWNER_LOST))
            end_row(tx, root, owner_lost(why), lost_detail(why), at)
            continue
        # The tree goes to the root's next attempt (rule 22): its running descendants back
        # to Queued with their checkpoints, for that attempt to take back.
        hand_back_descendants(tx, run_id, at)
        epoch = root.epoch + 1
        tx.set_epoch(root, epoch)
        tx.set_worker(root, owner)
        tx.set_claim(run_id, ClaimRow(owner, epoch, lease_until))
        recovered.append(Recovered(tx.record(run_id), epoch))
    return recovered


def names_held(names: Collection[str]) -> Collection[str]:
    """A copy of the ``names`` given to `recover` that a store may hold across threads:
    the names with their `BodyVersions` when it maps them (a serving runtime's), else a
    frozen set."""
    if isinstance(names, Mapping):
        return dict(names)
    return frozenset(names)


def _serves(names: Collection[str], root: StoredRun) -> bool:
    """Whether a runtime that registered ``names`` has a body that may run ``root``: one
    of its name and, when ``names`` maps names to `BodyVersions` (a serving runtime's),
    one that accepts the version the run's first attempt pinned."""
    name = root.name
    if name not in names:
        return False
    if isinstance(names, Mapping):
        versions = names[name]
        return isinstance(versions, BodyVersions) and versions.accepts(root.body_version)
    return True


def post_command(
    tx: RunTx[RowT],
    run_id: str,
    kind: CommandKind,
    payload: JsonValue,
    reason: str | None,
    at: float,
) -> int | Rejected:
    """`DurableStore.post_command`: a command waits for the run's current attempt or, for
    a queued run, its next one; an awaiting run has no attempt to take one until it is
    resumed."""
    row = tx.row(run_id)
    if row is None:
        return Rejected(RejectReason.UNKNOWN, None)
    if row.kind != "running" and row.kind != "queued":
        why = RejectReason.ENDED if row.kind == "ended" else RejectReason.STALE
        return Rejected(why, row.state)
    return tx.insert_command(run_id, kind, payload, reason, at)
