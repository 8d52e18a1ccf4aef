"""The body's side of the API: its own events (ctx.emit), tickets with a schema
(await_input(accepts=...)), progress committed with a ticket, the ticket a resumed attempt
answers, ending with a stable code (RunError) or the step budget (MaxStepsReached), and
reading a committed record through a handle."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from awaken_trio import (
    ContextMisuse,
    EndCause,
    InvalidArgument,
    InvalidPayload,
    JsonValue,
    LiveCommand,
    MaxStepsReached,
    NotActive,
    ResumeTicket,
    RunContext,
    RunError,
    RunEvent,
    RunRecord,
    RunState,
    Runtime,
)
from tests.run_helpers import history, reach, settle, snapshot, start_parked, terminal_commits

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
MAX_STEPS = RunState.Ended(EndCause.MaxSteps())

Body = Callable[[RunContext], Awaitable[object]]


def ticket_of(state: RunState) -> ResumeTicket:
    assert isinstance(state, RunState.Awaiting), state
    return state.ticket


def kinds(events: list[RunEvent]) -> list[str]:
    return [event.kind for event in events]


def body_events(events: list[RunEvent]) -> list[RunEvent]:
    return [event for event in events if event.kind != "committed"]


# --------------------------------------------------------------------------- ctx.emit


async def test_emit_writes_the_bodys_event_between_its_progress_commits_changing_no_state(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    records: list[tuple[object, object]] = []

    async def body(ctx: RunContext) -> object:
        await ctx.boundary({"step": 1})
        before = await runtime.record(ctx.run_id)
        await ctx.emit("body.tool_started", {"tool": "search", "args": [1, {"q": "x"}]})
        records.append((before, await runtime.record(ctx.run_id)))
        await ctx.boundary({"step": 2})
        before = await runtime.record(ctx.run_id)
        await ctx.emit("body.tool_finished")  # detail=None gives {}
        records.append((before, await runtime.record(ctx.run_id)))
        return "done"

    handle = await runtime.start(body, run_id="e1", thread_id="th-e1")
    assert await settle(handle) == NATURAL_END

    events = await history(runtime, "e1")
    assert kinds(events) == [
        "committed",  # Running: the start
        "committed",  # progress step 1
        "body.tool_started",
        "committed",  # progress step 2
        "body.tool_finished",
        "committed",  # Ended
    ]
    seqs = [event.seq for event in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    started, finished = body_events(events)
    assert started.detail == {"tool": "search", "args": [1, {"q": "x"}]}
    assert finished.detail == {}
    for event in (started, finished):
        assert (event.run_id, event.thread_id, event.generation) == ("e1", "th-e1", 1)
        assert event.state == RunState.Running(1)
    # No state changed: the record read right after each emit is the one read before it,
    # but for the time of its last commit.
    assert len(records) == 2
    for before, after in records:
        assert isinstance(before, RunRecord)
        assert isinstance(after, RunRecord)
        assert attrs.evolve(before, updated_at=after.updated_at) == after
    record = await runtime.record("e1")
    assert (record.result, record.checkpoint, record.steps) == ("done", {"step": 2}, 2)


async def test_an_emitted_detail_is_a_frozen_copy(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    given: dict[str, Any] = {"n": 1, "items": [1, 2], "inner": {"k": "v"}}

    async def body(ctx: RunContext) -> None:
        await ctx.emit("body.note", given)
        given["n"] = 2  # the body's later changes never reach the event
        given["items"].append(3)

    await runtime.execute(body, run_id="e2")
    (event,) = body_events(await history(runtime, "e2"))
    assert event.detail == {"n": 1, "items": [1, 2], "inner": {"k": "v"}}
    with pytest.raises(TypeError):
        event.detail["n"] = 5
    with pytest.raises(TypeError):
        del event.detail["n"]
    with pytest.raises(TypeError):
        event.detail["items"].append(9)
    with pytest.raises(TypeError):
        event.detail["inner"]["k"] = "w"
    assert event.detail == {"n": 1, "items": [1, 2], "inner": {"k": "v"}}


async def test_emit_in_a_resumed_attempt_carries_that_attempts_generation(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.emit("body.attempt", {"generation": ctx.generation})
        if ctx.generation == 1:
            await ctx.await_input("user_input")

    assert isinstance(await runtime.execute(body, run_id="e3"), RunState.Awaiting)
    assert await settle(await runtime.resume("e3")) == NATURAL_END
    emitted = body_events(await history(runtime, "e3"))
    assert [(e.generation, e.state, e.detail) for e in emitted] == [
        (1, RunState.Running(1), {"generation": 1}),
        (2, RunState.Running(2), {"generation": 2}),
    ]


BAD_KINDS: list[object] = [
    "committed",
    "late_result_discarded",
    "messages_discarded",
    "nodot",
    "Agent.tool_started",
    "agent.Tool_started",
    "AGENT.TOOL",
    "",
    "agent.",
    ".agent",
    "agent..tool",
    "agent.tool started",
    "1agent.tool",
    3,
    None,
    b"agent.tool",
]


@pytest.mark.parametrize("kind", BAD_KINDS, ids=repr)
async def test_emit_refuses_a_kind_that_is_not_a_dotted_lowercase_body_kind(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, kind: object
) -> None:
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> str:
        before = await snapshot(runtime, ctx.run_id)
        try:
            await ctx.emit(kind, {"x": 1})  # type: ignore[arg-type]
        except InvalidArgument as exc:
            raised.append(exc)
        assert await snapshot(runtime, ctx.run_id) == before
        return "went on"

    assert await runtime.execute(body, run_id="ek") == NATURAL_END
    assert len(raised) == 1
    assert "kind" in str(raised[0])
    assert set(kinds(await history(runtime, "ek"))) == {"committed"}


BAD_DETAILS: list[object] = [
    [1, 2],
    "text",
    3,
    True,
    {"a": {1, 2}},
    {"a": (1, 2)},
    {1: "x"},
    {"a": math.nan},
    {"a": {"b": math.inf}},
    {"a": b"bytes"},
]


@pytest.mark.parametrize("detail", BAD_DETAILS, ids=repr)
async def test_emit_refuses_a_detail_that_is_not_a_json_object(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, detail: object
) -> None:
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> str:
        before = await snapshot(runtime, ctx.run_id)
        try:
            await ctx.emit("body.bad_detail", detail)
        except InvalidArgument as exc:
            raised.append(exc)
        assert await snapshot(runtime, ctx.run_id) == before
        return "went on"

    assert await runtime.execute(body, run_id="ed") == NATURAL_END
    assert len(raised) == 1
    assert set(kinds(await history(runtime, "ed"))) == {"committed"}


async def test_emit_on_a_context_whose_attempt_ended_raises_not_active(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    kept: list[RunContext] = []
    stale: list[BaseException] = []

    async def body(ctx: RunContext) -> None:
        kept.append(ctx)
        if ctx.generation == 1:
            await ctx.await_input("user_input")
        # The run is running again, in a new attempt: the old context is still dead.
        try:
            await kept[0].emit("body.stale")
        except BaseException as exc:
            stale.append(exc)

    assert isinstance(await runtime.execute(body, run_id="en"), RunState.Awaiting)
    ctx = kept[0]
    # The run awaits: the first attempt is over.
    before = len(await history(runtime))
    with pytest.raises(NotActive, match="emit"):
        await ctx.emit("body.after_await", {"late": True})
    assert len(await history(runtime)) == before

    assert await settle(await runtime.resume("en")) == NATURAL_END
    assert len(stale) == 1
    assert isinstance(stale[0], NotActive)

    # The run has ended: both contexts are dead.
    before = len(await history(runtime))
    for dead in kept:
        with pytest.raises(NotActive, match="emit"):
            await dead.emit("body.after_end")
    assert len(await history(runtime)) == before
    assert set(kinds(await history(runtime, "en"))) == {"committed"}


async def test_emit_from_another_runs_task_raises_context_misuse(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    owner_ctx: list[RunContext] = []
    entered = trio.Event()
    misuse: list[BaseException] = []

    async def owner(ctx: RunContext) -> None:
        owner_ctx.append(ctx)
        entered.set()
        await trio.sleep_forever()

    async def other(ctx: RunContext) -> str:
        try:
            await owner_ctx[0].emit("body.not_mine")
        except ContextMisuse as exc:
            misuse.append(exc)
        return "other done"

    async def parent(ctx: RunContext) -> object:
        # A child run must not use its parent's context either.
        async def child(child_ctx: RunContext) -> str:
            try:
                await ctx.emit("body.parents")
            except ContextMisuse as exc:
                misuse.append(exc)
            return "child done"

        return (await ctx.run_child(child, run_id="em-child")) == NATURAL_END

    handle = await runtime.start(owner, run_id="em-owner")
    await reach(entered)
    assert await runtime.execute(other, run_id="em-other") == NATURAL_END
    assert await runtime.execute(parent, run_id="em-parent") == NATURAL_END
    # A task outside any run is refused as well.
    with pytest.raises(ContextMisuse, match="outside any run"):
        await owner_ctx[0].emit("body.outside")

    assert len(misuse) == 2
    assert "em-owner" in str(misuse[0])
    assert "em-other" in str(misuse[0])
    assert "em-parent" in str(misuse[1])
    assert "em-child" in str(misuse[1])
    assert set(kinds(await history(runtime, "em-owner"))) == {"committed"}
    assert set(kinds(await history(runtime, "em-parent"))) == {"committed"}
    assert await runtime.state("em-owner") == RunState.Running(1)
    runtime.deliver(LiveCommand.Cancel("em-owner"))
    assert await settle(handle) == CANCELLED


async def test_emit_from_a_task_the_body_started_in_its_own_nursery(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        async def tool(n: int) -> None:
            await trio.sleep(n)  # finish in a known order
            await ctx.emit("body.tool_done", {"n": n})

        async with trio.open_nursery() as nursery:
            for n in (1, 2, 3):
                nursery.start_soon(tool, n)

    assert await runtime.execute(body, run_id="et") == NATURAL_END
    emitted = body_events(await history(runtime, "et"))
    assert [(e.kind, e.detail, e.generation) for e in emitted] == [
        ("body.tool_done", {"n": 1}, 1),
        ("body.tool_done", {"n": 2}, 1),
        ("body.tool_done", {"n": 3}, 1),
    ]


async def test_emit_from_a_shielded_cleanup_after_cancel_comes_before_the_terminal_event(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()
    cleanup: list[bool] = []

    async def body(ctx: RunContext) -> None:
        try:
            entered.set()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await ctx.emit("body.cleanup", {"cancelled": ctx.is_cancelled})
                cleanup.append(True)

    handle = await runtime.start(body, run_id="ec")
    await reach(entered)
    runtime.deliver(LiveCommand.Cancel("ec", reason="enough"))
    assert await settle(handle) == CANCELLED
    assert cleanup == [True]

    events = await history(runtime, "ec")
    assert kinds(events) == ["committed", "body.cleanup", "committed"]
    emitted, terminal = events[1], events[2]
    assert emitted.detail == {"cancelled": True}
    assert emitted.state == RunState.Running(1)
    assert terminal.state == CANCELLED
    assert terminal.detail["source"] == "deliver"
    assert emitted.seq < terminal.seq
    assert terminal_commits(events) == [terminal]


# --------------------------------------------------------------------------- accepts

APPROVAL: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}


async def test_await_input_keeps_its_schema_frozen_in_the_ticket(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}},
        "required": ["approved"],
    }

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("tool_permission", accepts=schema)

    state = await runtime.execute(body, run_id="a1")
    schema["required"].append("other")  # the caller's later changes never reach the ticket
    schema["type"] = "array"
    ticket = ticket_of(state)
    expected = {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}},
        "required": ["approved"],
    }
    assert ticket.accepts == expected
    assert ticket_of(await runtime.state("a1")).accepts == expected
    with pytest.raises(TypeError):
        ticket.accepts["type"] = "array"
    with pytest.raises(TypeError):
        ticket.accepts["required"].append("other")
    with pytest.raises(TypeError):
        ticket.accepts["properties"]["approved"]["type"] = "string"
    assert ticket.accepts == expected
    # A resume honours the schema as it was when the ticket was made.
    with pytest.raises(InvalidPayload):
        await runtime.resume("a1", [])
    handle = await runtime.resume("a1", {"approved": True})
    assert await settle(handle) == NATURAL_END


@pytest.mark.parametrize(
    ("value", "mismatch"),
    [
        ({"approved": "yes"}, r"\$\['approved'\].*'yes' is not of type 'boolean'"),
        ({}, r"'approved' is a required property"),
        ({"approved": True, "extra": 1}, r"Additional properties are not allowed"),
        ("yes", r"the value itself.*'yes' is not of type 'object'"),
        (None, r"None is not of type 'object'"),
    ],
    ids=["wrong-type", "missing", "extra", "not-object", "none"],
)
async def test_a_resume_value_that_does_not_match_the_schema_commits_nothing(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, value: JsonValue, mismatch: str
) -> None:
    attempts: list[tuple[int, JsonValue]] = []

    async def body(ctx: RunContext) -> JsonValue:
        attempts.append((ctx.generation, ctx.resume_value))
        if ctx.generation == 1:
            await ctx.await_input("tool_permission", correlation_id="perm-1", accepts=APPROVAL)
        return {"answer": ctx.resume_value}

    awaiting = await runtime.execute(body, run_id="a2")
    before = await snapshot(runtime, "a2")
    record_before = await runtime.record("a2")

    with pytest.raises(InvalidPayload, match=mismatch) as raised:
        await runtime.resume("a2", value)
    assert "a2" in str(raised.value)
    with pytest.raises(InvalidPayload, match=mismatch):
        await runtime.resume("a2", value, correlation_id="perm-1")
    await trio.testing.wait_all_tasks_blocked()
    assert await snapshot(runtime, "a2") == before
    assert await runtime.record("a2") == record_before
    assert await runtime.state("a2") == awaiting  # the ticket is still live
    assert attempts == [(1, None)]

    handle = await runtime.resume("a2", {"approved": False, "note": "no"})
    assert handle.generation == 2
    assert await settle(handle) == NATURAL_END
    assert attempts == [(1, None), (2, {"approved": False, "note": "no"})]
    assert (await runtime.record("a2")).result == {"answer": {"approved": False, "note": "no"}}


async def test_a_true_schema_accepts_any_resume_value(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    values: list[JsonValue] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation > 1:
            values.append(ctx.resume_value)
        if ctx.generation < 4:
            await ctx.await_input("user_input", accepts=True)

    state = await runtime.execute(body, run_id="a3")
    assert ticket_of(state).accepts is True
    for value in ({"anything": [1, None, "x", 2.5]}, None, "text"):
        handle = await runtime.resume("a3", value)
        await settle(handle)
    assert values == [{"anything": [1, None, "x", 2.5]}, None, "text"]
    assert await runtime.state("a3") == NATURAL_END


async def test_a_false_schema_accepts_no_resume_value(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.await_input("user_input", accepts=False)

    state = await runtime.execute(body, run_id="a4")
    before = await snapshot(runtime, "a4")
    for value in (None, 1, {"a": 1}):
        with pytest.raises(InvalidPayload):
            await runtime.resume("a4", value)
    assert await snapshot(runtime, "a4") == before
    assert await runtime.state("a4") == state


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (({"const": 1}, 1), ({"const": True}, True)),
        (({"const": True}, True), ({"const": 1}, 1)),
        (({"enum": [0, "x"]}, 0), ({"enum": [False, "x"]}, False)),
    ],
    ids=["int-then-bool", "bool-then-int", "enum-zero-then-false"],
)
async def test_schemas_that_differ_only_by_bool_and_int_each_accept_their_own_value(
    runtime: Runtime,
    autojump_clock: trio.testing.MockClock,
    first: tuple[dict[str, Any], JsonValue],
    second: tuple[dict[str, Any], JsonValue],
) -> None:
    # JSON Schema tells true from 1 (and false from 0); Python's == does not.
    values: dict[str, JsonValue] = {}

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("user_input", accepts=ctx.input)
        values[ctx.run_id] = ctx.resume_value

    for run_id, (schema, _) in (("s-first", first), ("s-second", second)):
        state = await runtime.execute(body, run_id=run_id, input=schema)
        assert ticket_of(state).accepts == schema
    refused: dict[str, str] = {}
    for run_id, (_, value) in (("s-first", first), ("s-second", second)):
        try:
            await settle(await runtime.resume(run_id, value))
        except InvalidPayload as exc:
            refused[run_id] = str(exc)
    assert refused == {}
    assert values == {"s-first": first[1], "s-second": second[1]}
    for run_id, (_, value) in (("s-first", first), ("s-second", second)):
        assert type(values[run_id]) is type(value)


INVALID_SCHEMAS: list[object] = [
    {"type": 7},
    {"type": "no_such_type"},
    {"required": "approved"},
    {"minimum": "zero"},
    {"properties": {"a": {"type": 7}}},
    3,
    "object",
    [{"type": "object"}],
]


@pytest.mark.parametrize("schema", INVALID_SCHEMAS, ids=repr)
async def test_an_invalid_schema_raises_invalid_argument_from_await_input(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, schema: object
) -> None:
    raised = await _refused_await_input(runtime, "a5", schema)
    assert type(raised) is InvalidArgument
    assert "accepts" in str(raised)
    committed = await history(runtime, "a5")
    assert not any(isinstance(event.state, RunState.Awaiting) for event in committed)
    assert (await runtime.record("a5")).result == "caught"


async def test_an_uncaught_invalid_schema_ends_the_run_failed_invalid_argument(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"step": 1})
        await ctx.await_input("user_input", accepts={"type": 7})

    state = await runtime.execute(body, run_id="a6")
    assert isinstance(state, RunState.Ended)
    cause = state.cause
    assert isinstance(cause, EndCause.Failed)
    assert cause.code == "invalid_argument"
    assert "not a valid JSON Schema" in cause.message
    assert "a6" in cause.message
    events = await history(runtime, "a6")
    assert not any(isinstance(event.state, RunState.Awaiting) for event in events)
    assert (await runtime.record("a6")).checkpoint == {"step": 1}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "required": {"a", "b"}},
        {"enum": (1, 2)},
        {"const": math.nan},
        {1: {"type": "string"}},
        {"type": "object", "default": b"bytes"},
    ],
    ids=["set", "tuple", "nan", "int-key", "bytes"],
)
async def test_a_schema_that_is_not_json_is_refused_as_invalid_payload(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, schema: object
) -> None:
    assert isinstance(await _refused_await_input(runtime, "a7", schema), InvalidPayload)


def _nested_schema(levels: int, keyword: str = "items") -> dict[str, Any]:
    """A schema of ``levels`` nested JSON objects: ``{"items": {"items": ...}}``."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = {keyword: schema} if keyword == "items" else {"properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    "schema",
    [_nested_schema(65), _nested_schema(150), _nested_schema(90, "properties")],
    ids=["65-levels", "150-levels", "180-levels-of-properties"],
)
async def test_a_schema_nested_too_deeply_is_refused_at_await_input_and_the_run_goes_on(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, schema: object
) -> None:
    raised = await _refused_await_input(runtime, "a8", schema)
    assert type(raised) is InvalidArgument
    assert "accepts is nested" in str(raised)
    assert "at most 64 levels" in str(raised)


async def test_an_uncaught_deep_schema_ends_the_run_invalid_argument_not_recursion_error(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.await_input("user_input", accepts=_nested_schema(150))

    state = await runtime.execute(body, run_id="a9")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_argument"


async def test_a_schema_of_64_levels_is_kept_and_checks_resume_values(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> object:
        if ctx.resume_value is None:
            await ctx.await_input("user_input", accepts=_nested_schema(64))
        return "answered"

    assert isinstance(await runtime.execute(body, run_id="a10"), RunState.Awaiting)
    value: object = "leaf"
    wrong: object = 1
    for _ in range(63):
        value, wrong = [value], [wrong]
    with pytest.raises(InvalidPayload, match=r"does not match the ticket's schema"):
        await runtime.resume("a10", wrong)
    assert await settle(await runtime.resume("a10", value)) == NATURAL_END


async def test_a_resume_value_too_deep_for_its_schema_is_refused_and_the_ticket_stays(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    # A shallow schema that refers to itself: checking a value walks as deep as the value.
    tree = {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/tree"}}, {"type": "string"}]}
    schema = {"$defs": {"tree": tree}, "$ref": "#/$defs/tree"}

    async def body(ctx: RunContext) -> object:
        if ctx.resume_value is None:
            await ctx.await_input("user_input", accepts=schema)
        return ctx.resume_value

    awaiting = await runtime.execute(body, run_id="a11")
    assert isinstance(awaiting, RunState.Awaiting)
    deep: object = "leaf"
    for _ in range(199):
        deep = [deep]
    with pytest.raises(InvalidPayload, match=r"too deeply nested to be checked") as raised:
        await runtime.resume("a11", deep)
    assert "a11" in str(raised.value)
    assert await runtime.state("a11") == awaiting
    assert await settle(await runtime.resume("a11", [["leaf"]])) == NATURAL_END


async def _refused_await_input(runtime: Runtime, run_id: str, schema: object) -> BaseException:
    """Run a body whose ``await_input(accepts=schema)`` raises `InvalidArgument`, which it
    catches before returning; what was raised, once the call is known to have committed
    nothing and the run to have ended naturally."""
    raised: list[BaseException] = []

    async def body(ctx: RunContext) -> str:
        before = await snapshot(runtime, ctx.run_id)
        try:
            await ctx.await_input("user_input", accepts=schema)
        except InvalidArgument as exc:
            raised.append(exc)
        assert await snapshot(runtime, ctx.run_id) == before
        return "caught"

    assert await runtime.execute(body, run_id=run_id) == NATURAL_END
    assert len(raised) == 1
    return raised[0]


# ------------------------------------------------------------ await_input(progress=...)


async def test_await_input_commits_its_progress_with_the_awaiting_state_in_one_commit(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[tuple[int, JsonValue]] = []

    async def body(ctx: RunContext) -> JsonValue:
        seen.append((ctx.generation, ctx.checkpoint))
        if ctx.generation == 1:
            await ctx.boundary({"step": 1})
            await ctx.await_input("user_input", progress={"step": 2, "draft": [1, 2]})
        return ctx.checkpoint

    state = await runtime.execute(body, run_id="g1")
    assert ticket_of(state).reason == "user_input"
    record = await runtime.record("g1")
    assert record.state == state
    assert record.checkpoint == {"step": 2, "draft": [1, 2]}

    events = await history(runtime, "g1")
    assert [e.state for e in events] == [RunState.Running(1), RunState.Running(1), state]
    assert kinds(events) == ["committed"] * 3

    assert await settle(await runtime.resume("g1")) == NATURAL_END
    assert seen == [(1, None), (2, {"step": 2, "draft": [1, 2]})]
    assert (await runtime.record("g1")).result == {"step": 2, "draft": [1, 2]}


async def test_await_input_with_progress_does_not_honour_a_pending_pause(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            at_gate.set()
            await gate.wait()
            await ctx.await_input("tool_permission", correlation_id="perm", progress={"step": 1})

    handle = await runtime.start(body, run_id="g2")
    await reach(at_gate)
    runtime.deliver(LiveCommand.Pause("g2"))
    gate.set()
    state = await settle(handle)
    ticket = ticket_of(state)
    assert (ticket.reason, ticket.correlation_id) == ("tool_permission", "perm")
    assert (await runtime.record("g2")).checkpoint == {"step": 1}
    events = await history(runtime, "g2")
    assert [e.state for e in events] == [RunState.Running(1), state]


async def test_await_input_with_progress_counts_no_step(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    steps: list[tuple[int, int]] = []

    async def body(ctx: RunContext) -> str:
        steps.append((ctx.generation, ctx.steps))
        if ctx.generation == 1:
            await ctx.boundary()
            await ctx.boundary()
            steps.append((ctx.generation, ctx.steps))
            await ctx.await_input("user_input", progress={"step": 2})
        # With max_steps=3 this third boundary is within budget only if the await
        # counted no step.
        await ctx.boundary({"step": 3})
        steps.append((ctx.generation, ctx.steps))
        return "within budget"

    state = await runtime.execute(body, run_id="g3", max_steps=3)
    assert isinstance(state, RunState.Awaiting)
    assert (await runtime.record("g3")).steps == 2
    assert await settle(await runtime.resume("g3")) == NATURAL_END
    assert steps == [(1, 0), (1, 2), (2, 2), (2, 3)]
    record = await runtime.record("g3")
    assert (record.result, record.steps) == ("within budget", 3)


async def test_messages_before_await_input_with_progress_reach_the_next_first_boundary(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()
    batches: list[tuple[int, list[JsonValue]]] = []

    async def body(ctx: RunContext) -> None:
        if ctx.generation == 1:
            at_gate.set()
            await gate.wait()
            await ctx.await_input("user_input", progress={"step": 1})
        batches.append((ctx.generation, await ctx.boundary()))
        batches.append((ctx.generation, await ctx.boundary()))

    handle = await runtime.start(body, run_id="g4")
    await reach(at_gate)
    runtime.deliver(LiveCommand.Message("g4", "first"))
    runtime.deliver(LiveCommand.Message("g4", {"second": [2]}))
    gate.set()
    assert isinstance(await settle(handle), RunState.Awaiting)
    assert (await runtime.record("g4")).checkpoint == {"step": 1}
    assert await settle(await runtime.resume("g4")) == NATURAL_END
    assert batches == [(2, ["first", {"second": [2]}]), (2, [])]
    assert "messages_discarded" not in kinds(await history(runtime, "g4"))


BAD_PROGRESS: list[object] = [
    {"a": {1, 2}},
    (1, 2),
    {1: "x"},
    math.nan,
    {"step": math.inf},
    b"bytes",
]


@pytest.mark.parametrize("progress", BAD_PROGRESS, ids=repr)
async def test_await_input_refuses_bad_progress_before_anything_is_committed(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, progress: object
) -> None:
    raised: list[BaseException] = []
    at_gate = trio.Event()
    gate = trio.Event()

    async def body(ctx: RunContext) -> str:
        await ctx.boundary({"step": 1})
        at_gate.set()
        await gate.wait()  # a pause and a message are pending: neither may be touched
        before = await snapshot(runtime, ctx.run_id)
        try:
            await ctx.await_input("user_input", progress=progress)
        except InvalidPayload as exc:
            raised.append(exc)
        assert await snapshot(runtime, ctx.run_id) == before
        return "refused"

    handle = await runtime.start(body, run_id="g5")
    await reach(at_gate)
    gate.set()
    assert await settle(handle) == NATURAL_END
    assert len(raised) == 1
    assert "progress" in str(raised[0])
    record = await runtime.record("g5")
    assert (record.checkpoint, record.result) == ({"step": 1}, "refused")
    events = await history(runtime, "g5")
    assert not any(isinstance(event.state, RunState.Awaiting) for event in events)


async def test_uncaught_bad_progress_fails_the_run_and_keeps_the_last_checkpoint(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"step": 1})
        await ctx.await_input("user_input", progress={"step": {2}})

    state = await runtime.execute(body, run_id="g6")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_payload"
    assert (await runtime.record("g6")).checkpoint == {"step": 1}
    events = await history(runtime, "g6")
    assert not any(isinstance(event.state, RunState.Awaiting) for event in events)


# --------------------------------------------------------------------------- resumed_ticket


async def test_resumed_ticket_is_none_first_then_the_ticket_the_resume_answered(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()
    seen: list[tuple[int, ResumeTicket | None, JsonValue]] = []

    async def body(ctx: RunContext) -> None:
        seen.append((ctx.generation, ctx.resumed_ticket, ctx.resume_value))
        if ctx.generation == 1:
            await ctx.await_input(
                "tool_permission",
                correlation_id="perm-7",
                payload={"tool": "rm", "args": ["-rf"]},
                accepts={"type": "boolean"},
            )
        if ctx.generation == 2:
            at_gate.set()
            await gate.wait()
            await ctx.boundary()  # the pause is honoured here

    first = await runtime.execute(body, run_id="t1")
    ticket = ticket_of(first)
    handle = await runtime.resume("t1", True, correlation_id="perm-7")
    await reach(at_gate)
    runtime.deliver(LiveCommand.Pause("t1"))
    gate.set()
    pause_ticket = ticket_of(await settle(handle))
    assert pause_ticket.reason == "manual_pause"
    assert await settle(await runtime.resume("t1", "go on")) == NATURAL_END

    assert seen == [(1, None, None), (2, ticket, True), (3, pause_ticket, "go on")]
    answered = seen[1][1]
    assert answered is not None
    assert answered.correlation_id == "perm-7"
    assert answered.reason == "tool_permission"
    assert answered.payload == {"tool": "rm", "args": ["-rf"]}
    assert answered.accepts == {"type": "boolean"}
    assert answered.run_id == "t1"
    later = seen[2][1]
    assert later is not None
    assert later.correlation_id != "perm-7"


async def test_resumed_ticket_of_a_resume_queued_behind_a_busy_thread(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[ResumeTicket | None] = []

    async def waiter(ctx: RunContext) -> None:
        if ctx.generation == 1:
            await ctx.await_input("user_input", correlation_id="q-1", payload={"ask": "name"})
        seen.append(ctx.resumed_ticket)

    ticket = ticket_of(await runtime.execute(waiter, run_id="tq", thread_id="shared"))
    busy = await start_parked(runtime, run_id="occupant", thread_id="shared")
    resumed = await runtime.resume("tq", "Ada")
    assert await runtime.state("tq") == RunState.Queued()
    await trio.testing.wait_all_tasks_blocked()
    assert seen == []
    runtime.deliver(LiveCommand.Cancel("occupant"))
    assert await settle(busy) == CANCELLED
    assert await settle(resumed) == NATURAL_END
    assert seen == [ticket]
    answered = seen[0]
    assert answered is not None
    assert (answered.correlation_id, answered.reason, answered.payload) == (
        "q-1",
        "user_input",
        {"ask": "name"},
    )


# --------------------------------------------------------------------------- RunError


class QuotaExceeded(RunError):
    def __init__(self, used: int) -> None:
        super().__init__("quota_exceeded", f"used {used} of 100")


async def raise_run_error(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})
    raise RunError("rate_limited", "slow down, retry in 5s")


async def raise_subclass(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})
    raise QuotaExceeded(101)


async def raise_group_of_one(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})
    raise ExceptionGroup("tool calls", [RunError("rate_limited", "slow down, retry in 5s")])


async def raise_from_a_nursery_task(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})

    async def tool() -> None:
        await trio.sleep(1)
        raise QuotaExceeded(101)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tool)
        nursery.start_soon(trio.sleep, 5)


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        (raise_run_error, EndCause.Failed("rate_limited", "slow down, retry in 5s")),
        (raise_subclass, EndCause.Failed("quota_exceeded", "used 101 of 100")),
        (raise_group_of_one, EndCause.Failed("rate_limited", "slow down, retry in 5s")),
        (raise_from_a_nursery_task, EndCause.Failed("quota_exceeded", "used 101 of 100")),
    ],
    ids=["direct", "subclass", "group-of-one", "nursery-task"],
)
async def test_a_run_error_raised_by_a_body_ends_failed_with_its_code_and_message(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, body: Body, cause: EndCause
) -> None:
    state = await runtime.execute(body, run_id="re")
    assert state == RunState.Ended(cause)
    record = await runtime.record("re")
    assert (record.state, record.checkpoint, record.result) == (state, {"step": 1}, None)


def test_a_run_error_carries_its_code_and_message() -> None:
    error = RunError("rate_limited", "slow down")
    assert (error.code, error.message, str(error)) == (
        "rate_limited",
        "slow down",
        "rate_limited: slow down",
    )
    bare = RunError("http_429")
    assert (bare.code, bare.message, str(bare)) == ("http_429", "", "http_429")
    assert isinstance(QuotaExceeded(3), RunError)


@pytest.mark.parametrize(
    "code",
    ["Bad Code", "", 3, None, "BadCode", "bad-code", "bad code", "_bad", "1bad", "bad.code", "é"],
    ids=repr,
)
def test_a_run_error_refuses_a_code_that_is_not_snake_case(code: object) -> None:
    with pytest.raises(InvalidArgument, match="snake_case"):
        RunError(code, "message")  # type: ignore[arg-type]


@pytest.mark.parametrize("message", [3, None, b"text", ["text"]], ids=repr)
def test_a_run_error_refuses_a_message_that_is_not_a_str(message: object) -> None:
    with pytest.raises(InvalidArgument, match="message"):
        RunError("rate_limited", message)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- MaxStepsReached


async def raise_max_steps(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})
    raise MaxStepsReached("the body's own budget ran out")


async def raise_max_steps_from_a_nursery_task(ctx: RunContext) -> None:
    await ctx.boundary({"step": 1})

    async def tool() -> None:
        await trio.sleep(1)
        raise MaxStepsReached("the tool's budget ran out")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tool)
        nursery.start_soon(trio.sleep, 5)


@pytest.mark.parametrize(
    "body", [raise_max_steps, raise_max_steps_from_a_nursery_task], ids=["direct", "nursery-task"]
)
async def test_max_steps_reached_raised_by_a_body_ends_max_steps(
    runtime: Runtime, autojump_clock: trio.testing.MockClock, body: Body
) -> None:
    state = await runtime.execute(body, run_id="ms")
    assert state == MAX_STEPS
    record = await runtime.record("ms")
    assert (record.state, record.checkpoint, record.result) == (MAX_STEPS, {"step": 1}, None)


async def test_a_cancel_seen_before_max_steps_reached_wins_when_the_body_catches_it(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def body(ctx: RunContext) -> None:
        try:
            entered.set()
            await trio.sleep_forever()
        except trio.Cancelled:
            raise MaxStepsReached("turned the cancel into a budget end") from None

    handle = await runtime.start(body, run_id="mc1")
    await reach(entered)
    runtime.deliver(LiveCommand.Cancel("mc1", reason="operator"))
    assert await settle(handle) == CANCELLED
    (terminal,) = terminal_commits(await history(runtime, "mc1"))
    assert (terminal.detail["source"], terminal.detail["reason"]) == ("deliver", "operator")


async def test_a_cancel_delivered_before_max_steps_reached_is_raised_wins(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def body(ctx: RunContext) -> None:
        await ctx.boundary({"step": 1})
        runtime.deliver(LiveCommand.Cancel(ctx.run_id, reason="self"))
        raise MaxStepsReached("raised right after the cancel")

    state = await runtime.execute(body, run_id="mc2")
    assert state == CANCELLED
    (terminal,) = terminal_commits(await history(runtime, "mc2"))
    assert terminal.detail["source"] == "deliver"


# --------------------------------------------------------------------------- RunHandle.record


async def test_handle_record_reads_the_committed_record_while_running_and_after(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    at_gate = trio.Event()
    gate = trio.Event()

    async def body(ctx: RunContext) -> JsonValue:
        await ctx.boundary({"step": 1})
        at_gate.set()
        await gate.wait()
        return {"answer": 42}

    handle = await runtime.start(body, run_id="h1", thread_id="th-h1", name="h", input=[1])
    await reach(at_gate)
    running = await handle.record()
    assert running == await runtime.record("h1")
    assert (running.run_id, running.thread_id, running.name, running.input) == (
        "h1",
        "th-h1",
        "h",
        [1],
    )
    assert (running.state, running.generation) == (RunState.Running(1), 1)
    assert (running.checkpoint, running.result) == ({"step": 1}, None)

    gate.set()
    assert await settle(handle) == NATURAL_END
    done = await handle.record()
    assert done == await runtime.record("h1")
    assert (done.state, done.result, done.checkpoint) == (NATURAL_END, {"answer": 42}, {"step": 1})


async def test_a_parent_reads_its_childs_result_through_the_child_handle(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    async def child(ctx: RunContext) -> JsonValue:
        await ctx.boundary({"half": ctx.input})
        return {"doubled": ctx.input * 2}

    async def parent(ctx: RunContext) -> JsonValue:
        handle = await ctx.start_child(child, input=21, run_id="h-child")
        state = await handle.wait()
        record = await handle.record()
        return {
            "ended": state == NATURAL_END,
            "result": record.result,
            "checkpoint": record.checkpoint,
            "parent": record.parent_run_id,
        }

    assert await runtime.execute(parent, run_id="h-parent") == NATURAL_END
    assert (await runtime.record("h-parent")).result == {
        "ended": True,
        "result": {"doubled": 42},
        "checkpoint": {"half": 21},
        "parent": "h-parent",
    }
