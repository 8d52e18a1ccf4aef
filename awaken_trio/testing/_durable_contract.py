"""The durable store contract: the rules a store shared by several runtimes enforces (claims
with leases and epochs, fences, the thread guard, recovery, stored commands, runnable runs,
versions), as a test class (see `DurableStoreContract`).

Every check talks to the store through the `DurableStore` protocol only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from .. import (
    EndCause,
    FrozenDict,
    JsonValue,
    ResumeTicket,
    RunEvent,
    RunState,
)
from ..store import (
    Claim,
    Commit,
    DurableStore,
    Expect,
    Fence,
    NewRun,
    Recovered,
    Rejected,
    RejectReason,
    StoredCommand,
)
from ._store_contract import (
    CANCELLED,
    DONE,
    Awaiting,
    Ended,
    Queued,
    Running,
    StoreContract,
    _accepted,
    _assert_frozen,
    _create,
    _loaded,
    _rejected,
    _snapshot,
    _ticket,
)

LOST = Ended(EndCause.Indeterminate("owner lost"))

JOB = "job"
NAMES = frozenset({JOB})

# Lease durations, in seconds of the store's clock: one the suite lets lapse (``elapse``
# past it), and one that never lapses during a test.
BRIEF = 1.0
LIVE = 3600.0

Elapse = Callable[[float], Awaitable[None]]


def _new(
    run_id: str,
    state: RunState | None = None,
    *,
    generation: int = 1,
    name: str | None = JOB,
    thread: str | None = None,
    parent: str | None = None,
    root: str | None = None,
    at: float = 1.0,
    claim: Claim | None = None,
    fence: Fence | None = None,
    thread_guard: bool = False,
) -> Commit:
    """A commit creating ``run_id`` (named ``job``, on its own thread, by default)."""
    return _create(
        run_id,
        state,
        generation=generation,
        parent=parent,
        name=name,
        at=at,
        thread=thread,
        root=root,
        claim=claim,
        fence=fence,
        thread_guard=thread_guard,
    )


def _child(
    run_id: str,
    parent: str,
    root: str,
    fence: Fence | None,
    state: RunState | None = None,
    *,
    at: float = 2.0,
    thread: str | None = None,
) -> Commit:
    """A commit creating a child run (unnamed), made under its root's claim."""
    return Commit(
        run_id=run_id,
        state=Running(1) if state is None else state,
        generation=0 if isinstance(state, Queued) else 1,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(thread or f"thread-{run_id}", parent, None, None, None, root),
        fence=fence,
    )


def _commit(
    run_id: str,
    state: RunState,
    generation: int = 1,
    *,
    at: float = 2.0,
    **changes: object,
) -> Commit:
    """A commit with no expectation (only the fences under test decide)."""
    return Commit(
        run_id=run_id,
        state=state,
        generation=generation,
        expect=Expect(),
        at=at,
        **changes,  # type: ignore[arg-type]
    )


def _scheduled(run_id: str, wake_at: float) -> ResumeTicket:
    return ResumeTicket(
        correlation_id=f"sleep-{run_id}",
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        reason="scheduled_action",
        payload={"wake_at": wake_at},
    )


async def _claimed(
    store: DurableStore,
    run_id: str,
    owner: str = "a",
    lease: float = LIVE,
    *,
    name: str | None = JOB,
    thread: str | None = None,
    at: float = 1.0,
) -> int:
    """Create ``run_id`` Running under a new claim of ``lease`` seconds; its epoch."""
    landed = await _accepted(
        store,
        _new(run_id, name=name, thread=thread, at=at, claim=Claim(owner, lease)),
    )
    assert landed.accepted.epoch is not None
    return landed.accepted.epoch


async def _awaiting(store: DurableStore, run_id: str, ticket: ResumeTicket, **kw: object) -> None:
    await _accepted(store, _new(run_id, **kw))  # type: ignore[arg-type]
    await _accepted(store, _commit(run_id, Awaiting(ticket)))


async def _state(store: DurableStore, run_id: str) -> RunState:
    return (await _loaded(store, run_id)).state


async def _terminal_event(store: DurableStore, run_id: str) -> RunEvent:
    events = await store.events_after(0, run_id)
    assert events, f"run {run_id!r} has no events"
    assert events[-1].state.is_ended, events[-1]
    return events[-1]


async def _messages_discarded(store: DurableStore, run_id: str) -> list[JsonValue]:
    events = await store.events_after(0, run_id)
    found = [e for e in events if e.kind == "messages_discarded"]
    assert len(found) == 1, events
    assert events[-2] == found[0], "the discard event comes right before the terminal one"
    messages = found[0].detail["messages"]
    assert isinstance(messages, list)
    return messages


_LOSSES = ["expired", "ended", "paused", "released", "recovered"]


@pytest.mark.trio
class DurableStoreContract(StoreContract):
    """The rules every `DurableStore` enforces, on top of `StoreContract`'s. Subclass it
    and override ``store`` (a new, empty durable store per test), and ``peer`` if the store
    can be opened twice::

        class TestMyDurableStore(DurableStoreContract):
            @pytest.fixture
            async def store(self, tmp_path) -> AsyncIterator[DurableStore]:
                async with MyStore(tmp_path / "runs") as store:
                    yield store

            @pytest.fixture
            async def peer(self, tmp_path, store) -> AsyncIterator[DurableStore]:
                async with MyStore(tmp_path / "runs") as peer:  # the same truth
                    yield peer

    What a durable store must do, inside the transaction of each call:

    * Lease times are the store's: it reads its own clock inside each transaction, and
      the runtime passes only lease durations (`Claim.lease`, ``renew``, ``recover``);
      a commit's ``at`` dates its events and decides nothing about leases.
    * Claims: a commit with a `Claim` takes the run's next epoch (``Accepted.epoch``);
      epochs strictly increase per run, across releases; a claim is refused ``FENCED``
      while another owner's claim on the run is live, and granted once it expired or was
      released.
    * Fences: a commit with a `Fence` lands only while the root run's claim is that
      owner's, at that epoch, with its lease unexpired; else ``FENCED``, nothing changed.
      A child run lives on its root's claim.
    * ``renew`` extends the owner's claims that are still current and reports the rest
      (superseded, other owner, expired, released, unknown) as lost; ``release`` drops
      only the owner's claim, and leaves a run still ``Running`` for ``recover``; a commit
      with ``release`` drops the claim.
    * Thread guard: a commit with ``thread_guard`` is refused ``THREAD_BUSY`` while
      another run's attempt on the thread is live (its attempt epoch is its root's current
      claim, with the lease unexpired); a run never blocks itself.
    * ``recover``: see `DurableStore.recover`, branch by branch; the runs lost longest ago
      (earliest lease expiry) are dealt with first, and a run left for a runtime that has
      its body does not count toward ``limit``.
    * ``runnable``: queued named root runs with no live claim and a free thread, oldest
      first, then due scheduled ones, soonest first, at most ``limit``.
    * Stored commands: ``post_command`` only for a ``Running`` or ``Queued`` run, ids
      increasing; ``commands`` by run and cursor; ``consumed`` deletes them with the
      commit; a terminal end discards the stored messages (after carried and the commit's
      own) and drops the other commands.
    * ``end_descendants``: the run's unended tree is ended ``Cancelled`` (source parent),
      deepest first, before the run's own commit.
    * ``states`` reads committed states; ``version`` moves when another runtime writes.
    """

    @pytest.fixture
    def elapse(self) -> Elapse:
        """Let that many seconds pass on the store's lease clock. The default waits with
        `trio.sleep`: right for a store on Trio's clock under pytest-trio's
        ``autojump_clock`` (no real waiting), and for a store on real time (then each
        lapse the suite needs waits about two seconds). A store whose clock a test can set
        overrides this to advance it."""
        return trio.sleep

    @pytest.fixture
    def peer(self, store: DurableStore) -> DurableStore:
        """A second handle on the same committed truth as ``store``, as another runtime
        sees it: another connection to the same file or database. An in-process store
        shared by its runtimes is its own peer (the default)."""
        return store

    # ------------------------------------------------------------ identity

    async def test_a_durable_store_says_so(self, store: DurableStore) -> None:
        assert store.durable is True
        assert isinstance(store, DurableStore)

    # ------------------------------------------------------------ claims and epochs

    async def test_claim_epochs_strictly_increase_even_after_a_release(
        self, store: DurableStore
    ) -> None:
        created = await _accepted(store, _new("r1", Queued(), generation=0))
        assert created.accepted.epoch is None
        first = await _accepted(store, _commit("r1", Running(1), at=1.0, claim=Claim("a", LIVE)))
        assert first.accepted.epoch == 1
        unclaimed = await _accepted(store, _commit("r1", Running(1), at=1.5))
        assert unclaimed.accepted.epoch is None
        # The owner gives the run back with its commit (back to Queued, claim released).
        await _accepted(
            store, _commit("r1", Queued(), at=2.0, fence=Fence("r1", "a", 1), release=True)
        )
        second = await _accepted(
            store, _commit("r1", Running(2), 2, at=3.0, claim=Claim("b", LIVE))
        )
        assert second.accepted.epoch == 2
        await store.release("b", "r1")
        third = await _accepted(store, _commit("r1", Running(3), 3, at=4.0, claim=Claim("a", LIVE)))
        assert third.accepted.epoch == 3

    async def test_a_claim_is_refused_while_another_owners_lease_is_live(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _accepted(store, _new("r1", Queued(), generation=0))
        await _accepted(store, _commit("r1", Running(1), at=1.0, claim=Claim("a", BRIEF)))
        before = await _snapshot(store, "r1")
        # The commit's own time decides nothing: a runtime whose clock runs far ahead
        # cannot take a live claim.
        for at in (5.0, 1e9):
            taken = _commit("r1", Running(1), at=at, claim=Claim("b", LIVE))
            assert await _rejected(store, taken) == Rejected(RejectReason.FENCED, Running(1))
        assert await _snapshot(store, "r1") == before

        # Its own owner may claim it again (a new attempt of its own): the next epoch.
        again = await _accepted(store, _commit("r1", Running(1), at=6.0, claim=Claim("a", BRIEF)))
        assert again.accepted.epoch == 2
        # Once the lease has expired, another owner gets it, and the old owner is fenced,
        # even when that owner's clock runs far behind.
        await elapse(2 * BRIEF)
        taken_over = await _accepted(
            store, _commit("r1", Running(2), 2, at=0.0, claim=Claim("b", LIVE))
        )
        assert taken_over.accepted.epoch == 3
        late = _commit("r1", DONE, 2, at=-1e9, fence=Fence("r1", "a", 2))
        assert await _rejected(store, late) == Rejected(RejectReason.FENCED, Running(2))

    # ------------------------------------------------------------ fences

    async def test_a_fenced_commit_lands_only_under_the_current_live_claim(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "r1", "a", BRIEF)
        assert epoch == 1

        async def fenced(owner: str, epoch: int, run_id: str = "r1", at: float = 5.0) -> None:
            before = await _snapshot(store, run_id)
            commit = _commit(run_id, Running(1), at=at, fence=Fence(run_id, owner, epoch))
            rejected = await _rejected(store, commit)
            state = None if before[0] is None else before[0].state
            assert rejected == Rejected(RejectReason.FENCED, state)
            assert await _snapshot(store, run_id) == before

        progress = _commit("r1", Running(1), at=5.0, fence=Fence("r1", "a", 1), checkpoint=[1])
        assert (await _accepted(store, progress)).record.checkpoint == [1]
        # The commit's own time decides nothing: far ahead, the lease is still live.
        await _accepted(store, _commit("r1", Running(1), at=1e9, fence=Fence("r1", "a", 1)))

        await fenced("b", 1)  # another owner
        await fenced("a", 2)  # an epoch never granted
        # Superseded: the run was claimed again.
        await _accepted(store, _commit("r1", Running(1), at=6.0, claim=Claim("a", LIVE)))
        await fenced("a", 1)
        await _accepted(store, _commit("r1", Running(1), at=6.5, fence=Fence("r1", "a", 2)))
        # Released: no claim of that owner's any more.
        await store.release("a", "r1")
        await fenced("a", 2)
        # A run that was never claimed.
        await _accepted(store, _new("r2"))
        await fenced("a", 1, "r2")
        # Expired: the lease lapsed on the store's clock, whatever time the commit says.
        await _claimed(store, "r3", "a", BRIEF)
        await elapse(2 * BRIEF)
        await fenced("a", 1, "r3", at=0.0)

    async def test_a_child_lives_on_its_roots_claim(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "root", "a", BRIEF)
        fence = Fence("root", "a", epoch)
        child = await _accepted(store, _child("c1", "root", "root", fence, at=2.0))
        assert child.record.parent_run_id == "root"
        await _accepted(store, _commit("c1", Running(1), at=3.0, fence=fence, checkpoint="c"))
        # A grandchild is fenced by the root's claim too.
        await _accepted(store, _child("g1", "c1", "root", fence, at=3.0))

        # The root's lease expires: nothing more lands for its tree.
        await elapse(2 * BRIEF)
        late = _commit("c1", DONE, at=3.5, fence=fence)
        assert await _rejected(store, late) == Rejected(RejectReason.FENCED, Running(1))
        orphan = _child("c2", "root", "root", fence, at=3.5)
        assert await _rejected(store, orphan) == Rejected(RejectReason.FENCED, None)
        assert await store.load("c2") is None
        assert (await _loaded(store, "c1")).checkpoint == "c"

    # ------------------------------------------------------------ renew and release

    async def test_renew_extends_current_claims_and_reports_lost_ones(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # Every lease here outlives the first lapse and not the second, unless renewed.
        await _claimed(store, "live", "a", 3 * BRIEF)
        await _claimed(store, "superseded", "a")
        await _accepted(
            store, _commit("superseded", Running(1), at=2.0, claim=Claim("a", 3 * BRIEF))
        )  # epoch 2 now
        await _claimed(store, "expired", "a", BRIEF)
        await _claimed(store, "released", "a")
        await store.release("a", "released")
        await _claimed(store, "other", "b", 3 * BRIEF)
        await elapse(2 * BRIEF)

        held = {
            "live": 1,
            "superseded": 1,
            "expired": 1,
            "released": 1,
            "other": 1,
            "ghost": 1,
        }
        lost = await store.renew("a", held, 10 * BRIEF)
        assert lost == ["superseded", "expired", "released", "other", "ghost"]

        # The live claim was extended (past its first lease); the lost ones were not.
        await elapse(4 * BRIEF)
        await _accepted(store, _commit("live", Running(1), at=40.0, fence=Fence("live", "a", 1)))
        for run_id, owner, epoch in [("superseded", "a", 2), ("other", "b", 1)]:
            stale = _commit(run_id, Running(1), at=40.0, fence=Fence(run_id, owner, epoch))
            assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        assert await store.renew("a", {"live": 1}, BRIEF) == []
        assert await store.renew("a", {}, BRIEF) == []
        # Renewed for a lease too short to outlive the next look: lost once it lapsed.
        await elapse(2 * BRIEF)
        assert await store.renew("a", {"live": 1}, LIVE) == ["live"]

    async def test_release_drops_only_the_owners_claim(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        await store.release("b", "r1")  # not b's: nothing happens
        await _accepted(store, _commit("r1", Running(1), at=2.0, fence=Fence("r1", "a", 1)))
        await store.release("a", "r1")
        stale = _commit("r1", Running(1), at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        # Free: another owner claims it at once, at the next epoch.
        taken = await _accepted(store, _commit("r1", Running(1), at=3.0, claim=Claim("b", LIVE)))
        assert taken.accepted.epoch == 2
        await store.release("a", "ghost")  # nothing to release: fine

    async def test_a_claim_given_up_while_its_run_is_running_leaves_it_for_recovery(
        self, store: DurableStore
    ) -> None:
        # The attempt never committed its end (its first commit was fenced, or its end
        # commit failed): the run's owner is lost, and recovery must still find the run.
        await _claimed(store, "r1", "a")
        await store.release("a", "r1")
        stale = _commit("r1", Running(1), at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        recovered = await store.recover("b", NAMES, 3.0, LIVE, 3, 10)
        assert [(r.record.run_id, r.epoch) for r in recovered] == [("r1", 2)]
        # A run that is no longer running just loses its claim: nothing to recover.
        await _claimed(store, "r2", "a")
        await _accepted(store, _commit("r2", DONE, fence=Fence("r2", "a", 1)))
        await store.release("a", "r2")
        assert await store.recover("b", NAMES, 3.0, LIVE, 3, 10) == []
        assert await _state(store, "r2") == DONE

    async def test_a_commit_that_releases_drops_its_claim(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        await _accepted(
            store, _commit("r1", Queued(), at=2.0, fence=Fence("r1", "a", 1), release=True)
        )
        stale = _commit("r1", Running(2), 2, at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Queued())
        taken = await _accepted(store, _commit("r1", Running(2), 2, claim=Claim("b", LIVE)))
        assert taken.accepted.epoch == 2

    # ------------------------------------------------------------ the thread guard

    async def test_the_thread_guard_refuses_a_start_while_another_attempt_is_live(
        self, store: DurableStore
    ) -> None:
        await _claimed(store, "a1", "a", LIVE, thread="t")
        busy = _new("b1", thread="t", at=2.0, claim=Claim("b", LIVE), thread_guard=True)
        assert await _rejected(store, busy) == Rejected(RejectReason.THREAD_BUSY, None)
        assert await store.load("b1") is None

        await _accepted(store, _new("b2", Queued(), generation=0, thread="t"))
        start = _commit("b2", Running(1), at=2.0, claim=Claim("b", LIVE), thread_guard=True)
        assert await _rejected(store, start) == Rejected(RejectReason.THREAD_BUSY, Queued())
        assert await _state(store, "b2") == Queued()

        # A run never blocks itself.
        mine = _commit("a1", Running(1), at=2.0, fence=Fence("a1", "a", 1), thread_guard=True)
        await _accepted(store, mine)
        # Other threads are not concerned.
        await _accepted(store, _new("c1", thread="u", at=2.0, thread_guard=True))
        # Without the guard the store leaves the thread to the caller.
        await _accepted(store, _new("b3", thread="t", at=2.0))

    @pytest.mark.parametrize("how", _LOSSES)
    async def test_the_thread_frees_when_the_attempt_is_no_longer_live(
        self, store: DurableStore, elapse: Elapse, how: str
    ) -> None:
        await _claimed(store, "a1", "a", BRIEF, thread="t")
        await _accepted(store, _new("b1", Queued(), generation=0, thread="t"))
        if how == "expired":
            await elapse(2 * BRIEF)
        elif how == "ended":
            await _accepted(store, _commit("a1", DONE, fence=Fence("a1", "a", 1)))
        elif how == "paused":
            paused = Awaiting(_ticket("a1"))
            await _accepted(store, _commit("a1", paused, fence=Fence("a1", "a", 1)))
        elif how == "released":
            await store.release("a", "a1")
        else:  # recovered by another owner: claimed, but its new attempt has not started
            await elapse(2 * BRIEF)
            recovered = await store.recover("b", NAMES, 10.5, LIVE, 3, 10)
            assert [r.record.run_id for r in recovered] == ["a1"]
        start = _commit("b1", Running(1), at=3.0, claim=Claim("c", LIVE), thread_guard=True)
        assert (await _accepted(store, start)).record.state == Running(1)

    async def test_a_childs_live_attempt_occupies_its_thread(self, store: DurableStore) -> None:
        epoch = await _claimed(store, "root", "a", LIVE, thread="tr")
        await _accepted(store, _child("c1", "root", "root", Fence("root", "a", epoch), thread="tc"))
        busy = _new("x", thread="tc", at=3.0, thread_guard=True)
        assert await _rejected(store, busy) == Rejected(RejectReason.THREAD_BUSY, None)
        await store.release("a", "root")
        await _accepted(store, busy)

    # ------------------------------------------------------------ recover

    async def test_recover_claims_a_lost_named_run_at_the_next_epoch(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _claimed(store, "r1", "a", BRIEF)
        await _accepted(
            store, _commit("r1", Running(1), at=2.0, fence=Fence("r1", "a", 1), checkpoint=[7])
        )
        before = await store.events_after(0, "r1")
        # Not expired yet, however late the recovering runtime's clock says it is.
        assert await store.recover("b", NAMES, 1e9, LIVE, 3, 10) == []

        await elapse(2 * BRIEF)
        recovered = await store.recover("b", NAMES, 11.0, 2 * BRIEF, 3, 10)
        record = await _loaded(store, "r1")
        assert recovered == [Recovered(record, 2)]
        assert record.state == Running(1)
        assert record.checkpoint == [7]
        assert await store.events_after(0, "r1") == before  # recovering writes no event
        # b holds it at epoch 2 now; a is fenced.
        stale = _commit("r1", DONE, at=12.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        restart = _commit("r1", Running(2), 2, at=12.0, fence=Fence("r1", "b", 2))
        await _accepted(store, restart)
        # Recovered again later (its second loss), it is claimed at epoch 3.
        assert await store.recover("c", NAMES, 12.0, LIVE, 3, 10) == []  # b's lease lives
        await elapse(3 * BRIEF)
        again = await store.recover("c", NAMES, 0.0, LIVE, 3, 10)
        assert [(r.record.run_id, r.epoch) for r in again] == [("r1", 3)]

    async def test_recover_hands_the_lost_attempts_children_back_with_it(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # Rule 22: a recoverable root takes its tree to its next attempt. A running
        # descendant goes back to Queued at its generation (deepest first, each with an
        # event), its attempt no longer live; a queued or ended one is left as it is.
        epoch = await _claimed(store, "r1", "a", BRIEF)
        fence = Fence("r1", "a", epoch)
        await _accepted(store, _child("c1", "r1", "r1", fence))
        await _accepted(store, _child("g1", "c1", "r1", fence))
        await _accepted(store, _child("c2", "r1", "r1", fence, Queued()))
        await _accepted(store, _child("done", "r1", "r1", fence))
        await _accepted(store, _commit("done", DONE, fence=fence))
        done_events = await store.events_after(0, "done")
        c2_events = await store.events_after(0, "c2")

        await elapse(2 * BRIEF)
        recovered = await store.recover("b", NAMES, 11.0, LIVE, 3, 10)
        assert [r.record.run_id for r in recovered] == ["r1"]
        handed: dict[str, RunEvent] = {}
        for run_id in ("c1", "g1"):
            record = await _loaded(store, run_id)
            assert (record.state, record.generation) == (Queued(), 1)
            event = (await store.events_after(0, run_id))[-1]
            assert event.detail == {"source": "recovery", "reason": "handed back with its parent"}
            assert (event.kind, event.state, event.at) == ("committed", Queued(), 11.0)
            handed[run_id] = event
        assert handed["g1"].seq < handed["c1"].seq
        assert await store.events_after(0, "c2") == c2_events
        assert await store.events_after(0, "done") == done_events
        assert await _state(store, "r1") == Running(1)
        # Its attempt is not live any more: its thread is free for another run.
        other = Commit(
            run_id="other",
            state=Running(1),
            generation=1,
            expect=Expect(new=True),
            at=12.0,
            new_run=NewRun("thread-c1", None, None, None, None, "other"),
            thread_guard=True,
        )
        await _accepted(store, other)

    async def test_recover_ends_an_unnamed_run_as_owner_lost(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "r1", "a", BRIEF, name=None)
        await _accepted(store, _child("c1", "r1", "r1", Fence("r1", "a", epoch)))
        await elapse(2 * BRIEF)
        # Whatever bodies the recovering runtime has: an unnamed run cannot run again.
        assert await store.recover("b", frozenset(), 11.0, LIVE, 3, 10) == []
        assert await _state(store, "r1") == LOST
        assert await _state(store, "c1") == LOST
        event = await _terminal_event(store, "r1")
        assert event.detail == {"source": "recovery", "reason": "owner lost"}
        assert (await _terminal_event(store, "c1")).seq < event.seq
        # Nothing is left to recover.
        assert await store.recover("b", NAMES, 12.0, LIVE, 3, 10) == []

    async def test_recover_ends_a_run_lost_more_than_max_recoveries_times(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _claimed(store, "r1", "a", BRIEF)
        await _claimed(store, "r2", "a", BRIEF)
        await elapse(2 * BRIEF)
        first = await store.recover("b", frozenset({"other"}), 11.0, BRIEF, 1, 10)
        assert first == []  # left for a runtime with the body: r2 is still lost once
        first = await store.recover("b", NAMES, 11.0, BRIEF, 1, 1)
        assert [(r.record.run_id, r.epoch) for r in first] == [("r1", 2)]
        await _accepted(store, _commit("r1", Running(2), 2, at=12.0, fence=Fence("r1", "b", 2)))
        await elapse(2 * BRIEF)
        # Its second loss is one more than max_recoveries allows, even for a runtime
        # without the body.
        assert await store.recover("c", frozenset(), 21.0, LIVE, 1, 1) == []
        assert await _state(store, "r1") == Ended(EndCause.Indeterminate("owner lost 2 times"))
        event = await _terminal_event(store, "r1")
        assert event.detail == {"source": "recovery", "reason": "owner lost 2 times"}
        assert event.generation == 2
        # With max_recoveries=0 the first loss ends it.
        assert await store.recover("b", NAMES, 22.0, LIVE, 0, 10) == []
        assert await _state(store, "r2") == Ended(EndCause.Indeterminate("owner lost 1 times"))

    async def test_recover_leaves_a_run_it_has_no_body_for(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "r1", "a", BRIEF)
        await _accepted(store, _child("c1", "r1", "r1", Fence("r1", "a", epoch)))
        before = (await _snapshot(store, "r1"), await _snapshot(store, "c1"))
        await elapse(2 * BRIEF)
        assert await store.recover("b", frozenset({"other"}), 11.0, LIVE, 3, 10) == []
        assert (await _snapshot(store, "r1"), await _snapshot(store, "c1")) == before
        # A runtime that has the body recovers it later.
        recovered = await store.recover("c", NAMES, 12.0, LIVE, 3, 10)
        assert [(r.record.run_id, r.epoch) for r in recovered] == [("r1", 2)]

    async def test_recover_drops_a_stale_claim_of_a_run_that_is_not_running(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # The run committed Awaiting without giving its claim back; its child still runs.
        epoch = await _claimed(store, "r1", "a", BRIEF)
        await _accepted(store, _child("c1", "r1", "r1", Fence("r1", "a", epoch)))
        ticket = _ticket("r1")
        await _accepted(store, _commit("r1", Awaiting(ticket), fence=Fence("r1", "a", epoch)))
        root_events = await store.events_after(0, "r1")

        await elapse(2 * BRIEF)
        assert await store.recover("b", NAMES, 11.0, LIVE, 3, 10) == []
        assert await _state(store, "r1") == Awaiting(ticket)
        assert await store.events_after(0, "r1") == root_events
        assert await _state(store, "c1") == LOST
        # The stale claim is gone: the next recovery finds nothing.
        c1_events = await store.events_after(0, "c1")
        assert await store.recover("b", NAMES, 12.0, LIVE, 3, 10) == []
        assert await store.events_after(0, "c1") == c1_events

    async def test_recover_hands_back_the_tree_of_a_queued_run_with_a_stale_claim(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # The run went back to Queued without giving its claim back; its child still runs.
        epoch = await _claimed(store, "r1", "a", BRIEF)
        fence = Fence("r1", "a", epoch)
        await _accepted(store, _child("c1", "r1", "r1", fence))
        await _accepted(store, _commit("r1", Queued(), fence=fence))
        await elapse(2 * BRIEF)
        assert await store.recover("b", NAMES, 11.0, LIVE, 3, 10) == []
        assert await _state(store, "r1") == Queued()
        assert await _state(store, "c1") == Queued()
        event = (await store.events_after(0, "c1"))[-1]
        assert event.detail == {"source": "recovery", "reason": "handed back with its parent"}

    async def test_recover_leaves_live_claims_and_deals_with_at_most_limit_runs(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        for run_id in ("l1", "l2", "l3"):
            await _claimed(store, run_id, "a", BRIEF)
        await _claimed(store, "live", "a", LIVE)
        await elapse(2 * BRIEF)
        first = await store.recover("b", NAMES, 11.0, LIVE, 3, 2)
        second = await store.recover("b", NAMES, 11.0, LIVE, 3, 2)
        assert len(first) == 2
        assert len(second) == 1
        assert {r.record.run_id for r in [*first, *second]} == {"l1", "l2", "l3"}
        assert all(r.epoch == 2 for r in [*first, *second])
        assert await store.recover("b", NAMES, 11.0, LIVE, 3, 0) == []
        # The live claim is untouched.
        await _accepted(store, _commit("live", Running(1), at=20.0, fence=Fence("live", "a", 1)))

    async def test_recover_deals_with_the_longest_lost_first_and_skips_runs_it_leaves(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _claimed(store, "theirs", "a", BRIEF, name="other")  # not this runtime's body
        await _claimed(store, "late", "a", 4 * BRIEF)
        await _claimed(store, "early", "a", 2 * BRIEF)
        await _claimed(store, "middle", "a", 3 * BRIEF)
        await elapse(5 * BRIEF)
        first = await store.recover("b", NAMES, 11.0, LIVE, 3, 2)
        assert [r.record.run_id for r in first] == ["early", "middle"]
        second = await store.recover("b", NAMES, 11.0, LIVE, 3, 2)
        assert [r.record.run_id for r in second] == ["late"]
        theirs = await store.recover("c", frozenset({"other"}), 11.0, LIVE, 3, 2)
        assert [r.record.run_id for r in theirs] == ["theirs"]

    async def test_recover_discards_the_messages_of_a_run_it_ends_and_keeps_a_recovered_runs(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _claimed(store, "gone", "a", BRIEF, name=None)
        await _claimed(store, "kept", "a", BRIEF)
        for run_id in ("gone", "kept"):
            assert isinstance(await store.post_command(run_id, "message", "m1", None, 2.0), int)
            assert isinstance(await store.post_command(run_id, "pause", None, None, 2.0), int)
            assert isinstance(await store.post_command(run_id, "message", {"m": 2}, None, 3.0), int)
        await elapse(2 * BRIEF)
        recovered = await store.recover("b", NAMES, 11.0, LIVE, 3, 10)
        assert [r.record.run_id for r in recovered] == ["kept"]
        assert await _messages_discarded(store, "gone") == ["m1", {"m": 2}]
        assert await store.commands(["gone"]) == []
        # The recovered run's next attempt applies its commands as the lost one would have.
        kept = await store.commands(["kept"])
        assert [(c.kind, c.payload) for c in kept] == [
            ("message", "m1"),
            ("pause", None),
            ("message", {"m": 2}),
        ]

    # ------------------------------------------------------------ runnable

    async def test_runnable_hands_out_queued_named_root_runs_oldest_first(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0, at=1.0))
        await _accepted(store, _new("unnamed", Queued(), generation=0, name=None))
        await _accepted(store, _new("other", Queued(), generation=0, name="other"))
        await _accepted(store, _new("child", Queued(), generation=0, parent="q1", root="q1"))
        await _accepted(store, _new("running"))
        await _awaiting(store, "asking", _ticket("asking"))
        await _accepted(store, _new("ended", DONE))
        await _accepted(store, _new("q2", Queued(), generation=0, at=2.0))

        runnable = await store.runnable(NAMES, 5.0, 10)
        assert runnable == [await _loaded(store, "q1"), await _loaded(store, "q2")]
        both = await store.runnable({JOB, "other"}, 5.0, 10)
        assert [r.run_id for r in both] == ["q1", "other", "q2"]
        assert await store.runnable(frozenset(), 5.0, 10) == []
        # A run that leaves the queue is no longer handed out.
        await _accepted(store, _commit("q1", Running(1), claim=Claim("a", LIVE)))
        assert [r.run_id for r in await store.runnable(NAMES, 5.0, 10)] == ["q2"]

    async def test_runnable_skips_claimed_runs_and_busy_threads_until_their_leases_expire(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        # q1 was claimed and committed Queued (behind its thread) by its claimer.
        await _accepted(store, _new("q1", Queued(), generation=0, claim=Claim("a", BRIEF), at=1.0))
        await _claimed(store, "busy", "a", BRIEF, thread="t")
        await _accepted(store, _new("q2", Queued(), generation=0, thread="t", at=2.0))
        await _accepted(store, _new("q3", Queued(), generation=0, at=3.0))
        assert [r.run_id for r in await store.runnable(NAMES, 5.0, 10)] == ["q3"]
        # ``now`` is the runtime's clock, for scheduled tickets: it decides no lease.
        assert [r.run_id for r in await store.runnable(NAMES, 1e9, 10)] == ["q3"]
        await elapse(2 * BRIEF)
        assert [r.run_id for r in await store.runnable(NAMES, 0.0, 10)] == ["q1", "q2", "q3"]

    async def test_runnable_hands_out_due_scheduled_runs_after_queued_ones(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0))
        await _awaiting(store, "s5", _scheduled("s5", 5.0))
        await _awaiting(store, "s3", _scheduled("s3", 3))
        await _awaiting(store, "s8", _scheduled("s8", 8.0))
        await _awaiting(store, "asking", _ticket("asking"))
        await _awaiting(store, "unnamed", _scheduled("unnamed", 1.0), name=None)
        await _awaiting(store, "other", _scheduled("other", 1.0), name="other")
        await _awaiting(store, "child", _scheduled("child", 1.0), parent="q1", root="q1", name=JOB)

        due = await store.runnable(NAMES, 6.0, 10)
        assert [r.run_id for r in due] == ["q1", "s3", "s5"]
        assert due[1] == await _loaded(store, "s3")
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == [
            "q1",
            "s3",
            "s5",
            "s8",
        ]
        # Answered early: the ticket is gone, and so is the schedule.
        await _accepted(store, _commit("s3", Queued(), at=6.5))
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == [
            "q1",
            "s3",
            "s5",
            "s8",
        ]  # s3 is queued now (after q1), and no longer scheduled
        await _accepted(store, _commit("s5", CANCELLED, at=7.0))
        assert [r.run_id for r in await store.runnable(NAMES, 8.0, 10)] == ["q1", "s3", "s8"]

    async def test_runnable_returns_at_most_limit_runs(self, store: DurableStore) -> None:
        await _accepted(store, _new("q1", Queued(), generation=0, at=1.0))
        await _accepted(store, _new("q2", Queued(), generation=0, at=2.0))
        await _awaiting(store, "s1", _scheduled("s1", 1.0))
        await _awaiting(store, "s2", _scheduled("s2", 2.0))
        for limit, expected in [
            (0, []),
            (1, ["q1"]),
            (2, ["q1", "q2"]),
            (3, ["q1", "q2", "s1"]),
            (9, ["q1", "q2", "s1", "s2"]),
        ]:
            got = await store.runnable(NAMES, 5.0, limit)
            assert [r.run_id for r in got] == expected, limit

    # ------------------------------------------------------------ stored commands

    async def test_post_command_stores_commands_for_a_running_or_queued_run_only(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("queued", Queued(), generation=0))
        ids = [
            await store.post_command("r1", "message", {"text": ["hi"]}, None, 2.0),
            await store.post_command("r1", "pause", None, None, 3.0),
            await store.post_command("queued", "message", "x", None, 3.5),
            await store.post_command("r1", "cancel", None, "because", 4.0),
            await store.post_command("queued", "cancel", None, None, 4.5),
            await store.post_command("r1", "wake", None, "nudge", 5.0),
        ]
        assert all(type(i) is int for i in ids)
        assert ids == sorted(set(ids)), ids  # strictly increasing
        assert [c.id for c in await store.commands(["queued"])] == [ids[2], ids[4]]

        ticket = _ticket("asking")
        await _awaiting(store, "asking", ticket)
        await _accepted(store, _new("ended", DONE))
        before = await store.commands(["r1", "queued", "asking", "ended", "ghost"])
        rejected = [
            await store.post_command("asking", "message", "x", None, 6.0),
            await store.post_command("ended", "cancel", None, None, 6.0),
            await store.post_command("ghost", "wake", None, "", 6.0),
        ]
        assert rejected == [
            Rejected(RejectReason.STALE, Awaiting(ticket)),
            Rejected(RejectReason.ENDED, DONE),
            Rejected(RejectReason.UNKNOWN, None),
        ]
        assert await store.commands(["r1", "queued", "asking", "ended", "ghost"]) == before

    async def test_commands_are_read_by_run_and_after_a_cursor(self, store: DurableStore) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("r2"))
        # The runtime hands the store frozen payloads; the store hands them back frozen.
        payload = FrozenDict({"text": ["hi", {"n": 1}]})
        m = await store.post_command("r1", "message", payload, None, 2.0)
        w = await store.post_command("r2", "wake", None, "nudge", 2.5)
        c = await store.post_command("r1", "cancel", None, "because", 3.0)
        assert isinstance(m, int)
        assert isinstance(w, int)
        assert isinstance(c, int)
        message = StoredCommand(m, "r1", "message", {"text": ["hi", {"n": 1}]}, None, 2.0)
        wake = StoredCommand(w, "r2", "wake", None, "nudge", 2.5)
        cancel = StoredCommand(c, "r1", "cancel", None, "because", 3.0)
        assert await store.commands(["r1"]) == [message, cancel]
        assert await store.commands(["r1"], m) == [cancel]
        assert await store.commands(["r1"], c) == []
        assert await store.commands(["r1", "r2"]) == [message, wake, cancel]
        assert await store.commands({"r2", "ghost"}) == [wake]
        assert await store.commands([]) == []
        (read, _) = await store.commands(["r1"])
        _assert_frozen(read.payload, "a stored command's payload")
        assert await store.commands(["r1"]) == [message, cancel]  # reading changed nothing

    async def test_consumed_commands_are_deleted_with_the_commit(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        first = await store.post_command("r1", "message", "m1", None, 2.0)
        second = await store.post_command("r1", "pause", None, None, 2.0)
        third = await store.post_command("r1", "message", "m3", None, 2.0)
        assert isinstance(first, int)
        assert isinstance(second, int)
        assert isinstance(third, int)
        # A rejected commit consumes nothing.
        stale = _commit("r1", Running(1), at=3.0, fence=Fence("r1", "a", 2), consumed=(first,))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        assert [c.id for c in await store.commands(["r1"])] == [first, second, third]
        applied = _commit(
            "r1", Running(1), at=3.0, fence=Fence("r1", "a", 1), consumed=(first, second)
        )
        await _accepted(store, applied)
        assert [c.id for c in await store.commands(["r1"])] == [third]

    async def test_delivered_messages_stay_stored_and_are_never_discarded(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        """A message an attempt handed to its body (`Commit.delivered`) stays stored, so
        the attempt that replaces a lost one is handed it again; no end lists it as
        discarded, whether the run's own commit or recovery ends it."""
        epoch = await _claimed(store, "r1", "a", BRIEF)
        received = await store.post_command("r1", "message", "received", None, 2.0)
        unread = await store.post_command("r1", "message", "unread", None, 2.0)
        assert isinstance(received, int)
        assert isinstance(unread, int)
        # A rejected commit marks nothing.
        stale = _commit("r1", Running(1), at=3.0, fence=Fence("r1", "a", 2), delivered=(received,))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        await _accepted(
            store,
            _commit("r1", Running(1), at=3.0, fence=Fence("r1", "a", epoch), delivered=(received,)),
        )
        assert [c.id for c in await store.commands(["r1"])] == [received, unread]
        ended = await _accepted(
            store, _commit("r1", CANCELLED, at=4.0, fence=Fence("r1", "a", epoch))
        )
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert await _messages_discarded(store, "r1") == ["unread"]
        assert await store.commands(["r1"]) == []

        # Received, then the owner is lost and the run can never run again (no name).
        epoch = await _claimed(store, "r2", "a", BRIEF, name=None)
        only = await store.post_command("r2", "message", "received", None, 2.0)
        assert isinstance(only, int)
        await _accepted(
            store,
            _commit("r2", Running(1), at=3.0, fence=Fence("r2", "a", epoch), delivered=(only,)),
        )
        await elapse(2 * BRIEF)
        assert await store.recover("b", NAMES, 5.0, LIVE, 3, 10) == []
        assert (await _loaded(store, "r2")).state == LOST
        events = await store.events_after(0, "r2")
        assert [e.kind for e in events if e.kind == "messages_discarded"] == []
        assert await store.commands(["r2"]) == []

    async def test_an_end_discards_stored_messages_after_carried_and_its_own(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(
            store, _commit("r1", Awaiting(_ticket("r1")), carried_messages=("carried",))
        )
        # Started again without taking the carried messages: they stay carried.
        await _accepted(store, _commit("r1", Running(2), 2, at=3.0))
        await store.post_command("r1", "message", "stored-1", None, 4.0)
        await store.post_command("r1", "cancel", None, "x", 4.0)
        await store.post_command("r1", "message", {"stored": 2}, None, 4.0)
        ended = await _accepted(
            store, _commit("r1", CANCELLED, 2, at=5.0, discarded_messages=("inbox",))
        )
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert await _messages_discarded(store, "r1") == [
            "carried",
            "inbox",
            "stored-1",
            {"stored": 2},
        ]
        assert await store.commands(["r1"]) == []

    async def test_a_queued_runs_commands_outlive_its_start_and_are_dropped_by_its_end(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("q", Queued(), generation=0))
        first = await store.post_command("q", "message", "early", None, 2.0)
        await store.post_command("q", "wake", None, "", 2.0)
        assert isinstance(first, int)
        started = _commit("q", Running(1), at=3.0, take_messages=True, claim=Claim("a", 10.0))
        await _accepted(store, started)
        # The attempt reads what was stored while the run was queued, and more comes.
        assert [c.kind for c in await store.commands(["q"])] == ["message", "wake"]
        await store.post_command("q", "message", "later", None, 4.0)
        await _accepted(store, _commit("q", CANCELLED, at=5.0, fence=Fence("q", "a", 1)))
        assert await _messages_discarded(store, "q") == ["early", "later"]
        assert await store.commands(["q"]) == []

    # ------------------------------------------------------------ ends made elsewhere

    async def test_end_descendants_ends_the_tree_children_first(self, store: DurableStore) -> None:
        await _accepted(store, _new("p"))
        await _accepted(store, _child("c1", "p", "p", None))
        await _accepted(store, _child("g1", "c1", "p", None, Queued()))
        await _accepted(store, _child("c2", "p", "p", None))
        await _accepted(store, _commit("c2", Awaiting(_ticket("c2")), carried_messages=("m",)))
        await _accepted(store, _child("c3", "p", "p", None))
        await _accepted(store, _commit("c3", DONE))
        await _accepted(store, _new("q"))
        await _accepted(store, _child("qc", "q", "q", None))
        c3_events = await store.events_after(0, "c3")

        stop = Ended(EndCause.Stopped("budget"))
        ended = await _accepted(
            store,
            _commit(
                "p", stop, at=5.0, end_descendants="parent_ended", detail={"source": "stop_run"}
            ),
        )
        assert [e.detail for e in ended.events] == [{"source": "stop_run"}]
        detail = {"source": "parent", "reason": "parent run 'p' ended"}
        for run_id in ("c1", "g1", "c2"):
            assert await _state(store, run_id) == CANCELLED
            event = await _terminal_event(store, run_id)
            assert (event.detail, event.at) == (detail, 5.0)
            assert event.seq < ended.events[-1].seq
        assert (await _terminal_event(store, "g1")).seq < (await _terminal_event(store, "c1")).seq
        assert await _messages_discarded(store, "c2") == ["m"]
        assert await store.events_after(0, "c3") == c3_events
        # Without end_descendants, a run's end leaves its children to its attempt.
        await _accepted(store, _commit("q", CANCELLED, at=6.0))
        assert await _state(store, "qc") == Running(1)

    # ------------------------------------------------------------ reads

    async def test_states_reads_the_committed_states_of_known_runs(
        self, store: DurableStore
    ) -> None:
        await _accepted(store, _new("r1"))
        await _accepted(store, _new("r2", Queued(), generation=0))
        await _accepted(store, _new("r3", DONE))
        states = await store.states(["r1", "r2", "r3", "ghost"])
        assert states == {"r1": Running(1), "r2": Queued(), "r3": DONE}
        assert await store.states({"r2"}) == {"r2": Queued()}
        assert await store.states([]) == {}

    async def test_a_queued_resume_hands_its_value_and_ticket_to_the_attempt(
        self, store: DurableStore
    ) -> None:
        ticket = _ticket("r1")
        await _awaiting(store, "r1", ticket)
        await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Queued(),
                generation=1,
                expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
                at=3.0,
                resume_value={"answer": [1]},
                resume_ticket=ticket,
            ),
        )
        started = await _accepted(
            store, _commit("r1", Running(2), 2, at=4.0, take_messages=True, claim=Claim("a", LIVE))
        )
        assert started.accepted.resume_value == {"answer": [1]}
        assert started.accepted.resume_ticket == ticket
        assert started.accepted.epoch == 1
        # Kept while the run runs: the attempt that replaces this one is handed it too.
        again = await _accepted(store, _commit("r1", Running(3), 3, at=5.0, take_messages=True))
        assert (again.accepted.resume_value, again.accepted.resume_ticket) == (
            {"answer": [1]},
            ticket,
        )

    async def test_a_recovered_attempt_is_handed_the_resume_of_the_attempt_it_replaces(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        ticket = _ticket("r1")
        epoch = await _claimed(store, "r1", "a", BRIEF)
        await _accepted(
            store, _commit("r1", Awaiting(ticket), fence=Fence("r1", "a", epoch), release=True)
        )
        # Answered in a runtime that has the body: its attempt commits the answer as it
        # takes its claim, then that owner is lost.
        await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(2),
                generation=2,
                expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
                at=3.0,
                take_messages=True,
                resume_value={"answer": "yes"},
                resume_ticket=ticket,
                claim=Claim("a", BRIEF),
            ),
        )
        await _accepted(
            store, _commit("r1", Running(2), 2, at=4.0, fence=Fence("r1", "a", epoch + 1))
        )
        await elapse(2 * BRIEF)
        (recovered,) = await store.recover("b", NAMES, 11.0, LIVE, 3, 10)
        restarted = await _accepted(
            store,
            _commit(
                "r1",
                Running(3),
                3,
                at=12.0,
                fence=Fence("r1", "b", recovered.epoch),
                take_messages=True,
            ),
        )
        assert restarted.accepted.resume_value == {"answer": "yes"}
        assert restarted.accepted.resume_ticket == ticket

    # ------------------------------------------------------------ another runtime's view

    async def test_a_peer_sees_what_the_store_committed(
        self, store: DurableStore, peer: DurableStore
    ) -> None:
        await _accepted(store, _new("r1", claim=Claim("a", LIVE)))
        assert await peer.load("r1") == await store.load("r1")
        assert await peer.events_after(0) == await store.events_after(0)
        # Claims are shared: the peer's runtime cannot take the run while its lease lives.
        taken = _commit("r1", Running(1), at=5.0, claim=Claim("b", LIVE))
        assert await _rejected(peer, taken) == Rejected(RejectReason.FENCED, Running(1))

    async def test_version_moves_when_another_runtime_writes(
        self, store: DurableStore, peer: DurableStore, elapse: Elapse
    ) -> None:
        start = await store.version()
        assert await store.version() == start  # nothing was written

        async def moves(write: Callable[[], Awaitable[object]]) -> None:
            before = await store.version()
            await write()
            assert await store.version() != before

        await moves(lambda: peer.apply([_new("r1", claim=Claim("a", LIVE))]))
        await moves(lambda: peer.post_command("r1", "message", "m", None, 2.0))
        await moves(lambda: peer.renew("a", {"r1": 1}, LIVE))
        await moves(lambda: peer.release("a", "r1"))
        await peer.apply([_new("r2", claim=Claim("a", BRIEF))])
        await elapse(2 * BRIEF)
        await moves(lambda: peer.recover("b", NAMES, 11.0, LIVE, 3, 10))
        assert await store.states(["r1", "r2"]) == {"r1": Running(1), "r2": Running(1)}
