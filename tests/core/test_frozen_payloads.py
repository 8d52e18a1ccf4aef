"""Committed truth cannot be changed without a commit: every payload the runtime hands out
is frozen, hashes, and copies into a plain mutable value on request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from awaken_trio import (
    EndCause,
    LiveCommand,
    ResumeTicket,
    RunContext,
    RunState,
    Runtime,
)
from tests.run_helpers import history, reach, settle, snapshot


def refused(change: Callable[[], object]) -> bool:
    """Whether ``change`` was refused as a change of a read-only value (TypeError); any
    other outcome means it was not."""
    try:
        change()
    except TypeError:
        return True
    except LookupError:  # an earlier change went through, so this one found nothing
        return False
    return False


def every_change_refused(value: Any, key: object) -> list[bool]:
    """Try the usual ways to change a JSON container in place."""
    if isinstance(value, dict):
        return [
            refused(lambda: value.__setitem__(key, 999)),
            refused(lambda: value.__setitem__("added", 1)),
            refused(lambda: value.__delitem__(key)),
            refused(lambda: value.update({"added": 1})),
            refused(lambda: value.pop(key)),
            refused(lambda: value.setdefault("added", 1)),
            refused(value.clear),
        ]
    return [
        refused(lambda: value.__setitem__(key, 999)),
        refused(lambda: value.append(999)),
        refused(lambda: value.extend([999])),
        refused(lambda: value.insert(0, 999)),
        refused(value.pop),
        refused(value.clear),
    ]


async def test_the_checkpoint_cannot_be_changed_without_a_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: dict[str, Any] = {}

    async def body(ctx: RunContext) -> None:
        progress = {"step": 1, "done": ["a"]}
        await ctx.boundary(progress)
        progress["step"] = 2  # the caller's own dict: not what was committed
        seen["checkpoint"] = dict(ctx.checkpoint)
        seen["nested"] = every_change_refused(ctx.checkpoint["done"], 0)
        seen["top"] = every_change_refused(ctx.checkpoint, "step")
        copy = dict(ctx.checkpoint)
        copy["step"] = 999
        seen["copy"] = copy
        seen["after"] = dict(ctx.checkpoint)

    assert await runtime.execute(body, run_id="r") == RunState.Ended(EndCause.NaturalEnd())
    assert seen["top"] == [True] * 7
    assert seen["nested"] == [True] * 6
    assert seen["checkpoint"] == {"step": 1, "done": ["a"]}
    assert seen["copy"] == {"step": 999, "done": ["a"]}
    assert type(seen["copy"]) is dict
    assert seen["after"] == {"step": 1, "done": ["a"]}
    assert (await runtime.record("r")).checkpoint == {"step": 1, "done": ["a"]}


async def test_the_input_is_frozen_for_the_body(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: dict[str, Any] = {}
    given: dict[str, Any] = {"q": [1, 2], "opts": {"fast": True}}

    async def body(ctx: RunContext) -> None:
        items = list(ctx.input["q"])
        items.append(3)
        seen["copy"] = items
        seen["nested"] = every_change_refused(ctx.input["q"], 0)
        seen["deeper"] = every_change_refused(ctx.input["opts"], "fast")
        seen["top"] = every_change_refused(ctx.input, "q")
        seen["input"] = ctx.input

    assert await runtime.execute(body, run_id="r", input=given) == RunState.Ended(
        EndCause.NaturalEnd()
    )
    given["q"].append(99)  # the caller's dict was copied when it was handed over
    assert seen["top"] == [True] * 7
    assert seen["nested"] == [True] * 6
    assert seen["deeper"] == [True] * 7
    assert seen["copy"] == [1, 2, 3]
    assert seen["input"] == {"q": [1, 2], "opts": {"fast": True}}
    assert (await runtime.record("r")).input == {"q": [1, 2], "opts": {"fast": True}}


async def test_a_records_result_cannot_be_changed_in_place(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        return {"items": [1, 2], "meta": {"k": "v"}}

    await runtime.execute(body, run_id="r")
    record = await runtime.record("r")
    before = await snapshot(runtime, "r")
    assert every_change_refused(record.result, "items") == [True] * 7
    assert every_change_refused(record.result["items"], 0) == [True] * 6
    assert every_change_refused(record.result["meta"], "k") == [True] * 7
    assert record.result == {"items": [1, 2], "meta": {"k": "v"}}
    assert (await runtime.record("r")).result == {"items": [1, 2], "meta": {"k": "v"}}
    assert await snapshot(runtime, "r") == before
    copy = dict(record.result)
    copy["items"] = [*copy["items"], 3]
    assert copy == {"items": [1, 2, 3], "meta": {"k": "v"}}
    assert (await runtime.record("r")).result == {"items": [1, 2], "meta": {"k": "v"}}


async def test_a_tickets_payload_cannot_be_changed_in_place(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        await ctx.await_input("user_input", correlation_id="q-1", payload={"ask": ["name"]})

    state = await runtime.execute(body, run_id="r")
    assert isinstance(state, RunState.Awaiting)
    before = await snapshot(runtime, "r")
    payload = state.ticket.payload
    assert every_change_refused(payload, "ask") == [True] * 7
    assert every_change_refused(payload["ask"], 0) == [True] * 6
    committed = await runtime.state("r")
    assert isinstance(committed, RunState.Awaiting)
    assert every_change_refused(committed.ticket.payload, "ask") == [True] * 7
    assert committed.ticket.payload == {"ask": ["name"]}
    assert await snapshot(runtime, "r") == before


async def test_event_details_cannot_be_changed_in_place(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    parked = trio.Event()

    async def body(ctx: RunContext) -> None:
        parked.set()
        await trio.sleep_forever()

    handle = await runtime.start(body, run_id="r")
    await reach(parked)
    runtime.deliver(LiveCommand.Cancel("r", reason="enough"))
    await settle(handle)
    events = await history(runtime, "r")
    end = events[-1]
    assert end.detail == {"source": "deliver", "reason": "enough"}
    assert every_change_refused(end.detail, "source") == [True] * 7
    assert end.detail == {"source": "deliver", "reason": "enough"}
    assert await history(runtime, "r") == events
    copy = dict(end.detail)
    copy["source"] = "edited"
    assert (await history(runtime, "r"))[-1].detail["source"] == "deliver"


async def test_a_message_payload_returned_by_boundary_is_frozen(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: dict[str, Any] = {}
    sent: dict[str, Any] = {"m": [1], "meta": {"from": "test"}}

    async def body(ctx: RunContext) -> object:
        [message] = await ctx.boundary(wait=True)
        seen["nested"] = every_change_refused(message["m"], 0)
        seen["top"] = every_change_refused(message, "m")
        seen["message"] = message
        return {"got": message}

    handle = await runtime.start(body, run_id="r")
    await trio.testing.wait_all_tasks_blocked()
    runtime.deliver(LiveCommand.Message("r", sent))
    sent["m"].append(2)  # the sender's dict was copied when the command was built
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert seen["top"] == [True] * 7
    assert seen["nested"] == [True] * 6
    assert seen["message"] == {"m": [1], "meta": {"from": "test"}}
    assert (await runtime.record("r")).result == {"got": {"m": [1], "meta": {"from": "test"}}}


async def test_states_and_records_holding_payloads_hash_by_value(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    def awaiting() -> RunState:
        return RunState.Awaiting(
            ResumeTicket(
                correlation_id="q-1",
                run_id="r",
                thread_id="r",
                reason="user_input",
                payload={"ask": ["name", {"max": 3}]},
            )
        )

    one, two = awaiting(), awaiting()
    assert one == two
    assert one is not two
    assert hash(one) == hash(two)
    assert len({one, two}) == 1

    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1, "seen": [1, 2]})
        return {"items": [1, 2], "meta": {"k": "v"}}

    await runtime.execute(body, run_id="r")
    first, second = await runtime.record("r"), await runtime.record("r")
    assert first == second
    assert hash(first) == hash(second)
    assert hash(first.checkpoint) == hash(second.checkpoint)
    events = await history(runtime, "r")
    assert len(set(events)) == len(events)
