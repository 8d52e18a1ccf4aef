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
from typing import Final, NamedTuple, Protocol, final

import attrs

from .._core import (
    CANCELLED_CAUSE,
    UNSET,
    Awaiting,
    CommandKind,
    Commit,
    Ended,
    EndRequest,
    Indeterminate,
    JsonValue,
    NewRun,
    Queued,
    ResumeTicket,
    Running,
    RunRecord,
    RunState,
    StateKind,
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


class RunTx(Protocol):
    """One write transaction of a store, as the rules use it (see the module docstring for
    what every method may assume and must provide).

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

    def row(self, run_id: str) -> StoredRun | None:
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

    def expired_claims(self, now: float) -> Iterable[str]:
        """The runs whose claim's ``lease_until`` is before ``now``, those lost longest ago
        first (by ``lease_until``, then run id). A snapshot as of the call: `recover` writes
        claims while it iterates, and stops early."""
        ...

    def take_carried(self, row: StoredRun) -> Carried:
        """Empty the run's carried slot (messages and pause); what it held. A write only
        when it held something."""
        ...

    def held_resume(self, row: StoredRun) -> HeldResume:
        """The resume the run holds (`NO_RESUME` when none)."""
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

    # ------------------------------------------------------------------ writing

    def create(
        self,
        run_id: str,
        new: NewRun,
        state: RunState,
        generation: int,
        result: JsonValue,
    ) -> StoredRun:
        """Insert a run (``run_id`` is new to the store): its identity, input, step cap and
        fork origin from ``new`` (``root_run_id`` defaulting to ``run_id``), its state and
        generation, its result (None unless it is created ended); steps 0, checkpoint None,
        epoch 0, no attempt, nothing carried, no resume, no ticket. The new row."""
        ...

    def put_state(
        self,
        row: StoredRun,
        state: RunState,
        generation: int,
        *,
        steps: int | None = None,
        result: JsonValue = UNSET,
    ) -> None:
        """Set the run's state and generation; its ``steps`` unless None, its result
        unless `UNSET`. The store keeps its own indexes here (a queued named root enters
        the queue it hands runs out from, an ended run the ones it forgets by)."""
        ...

    def put_checkpoint(self, row: StoredRun, checkpoint: JsonValue, seq: int) -> None:
        """Set the run's checkpoint, and keep it as the run's checkpoint as of its event
        ``seq`` (`ForkingStore.checkpoint_at`): the last event the commit that wrote it
        wrote, or the store's last seq when it wrote none."""
        ...

    def set_ticket(self, row: StoredRun, ticket: ResumeTicket | None) -> None:
        """Put the run's one live ticket (an ``Awaiting`` state's), or delete it (None). A
        store that finds due tickets by their time uses ``wake_at(ticket)``."""
        ...

    def keep_carried(self, row: StoredRun, messages: tuple[JsonValue, ...], pause: bool) -> None:
        """Fill the run's carried slot (it replaces what was there)."""
        ...

    def keep_resume(self, row: StoredRun, resume: HeldResume) -> None:
        """Set the resume the run holds (`NO_RESUME` deletes it)."""
        ...

    def set_epoch(self, row: StoredRun, epoch: int) -> None:
        """Record ``epoch`` as the last granted on the run."""
        ...

    def set_attempt(self, row: StoredRun, epoch: int | None) -> None:
        """Mark the run's attempt live at ``epoch``, or not live (None)."""
        ...

    def set_recoveries(self, row: StoredRun, recoveries: int) -> None:
        """Record how many times the run's owner was lost."""
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
        row: StoredRun,
        generation: int,
        kind: str,
        detail: Mapping[str, JsonValue],
        at: float,
    ) -> int:
        """Append an event of the run, with the run's state as it is now; its seq, one
        more than `last_seq`. ``detail`` is frozen, and most often one of a few shared
        objects (a store that encodes may keep their text by identity)."""
        ...


# ============================================================================ values


_KINDS: Final[dict[type[RunState], StateKind]] = {
    Queued: "queued",
    Running: "running",
    Awaiting: "awaiting",
    Ended: "ended",
}


def state_kind(state: RunState) -> StateKind:
    """The kind of a committed state."""
    return _KINDS[type(state)]


def kind_of_variant(variant: type[RunState]) -> StateKind | None:
    """The kind of a `RunState` variant (None for anything else)."""
    return _KINDS.get(variant)


LAPSED: Final = -math.inf
"""The lease of a claim given up while its run is still ``Running``: lapsed at every
reading, so recovery finds the run."""

# ---------------------------------------------------------------- store-made end details

OWNER_LOST: Final = "owner lost"

PARENT_ENDED: Final[RunState] = Ended(CANCELLED_CAUSE)
"""How a descendant of a run ended elsewhere ends (``Commit.end_descendants``)."""


def parent_detail(run_id: str) -> Mapping[str, JsonValue]:
    """The detail of a descendant's end when its ancestor ``run_id`` ended elsewhere."""
    return EndRequest.parent_ended(run_id).detail


def owner_lost(why: str) -> RunState:
    """How a run whose owner was lost ends when it is not recovered."""
    return Ended(Indeterminate(why))


def lost_detail(why: str) -> Mapping[str, JsonValue]:
    """The detail of a run's end when its owner was lost."""
    return scalar_dict({"source": "recovery", "reason": why})


def discarded_detail(messages: Sequence[JsonValue]) -> Mapping[str, JsonValue]:
    """The detail of a ``messages_discarded`` event: the messages no attempt received."""
    return freeze_detail({"messages": list(messages)}, "discarded messages")
