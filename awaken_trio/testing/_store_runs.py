"""The store contract's checks of a run's life: its creation, the fences every commit
passes, the ticket slot, and what a run carries from one attempt to the next."""

from __future__ import annotations

import pytest

from .. import (
    EndCause,
    RunEvent,
    RunRecord,
    RunState,
)
from ..store import (
    Commit,
    Expect,
    Rejected,
    RejectReason,
    Store,
)
from ._checks import (
    _accepted,
    _awaiting_with,
    _rejected,
    _snapshot,
)
from ._commits import (
    CANCELLED,
    DONE,
    Awaiting,
    Ended,
    Queued,
    Running,
    answer,
    asking,
    create,
    end,
    pause,
    queue,
    run,
)

_LATE_COMMITS = [
    pytest.param(
        run("r1", 2),
        id="running",
    ),
    pytest.param(
        run("r1", 1, expect=Expect(generation=1, state=RunState.Ended)),
        id="expecting-ended",
    ),
    pytest.param(
        end("r1", Ended(EndCause.Stopped("x")), at=2),
        id="ended-again",
    ),
    pytest.param(
        pause("r1", asking("r1")),
        id="awaiting",
    ),
    pytest.param(
        queue("r1"),
        id="queued",
    ),
    pytest.param(
        create("r1", at=2.0, detail={}),
        id="created-again",
    ),
]


class CreationChecks:
    """Creation and identity: `StoreContract`'s first rule."""

    # ------------------------------------------------------------ creation and identity

    async def test_creation_with_expect_new(self, store: Store) -> None:
        assert await store.load("r1") is None

        accepted = await _accepted(
            store,
            create("r1", parent="p0", name="job", input={"q": [1, 2]}, at=12.5),
        )
        record = accepted.record
        assert record == RunRecord(
            run_id="r1",
            thread_id="thread-r1",
            parent_run_id="p0",
            name="job",
            state=Running(1),
            generation=1,
            result=None,
            checkpoint=None,
            input={"q": [1, 2]},
            created_at=12.5,
            updated_at=12.5,
            started_at=12.5,
        )
        assert await store.load("r1") == record
        assert accepted.taken_messages == ()
        assert len(accepted.events) == 1
        (event,) = accepted.events
        assert event == RunEvent(
            seq=1,
            run_id="r1",
            thread_id="thread-r1",
            generation=1,
            kind="committed",
            state=Running(1),
            detail={"source": "start"},
            at=12.5,
        )
        assert await store.events_after(0) == [event]

    async def test_creation_as_queued_keeps_generation_zero(self, store: Store) -> None:
        accepted = await _accepted(store, create("r1", Queued(), generation=0))
        assert accepted.record.state == Queued()
        assert accepted.record.generation == 0
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.state == Queued()

    async def test_second_creation_is_rejected_exists_and_changes_nothing(
        self, store: Store
    ) -> None:
        await _accepted(store, create("r1", input="first"))
        before = await _snapshot(store, "r1")

        rejected = await _rejected(store, create("r1", Queued(), generation=0, input="second"))
        assert rejected == Rejected(RejectReason.EXISTS, Running(1))
        assert await _snapshot(store, "r1") == before

    async def test_commit_for_an_unknown_run_is_rejected_unknown(self, store: Store) -> None:
        plain = run("ghost", 1, at=1.0)
        assert await _rejected(store, plain) == Rejected(RejectReason.UNKNOWN, None)

        # Expect(new=True) without an identity cannot create a run either.
        no_identity = run("ghost", 1, expect=Expect(new=True), at=1.0)
        assert await _rejected(store, no_identity) == Rejected(RejectReason.UNKNOWN, None)

        assert await store.load("ghost") is None
        assert await store.events_after(0) == []


class FenceChecks:
    """The terminal and expectation fences, and the reasons a rejection names."""

    # ------------------------------------------------------------ fences

    @pytest.mark.parametrize("late", _LATE_COMMITS)
    async def test_terminal_fence_rejects_every_later_commit(
        self, store: Store, late: Commit
    ) -> None:
        await _accepted(store, create("r1"))
        ending = end(
            "r1",
            CANCELLED,
            expect=Expect(generation=1, state=Running),
            at=1.5,
            result={"late": True},
            detail={"source": "cancel_run"},
        )
        await _accepted(store, ending)
        before = await _snapshot(store, "r1")

        assert await _rejected(store, late) == Rejected(RejectReason.ENDED, CANCELLED)
        assert await _snapshot(store, "r1") == before

    async def test_generation_mismatch_is_stale(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        before = await _snapshot(store, "r1")
        stale = end("r1", CANCELLED, 2, expect=Expect(generation=2, state=Running))
        assert await _rejected(store, stale) == Rejected(RejectReason.STALE, Running(1))
        assert await _snapshot(store, "r1") == before

    async def test_state_kind_mismatch_is_stale(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        before = await _snapshot(store, "r1")
        for expected in (Queued, Awaiting, Ended):
            wrong = end("r1", CANCELLED, expect=Expect(generation=1, state=expected))
            assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Running(1))
        assert await _snapshot(store, "r1") == before

    async def test_correlation_id_mismatch_is_stale(self, store: Store) -> None:
        ticket = asking("r1", "c1")
        await _accepted(store, create("r1"))
        await _accepted(
            store,
            pause("r1", ticket, expect=Expect(generation=1, state=Running)),
        )
        before = await _snapshot(store, "r1")
        wrong = run(
            "r1",
            2,
            expect=Expect(generation=1, state=Awaiting, correlation_id="c2"),
            at=3.0,
            take_messages=True,
        )
        assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Awaiting(ticket))
        assert await _snapshot(store, "r1") == before

        right = run(
            "r1",
            2,
            expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
            at=3.0,
            take_messages=True,
        )
        accepted = await _accepted(store, right)
        assert accepted.record.state == Running(2)
        assert accepted.record.generation == 2

    async def test_correlation_id_when_no_ticket_is_live_is_stale(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        wrong = run("r1", 1, expect=Expect(correlation_id="c1"))
        assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Running(1))

    async def test_matching_expectation_is_accepted(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        accepted = await _accepted(
            store,
            end("r1", DONE, expect=Expect(generation=1, state=Running), result={"answer": 42}),
        )
        assert accepted.record.state == DONE
        assert accepted.record.result == {"answer": 42}

    async def test_rejections_name_a_reject_reason_member(self, store: Store) -> None:
        # RejectReason is a StrEnum, so a store answering the bare string "stale" would
        # still compare equal; the reason must be the member itself.
        await _accepted(store, create("r1"))
        await _accepted(store, create("done"))
        await _accepted(store, end("done", DONE))
        batch = [
            run("ghost", 1, at=3.0),
            create("r1"),
            end("r1", DONE, expect=Expect(generation=5), at=3.0),
            run("done", 2, at=3.0),
        ]
        results = await store.apply(batch)
        expected = [
            RejectReason.UNKNOWN,
            RejectReason.EXISTS,
            RejectReason.STALE,
            RejectReason.ENDED,
        ]
        assert len(results) == len(expected)
        for result, reason in zip(results, expected, strict=True):
            assert isinstance(result, Rejected), result
            assert type(result.reason) is RejectReason, repr(result.reason)
            assert result.reason is reason


class TicketChecks:
    """The ticket slot: a ticket lives inside its ``Awaiting`` state."""

    # ------------------------------------------------------------ ticket slot

    async def test_ticket_lives_only_while_awaiting(self, store: Store) -> None:
        ticket = asking("r1", "c1")
        await _accepted(store, create("r1"))
        await _accepted(
            store,
            pause("r1", ticket, expect=Expect(generation=1, state=Running)),
        )
        loaded = await store.load("r1")
        assert loaded is not None
        assert isinstance(loaded.state, Awaiting)
        assert loaded.state.ticket == ticket

        # The next (non-Awaiting) commit replaces the ticket...
        await _accepted(
            store,
            queue("r1", expect=Expect(generation=1, state=Awaiting, correlation_id="c1"), at=3.0),
        )
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.state == Queued()

        # ...so an answer to the old ticket is fenced off.
        answer = run("r1", 2, expect=Expect(generation=1, correlation_id="c1"), at=4.0)
        assert await _rejected(store, answer) == Rejected(RejectReason.STALE, Queued())

    async def test_a_new_awaiting_commit_replaces_the_ticket(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        first, second = asking("r1", "c1"), asking("r1", "c2")
        await _accepted(
            store,
            pause("r1", first),
        )
        await _accepted(
            store,
            run("r1", 2, expect=Expect(correlation_id="c1"), at=3.0),
        )
        await _accepted(
            store,
            pause("r1", second, 2, at=4.0),
        )
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.state == Awaiting(second)
        stale = run("r1", 3, expect=Expect(correlation_id="c1"), at=5)
        assert await _rejected(store, stale) == Rejected(RejectReason.STALE, Awaiting(second))

    async def test_terminal_commit_deletes_the_ticket(self, store: Store) -> None:
        await _accepted(store, create("r1"))
        await _accepted(
            store,
            pause("r1", asking("r1"), at=2),
        )
        await _accepted(
            store,
            end("r1", CANCELLED, expect=Expect(generation=1, state=Awaiting), at=3.0),
        )
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.state == CANCELLED


class CarriedChecks:
    """Carried messages, a carried pause and the resume a run holds; the messages an end
    discards."""

    # ------------------------------------------------------------ carried messages

    async def test_awaiting_carries_queued_keeps_and_take_hands_over(self, store: Store) -> None:
        await _awaiting_with(store, "r1", ("a", {"b": [1]}))

        queued = await _accepted(
            store,
            queue(
                "r1",
                expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
                at=3.0,
                resume_value={"answer": "yes"},
            ),
        )
        assert queued.taken_messages == ()

        started = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=1, state=Queued), at=4.0, take_messages=True),
        )
        assert started.taken_messages == ("a", {"b": [1]})
        assert started.resume_value == {"answer": "yes"}

        # Messages are taken once; the resume stays with the run while it runs, so an
        # attempt that replaces this one (a recovery) is handed the same answer.
        again = await _accepted(
            store,
            run("r1", 3, expect=Expect(generation=2, state=Running), at=5.0, take_messages=True),
        )
        assert again.taken_messages == ()
        assert again.resume_value == {"answer": "yes"}

    async def test_the_resume_is_kept_while_the_run_runs_and_dropped_when_it_awaits(
        self, store: Store
    ) -> None:
        ticket = asking("r1")
        later = asking("r1", "c2")
        await _accepted(store, create("r1"))
        await _accepted(store, pause("r1", ticket, at=3.0))
        # An attempt started by answering the ticket (the runtime had the body) commits
        # the answer with its Running state.
        started = await _accepted(
            store,
            answer("r1", ticket, {"answer": "yes"}, 2, at=3.0),
        )
        assert (started.resume_value, started.accepted.resume_ticket) == ({"answer": "yes"}, ticket)
        # Progress, a release back to Queued and the next attempt's start keep it.
        await _accepted(store, run("r1", 2, at=3.0, checkpoint={"step": 1}))
        await _accepted(store, queue("r1", 2, at=3.0))
        restarted = await _accepted(store, run("r1", 3, at=3.0, take_messages=True))
        assert restarted.resume_value == {"answer": "yes"}
        assert restarted.accepted.resume_ticket == ticket
        # Awaiting again deletes it: the next attempt is handed only the next answer.
        await _accepted(store, pause("r1", later, 3, at=3.0))
        fresh = await _accepted(store, run("r1", 4, at=3.0, take_messages=True))
        assert (fresh.resume_value, fresh.accepted.resume_ticket) == (None, None)

    async def test_a_carried_pause_is_taken_once_and_dropped_by_an_end(self, store: Store) -> None:
        for run_id in ("r1", "r2"):
            await _accepted(store, create(run_id))
            await _accepted(
                store,
                pause(
                    run_id,
                    asking(run_id),
                    expect=Expect(generation=1, state=Running),
                    carried_pause=True,
                ),
            )
        started = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=1, state=Awaiting), at=3.0, take_messages=True),
        )
        assert started.accepted.taken_pause is True
        again = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=2, state=Running), at=4.0, take_messages=True),
        )
        assert again.accepted.taken_pause is False
        # A commit that does not take it leaves it; an end drops it.
        kept = await _accepted(
            store,
            queue("r2", expect=Expect(generation=1, state=Awaiting), at=3.0),
        )
        assert kept.accepted.taken_pause is False
        taken = await _accepted(
            store,
            run("r2", 2, expect=Expect(generation=1, state=Queued), at=4.0, take_messages=True),
        )
        assert taken.accepted.taken_pause is True

    async def test_take_straight_from_awaiting(self, store: Store) -> None:
        await _awaiting_with(store, "r1", ("m1", "m2"))
        started = await _accepted(
            store,
            run("r1", 2, expect=Expect(generation=1, state=Awaiting), at=3.0, take_messages=True),
        )
        assert started.taken_messages == ("m1", "m2")
        # Nothing of them is left for a terminal commit to discard.
        ended = await _accepted(
            store,
            end("r1", DONE, 2, expect=Expect(generation=2), at=4.0),
        )
        assert [e.kind for e in ended.events] == ["committed"]

    async def test_terminal_commit_discards_carried_and_inbox_messages_in_one_event(
        self, store: Store
    ) -> None:
        await _awaiting_with(store, "r1", ("carried-1", "carried-2"))
        ended = await _accepted(
            store,
            end(
                "r1",
                CANCELLED,
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
                discarded_messages=("inbox-1",),
                detail={"source": "cancel_run", "reason": None},
            ),
        )
        assert ended.taken_messages == ()
        kinds = [e.kind for e in ended.events]
        assert kinds == ["messages_discarded", "committed"]
        discarded, terminal = ended.events
        assert discarded.detail == {"messages": ["carried-1", "carried-2", "inbox-1"]}
        assert discarded.seq < terminal.seq
        assert discarded.state == CANCELLED
        assert terminal.detail == {"source": "cancel_run", "reason": None}
        assert (await store.events_after(0))[-2:] == list(ended.events)

    async def test_terminal_commit_with_only_inbox_messages_records_them(
        self, store: Store
    ) -> None:
        await _accepted(store, create("r1"))
        ended = await _accepted(
            store,
            end(
                "r1",
                CANCELLED,
                expect=Expect(generation=1, state=Running),
                discarded_messages=("x", "y"),
            ),
        )
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert ended.events[0].detail == {"messages": ["x", "y"]}

    async def test_terminal_commit_without_messages_writes_no_discard_event(
        self, store: Store
    ) -> None:
        await _accepted(store, create("r1"))
        ended = await _accepted(
            store,
            end("r1", DONE, expect=Expect(generation=1)),
        )
        assert [e.kind for e in ended.events] == ["committed"]

    async def test_terminal_commit_from_queued_discards_carried_messages(
        self, store: Store
    ) -> None:
        await _awaiting_with(store, "r1", ("kept",))
        await _accepted(
            store,
            queue("r1", expect=Expect(state=Awaiting), at=3),
        )
        ended = await _accepted(
            store,
            end("r1", CANCELLED, expect=Expect(state=Queued), at=4),
        )
        assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
        assert ended.events[0].detail == {"messages": ["kept"]}
