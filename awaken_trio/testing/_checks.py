"""What the store contract suites check with: reading back what a commit left, frozen
payloads, and the durable suite's runs and leases."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from .. import (
    EndCause,
    JsonValue,
    ResumeTicket,
    RunEvent,
    RunRecord,
    RunState,
)
from ..store import (
    Accepted,
    Claim,
    Commit,
    CommitResult,
    DurableStore,
    Expect,
    Fence,
    Rejected,
    Store,
)
from ._commits import (
    Awaiting,
    Ended,
    Running,
    asking,
    create,
    pause,
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
    await _accepted(store, create(run_id))
    await _accepted(
        store,
        pause(
            run_id,
            asking(run_id),
            expect=Expect(generation=1, state=Running),
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
    not_before: float | None = None,
    deadline: float | None = None,
    queue_deadline: float | None = None,
) -> Commit:
    """A commit creating ``run_id`` (named ``job``, on its own thread, by default)."""
    return create(
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
        not_before=not_before,
        deadline=deadline,
        queue_deadline=queue_deadline,
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
    await _accepted(store, pause(run_id, ticket))


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
