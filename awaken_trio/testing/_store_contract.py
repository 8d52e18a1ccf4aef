"""The store contract as a test class every store runs (see `StoreContract`).

Every check talks to the store through the `Store` protocol only (``apply``, ``load``,
``events_after``; the fixture closes it with ``aclose``), so the same checks hold the memory
store and a durable or third-party store to the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import attrs
import pytest

from .. import (
    EndCause,
    FrozenDict,
    FrozenList,
    JsonValue,
    ResumeTicket,
    RunEvent,
    RunRecord,
    RunState,
)
from ..store import (
    UNSET,
    Accepted,
    Claim,
    Commit,
    CommitResult,
    EventDraft,
    Expect,
    Fence,
    NewRun,
    Rejected,
    RejectReason,
    StepStore,
    Store,
)

Running = RunState.Running
Queued = RunState.Queued
Awaiting = RunState.Awaiting
Ended = RunState.Ended

CANCELLED = Ended(EndCause.Cancelled())
DONE = Ended(EndCause.NaturalEnd())


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
    max_steps: int | None = None,
    at: float = 1.0,
    detail: dict[str, JsonValue] | None = None,
    thread: str | None = None,
    root: str | None = None,
    claim: Claim | None = None,
    fence: Fence | None = None,
    thread_guard: bool = False,
) -> Commit:
    """A commit creating ``run_id`` (on a thread of its own unless ``thread`` is given)."""
    return Commit(
        run_id=run_id,
        state=Running(generation) if state is None else state,
        generation=generation,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(thread or f"thread-{run_id}", parent, name, input, max_steps, root),
        detail={"source": "start"} if detail is None else detail,
        claim=claim,
        fence=fence,
        thread_guard=thread_guard,
    )


def _change(run_id: str, state: RunState, generation: int, **changes: object) -> Commit:
    """A commit of ``state`` with no expectation (only the store's own rules decide)."""
    return Commit(
        run_id=run_id,
        state=state,
        generation=generation,
        expect=Expect(),
        at=3.0,
        **changes,  # type: ignore[arg-type]
    )


async def _one(store: Store, commit: Commit) -> CommitResult:
    results = await store.apply([commit])
    assert len(results) == 1
    return results[0]


@attrs.frozen
class _Landed:
    """An accepted commit with what it left in the store: the run's record right after it
    and the events it wrote (read back through the protocol)."""

    accepted: Accepted
    record: RunRecord
    events: tuple[RunEvent, ...]

    @property
    def taken_messages(self) -> tuple[JsonValue, ...]:
        return self.accepted.taken_messages

    @property
    def resume_value(self) -> JsonValue:
        return self.accepted.resume_value


async def _written(store: Store, run_id: str, after: int, accepted: Accepted) -> list[RunEvent]:
    """The events of ``run_id`` an accepted commit wrote (seq after ``after``)."""
    events = [e for e in await store.events_after(after, run_id) if e.seq <= accepted.last_seq]
    assert accepted.last_seq == (events[-1].seq if events else 0), (accepted, events)
    return events


async def _accepted(store: Store, commit: Commit) -> _Landed:
    before = await store.events_after(0, commit.run_id)
    after = before[-1].seq if before else 0
    result = await _one(store, commit)
    assert isinstance(result, Accepted), result
    record = await _loaded(store, commit.run_id)
    assert result.state == record.state, (result, record)
    events = await _written(store, commit.run_id, after, result)
    return _Landed(result, record, tuple(events))


async def _rejected(store: Store, commit: Commit) -> Rejected:
    result = await _one(store, commit)
    assert isinstance(result, Rejected), result
    return result


async def _loaded(store: Store, run_id: str) -> RunRecord:
    record = await store.load(run_id)
    assert record is not None, f"the store lost run {run_id!r}"
    return record


async def _snapshot(store: Store, run_id: str) -> tuple[RunRecord | None, list[RunEvent]]:
    return await store.load(run_id), await store.events_after(0)


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


def _refuses(change: Callable[[], object]) -> bool:
    try:
        change()
    except TypeError:
        return True
    return False


def _assert_frozen(value: JsonValue, where: str) -> None:
    """Every container in ``value`` refuses to change, all the way down."""
    if isinstance(value, dict):
        assert _refuses(lambda: value.__setitem__("contract", 1)), f"{where} can be changed"
        assert _refuses(value.clear), f"{where} can be cleared"
        for key, item in value.items():
            _assert_frozen(item, f"{where}[{key!r}]")
    elif isinstance(value, list):
        assert _refuses(lambda: value.append("contract")), f"{where} can be changed"
        assert _refuses(value.clear), f"{where} can be cleared"
        for i, item in enumerate(value):
            _assert_frozen(item, f"{where}[{i}]")


def _assert_record_frozen(record: RunRecord, where: str) -> None:
    _assert_frozen(record.input, f"{where}.input")
    _assert_frozen(record.checkpoint, f"{where}.checkpoint")
    _assert_frozen(record.result, f"{where}.result")
    _assert_state_frozen(record.state, f"{where}.state")


def _assert_state_frozen(state: RunState, where: str) -> None:
    if isinstance(state, Awaiting):
        _assert_frozen(state.ticket.payload, f"{where}.ticket.payload")
        _assert_frozen(state.ticket.accepts, f"{where}.ticket.accepts")


def _assert_events_frozen(events: Sequence[RunEvent], where: str) -> None:
    for event in events:
        _assert_frozen(event.detail, f"{where} seq {event.seq} detail")
        _assert_state_frozen(event.state, f"{where} seq {event.seq} state")


_LATE_COMMITS = [
    pytest.param(
        Commit(run_id="r1", state=Running(2), generation=2, expect=Expect(), at=2.0),
        id="running",
    ),
    pytest.param(
        Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(generation=1, state=RunState.Ended),
            at=2.0,
        ),
        id="expecting-ended",
    ),
    pytest.param(
        Commit(
            run_id="r1", state=Ended(EndCause.Stopped("x")), generation=1, expect=Expect(), at=2
        ),
        id="ended-again",
    ),
    pytest.param(
        Commit(run_id="r1", state=Awaiting(_ticket("r1")), generation=1, expect=Expect(), at=2.0),
        id="awaiting",
    ),
    pytest.param(
        Commit(run_id="r1", state=Queued(), generation=1, expect=Expect(), at=2.0),
        id="queued",
    ),
    pytest.param(
        Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(new=True),
            at=2.0,
            new_run=NewRun("thread-r1", None, None, None),
        ),
        id="created-again",
    ),
]


@pytest.mark.trio
class StoreContract:
    """The rules every `Store` enforces, as tests. Subclass it and override ``store``.

    The subclass's ``store`` fixture gives each test a new, empty store and closes it
    afterwards (a sync fixture, an async one or an async generator all work)::

        class TestMyStore(StoreContract):
            @pytest.fixture
            async def store(self) -> AsyncIterator[Store]:
                store = MyStore(...)
                yield store
                await store.aclose()

    The class is marked ``trio``, so pytest-trio runs its tests with or without
    ``trio_mode``. Every check goes through ``apply``, ``load`` and ``events_after``.

    What a store must do, inside the one transaction that applies a batch (commits in
    order, each accepted or rejected on its own; a rejected commit changes nothing, and a
    later commit of the batch sees what an earlier one did):

    * Creation: ``Expect(new=True)`` with a `NewRun` creates the run with ``steps=0`` and
      the commit's state and generation; it is rejected ``EXISTS`` if the id is taken. A
      commit for a run the store does not hold, or ``Expect(new=True)`` without a
      `NewRun`, is rejected ``UNKNOWN`` with no state.
    * Terminal fence: once a run is ``Ended`` every later commit for it, a creation
      included, is rejected ``ENDED`` with the ended state.
    * Expectation fence: a commit is rejected ``STALE`` (with the committed state) when
      the committed generation, the kind of state, or the live ticket's correlation id is
      not the one its `Expect` names; a correlation id with no live ticket is stale too.
    * Ticket slot: the ticket lives inside the ``Awaiting`` state, so every later commit
      replaces or deletes it and an answer to an old ticket is stale.
    * Carried messages: an ``Awaiting`` commit keeps its ``carried_messages`` for the next
      attempt; a ``Queued`` commit keeps them, and keeps its ``resume_value`` for the
      queued attempt.
    * ``take_messages``: the commit (an attempt start) hands the carried messages over in
      ``Accepted.taken_messages`` (then spent: a second take finds none), and the resume
      the run holds in ``Accepted.resume_value`` and ``Accepted.resume_ticket``.
    * Resume: a ``Queued`` or ``Running`` commit with a ``resume_value`` or
      ``resume_ticket`` (an answered ticket: a queued resume, or the attempt it starts)
      replaces the run's resume; other commits keep it while the run is queued or
      running, so every attempt that starts before the run next awaits is handed the
      same answer; an ``Awaiting`` or ``Ended`` commit deletes it.
    * Discarded messages event: a terminal commit throws away the carried messages and its
      own ``discarded_messages`` and writes one ``messages_discarded`` event whose detail
      is ``{"messages": [carried..., discarded...]}``, right before its own event; with
      nothing to throw away it writes none.
    * Events: a commit's `EventDraft` events come first, then the discard event, then its
      own ``committed`` event with its ``detail``; each carries the run's thread, the
      committed generation and state, and the commit's ``at``.
    * ``announce=False``: the state commit happens but the commit's own ``committed``
      event is not written; only the drafted events are (none when there are none).
    * One store-wide ``seq``, strictly increasing across all runs: a new store numbers its
      events 1, 2, 3, ... (no gaps while nothing fails). ``events_after(seq, run_id,
      limit)`` returns the events after ``seq``, oldest first, at most ``limit``, of one
      run when ``run_id`` is given.
    * Checkpoint: `UNSET` keeps the committed one (None before any), any other value,
      None included, replaces it. The result is stored only by an ``Ended`` commit.
    * ``steps``: None keeps the committed count, a number (0 included) replaces it.
    * ``max_steps``: taken from the `NewRun` and kept on the record by every commit.
    * Rejected reasons are `RejectReason` members (not bare strings that happen to
      compare equal).
    * Frozen payloads out: every payload the store hands back (record input, result and
      checkpoint, event details, ticket payloads, taken messages, resume values) is
      frozen (`awaken_trio.FrozenDict` / `awaken_trio.FrozenList`), so changing it raises
      ``TypeError`` and never changes what a later ``load`` returns.
    """

    @pytest.fixture
    def store(self) -> Store:
        """The store under test: a new, empty one for each test. Subclasses override it."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `store` fixture to give each test"
            " a new, empty store (see awaken_trio.testing.StoreContract)"
        )

    # ------------------------------------------------------------ creation and identity

    async def test_creation_with_expect_new(self, store: Store) -> None:
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

    async def test_creation_as_queued_keeps_generation_zero(self, store: Store) -> None:
        accepted = await _accepted(store, _create("r1", Queued(), generation=0))
        assert accepted.record.state == Queued()
        assert accepted.record.generation == 0
        loaded = await store.load("r1")
        assert loaded is not None
        assert loaded.state == Queued()

    async def test_second_creation_is_rejected_exists_and_changes_nothing(
        self, store: Store
    ) -> None:
        await _accepted(store, _create("r1", input="first"))
        before = await _snapshot(store, "r1")

        rejected = await _rejected(store, _create("r1", Queued(), generation=0, input="second"))
        assert rejected == Rejected(RejectReason.EXISTS, Running(1))
        assert await _snapshot(store, "r1") == before

    async def test_commit_for_an_unknown_run_is_rejected_unknown(self, store: Store) -> None:
        plain = Commit(run_id="ghost", state=Running(1), generation=1, expect=Expect(), at=1.0)
        assert await _rejected(store, plain) == Rejected(RejectReason.UNKNOWN, None)

        # Expect(new=True) without an identity cannot create a run either.
        no_identity = Commit(
            run_id="ghost", state=Running(1), generation=1, expect=Expect(new=True), at=1.0
        )
        assert await _rejected(store, no_identity) == Rejected(RejectReason.UNKNOWN, None)

        assert await store.load("ghost") is None
        assert await store.events_after(0) == []

    # ------------------------------------------------------------ fences

    @pytest.mark.parametrize("late", _LATE_COMMITS)
    async def test_terminal_fence_rejects_every_later_commit(
        self, store: Store, late: Commit
    ) -> None:
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

    async def test_generation_mismatch_is_stale(self, store: Store) -> None:
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

    async def test_state_kind_mismatch_is_stale(self, store: Store) -> None:
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

    async def test_correlation_id_mismatch_is_stale(self, store: Store) -> None:
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

    async def test_correlation_id_when_no_ticket_is_live_is_stale(self, store: Store) -> None:
        await _accepted(store, _create("r1"))
        wrong = Commit(
            run_id="r1",
            state=Running(1),
            generation=1,
            expect=Expect(correlation_id="c1"),
            at=2.0,
        )
        assert await _rejected(store, wrong) == Rejected(RejectReason.STALE, Running(1))

    async def test_matching_expectation_is_accepted(self, store: Store) -> None:
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

    async def test_rejections_name_a_reject_reason_member(self, store: Store) -> None:
        # RejectReason is a StrEnum, so a store answering the bare string "stale" would
        # still compare equal; the reason must be the member itself.
        await _accepted(store, _create("r1"))
        await _accepted(store, _create("done"))
        await _accepted(
            store, Commit(run_id="done", state=DONE, generation=1, expect=Expect(), at=2.0)
        )
        batch = [
            Commit(run_id="ghost", state=Running(1), generation=1, expect=Expect(), at=3.0),
            _create("r1"),
            Commit(run_id="r1", state=DONE, generation=1, expect=Expect(generation=5), at=3.0),
            Commit(run_id="done", state=Running(2), generation=2, expect=Expect(), at=3.0),
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

    # ------------------------------------------------------------ ticket slot

    async def test_ticket_lives_only_while_awaiting(self, store: Store) -> None:
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

    async def test_a_new_awaiting_commit_replaces_the_ticket(self, store: Store) -> None:
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

    async def test_terminal_commit_deletes_the_ticket(self, store: Store) -> None:
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

    # ------------------------------------------------------------ carried messages

    async def test_awaiting_carries_queued_keeps_and_take_hands_over(self, store: Store) -> None:
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

        # Messages are taken once; the resume stays with the run while it runs, so an
        # attempt that replaces this one (a recovery) is handed the same answer.
        again = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(3),
                generation=3,
                expect=Expect(generation=2, state=Running),
                at=5.0,
                take_messages=True,
            ),
        )
        assert again.taken_messages == ()
        assert again.resume_value == {"answer": "yes"}

    async def test_the_resume_is_kept_while_the_run_runs_and_dropped_when_it_awaits(
        self, store: Store
    ) -> None:
        ticket = _ticket("r1")
        later = _ticket("r1", "c2")
        await _accepted(store, _create("r1"))
        await _accepted(store, _change("r1", Awaiting(ticket), 1))
        # An attempt started by answering the ticket (the runtime had the body) commits
        # the answer with its Running state.
        started = await _accepted(
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
            ),
        )
        assert (started.resume_value, started.accepted.resume_ticket) == ({"answer": "yes"}, ticket)
        # Progress, a release back to Queued and the next attempt's start keep it.
        await _accepted(store, _change("r1", Running(2), 2, checkpoint={"step": 1}))
        await _accepted(store, _change("r1", Queued(), 2))
        restarted = await _accepted(store, _change("r1", Running(3), 3, take_messages=True))
        assert restarted.resume_value == {"answer": "yes"}
        assert restarted.accepted.resume_ticket == ticket
        # Awaiting again deletes it: the next attempt is handed only the next answer.
        await _accepted(store, _change("r1", Awaiting(later), 3))
        fresh = await _accepted(store, _change("r1", Running(4), 4, take_messages=True))
        assert (fresh.resume_value, fresh.accepted.resume_ticket) == (None, None)

    async def test_a_carried_pause_is_taken_once_and_dropped_by_an_end(self, store: Store) -> None:
        for run_id in ("r1", "r2"):
            await _accepted(store, _create(run_id))
            await _accepted(
                store,
                Commit(
                    run_id=run_id,
                    state=Awaiting(_ticket(run_id)),
                    generation=1,
                    expect=Expect(generation=1, state=Running),
                    at=2.0,
                    carried_pause=True,
                ),
            )
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
        assert started.accepted.taken_pause is True
        again = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(2),
                generation=2,
                expect=Expect(generation=2, state=Running),
                at=4.0,
                take_messages=True,
            ),
        )
        assert again.accepted.taken_pause is False
        # A commit that does not take it leaves it; an end drops it.
        kept = await _accepted(
            store,
            Commit(
                run_id="r2",
                state=Queued(),
                generation=1,
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
            ),
        )
        assert kept.accepted.taken_pause is False
        taken = await _accepted(
            store,
            Commit(
                run_id="r2",
                state=Running(2),
                generation=2,
                expect=Expect(generation=1, state=Queued),
                at=4.0,
                take_messages=True,
            ),
        )
        assert taken.accepted.taken_pause is True

    async def test_take_straight_from_awaiting(self, store: Store) -> None:
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
        self, store: Store
    ) -> None:
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

    async def test_terminal_commit_with_only_inbox_messages_records_them(
        self, store: Store
    ) -> None:
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
        self, store: Store
    ) -> None:
        await _accepted(store, _create("r1"))
        ended = await _accepted(
            store,
            Commit(run_id="r1", state=DONE, generation=1, expect=Expect(generation=1), at=2.0),
        )
        assert [e.kind for e in ended.events] == ["committed"]

    async def test_terminal_commit_from_queued_discards_carried_messages(
        self, store: Store
    ) -> None:
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

    # ------------------------------------------------------------ events, checkpoint, result

    async def test_extra_event_drafts_precede_the_commits_own_event(self, store: Store) -> None:
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

    async def test_extra_events_on_a_non_terminal_commit(self, store: Store) -> None:
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

    async def test_announce_false_writes_only_the_drafted_events(self, store: Store) -> None:
        await _accepted(store, _create("r1"))
        accepted = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(1),
                generation=1,
                expect=Expect(generation=1, state=Running),
                at=2.0,
                events=(EventDraft("agent.note", {"n": 1}), EventDraft("agent.note", {"n": 2})),
                detail={"never": "written"},
                announce=False,
            ),
        )
        events = accepted.events
        assert [(e.kind, e.detail) for e in events] == [
            ("agent.note", {"n": 1}),
            ("agent.note", {"n": 2}),
        ]
        assert [e.seq for e in events] == [2, 3]
        assert await store.events_after(1) == list(events)

    async def test_a_new_run_with_step_events_writes_them_before_its_own_event(
        self, store: Store
    ) -> None:
        steps = ({"name": "s", "index": 0, "result": [1]}, {"name": "s", "index": 1, "result": 2})
        commit = attrs.evolve(
            _create("fork", Queued(), generation=0, at=4.0),
            new_run=NewRun("thread-fork", None, "job", None, None, None, step_events=steps),
        )
        accepted = await _accepted(store, commit)
        assert [(e.kind, e.detail, e.generation, e.at) for e in accepted.events] == [
            ("step", steps[0], 0, 4.0),
            ("step", steps[1], 0, 4.0),
            ("committed", {"source": "start"}, 0, 4.0),
        ]
        assert [e.seq for e in accepted.events] == [1, 2, 3]

    async def test_step_events_are_read_by_their_kind_oldest_first(self, store: Store) -> None:
        """A `StepStore` hands out a run's ``step`` events alone, in seq order (a store
        that is not one is read through ``events_after``, which holds them too)."""
        await _accepted(store, _create("r1"))
        await _accepted(store, _create("r2"))

        def step(run_id: str, index: int) -> Commit:
            detail = {"name": "s", "index": index, "result": {"of": run_id}}
            return _change(
                run_id,
                Running(1),
                1,
                events=(EventDraft("step", detail),),
                announce=False,
            )

        for commit in (step("r1", 0), step("r2", 0), _change("r1", Running(1), 1), step("r1", 1)):
            await _accepted(store, commit)
        wanted = [e for e in await store.events_after(0, "r1") if e.kind == "step"]
        assert [e.detail["index"] for e in wanted] == [0, 1]
        if isinstance(store, StepStore):
            assert await store.step_events("r1") == wanted
            assert await store.step_events("nobody") == []

    async def test_announce_false_without_drafts_commits_the_state_and_writes_nothing(
        self, store: Store
    ) -> None:
        created = await _accepted(store, _create("r1"))
        quiet = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(1),
                generation=1,
                expect=Expect(generation=1, state=Running),
                at=2.0,
                checkpoint={"step": 1},
                steps=1,
                announce=False,
            ),
        )
        assert quiet.events == ()
        assert quiet.record.checkpoint == {"step": 1}
        assert quiet.record.steps == 1

        ticket = _ticket("r1", "c1")
        paused = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Awaiting(ticket),
                generation=1,
                expect=Expect(generation=1, state=Running),
                at=3.0,
                announce=False,
            ),
        )
        assert paused.events == ()
        assert paused.record.state == Awaiting(ticket)
        assert await store.load("r1") == paused.record
        assert await store.events_after(0) == list(created.events)

        # The unannounced state is the committed one: the fence sees it.
        resumed = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Running(2),
                generation=2,
                expect=Expect(generation=1, state=Awaiting, correlation_id="c1"),
                at=4.0,
            ),
        )
        assert [e.kind for e in resumed.events] == ["committed"]
        assert resumed.record.checkpoint == {"step": 1}

    async def test_checkpoint_unset_keeps_the_committed_one(self, store: Store) -> None:
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

    async def test_checkpoint_none_replaces_the_committed_one(self, store: Store) -> None:
        await _accepted(store, _create("r1"))
        await _accepted(
            store,
            Commit(
                run_id="r1", state=Running(1), generation=1, expect=Expect(), at=2, checkpoint=[1]
            ),
        )
        cleared = await _accepted(
            store,
            Commit(
                run_id="r1", state=Running(1), generation=1, expect=Expect(), at=3, checkpoint=None
            ),
        )
        assert cleared.record.checkpoint is None

    async def test_result_is_stored_only_on_ended(self, store: Store) -> None:
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
            Commit(
                run_id="r1", state=Queued(), generation=1, expect=Expect(), at=4, result={"no": 3}
            ),
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

    # ------------------------------------------------------------ steps and max_steps

    async def test_steps_are_kept_by_none_and_replaced_by_a_number(self, store: Store) -> None:
        created = await _accepted(store, _create("r1"))
        assert created.record.steps == 0

        def commit(state: RunState, generation: int, steps: int | None) -> Commit:
            return Commit(
                run_id="r1",
                state=state,
                generation=generation,
                expect=Expect(),
                at=2.0,
                steps=steps,
            )

        assert (await _accepted(store, commit(Running(1), 1, 3))).record.steps == 3
        assert (await _accepted(store, commit(Running(1), 1, None))).record.steps == 3
        assert (await _accepted(store, commit(Awaiting(_ticket("r1")), 1, None))).record.steps == 3
        assert (await _accepted(store, commit(Running(2), 2, None))).record.steps == 3
        assert (await _accepted(store, commit(Running(2), 2, 5))).record.steps == 5
        # Zero is a number, not "keep".
        assert (await _accepted(store, commit(Running(2), 2, 0))).record.steps == 0
        assert (await _accepted(store, commit(Running(2), 2, 6))).record.steps == 6
        ended = await _accepted(store, commit(DONE, 2, None))
        assert ended.record.steps == 6
        assert (await _loaded(store, "r1")).steps == 6

    async def test_max_steps_of_the_new_run_is_kept_across_commits(self, store: Store) -> None:
        created = await _accepted(store, _create("r1", max_steps=5))
        assert created.record.max_steps == 5
        plain = await _accepted(store, _create("r2"))
        assert plain.record.max_steps is None

        later = [
            Commit(run_id="r1", state=Running(1), generation=1, expect=Expect(), at=2, steps=5),
            Commit(run_id="r1", state=Awaiting(_ticket("r1")), generation=1, expect=Expect(), at=3),
            Commit(run_id="r1", state=Queued(), generation=1, expect=Expect(), at=4),
            Commit(run_id="r1", state=Running(2), generation=2, expect=Expect(), at=5),
            Commit(
                run_id="r1",
                state=Ended(EndCause.MaxSteps()),
                generation=2,
                expect=Expect(),
                at=6,
            ),
        ]
        for commit in later:
            accepted = await _accepted(store, commit)
            assert accepted.record.max_steps == 5, commit.state
            assert (await _loaded(store, "r1")).max_steps == 5
        assert (await _loaded(store, "r2")).max_steps is None

    # ------------------------------------------------------------ frozen payloads

    async def test_records_and_events_handed_back_are_frozen(self, store: Store) -> None:
        ticket = ResumeTicket(
            correlation_id="c1",
            run_id="r1",
            thread_id="thread-r1",
            reason="approval",
            payload={"question": ["ship it?", {"options": ["yes", "no"]}]},
            accepts={"type": "object", "required": ["ok"]},
        )
        handed_back: list[tuple[str, RunRecord | None, Sequence[RunEvent]]] = []

        created = await _accepted(store, _create("r1", input={"q": [1, {"deep": [2]}]}))
        handed_back.append(("created", created.record, created.events))
        paused = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Awaiting(ticket),
                generation=1,
                expect=Expect(generation=1, state=Running),
                at=2.0,
                checkpoint={"done": [1, 2], "next": {"at": [3]}},
                events=(EventDraft("agent.note", {"items": [1, {"x": [2]}]}),),
                carried_messages=({"m": [1]},),
                detail={"source": "await", "why": ["user", {"asked": True}]},
            ),
        )
        handed_back.append(("paused", paused.record, paused.events))
        handed_back.append(("loaded while awaiting", await store.load("r1"), ()))
        ended = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=DONE,
                generation=1,
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
                result={"answer": [42, {"why": "so"}]},
                discarded_messages=({"inbox": ["x"]},),
            ),
        )
        handed_back.append(("ended", ended.record, ended.events))
        handed_back.append(("loaded", await store.load("r1"), await store.events_after(0)))
        handed_back.append(("run events", None, await store.events_after(0, "r1")))
        expected_record = await _loaded(store, "r1")
        expected_events = await store.events_after(0)
        assert [e.kind for e in expected_events] == [
            "committed",
            "agent.note",
            "committed",
            "messages_discarded",
            "committed",
        ]

        for where, record, events in handed_back:
            if record is not None:
                _assert_record_frozen(record, where)
            _assert_events_frozen(events, where)

        # Nothing above changed what the store holds.
        assert await store.load("r1") == expected_record
        assert expected_record.input == {"q": [1, {"deep": [2]}]}
        assert expected_record.checkpoint == {"done": [1, 2], "next": {"at": [3]}}
        assert expected_record.result == {"answer": [42, {"why": "so"}]}
        assert await store.events_after(0) == expected_events
        assert expected_events[1].detail == {"items": [1, {"x": [2]}]}
        assert expected_events[2].state == Awaiting(ticket)
        assert expected_events[3].detail == {"messages": [{"m": [1]}, {"inbox": ["x"]}]}

    async def test_taken_messages_and_resume_values_handed_back_are_frozen(
        self, store: Store
    ) -> None:
        # The runtime hands the store frozen payloads (commits carry checked values).
        messages = (FrozenDict({"m": [1, {"n": [2]}]}), FrozenList(["list", {"k": "v"}]))
        await _awaiting_with(store, "r1", messages)
        await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Queued(),
                generation=1,
                expect=Expect(generation=1, state=Awaiting),
                at=3.0,
                # The runtime hands the store frozen resume values; the store hands them
                # back frozen too, even if it stored them as text.
                resume_value=FrozenDict({"answer": ["yes", {"sure": True}]}),
            ),
        )
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
        assert started.taken_messages == ({"m": [1, {"n": [2]}]}, ["list", {"k": "v"}])
        assert started.resume_value == {"answer": ["yes", {"sure": True}]}
        for i, message in enumerate(started.taken_messages):
            _assert_frozen(message, f"taken_messages[{i}]")
        _assert_frozen(started.resume_value, "resume_value")
        assert started.taken_messages == ({"m": [1, {"n": [2]}]}, ["list", {"k": "v"}])
        assert started.resume_value == {"answer": ["yes", {"sure": True}]}

    # ------------------------------------------------------------ reading events

    async def test_events_after_paging_and_filtering(self, store: Store) -> None:
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

    async def test_events_after_pages_oldest_first_across_runs(self, store: Store) -> None:
        written: list[RunEvent] = []

        async def apply(*batch: Commit) -> None:
            cursor = written[-1].seq if written else 0
            for commit, result in zip(batch, await store.apply(batch), strict=True):
                assert isinstance(result, Accepted), result
                mine = await _written(store, commit.run_id, cursor, result)
                written.extend(mine)
                cursor = result.last_seq

        await apply(_create("a"), _create("b"))
        await apply(
            Commit(
                run_id="a",
                state=Running(1),
                generation=1,
                expect=Expect(),
                at=2,
                events=(EventDraft("agent.step", {"i": 1}),),
            )
        )
        await apply(_create("c", Queued(), generation=0))
        await apply(
            Commit(run_id="b", state=Awaiting(_ticket("b")), generation=1, expect=Expect(), at=3),
            Commit(run_id="c", state=Running(1), generation=1, expect=Expect(), at=3),
            Commit(run_id="a", state=DONE, generation=1, expect=Expect(), at=3),
        )
        await apply(
            Commit(run_id="c", state=CANCELLED, generation=1, expect=Expect(), at=4),
            Commit(run_id="b", state=Running(2), generation=2, expect=Expect(), at=4),
        )

        everything = await store.events_after(0)
        assert everything == written
        seqs = [e.seq for e in everything]
        assert all(earlier < later for earlier, later in pairwise(seqs)), seqs
        assert len(everything) == 10
        for cursor in [0, *seqs]:
            after = [e for e in written if e.seq > cursor]
            for limit in (1, 2, 3, len(written) + 1):
                page = await store.events_after(cursor, limit=limit)
                assert len(page) <= limit
                assert page == after[:limit], (cursor, limit)
            for run_id in ("a", "b", "c"):
                mine = [e for e in after if e.run_id == run_id]
                assert await store.events_after(cursor, run_id) == mine, (cursor, run_id)
                assert await store.events_after(cursor, run_id, limit=1) == mine[:1]

    async def test_events_of_one_run_come_in_their_commit_order(self, store: Store) -> None:
        await _accepted(store, _create("other"))
        created = await _accepted(store, _create("r1", at=1.0))
        await _accepted(
            store, Commit(run_id="other", state=DONE, generation=1, expect=Expect(), at=1.5)
        )
        paused = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=Awaiting(_ticket("r1")),
                generation=1,
                expect=Expect(),
                at=2.0,
                carried_messages=("m",),
            ),
        )
        ended = await _accepted(
            store,
            Commit(
                run_id="r1",
                state=CANCELLED,
                generation=1,
                expect=Expect(),
                at=3.0,
                events=(EventDraft("agent.bye", {}),),
            ),
        )
        mine = await store.events_after(0, "r1")
        assert mine == [*created.events, *paused.events, *ended.events]
        assert [(e.kind, e.state, e.at) for e in mine] == [
            ("committed", Running(1), 1.0),
            ("committed", Awaiting(_ticket("r1")), 2.0),
            ("agent.bye", CANCELLED, 3.0),
            ("messages_discarded", CANCELLED, 3.0),
            ("committed", CANCELLED, 3.0),
        ]
        assert all(e.run_id == "r1" and e.thread_id == "thread-r1" for e in mine)

    # ------------------------------------------------------------ batches

    async def test_batch_applies_in_order_with_independent_results(self, store: Store) -> None:
        await _accepted(store, _create("done"))
        await _accepted(
            store, Commit(run_id="done", state=DONE, generation=1, expect=Expect(), at=1.0)
        )
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
        assert results[3].state == Running(1)
        assert (await _loaded(store, "a")).checkpoint == {"after": "create"}
        assert results[4] == Rejected(RejectReason.UNKNOWN, None)
        assert results[5] == Rejected(RejectReason.EXISTS, Running(1))
        assert isinstance(results[6], Accepted)
        assert isinstance(results[7], Accepted)
        assert results[7].state == CANCELLED
        assert [r.last_seq for r in results if isinstance(r, Accepted)] == list(
            range(before[-1].seq + 1, before[-1].seq + 5)
        )

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

    async def test_an_empty_batch_returns_no_results(self, store: Store) -> None:
        assert await store.apply([]) == []
        assert await store.events_after(0) == []
