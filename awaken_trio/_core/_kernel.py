"""The kernel's state: what the supervisor's parts (admissions, progress, the finish boundary,
serving) share, owned by the supervisor.

One record, so each part is an object with behaviour over the same state rather than an
owner of state of its own: the registry of active attempts, the thread gate, the attempts
queued behind their threads, the bodies by name and those of runs awaiting here, the
messages stranded by failed commits, the clock, the store and its mailbox, the claim policy,
and where the runtime is in its life.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, final

import trio
from trio_util import RepeatedEvent

from ._attempt import lost
from ._claims import ClaimPolicy
from ._commits import CommitMailbox
from ._errors import InvalidArgument, UnknownRun
from ._json import JsonValue
from ._policy import Deadlines
from ._registry import AttemptRegistry, ThreadGate
from ._state import RunRecord
from ._storage import Store, read_store
from ._util import safe_repr
from ._validate import check_body, check_id
from ._versions import UNVERSIONED, BodyVersions, checked_versions

if TYPE_CHECKING:
    from ._attempt import Attempt, Body, EndRequest, OwnershipVerifier
    from ._observe import AttemptObserver

Clock = Callable[[], float]
VerifierFactory = Callable[[str, str, int], "OwnershipVerifier | None"]
Scheduled = Callable[[float, str, str], None]
Retry = Callable[[float, str, int], None]
"""Try run ``run_id``, committed ``Queued`` at generation ``g`` to retry, again at a time."""


class OnLimits(Protocol):
    """Told of a run's time limits, to end it at them (`Scheduler.limits`)."""

    def __call__(self, *, run_id: str, limits: Deadlines) -> None: ...


"""Told of every scheduled resume (``ctx.sleep``) committed here: wake time, run, ticket."""


@final
class Kernel:
    """The state the supervisor's parts share.

    Invariant: an attempt is in `registry` from the commit that made it ``Running`` until
    its end's step, and in `queued` while it waits ``Queued`` for its thread here; each
    holds (or waits in FIFO order for) its thread in `gate` for as long; no other structure
    here outlives the runs it names (entries go as their runs end or leave).
    """

    def __init__(
        self,
        store: Store,
        mailbox: CommitMailbox,
        clock: Clock,
        claims: ClaimPolicy,
        *,
        max_payload_bytes: int,
        verifier_factory: VerifierFactory | None,
        observer: AttemptObserver | None,
        on_scheduled: Scheduled,
        on_retry: Retry,
        on_interrupt: Callable[[BaseException], None],
        on_limits: OnLimits,
    ) -> None:
        self.store = store
        self.mailbox = mailbox
        self.clock = clock
        self.claims = claims
        # The most characters of compact JSON text any one payload may take.
        self.max_payload_bytes = max_payload_bytes
        self.verifier_factory = verifier_factory
        # Told of every attempt that starts here (tracing); None costs one test per attempt.
        self.observer = observer
        self.on_scheduled = on_scheduled
        # A run that failed here waits to retry: this runtime tries it again when due.
        self.on_retry = on_retry
        # A run this runtime holds has time limits: end it at them unless it has ended.
        self.on_limits = on_limits
        self.on_interrupt = on_interrupt
        self.registry = AttemptRegistry()
        self.gate = ThreadGate()
        self.queued: dict[str, Attempt] = {}
        # Bodies by name (`register`): what lets a run be submitted, served and recovered;
        # and the versions of those registered with one (DESIGN §3.8).
        self.named: dict[str, Body] = {}
        self.versions: dict[str, BodyVersions] = {}
        # The bodies of runs committed Awaiting here, for their resume, and of runs that
        # failed here and wait Queued to retry, for their next try.
        self.awaiting_bodies: dict[str, Body] = {}
        # Messages of attempts whose last commit failed: discarded, with an event, by
        # whichever commit ends the run later, so an accepted message never vanishes.
        self.stranded: dict[str, tuple[JsonValue, ...]] = {}
        # Set whenever the store may have changed elsewhere (durable stores: polled), so
        # waiters on other runtimes' doings look again.
        self.store_changed = RepeatedEvent()
        # Readers of streams waiting for a change here (`StreamReader`): while there are
        # some, a stream write announced by another runtime wakes them.
        self.stream_readers = 0
        # Shutdown has begun: every actor's scope is being cancelled, and why.
        self.closing = False
        self.shutdown_request: EndRequest | None = None
        self._last_at = 0.0
        # The checkpoint of a call that commits next. Through the mailbox, the commit's wait
        # is the schedule point (the task sleeps until its answer), so only the cancel point
        # is taken before it, which saves a trip through the scheduler; an inline commit
        # yields nowhere, so the checkpoint is a full one. (The mailbox's mode is fixed.)
        self.checkpoint_before_commit: Callable[[], Awaitable[None]] = (
            trio.lowlevel.checkpoint if mailbox.inline else trio.lowlevel.checkpoint_if_cancelled
        )

    # ------------------------------------------------------------------ the clock

    def now(self) -> float:
        """The runtime clock, checked. Admissions read it before they take anything, so a
        clock that fails leaves nothing behind."""
        at = self.clock()
        if type(at) is not float:
            if type(at) is not int:
                raise InvalidArgument(
                    f"the runtime's clock returned {safe_repr(at)}; it must return wall-clock"
                    " seconds as a float (time.time() scale)"
                )
            at = float(at)
        if not math.isfinite(at):
            raise InvalidArgument(f"the runtime's clock returned {at!r}; it must be finite")
        self._last_at = at
        return at

    def now_for_end(self) -> tuple[float, str | None]:
        """The clock for a commit that must land anyway: on failure, the last good reading
        and what went wrong (a KeyboardInterrupt from the clock shuts the runtime down)."""
        try:
            return self.now(), None
        except BaseException as exc:
            return self.clock_failed(exc)

    def clock_failed(self, exc: BaseException) -> tuple[float, str]:
        """`now_for_end`'s answer when the clock raised ``exc``."""
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            self.on_interrupt(exc)
        elif isinstance(exc, trio.Cancelled):  # pragma: no cover - the clock is sync
            raise exc
        return self._last_at, f"the clock failed: {safe_repr(exc)}"

    # ------------------------------------------------------------------ where runs are

    def attempt_here(self, run_id: str) -> Attempt | None:
        """The run's attempt here that control may still reach: running, or waiting for
        its thread."""
        attempt = self.registry.get(run_id) or self.queued.get(run_id)
        return None if attempt is None or attempt.phase == "sealed" else attempt

    def free_thread(self, attempt: Attempt) -> None:
        if attempt.gate_waiter is not None:
            self.gate.withdraw(attempt.gate_waiter)
        else:
            self.gate.free(attempt.thread_id, attempt)

    def lose(self, run_id: str, why: str) -> bool:
        """This runtime's claim on the root run is lost: its attempt (and every child of
        it) stops at once and commits nothing. False when there was no attempt to stop."""
        self.claims.forget(run_id)
        attempt = self.attempt_here(run_id)
        if attempt is None:
            return False
        attempt.request_end(lost(why, claim_lost=True))
        return True

    def superseded(self, run_ids: tuple[str, ...], by: str) -> None:
        """A commit of the new run ``by`` ended ``run_ids``, the other runs of its thread
        (``if_busy="supersede"``): their attempts here stop and commit nothing (the store
        holds their end); each then lets its claim go, which frees the thread."""
        why = f"superseded by run {by!r}"
        for run_id in run_ids:
            attempt = self.attempt_here(run_id)
            if attempt is not None:
                attempt.request_end(lost(why, claim_lost=False))

    def lose_attempt(self, attempt: Attempt, why: str) -> None:
        """A commit of ``attempt`` was fenced: its whole tree has lost the root's claim."""
        root = attempt
        while root.parent is not None:
            root = root.parent
        self.lose(root.run_id, why)

    async def load(self, run_id: str) -> RunRecord:
        """The run's committed record. Raises `UnknownRun`, or `StoreError`."""
        record = await read_store(self.store.load(run_id), f"run {run_id!r}")
        if record is None:
            raise UnknownRun(run_id)
        return record

    # ------------------------------------------------------------------ bodies by name

    def register(
        self, name: str, body: Body, *, version: str | None = None, compatible: object = ()
    ) -> None:
        """Give ``body`` a name runs can be submitted, served and recovered by, at
        ``version`` (and able to run the runs pinned to a version in ``compatible``)."""
        check_id(name, "a body's name")
        check_body(body)
        versions = checked_versions(name, version, compatible)
        known = self.named.get(name)
        if known is not None and not same_body(known, body):
            raise InvalidArgument(
                f"the name {name!r} is registered for another body ({safe_repr(known)});"
                " register each body under a name of its own"
            )
        had = self.versions.get(name, UNVERSIONED)
        if known is not None and had != versions:
            raise InvalidArgument(
                f"the body {name!r} is registered at version {had.version!r} already; one"
                " runtime serves one version of a name (run the other in another runtime)"
            )
        self.named[name] = body
        if versions is not UNVERSIONED:
            self.versions[name] = versions

    def versions_of(self, name: str) -> BodyVersions:
        """The versions of the body registered under ``name`` (`UNVERSIONED` by default)."""
        return self.versions.get(name, UNVERSIONED) if self.versions else UNVERSIONED

    def version_for(self, name: str | None, body: Body) -> str | None:
        """The version a new run of ``body`` started here pins: its registered one, when
        ``body`` is the body registered under ``name``."""
        if name is None:
            return None
        known = self.named.get(name)
        if known is None or not same_body(known, body):
            return None
        return self.versions_of(name).version

    def body_for_record(self, record: RunRecord) -> Body | None:
        """The body to start the stored run's next attempt with here: the one it awaits a
        resume with, else the one registered under its name if it may run the run
        (`named_body_for`). None: leave the run for another runtime."""
        body = self.awaiting_bodies.get(record.run_id)
        return body if body is not None else self.named_body_for(record)

    def named_body_for(self, record: RunRecord) -> Body | None:
        """The body registered under the run's name, if it may run the run: a run that
        never started takes any version; one that did, only a body that accepts the
        version its first attempt pinned."""
        name = record.name
        if name is None:
            return None
        body = self.named.get(name)
        if body is None or record.generation == 0:
            return body
        return body if self.versions_of(name).accepts(record.body_version) else None

    def name_of(self, body: Body) -> str | None:
        """The name ``body`` is registered under, if any (the first, if several)."""
        for name, known in self.named.items():
            if same_body(known, body):
                return name
        return None

    def body_for(self, run_id: str, name: str | None) -> Body | None:
        """The body to run a run with here: the one it awaits a resume with, or the one
        registered under its name."""
        body = self.awaiting_bodies.get(run_id)
        if body is None and name is not None:
            body = self.named.get(name)
        return body

    # ------------------------------------------------------------------ changes

    def changed_event(self) -> trio.Event:
        return self.mailbox.changed_event()

    async def changed(self, local: trio.Event, *, interval: float | None = None) -> bool:
        """Wait until something may have changed: a commit here or, on a durable store, a
        change made by another runtime (`store_changed_elsewhere` sets ``local`` too), an
        event the caller took from the mailbox before it looked; at most ``interval``
        seconds (by default the claim policy's idle wait: a lapsed lease changes nothing
        in the store). True if something changed, False if the wait timed out.

        One event and no nursery of its own: a KeyboardInterrupt delivered while a caller
        waits here comes out as itself, not wrapped in a group."""
        with trio.move_on_after(self.claims.idle_wait if interval is None else interval):
            await local.wait()
            return True
        return False

    def streams_written_elsewhere(self) -> None:
        """Another runtime wrote stream chunks (a store's notice): wake the stream readers
        waiting here, if any (the rest of the runtime has no use for it)."""
        if self.stream_readers:
            self.mailbox.publish()

    def store_changed_elsewhere(self) -> None:
        """Another runtime changed the store (or something may have become runnable): wake
        everything that waits on it, serving loops included."""
        self.store_changed.set()
        self.mailbox.publish()


def same_body(known: Body, body: Body) -> bool:
    # A bound method is a new object at every attribute access; it compares equal to
    # another for the same function and instance.
    if known is body:
        return True
    try:
        return bool(known == body)
    except Exception:
        return False
