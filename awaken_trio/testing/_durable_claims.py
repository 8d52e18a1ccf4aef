"""The durable store contract's checks of claims: epochs, fences, renewals and releases,
the thread guard, and recovery."""

from __future__ import annotations

import pytest

from .. import (
    EndCause,
    RunEvent,
)
from ..store import (
    Claim,
    DurableStore,
    Fence,
    Recovered,
    Rejected,
    RejectReason,
)
from ._checks import (
    _LOSSES,
    BRIEF,
    LIVE,
    LOST,
    NAMES,
    Elapse,
    _accepted,
    _claimed,
    _loaded,
    _messages_discarded,
    _new,
    _rejected,
    _snapshot,
    _state,
    _terminal_event,
)
from ._commits import (
    DONE,
    Awaiting,
    Ended,
    Queued,
    Running,
    asking,
    commit,
    create,
    create_child,
    end,
    pause,
    queue,
    run,
)


class ClaimChecks:
    """Claims, epochs and fences; renewals and releases."""

    # ------------------------------------------------------------ claims and epochs

    async def test_claim_epochs_strictly_increase_even_after_a_release(
        self, store: DurableStore
    ) -> None:
        created = await _accepted(store, _new("r1", Queued(), generation=0))
        assert created.accepted.epoch is None
        first = await _accepted(store, run("r1", 1, at=1.0, claim=Claim("a", LIVE)))
        assert first.accepted.epoch == 1
        unclaimed = await _accepted(store, run("r1", 1, at=1.5))
        assert unclaimed.accepted.epoch is None
        # The owner gives the run back with its commit (back to Queued, claim released).
        await _accepted(store, queue("r1", fence=Fence("r1", "a", 1), release=True))
        second = await _accepted(store, run("r1", 2, at=3.0, claim=Claim("b", LIVE)))
        assert second.accepted.epoch == 2
        await store.release("b", "r1")
        third = await _accepted(store, run("r1", 3, at=4.0, claim=Claim("a", LIVE)))
        assert third.accepted.epoch == 3

    async def test_a_claim_is_refused_while_another_owners_lease_is_live(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _accepted(store, _new("r1", Queued(), generation=0))
        await _accepted(store, run("r1", 1, at=1.0, claim=Claim("a", BRIEF)))
        before = await _snapshot(store, "r1")
        # The commit's own time decides nothing: a runtime whose clock runs far ahead
        # cannot take a live claim.
        for at in (5.0, 1e9):
            taken = run("r1", 1, at=at, claim=Claim("b", LIVE))
            assert await _rejected(store, taken) == Rejected(RejectReason.FENCED, Running(1))
        assert await _snapshot(store, "r1") == before

        # Its own owner may claim it again (a new attempt of its own): the next epoch.
        again = await _accepted(store, run("r1", 1, at=6.0, claim=Claim("a", BRIEF)))
        assert again.accepted.epoch == 2
        # Once the lease has expired, another owner gets it, and the old owner is fenced,
        # even when that owner's clock runs far behind.
        await elapse(2 * BRIEF)
        taken_over = await _accepted(store, run("r1", 2, at=0.0, claim=Claim("b", LIVE)))
        assert taken_over.accepted.epoch == 3
        late = end("r1", DONE, 2, at=-1e9, fence=Fence("r1", "a", 2))
        assert await _rejected(store, late) == Rejected(RejectReason.FENCED, Running(2))

    # ------------------------------------------------------------ fences

    async def test_a_fenced_commit_lands_only_under_the_current_live_claim(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "r1", "a", BRIEF)
        assert epoch == 1

        async def fenced(owner: str, epoch: int, run_id: str = "r1", at: float = 5.0) -> None:
            before = await _snapshot(store, run_id)
            commit = run(run_id, 1, at=at, fence=Fence(run_id, owner, epoch))
            rejected = await _rejected(store, commit)
            state = None if before[0] is None else before[0].state
            assert rejected == Rejected(RejectReason.FENCED, state)
            assert await _snapshot(store, run_id) == before

        progress = run("r1", 1, at=5.0, fence=Fence("r1", "a", 1), checkpoint=[1])
        assert (await _accepted(store, progress)).record.checkpoint == [1]
        # The commit's own time decides nothing: far ahead, the lease is still live.
        await _accepted(store, run("r1", 1, at=1e9, fence=Fence("r1", "a", 1)))

        await fenced("b", 1)  # another owner
        await fenced("a", 2)  # an epoch never granted
        # Superseded: the run was claimed again.
        await _accepted(store, run("r1", 1, at=6.0, claim=Claim("a", LIVE)))
        await fenced("a", 1)
        await _accepted(store, run("r1", 1, at=6.5, fence=Fence("r1", "a", 2)))
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
        child = await _accepted(store, create_child("c1", "root", "root", fence, at=2.0))
        assert child.record.parent_run_id == "root"
        await _accepted(store, run("c1", 1, at=3.0, fence=fence, checkpoint="c"))
        # A grandchild is fenced by the root's claim too.
        await _accepted(store, create_child("g1", "c1", "root", fence, at=3.0))

        # The root's lease expires: nothing more lands for its tree.
        await elapse(2 * BRIEF)
        late = end("c1", DONE, at=3.5, fence=fence)
        assert await _rejected(store, late) == Rejected(RejectReason.FENCED, Running(1))
        orphan = create_child("c2", "root", "root", fence, at=3.5)
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
        await _accepted(store, run("superseded", 1, claim=Claim("a", 3 * BRIEF)))  # epoch 2 now
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
        await _accepted(store, run("live", 1, at=40.0, fence=Fence("live", "a", 1)))
        for run_id, owner, epoch in [("superseded", "a", 2), ("other", "b", 1)]:
            stale = run(run_id, 1, at=40.0, fence=Fence(run_id, owner, epoch))
            assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        assert await store.renew("a", {"live": 1}, BRIEF) == []
        assert await store.renew("a", {}, BRIEF) == []
        # Renewed for a lease too short to outlive the next look: lost once it lapsed.
        await elapse(2 * BRIEF)
        assert await store.renew("a", {"live": 1}, LIVE) == ["live"]

    async def test_release_drops_only_the_owners_claim(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        await store.release("b", "r1")  # not b's: nothing happens
        await _accepted(store, run("r1", 1, fence=Fence("r1", "a", 1)))
        await store.release("a", "r1")
        stale = run("r1", 1, at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        # Free: another owner claims it at once, at the next epoch.
        taken = await _accepted(store, run("r1", 1, at=3.0, claim=Claim("b", LIVE)))
        assert taken.accepted.epoch == 2
        await store.release("a", "ghost")  # nothing to release: fine

    async def test_a_claim_given_up_while_its_run_is_running_leaves_it_for_recovery(
        self, store: DurableStore
    ) -> None:
        # The attempt never committed its end (its first commit was fenced, or its end
        # commit failed): the run's owner is lost, and recovery must still find the run.
        await _claimed(store, "r1", "a")
        await store.release("a", "r1")
        stale = run("r1", 1, at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        recovered = await store.recover("b", NAMES, 3.0, LIVE, 3, 10)
        assert [(r.record.run_id, r.epoch) for r in recovered] == [("r1", 2)]
        # A run that is no longer running just loses its claim: nothing to recover.
        await _claimed(store, "r2", "a")
        await _accepted(store, end("r2", DONE, fence=Fence("r2", "a", 1)))
        await store.release("a", "r2")
        assert await store.recover("b", NAMES, 3.0, LIVE, 3, 10) == []
        assert await _state(store, "r2") == DONE

    async def test_a_commit_that_releases_drops_its_claim(self, store: DurableStore) -> None:
        await _claimed(store, "r1", "a")
        await _accepted(store, queue("r1", fence=Fence("r1", "a", 1), release=True))
        stale = run("r1", 2, at=3.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Queued())
        taken = await _accepted(store, run("r1", 2, claim=Claim("b", LIVE)))
        assert taken.accepted.epoch == 2


class ThreadGuardChecks:
    """The thread guard."""

    # ------------------------------------------------------------ the thread guard

    async def test_the_thread_guard_refuses_a_start_while_another_attempt_is_live(
        self, store: DurableStore
    ) -> None:
        await _claimed(store, "a1", "a", LIVE, thread="t")
        busy = _new("b1", thread="t", at=2.0, claim=Claim("b", LIVE), thread_guard=True)
        assert await _rejected(store, busy) == Rejected(RejectReason.THREAD_BUSY, None)
        assert await store.load("b1") is None

        await _accepted(store, _new("b2", Queued(), generation=0, thread="t"))
        start = run("b2", 1, claim=Claim("b", LIVE), thread_guard=True)
        assert await _rejected(store, start) == Rejected(RejectReason.THREAD_BUSY, Queued())
        assert await _state(store, "b2") == Queued()

        # A run never blocks itself.
        mine = run("a1", 1, fence=Fence("a1", "a", 1), thread_guard=True)
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
            await _accepted(store, end("a1", DONE, fence=Fence("a1", "a", 1)))
        elif how == "paused":
            paused = Awaiting(asking("a1"))
            await _accepted(store, commit("a1", paused, fence=Fence("a1", "a", 1)))
        elif how == "released":
            await store.release("a", "a1")
        else:  # recovered by another owner: claimed, but its new attempt has not started
            await elapse(2 * BRIEF)
            recovered = await store.recover("b", NAMES, 10.5, LIVE, 3, 10)
            assert [r.record.run_id for r in recovered] == ["a1"]
        start = run("b1", 1, at=3.0, claim=Claim("c", LIVE), thread_guard=True)
        assert (await _accepted(store, start)).record.state == Running(1)

    async def test_a_childs_live_attempt_occupies_its_thread(self, store: DurableStore) -> None:
        epoch = await _claimed(store, "root", "a", LIVE, thread="tr")
        await _accepted(
            store, create_child("c1", "root", "root", Fence("root", "a", epoch), thread="tc")
        )
        busy = _new("x", thread="tc", at=3.0, thread_guard=True)
        assert await _rejected(store, busy) == Rejected(RejectReason.THREAD_BUSY, None)
        await store.release("a", "root")
        await _accepted(store, busy)


class RecoveryChecks:
    """``recover``, branch by branch."""

    # ------------------------------------------------------------ recover

    async def test_recover_claims_a_lost_named_run_at_the_next_epoch(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        await _claimed(store, "r1", "a", BRIEF)
        await _accepted(store, run("r1", 1, fence=Fence("r1", "a", 1), checkpoint=[7]))
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
        stale = end("r1", DONE, at=12.0, fence=Fence("r1", "a", 1))
        assert await _rejected(store, stale) == Rejected(RejectReason.FENCED, Running(1))
        restart = run("r1", 2, at=12.0, fence=Fence("r1", "b", 2))
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
        await _accepted(store, create_child("c1", "r1", "r1", fence))
        await _accepted(store, create_child("g1", "c1", "r1", fence))
        await _accepted(store, create_child("c2", "r1", "r1", fence, Queued()))
        await _accepted(store, create_child("done", "r1", "r1", fence))
        await _accepted(store, end("done", DONE, fence=fence))
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
        other = create(
            "other", at=12.0, thread="thread-c1", root="other", thread_guard=True, detail={}
        )
        await _accepted(store, other)

    async def test_recover_ends_an_unnamed_run_as_owner_lost(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        epoch = await _claimed(store, "r1", "a", BRIEF, name=None)
        await _accepted(store, create_child("c1", "r1", "r1", Fence("r1", "a", epoch)))
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
        await _accepted(store, run("r1", 2, at=12.0, fence=Fence("r1", "b", 2)))
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
        await _accepted(store, create_child("c1", "r1", "r1", Fence("r1", "a", epoch)))
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
        await _accepted(store, create_child("c1", "r1", "r1", Fence("r1", "a", epoch)))
        ticket = asking("r1")
        await _accepted(store, pause("r1", ticket, fence=Fence("r1", "a", epoch)))
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
        await _accepted(store, create_child("c1", "r1", "r1", fence))
        await _accepted(store, queue("r1", fence=fence))
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
        await _accepted(store, run("live", 1, at=20.0, fence=Fence("live", "a", 1)))

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
