"""The store contract's checks of run policies (DESIGN §3.8): busy threads (``NewRun.
if_busy``: a new run that rejects a busy thread, or supersedes every other unended run of
it, in its own transaction) and body versions (pinned by a run's first attempt, and
recovery left to a runtime whose body accepts the pinned one)."""

from __future__ import annotations

from .. import EndCause
from .._core import BodyVersions
from ..store import Accepted, Claim, DurableStore, Expect, Fence, Rejected, RejectReason, Store
from ._checks import BRIEF, LIVE, Elapse, _accepted, _claimed, _loaded, _new, _one, _rejected
from ._commits import DONE, Ended, Queued, Running, answer, asking, create, end, pause, run

SUPERSEDED = Ended(EndCause.Stopped("superseded"))


class BusyThreadChecks:
    """``if_busy="reject"`` and ``if_busy="supersede"`` on a new run."""

    async def test_reject_refuses_a_thread_with_a_running_run_and_writes_nothing(
        self, store: Store
    ) -> None:
        await _accepted(store, create("q1", Queued(), generation=0, thread="t"))
        await _accepted(store, create("r1", thread="t"))
        before = await store.events_after(0)
        refused = await _rejected(store, create("new", thread="t", if_busy="reject"))
        # The running run is named, before any queued one.
        assert refused == Rejected(RejectReason.BUSY, Running(1), holder="r1")
        assert await store.load("new") is None
        assert await store.events_after(0) == before

    async def test_reject_names_the_first_queued_run_when_none_runs(self, store: Store) -> None:
        await _accepted(store, create("q1", Queued(), generation=0, thread="t"))
        await _accepted(store, create("q2", Queued(), generation=0, thread="t"))
        refused = await _rejected(
            store, create("new", Queued(), generation=0, thread="t", if_busy="reject")
        )
        assert refused == Rejected(RejectReason.BUSY, Queued(), holder="q1")

    async def test_reject_passes_a_thread_whose_runs_await_or_ended(self, store: Store) -> None:
        await _accepted(store, create("a1", thread="t"))
        await _accepted(store, pause("a1", asking("a1")))
        await _accepted(store, create("e1", thread="t"))
        await _accepted(store, end("e1", DONE))
        landed = await _accepted(store, create("new", thread="t", if_busy="reject"))
        assert landed.record.state == Running(1)
        assert landed.accepted.superseded == ()
        # Other threads never count.
        await _accepted(store, create("other", thread="u"))
        await _accepted(store, create("new2", thread="v", if_busy="reject"))

    async def test_supersede_ends_every_unended_run_of_the_thread_in_one_commit(
        self, store: Store
    ) -> None:
        await _accepted(store, create("r1", thread="t"))
        await _accepted(store, create("q1", Queued(), generation=0, thread="t"))
        await _accepted(store, create("a1", thread="t"))
        await _accepted(store, pause("a1", asking("a1")))
        await _accepted(store, create("done", thread="t"))
        await _accepted(store, end("done", DONE))
        await _accepted(store, create("elsewhere", thread="u"))
        last = (await store.events_after(0))[-1].seq
        result = await _one(
            store, create("new", Queued(), generation=0, thread="t", if_busy="supersede")
        )
        assert isinstance(result, Accepted), result
        assert result.superseded == ("r1", "q1", "a1")
        for run_id in ("r1", "q1", "a1"):
            assert (await _loaded(store, run_id)).state == SUPERSEDED
        assert (await _loaded(store, "done")).state == DONE
        assert (await _loaded(store, "elsewhere")).state == Running(1)
        assert (await _loaded(store, "new")).state == Queued()
        written = await store.events_after(last)
        # The ends first, oldest run first, then the new run's own event; the ends say who
        # superseded them.
        assert [(e.run_id, e.state) for e in written] == [
            ("r1", SUPERSEDED),
            ("q1", SUPERSEDED),
            ("a1", SUPERSEDED),
            ("new", Queued()),
        ]
        assert all(e.detail == {"superseded_by": "new"} for e in written[:3])
        assert result.last_seq == written[-1].seq
        # The awaiting run's ticket went with its end: an answer to it is refused.
        late = answer("a1", asking("a1"), "yes", 2)
        assert (await _rejected(store, late)).reason is RejectReason.ENDED

    async def test_supersede_ends_a_superseded_runs_descendants_first(self, store: Store) -> None:
        await _accepted(store, create("root", thread="t"))
        await _accepted(store, create("child", parent="root", root="root"))
        await _accepted(store, create("grandchild", parent="child", root="root"))
        last = (await store.events_after(0))[-1].seq
        result = await _one(store, create("new", thread="t", if_busy="supersede"))
        assert isinstance(result, Accepted)
        assert result.superseded == ("root",)
        ends = [(e.run_id, e.state) for e in await store.events_after(last) if e.state.is_ended]
        cancelled = Ended(EndCause.Cancelled())
        assert ends == [("grandchild", cancelled), ("child", cancelled), ("root", SUPERSEDED)]

    async def test_supersede_of_a_free_thread_writes_the_run_alone(self, store: Store) -> None:
        landed = await _accepted(store, create("new", thread="t", if_busy="supersede"))
        assert landed.accepted.superseded == ()
        assert [e.run_id for e in landed.events] == ["new"]

    async def test_an_existing_run_id_is_refused_before_any_supersede(self, store: Store) -> None:
        await _accepted(store, create("new", Queued(), generation=0, thread="t"))
        await _accepted(store, create("r1", thread="t"))
        again = create("new", Queued(), generation=0, thread="t", if_busy="supersede")
        assert (await _rejected(store, again)).reason is RejectReason.EXISTS
        assert (await _loaded(store, "r1")).state == Running(1)
        rejecting = create("new", Queued(), generation=0, thread="t", if_busy="reject")
        assert (await _rejected(store, rejecting)).reason is RejectReason.EXISTS

    async def test_a_run_never_supersedes_its_own_ancestor(self, store: Store) -> None:
        await _accepted(store, create("root", thread="t"))
        await _accepted(store, create("child", parent="root", root="root", thread="c"))
        grandchild = create("gc", parent="child", root="root", thread="t", if_busy="supersede")
        refused = await _rejected(store, grandchild)
        assert refused == Rejected(RejectReason.BUSY, Running(1), holder="root")
        assert (await _loaded(store, "root")).state == Running(1)
        assert await store.load("gc") is None

    async def test_a_later_commit_of_the_batch_sees_the_supersede(self, store: Store) -> None:
        await _accepted(store, create("r1", thread="t"))
        results = await store.apply(
            [
                create("new", Queued(), generation=0, thread="t", if_busy="supersede"),
                end("r1", DONE, expect=Expect(generation=1, state=Running)),
                create("third", Queued(), generation=0, thread="t", if_busy="reject"),
            ]
        )
        assert isinstance(results[0], Accepted)
        assert results[1] == Rejected(RejectReason.ENDED, SUPERSEDED)
        assert results[2] == Rejected(RejectReason.BUSY, Queued(), holder="new")


class BodyVersionChecks:
    """``body_version``: pinned by the commit that starts a run's first attempt."""

    async def test_the_first_attempt_pins_the_body_version(self, store: Store) -> None:
        created = create("r1", name="job")
        created.new_run.body_version = "2"  # type: ignore[union-attr]
        assert (await _accepted(store, created)).record.body_version == "2"
        await _accepted(store, create("q1", Queued(), generation=0, name="job"))
        assert (await _loaded(store, "q1")).body_version is None  # never started
        start = run("q1", 1, expect=Expect(generation=0, state=Queued), body_version="7")
        assert (await _accepted(store, start)).record.body_version == "7"
        # Later commits keep it.
        await _accepted(store, pause("q1", asking("q1")))
        assert (await _loaded(store, "q1")).body_version == "7"
        await _accepted(store, end("q1", DONE, 2))
        assert (await _loaded(store, "q1")).body_version == "7"


class SupersedeClaimChecks:
    """A superseded run's live attempt keeps its thread until its owner stops it."""

    async def test_a_superseded_attempt_keeps_the_thread_until_its_owner_releases_it(
        self, store: DurableStore
    ) -> None:
        epoch = await _claimed(store, "old", "a", LIVE, thread="t")
        # Refused while the old attempt is live: nothing is written, not even the supersede.
        start = create(
            "new",
            thread="t",
            name="job",
            at=2.0,
            claim=Claim("b", LIVE),
            thread_guard=True,
            if_busy="supersede",
        )
        assert await _rejected(store, start) == Rejected(RejectReason.THREAD_BUSY, None)
        assert (await _loaded(store, "old")).state == Running(1)
        # Committed Queued, it supersedes; the thread stays busy while the old attempt may
        # still run.
        queued = create("new", Queued(), generation=0, thread="t", name="job", if_busy="supersede")
        assert (await _accepted(store, queued)).accepted.superseded == ("old",)
        assert (await _loaded(store, "old")).state == SUPERSEDED
        go = _new("x", thread="t", at=3.0, claim=Claim("b", LIVE), thread_guard=True)
        assert await _rejected(store, go) == Rejected(RejectReason.THREAD_BUSY, None)
        # The old owner's attempt commits nothing more, then lets its claim go.
        late = end("old", DONE, fence=Fence("old", "a", epoch))
        assert (await _rejected(store, late)).reason is RejectReason.ENDED
        await store.release("a", "old")
        begin = create("x2", thread="t", name="job", claim=Claim("b", LIVE), thread_guard=True)
        assert (await _accepted(store, begin)).record.state == Running(1)

    async def test_recover_leaves_a_run_pinned_to_a_version_its_body_does_not_run(
        self, store: DurableStore, elapse: Elapse
    ) -> None:
        lost = create("r1", name="job", claim=Claim("a", BRIEF))
        lost.new_run.body_version = "1"  # type: ignore[union-attr]
        await _accepted(store, lost)
        before = await _loaded(store, "r1")
        await elapse(2 * BRIEF)
        other = {"job": BodyVersions("2")}
        assert await store.recover("b", other, 11.0, LIVE, 1, 10) == []
        # Left as it was: not claimed, its loss not counted (max_recoveries=1 would end it).
        assert await _loaded(store, "r1") == before
        accepting = {"job": BodyVersions("2", frozenset({"1"}))}
        recovered = await store.recover("c", accepting, 12.0, LIVE, 1, 10)
        assert [r.record.run_id for r in recovered] == ["r1"]
        assert recovered[0].record.body_version == "1"
