"""The store contract, checked on MemoryStore through the `Store` protocol, and group
commit through the runtime's supervisor."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing
from wrapped_stores import FailingStore

from awaken_trio import (
    EndCause,
    JsonValue,
    LiveCommand,
    ResumeTicket,
    RunContext,
    RunEvent,
    RunRecord,
    RunState,
    StoreError,
    open_runtime,
)
from awaken_trio.store import (
    UNSET,
    Accepted,
    Commit,
    CommitResult,
    EventDraft,
    Expect,
    MemoryStore,
    NewRun,
    Rejected,
    RejectReason,
    Store,
)

Running = RunState.Running
Queued = RunState.Queued
Awaiting = RunState.Awaiting
Ended = RunState.Ended

CANCELLED = Ended(EndCause.Cancelled())
DONE = Ended(EndCause.NaturalEnd())


@pytest.fixture(params=["memory"])
def contract_store(request: pytest.FixtureRequest) -> Store:
    """Every store implementation; each check below goes through the protocol only."""
    stores: dict[str, Store] = {"memory": MemoryStore()}
    return stores[request.param]


def _ticket(run_id: str, correlation_id: str = "c1") -> ResumeTicket:
    return ResumeTicket(
        correlation_id=correlation_id,
        run_id=run_id,
        thread_id=f"thread-{run_id}",
        reason="user_input",
        payload={"question": "?"},
    )


def _create(
    run_id: str,
    state: RunState | None = None,
    *,
    generation: int = 1,
    parent: str | None = None,
    name: str | None = None,
    input: JsonValue = None,
    at: float = 1.0,
    detail: dict[str, JsonValue] | None = None,
) -> Commit:
    return Commit(
        run_id=run_id,
        state=Running(generation) if state is None else state,
        generation=generation,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(f"thread-{run_id}", parent, name, input),
        detail={"source": "start"} if detail is None else detail,
    )


async def _one(store: Store, commit: Commit) -> CommitResult:
    results = await store.apply([commit])
    assert len(results) == 1
    return results[0]


async def _accepted(store: Store, commit: Commit) -> Accepted:
    result = await _one(store, commit)
    assert isinstance(result, Accepted), result
    return result


async def _rejected(store: Store, commit: Commit) -> Rejected:
    result = await _one(store, commit)
    assert isinstance(result, Rejected), result
    return result


async def _snapshot(store: Store, run_id: str) -> tuple[RunRecord | None, list[RunEvent]]:
    return await store.load(run_id), await store.events_after(0)


# ---------------------------------------------------------------- creation and identity


async def test_creation_with_expect_new(contract_store: Store) -> None:
    store = contract_store
    assert await store.load("r1") is None

    accepted = await _accepted(
        store,
        _create("r1", parent="p0", name="job", input={"q": [1, 2]}, at=12.5),
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


async def test_creation_as_queued_keeps_generation_zero(contract_store: Store) -> None:
    store = contract_store
    accepted = await _accepted(store, _create("r1", Queued(), generation=0))
    assert accepted.record.state == Queued()
    assert accepted.record.generation == 0
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.state == Queued()


async def test_second_creation_is_rejected_exists_and_changes_nothing(
    contract_store: Store,
) -> None:
    store = contract_store
    await _accepted(store, _create("r1", input="first"))
    before = await _snapshot(store, "r1")

    rejected = await _rejected(store, _create("r1", Queued(), generation=0, input="second"))
    assert rejected == Rejected(RejectReason.EXISTS, Running(1))
    assert await _snapshot(store, "r1") == before


async def test_commit_for_an_unknown_run_is_rejected_unknown(contract_store: Store) -> None:
    store = contract_store
    plain = Commit(run_id="ghost", state=Running(1), generation=1, expect=Expect(), at=1.0)
    assert await _rejected(store, plain) == Rejected(RejectReason.UNKNOWN, None)

    # Expect(new=True) without an identity cannot create a run either.
    no_identity = Commit(
        run_id="ghost", state=Running(1), generation=1, expect=Expect(new=True), at=1.0
    )
    assert await _rejected(store, no_identity) == Rejected(RejectReason.UNKNOWN, None)

    assert await store.load("ghost") is None
    assert await store.events_after(0) == []


# ---------------------------------------------------------------- fences


@pytest.mark.parametrize(
    "late",
    [
        Commit(run_id="r1", state=Running(2), generation=2, expect=Expect(), at=2.0),
        Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(generation=1, state=RunState.Ended),
            at=2.0,
        ),
        Commit(
            run_id="r1", state=Ended(EndCause.Stopped("x")), generation=1, expect=Expect(), at=2
        ),
        Commit(run_id="r1", state=Awaiting(_ticket("r1")), generation=1, expect=Expect(), at=2.0),
        Commit(run_id="r1", state=Queued(), generation=1, expect=Expect(), at=2.0),
        Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(new=True),
            at=2.0,
            new_run=NewRun("thread-r1", None, None, None),
        ),
    ],
)
async def test_terminal_fence_rejects_every_later_commit(
    contract_store: Store, late: Commit
) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    end = Commit(
        run_id="r1",
        state=CANCELLED,
        generation=1,
        expect=Expect(generation=1, state=Running),
        at=1.5,
        result={"late": True},
        detail={"source": "cancel_run"},
    )
    await _accepted(store, end)
    before = await _snapshot(store, "r1")

    assert await _rejected(store, late) == Rejected(RejectReason.ENDED, CANCELLED)
    assert await _snapshot(store, "r1") == before


async def test_generation_mismatch_is_stale(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    before = await _snapshot(store, "r1")
    stale = Commit(
        run_id="r1",
        state=CANCELLED,
        generation=2,
        expect=Expect(generation=2, state=Running),
        at=2.0,
    )
    assert await _rejected(store, stale) == Rejected(RejectReason.STALE, Running(1))
    assert await _snapshot(store, "r1") == before


async def test_state_kind_mismatch_is_stale(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    before = await _snapshot(store, "r1")
    for expected in (Queued, Awaiting, Ended):
        wrong = Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
            expect=Expect(generation=1, state=expected),
            at=2.0,
        )
        assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Running(1))
    assert await _snapshot(store, "r1") == before


async def test_correlation_id_mismatch_is_stale(contract_store: Store) -> None:
    store = contract_store
    ticket = _ticket("r1", "c1")
    await _accepted(store, _create("r1"))
    await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Awaiting(ticket),
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
        ),
    )
    before = await _snapshot(store, "r1")
    wrong = Commit(
        run_id="r1",
        state=Running(2),
        generation=2,
        expect=Expect(generation=1, state=Awaiting, correlation_id="c2"),
        at=3.0,
        take_messages=True,
    )
    assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Awaiting(ticket))
    assert await _snapshot(store, "r1") == before

    right = Commit(
        run_id="r1",
        state=Running(2),
        generation=2,
        expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
        at=3.0,
        take_messages=True,
    )
    accepted = await _accepted(store, right)
    assert accepted.record.state == Running(2)
    assert accepted.record.generation == 2


async def test_correlation_id_when_no_ticket_is_live_is_stale(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    wrong = Commit(
        run_id="r1",
        state=Running(1),
        generation=1,
        expect=Expect(correlation_id="c1"),
        at=2.0,
    )
    assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Running(1))


async def test_matching_expectation_is_accepted(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    accepted = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=DONE,
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
            result={"answer": 42},
        ),
    )
    assert accepted.record.state == DONE
    assert accepted.record.result == {"answer": 42}


# ---------------------------------------------------------------- ticket slot


async def test_ticket_lives_only_while_awaiting(contract_store: Store) -> None:
    store = contract_store
    ticket = _ticket("r1", "c1")
    await _accepted(store, _create("r1"))
    await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Awaiting(ticket),
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
        ),
    )
    loaded = await store.load("r1")
    assert loaded is not None
    assert isinstance(loaded.state, Awaiting)
    assert loaded.state.ticket == ticket

    # The next (non-Awaiting) commit replaces the ticket...
    await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Queued(),
            generation=1,
            expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
            at=3.0,
        ),
    )
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.state == Queued()

    # ...so an answer to the old ticket is fenced off.
    answer = Commit(
        run_id="r1",
        state=Running(2),
        generation=2,
        expect=Expect(generation=1, correlation_id="c1"),
        at=4.0,
    )
    assert await _rejected(store, answer) == Rejected(RejectReason.STALE, Queued())


async def test_a_new_awaiting_commit_replaces_the_ticket(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    first, second = _ticket("r1", "c1"), _ticket("r1", "c2")
    await _accepted(
        store,
        Commit(run_id="r1", state=Awaiting(first), generation=1, expect=Expect(), at=2.0),
    )
    await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Running(2),
            generation=2,
            expect=Expect(correlation_id="c1"),
            at=3.0,
        ),
    )
    await _accepted(
        store,
        Commit(run_id="r1", state=Awaiting(second), generation=2, expect=Expect(), at=4.0),
    )
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.state == Awaiting(second)
    stale = Commit(
        run_id="r1", state=Running(3), generation=3, expect=Expect(correlation_id="c1"), at=5
    )
    assert await _rejected(store, stale) == Rejected(RejectReason.STALE, Awaiting(second))


async def test_terminal_commit_deletes_the_ticket(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    await _accepted(
        store,
        Commit(run_id="r1", state=Awaiting(_ticket("r1")), generation=1, expect=Expect(), at=2),
    )
    await _accepted(
        store,
        Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
            expect=Expect(generation=1, state=Awaiting),
            at=3.0,
        ),
    )
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.state == CANCELLED


# ---------------------------------------------------------------- carried messages


async def _awaiting_with(store: Store, run_id: str, messages: tuple[JsonValue, ...]) -> None:
    await _accepted(store, _create(run_id))
    await _accepted(
        store,
        Commit(
            run_id=run_id,
            state=Awaiting(_ticket(run_id)),
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
            carried_messages=messages,
        ),
    )


async def test_awaiting_carries_queued_keeps_and_take_hands_over(contract_store: Store) -> None:
    store = contract_store
    await _awaiting_with(store, "r1", ("a", {"b": [1]}))

    queued = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Queued(),
            generation=1,
            expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
            at=3.0,
            resume_value={"answer": "yes"},
        ),
    )
    assert queued.taken_messages == ()

    started = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Running(2),
            generation=2,
            expect=Expect(generation=1, state=Queued),
            at=4.0,
            take_messages=True,
        ),
    )
    assert started.taken_messages == ("a", {"b": [1]})
    assert started.resume_value == {"answer": "yes"}

    # Taken once: a later take finds nothing, and the resume value is spent too.
    again = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Running(2),
            generation=2,
            expect=Expect(generation=2, state=Running),
            at=5.0,
            take_messages=True,
        ),
    )
    assert again.taken_messages == ()
    assert again.resume_value is None


async def test_take_straight_from_awaiting(contract_store: Store) -> None:
    store = contract_store
    await _awaiting_with(store, "r1", ("m1", "m2"))
    started = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Running(2),
            generation=2,
            expect=Expect(generation=1, state=Awaiting),
            at=3.0,
            take_messages=True,
        ),
    )
    assert started.taken_messages == ("m1", "m2")
    # Nothing of them is left for a terminal commit to discard.
    ended = await _accepted(
        store,
        Commit(run_id="r1", state=DONE, generation=2, expect=Expect(generation=2), at=4.0),
    )
    assert [e.kind for e in ended.events] == ["committed"]


async def test_terminal_commit_discards_carried_and_inbox_messages_in_one_event(
    contract_store: Store,
) -> None:
    store = contract_store
    await _awaiting_with(store, "r1", ("carried-1", "carried-2"))
    ended = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
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


async def test_terminal_commit_with_only_inbox_messages_records_them(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    ended = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
            discarded_messages=("x", "y"),
        ),
    )
    assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
    assert ended.events[0].detail == {"messages": ["x", "y"]}


async def test_terminal_commit_without_messages_writes_no_discard_event(
    contract_store: Store,
) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    ended = await _accepted(
        store,
        Commit(run_id="r1", state=DONE, generation=1, expect=Expect(generation=1), at=2.0),
    )
    assert [e.kind for e in ended.events] == ["committed"]


async def test_terminal_commit_from_queued_discards_carried_messages(contract_store: Store) -> None:
    store = contract_store
    await _awaiting_with(store, "r1", ("kept",))
    await _accepted(
        store,
        Commit(run_id="r1", state=Queued(), generation=1, expect=Expect(state=Awaiting), at=3),
    )
    ended = await _accepted(
        store,
        Commit(run_id="r1", state=CANCELLED, generation=1, expect=Expect(state=Queued), at=4),
    )
    assert [e.kind for e in ended.events] == ["messages_discarded", "committed"]
    assert ended.events[0].detail == {"messages": ["kept"]}


# ---------------------------------------------------------------- events, checkpoint, result


async def test_extra_event_drafts_precede_the_commits_own_event(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    accepted = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=CANCELLED,
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=7.0,
            events=(
                EventDraft("late_result_discarded", {"result": {"v": 1}}),
                EventDraft("custom", {"n": 2}),
            ),
            discarded_messages=("m",),
            detail={"source": "deliver", "reason": None},
        ),
    )
    events = accepted.events
    assert [e.kind for e in events] == [
        "late_result_discarded",
        "custom",
        "messages_discarded",
        "committed",
    ]
    assert [e.seq for e in events] == [2, 3, 4, 5]
    assert events[0].detail == {"result": {"v": 1}}
    assert events[1].detail == {"n": 2}
    assert events[3].detail == {"source": "deliver", "reason": None}
    for event in events:
        assert event.run_id == "r1"
        assert event.thread_id == "thread-r1"
        assert event.generation == 1
        assert event.state == CANCELLED
        assert event.at == 7.0
    assert await store.events_after(1) == list(events)


async def test_extra_events_on_a_non_terminal_commit(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    accepted = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(generation=1),
            at=2.0,
            events=(EventDraft("note", {"x": 1}),),
        ),
    )
    assert [(e.kind, e.state) for e in accepted.events] == [
        ("note", Running(1)),
        ("committed", Running(1)),
    ]


async def test_checkpoint_unset_keeps_the_committed_one(contract_store: Store) -> None:
    store = contract_store
    created = await _accepted(store, _create("r1"))
    assert created.record.checkpoint is None  # the UNSET marker never leaks into a record

    def progress(checkpoint: JsonValue) -> Commit:
        return Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2.0,
            checkpoint=checkpoint,
        )

    assert (await _accepted(store, progress({"step": 1}))).record.checkpoint == {"step": 1}
    assert (await _accepted(store, progress(UNSET))).record.checkpoint == {"step": 1}
    assert (await _accepted(store, progress({"step": 2}))).record.checkpoint == {"step": 2}

    # Pausing, resuming and ending without a checkpoint keep it.
    await _accepted(
        store,
        Commit(run_id="r1", state=Awaiting(_ticket("r1")), generation=1, expect=Expect(), at=3),
    )
    await _accepted(
        store, Commit(run_id="r1", state=Running(2), generation=2, expect=Expect(), at=4)
    )
    ended = await _accepted(
        store, Commit(run_id="r1", state=DONE, generation=2, expect=Expect(), at=5)
    )
    assert ended.record.checkpoint == {"step": 2}
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.checkpoint == {"step": 2}


async def test_checkpoint_none_replaces_the_committed_one(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    await _accepted(
        store,
        Commit(run_id="r1", state=Running(1), generation=1, expect=Expect(), at=2, checkpoint=[1]),
    )
    cleared = await _accepted(
        store,
        Commit(run_id="r1", state=Running(1), generation=1, expect=Expect(), at=3, checkpoint=None),
    )
    assert cleared.record.checkpoint is None


async def test_result_is_stored_only_on_ended(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("r1"))
    running = await _accepted(
        store,
        Commit(
            run_id="r1", state=Running(1), generation=1, expect=Expect(), at=2, result={"no": 1}
        ),
    )
    assert running.record.result is None
    awaiting = await _accepted(
        store,
        Commit(
            run_id="r1",
            state=Awaiting(_ticket("r1")),
            generation=1,
            expect=Expect(),
            at=3,
            result={"no": 2},
        ),
    )
    assert awaiting.record.result is None
    queued = await _accepted(
        store,
        Commit(run_id="r1", state=Queued(), generation=1, expect=Expect(), at=4, result={"no": 3}),
    )
    assert queued.record.result is None
    await _accepted(
        store, Commit(run_id="r1", state=Running(2), generation=2, expect=Expect(), at=5)
    )
    ended = await _accepted(
        store,
        Commit(run_id="r1", state=DONE, generation=2, expect=Expect(), at=6, result={"yes": 4}),
    )
    assert ended.record.result == {"yes": 4}
    loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.result == {"yes": 4}
    assert loaded.generation == 2


async def test_events_after_paging_and_filtering(contract_store: Store) -> None:
    store = contract_store
    # r1: 3 events, r2: 2 events, interleaved.
    await _accepted(store, _create("r1"))  # seq 1
    await _accepted(store, _create("r2"))  # seq 2
    await _accepted(
        store, Commit(run_id="r1", state=Running(1), generation=1, expect=Expect(), at=2)
    )  # seq 3
    await _accepted(
        store, Commit(run_id="r2", state=DONE, generation=1, expect=Expect(), at=3)
    )  # seq 4
    await _accepted(
        store, Commit(run_id="r1", state=CANCELLED, generation=1, expect=Expect(), at=4)
    )  # seq 5

    everything = await store.events_after(0)
    assert [e.seq for e in everything] == [1, 2, 3, 4, 5]
    assert [e.run_id for e in everything] == ["r1", "r2", "r1", "r2", "r1"]
    assert [e.seq for e in await store.events_after(2)] == [3, 4, 5]
    assert await store.events_after(5) == []
    assert await store.events_after(99) == []
    assert [e.seq for e in await store.events_after(0, limit=2)] == [1, 2]
    assert [e.seq for e in await store.events_after(2, limit=2)] == [3, 4]
    assert [e.seq for e in await store.events_after(0, "r1")] == [1, 3, 5]
    assert [e.seq for e in await store.events_after(1, "r1")] == [3, 5]
    assert [e.seq for e in await store.events_after(3, "r1")] == [5]
    assert [e.seq for e in await store.events_after(0, "r1", limit=1)] == [1]
    assert [e.seq for e in await store.events_after(0, "r2")] == [2, 4]
    assert await store.events_after(0, "unknown") == []

    # Paging by the last seen seq visits every event once, in order.
    seen: list[int] = []
    cursor = 0
    while page := await store.events_after(cursor, limit=2):
        seen.extend(e.seq for e in page)
        cursor = page[-1].seq
    assert seen == [1, 2, 3, 4, 5]


async def test_batch_applies_in_order_with_independent_results(contract_store: Store) -> None:
    store = contract_store
    await _accepted(store, _create("done"))
    await _accepted(store, Commit(run_id="done", state=DONE, generation=1, expect=Expect(), at=1.0))
    before = await store.events_after(0)

    batch = [
        _create("a"),  # creates a
        Commit(run_id="done", state=Running(2), generation=2, expect=Expect(), at=2),  # ended
        Commit(run_id="a", state=Running(1), generation=1, expect=Expect(generation=7), at=2),
        Commit(
            run_id="a",
            state=Running(1),
            generation=1,
            expect=Expect(generation=1, state=Running),
            at=2,
            checkpoint={"after": "create"},
        ),  # sees the creation earlier in the batch
        Commit(run_id="ghost", state=Running(1), generation=1, expect=Expect(), at=2),
        _create("a"),  # exists: created earlier in this batch
        _create("b"),
        Commit(run_id="b", state=CANCELLED, generation=1, expect=Expect(state=Running), at=2),
    ]
    results = await store.apply(batch)
    assert len(results) == len(batch)
    assert isinstance(results[0], Accepted)
    assert results[1] == Rejected(RejectReason.ENDED, DONE)
    assert results[2] == Rejected(RejectReason.STALE, Running(1))
    assert isinstance(results[3], Accepted)
    assert results[3].record.checkpoint == {"after": "create"}
    assert results[4] == Rejected(RejectReason.UNKNOWN, None)
    assert results[5] == Rejected(RejectReason.EXISTS, Running(1))
    assert isinstance(results[6], Accepted)
    assert isinstance(results[7], Accepted)
    assert results[7].record.state == CANCELLED

    after = await store.events_after(0)
    assert after[: len(before)] == before
    new = after[len(before) :]
    # One event per accepted commit, in batch order, with consecutive seqs.
    assert [(e.run_id, e.state) for e in new] == [
        ("a", Running(1)),
        ("a", Running(1)),
        ("b", Running(1)),
        ("b", CANCELLED),
    ]
    assert [e.seq for e in new] == list(range(before[-1].seq + 1, before[-1].seq + 5))
    loaded = await store.load("done")
    assert loaded is not None
    assert loaded.state == DONE


async def test_an_empty_batch_returns_no_results(contract_store: Store) -> None:
    store = contract_store
    assert await store.apply([]) == []
    assert await store.events_after(0) == []


# ---------------------------------------------------------------- through the runtime


async def _returns_quickly(ctx: RunContext) -> JsonValue:
    await trio.lowlevel.checkpoint()
    return {"run": ctx.run_id}


async def test_concurrent_starts_are_group_committed() -> None:
    store = MemoryStore(inline=False)
    handles: dict[str, RunState] = {}
    async with open_runtime(store) as runtime:

        async def start_one(i: int) -> None:
            handle = await runtime.start(_returns_quickly, run_id=f"r{i}")
            handles[handle.run_id] = await handle.wait()

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(start_one, i)

        stats = runtime.statistics().supervisor
    assert len(handles) == 200
    assert set(handles.values()) == {DONE}
    assert stats.commits >= 400  # a start and an end per run
    assert stats.largest_batch > 1
    assert stats.batches < stats.commits
    assert stats.waiting == 0
    for i in range(200):
        record = await store.load(f"r{i}")
        assert record is not None
        assert record.state == DONE
        assert record.result == {"run": f"r{i}"}


async def test_group_commit_respects_max_batch() -> None:
    store = MemoryStore(inline=False)
    async with open_runtime(store, max_batch=7) as runtime:
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(partial(runtime.execute, _returns_quickly, run_id=f"r{i}"))
        stats = runtime.statistics().supervisor
    assert 1 < stats.largest_batch <= 7
    assert stats.commits >= 200
    assert stats.batches >= stats.commits / 7
    assert [e.seq for e in await store.events_after(0)] == list(range(1, stats.commits + 1))


async def test_inline_store_commits_one_at_a_time() -> None:
    store = MemoryStore(inline=True)
    async with open_runtime(store) as runtime:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(partial(runtime.execute, _returns_quickly, run_id=f"r{i}"))
        stats = runtime.statistics().supervisor
    assert stats.largest_batch == 1
    assert stats.batches == stats.commits == 40
    for i in range(20):
        record = await store.load(f"r{i}")
        assert record is not None
        assert record.state == DONE


async def test_store_failure_reaches_the_caller_and_the_runtime_keeps_working() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.failing = True
        with pytest.raises(StoreError, match="disk full"):
            await runtime.start(_returns_quickly, run_id="r1")
        assert store.failed_batches == 1
        assert await store.load("r1") is None
        assert await store.events_after(0) == []

        store.failing = False
        handle = await runtime.start(_returns_quickly, run_id="r2")
        with trio.fail_after(5):
            assert await handle.wait() == DONE
        for i in range(3):
            later = await runtime.start(_returns_quickly, run_id=f"later{i}", thread_id="t9")
            with trio.fail_after(5):
                assert await later.wait() == DONE
    assert await store.load("r1") is None
    record = await store.load("r2")
    assert record is not None
    assert record.state == DONE
    assert record.result == {"run": "r2"}


async def test_failed_start_leaves_its_thread_free() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.failing = True
        with pytest.raises(StoreError):
            await runtime.start(_returns_quickly, run_id="r1", thread_id="t1")
        store.failing = False

        # Nothing was committed, so nothing may hold the thread: a retry of the same run
        # on the same thread runs at once, and so does the next run on that thread.
        retry = await runtime.start(_returns_quickly, run_id="r1", thread_id="t1")
        other = await runtime.start(_returns_quickly, run_id="r2", thread_id="t1")
        await trio.testing.wait_all_tasks_blocked()
        assert await runtime.state("r1") == DONE
        assert await runtime.state("r2") == DONE
        assert retry.done
        assert other.done
        stats = runtime.statistics()
        assert stats.busy_threads == 0
        assert stats.active_attempts == 0
        assert stats.queued_runs == 0


async def test_store_failure_on_progress_reaches_the_body() -> None:
    store = FailingStore()
    errors: list[str] = []

    async def body(ctx: RunContext) -> JsonValue:
        await ctx.boundary(wait=True)
        store.failing = True
        try:
            await ctx.boundary({"step": 1})
        except StoreError as exc:
            errors.append(str(exc))
        store.failing = False
        await ctx.boundary({"step": 2})
        return "ok"

    async with open_runtime(store) as runtime:
        handle = await runtime.start(body, run_id="r1")
        await trio.testing.wait_all_tasks_blocked()
        runtime.deliver(LiveCommand.Wake("r1"))
        with trio.fail_after(5):
            assert await handle.wait() == DONE
    assert len(errors) == 1
    assert "disk full" in errors[0]
    record = await store.load("r1")
    assert record is not None
    assert record.checkpoint == {"step": 2}
    assert record.result == "ok"


async def test_store_answering_too_few_results_is_a_store_error() -> None:
    store = FailingStore()
    async with open_runtime(store) as runtime:
        store.short = True
        with pytest.raises(StoreError, match="answered 0 results for a batch of 1 commits"):
            await runtime.start(_returns_quickly, run_id="r1")
        store.short = False
        handle = await runtime.start(_returns_quickly, run_id="r2")
        with trio.fail_after(5):
            assert await handle.wait() == DONE


async def test_store_failure_on_one_runs_end_leaves_the_other_runs_alone() -> None:
    # The store fails every commit of run "a", including its terminal one. Run "b" and
    # runs started later have nothing to do with it and keep working.
    store = FailingStore()
    observed: dict[str, object] = {}
    escaped: BaseException | None = None

    async def waits_then_returns(ctx: RunContext) -> JsonValue:
        await ctx.boundary(wait=True)
        return ctx.run_id

    try:
        async with open_runtime(store) as runtime:
            a = await runtime.start(waits_then_returns, run_id="a")
            b = await runtime.start(waits_then_returns, run_id="b")
            await trio.testing.wait_all_tasks_blocked()
            store.failing_runs.add("a")
            runtime.deliver(LiveCommand.Wake("a"))  # "a" returns; its end cannot commit
            await trio.testing.wait_all_tasks_blocked()
            observed["b after a's failure"] = await runtime.state("b")
            if not b.done:
                runtime.deliver(LiveCommand.Wake("b"))
            with trio.fail_after(5):
                observed["b's end"] = await b.wait()
            later = await runtime.start(_returns_quickly, run_id="later")
            with trio.fail_after(5):
                observed["a later run's end"] = await later.wait()
            with trio.fail_after(5):
                try:
                    observed["a's wait"] = await a.wait()
                except StoreError as exc:
                    observed["a's wait"] = exc
            observed["a's committed state"] = await runtime.state("a")
            observed["a still controllable"] = runtime.active_attempt_run_id("a")
            observed["busy threads"] = runtime.statistics().busy_threads
            store.failing_runs.clear()
            # The orphaned Running run is ended through the committed path.
            observed["stop_run(a)"] = await runtime.stop_run("a", "orphaned")
    except BaseException as exc:
        escaped = exc
    assert observed.get("b after a's failure") == Running(1), observed
    assert observed.get("b's end") == DONE, observed
    assert observed.get("a later run's end") == DONE, observed
    assert isinstance(observed.get("a's wait"), StoreError), observed
    assert "disk full" in str(observed["a's wait"])
    # Nothing was committed for a's end: it keeps its last committed state, and its
    # attempt and thread are let go.
    assert observed.get("a's committed state") == Running(1), observed
    assert observed.get("a still controllable") is None, observed
    assert observed.get("busy threads") == 0, observed
    assert observed.get("stop_run(a)") == Ended(EndCause.Stopped("orphaned")), observed
    assert escaped is None, repr(escaped)
    a_events = await store.events_after(0, "a")
    assert [e.state for e in a_events] == [Running(1), Ended(EndCause.Stopped("orphaned"))]
