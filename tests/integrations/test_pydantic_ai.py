"""`awaken_trio.integrations.pydantic_ai`: a pydantic-ai agent as a durable run body, on
pydantic-ai's own test models (no network). Every model request and tool call is a step;
a resumed attempt replays them; approvals are tickets; a cancel reaches the model's request
on the asyncio side at once; nothing is left running on any thread when an attempt ends."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from pydantic_ai import Agent
from pydantic_ai import RunContext as AgentContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from awaken_trio import (
    EndCause,
    EventKind,
    InvalidArgument,
    InvalidPayload,
    LiveCommand,
    RunEvent,
    RunState,
    Runtime,
    open_runtime,
)
from awaken_trio.integrations.pydantic_ai import agent_body, load_messages
from awaken_trio.store import MemoryStore, Store
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.integrations.pa_helpers import Script, lookup_agent, until
from tests.wrapped_stores import CountingStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    return MemoryStore()


async def events_of(runtime: Runtime, run_id: str) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]


def step_names(events: list[RunEvent]) -> list[tuple[str, int]]:
    return [(e.detail["name"], e.detail["index"]) for e in events if e.kind == EventKind.STEP]


def bridge_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("asyncio bridge")]


# ---------------------------------------------------------------------------- a run


async def test_an_agent_run_journals_each_model_request_and_tool_call(any_store: Store) -> None:
    script = Script()
    agent, looked = lookup_agent(script)
    body = agent_body(agent)
    async with open_runtime(any_store, bodies={"looker": body}) as runtime:
        assert await runtime.execute(body, run_id="a1", input="what is k?") == NATURAL
        record = await runtime.record("a1")
        events = await events_of(runtime, "a1")
    assert record.result["output"] == "found value of k"
    messages = load_messages(record.result["messages"])
    assert isinstance(messages[0], ModelRequest)
    assert isinstance(messages[0].parts[0], UserPromptPart)
    assert messages[0].parts[0].content == "what is k?"
    assert len(messages) == 4  # prompt, tool call, tool return, answer
    assert step_names(events) == [
        ("looker__model.request", 0),
        ("looker__function_toolset__<agent>.call_tool:lookup", 0),
        ("looker__model.request", 1),
    ]
    assert (script.calls, looked) == (2, ["k"])
    assert bridge_threads() == []


async def test_the_input_may_carry_a_message_history_in_pydantic_ais_json_form() -> None:
    agent: Agent[None, str] = Agent(TestModel(custom_output_text="ok"), name="hist")
    earlier = ModelMessagesTypeAdapter.dump_python(
        [ModelRequest(parts=[UserPromptPart("earlier question")])], mode="json"
    )
    body = agent_body(agent)
    async with open_runtime(bodies={"hist": body}) as runtime:
        await runtime.execute(body, run_id="h", input={"prompt": "now", "message_history": earlier})
        result = (await runtime.record("h")).result
    assert result["output"] == "ok"
    new = load_messages(result["messages"])
    # Only the new messages come back: the history given is not repeated.
    assert [part.content for part in new[0].parts] == ["now"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (42, "must be a prompt string"),
        ({"prompt": 3}, "'prompt' must be a str"),
        ({"prompt": "x", "message_history": [{"nope": 1}]}, "'message_history' is not a list"),
        ({"prompt": "x", "other": 1}, "must be a prompt string"),
    ],
)
async def test_bad_input_fails_the_run_with_invalid_payload(value: Any, says: str) -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="bad")
    body = agent_body(agent)
    async with open_runtime(bodies={"bad": body}) as runtime:
        state = await runtime.execute(body, run_id="b", input=value)
        assert isinstance(state, RunState.Ended)
        assert isinstance(state.cause, EndCause.Failed)
        assert state.cause.code == "invalid_payload"
        assert says in state.cause.message
        assert step_names(await events_of(runtime, "b")) == []


class Opaque:
    """Nothing pydantic knows how to turn into JSON."""


@dataclass
class Answer:
    text: str


@dataclass
class Deps:
    greeting: str


def to_opaque(answer: Answer) -> Any:
    return Opaque()


async def test_an_output_pydantic_cannot_turn_into_json_fails_the_run_clearly() -> None:
    agent: Agent[None, Any] = Agent(TestModel(), name="opaque", output_type=to_opaque)
    body = agent_body(agent)
    async with open_runtime(bodies={"opaque": body}) as runtime:
        state = await runtime.execute(body, run_id="o", input="go")
    assert isinstance(state, RunState.Ended)
    assert isinstance(state.cause, EndCause.Failed)
    assert state.cause.code == "invalid_payload"
    assert "the output of agent 'opaque' is a Opaque" in state.cause.message
    assert "output type pydantic can serialise" in state.cause.message


def test_agent_body_refuses_what_is_not_a_named_agent() -> None:
    with pytest.raises(InvalidArgument, match="needs a pydantic-ai Agent, not str"):
        agent_body("agent")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="needs an agent with a name"):
        agent_body(Agent(TestModel()))


async def test_deps_reach_the_tools() -> None:
    agent: Agent[Deps, str] = Agent(TestModel(), name="deps", deps_type=Deps)

    @agent.tool
    def greet(ctx: AgentContext[Deps]) -> str:
        return ctx.deps.greeting

    body = agent_body(agent, deps=Deps("hello"))
    async with open_runtime(bodies={"deps": body}) as runtime:
        await runtime.execute(body, run_id="d", input="hi")
        assert "hello" in (await runtime.record("d")).result["output"]


# ---------------------------------------------------------------------------- replay


async def test_a_resumed_attempt_replays_committed_requests_and_tool_calls(
    any_store: Store,
) -> None:
    calls: list[int] = []

    # The model asks for the lookup, then for the delete (which needs approval), then answers.
    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        returned = [
            part.tool_name
            for message in messages
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": "k"}, tool_call_id="c1")])
        if returned == ["lookup"]:
            return ModelResponse(parts=[ToolCallPart("delete", {"path": "/x"}, tool_call_id="c2")])
        return ModelResponse(parts=[TextPart(f"done after {returned}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="approver")
    looked: list[str] = []
    deleted: list[str] = []

    @agent.tool_plain
    def lookup(key: str) -> str:
        looked.append(key)
        return f"value of {key}"

    @agent.tool_plain(requires_approval=True)
    def delete(path: str) -> str:
        deleted.append(path)
        return f"deleted {path}"

    body = agent_body(agent)
    async with open_runtime(any_store, bodies={"approver": body}) as runtime:
        state = await runtime.execute(body, run_id="ap", input="clean up")
        assert isinstance(state, RunState.Awaiting)
        ticket = state.ticket
        assert ticket.reason == "tool_permission"
        assert ticket.correlation_id == "ap/tool_permission/c2"
        assert ticket.payload == {
            "tool_call": {"id": "c2", "name": "delete", "arguments": {"path": "/x"}}
        }
        assert (len(calls), looked, deleted) == (2, ["k"], [])
        handle = await runtime.resume("ap", {"decision": "allow"})
        assert await handle.wait() == NATURAL
        result = (await runtime.record("ap")).result
        events = await events_of(runtime, "ap")
    # The second attempt called the model once (for the answer), and never the lookup again.
    assert (len(calls), looked, deleted) == (3, ["k"], ["/x"])
    assert result["output"] == "done after ['lookup', 'delete']"
    assert step_names(events) == [
        ("approver__model.request", 0),
        ("approver__function_toolset__<agent>.call_tool:lookup", 0),
        ("approver__model.request", 1),
        ("tool_permission:c2", 0),
        ("approver__function_toolset__<agent>.call_tool:delete", 0),
        ("approver__model.request", 2),
    ]
    assert bridge_threads() == []


async def test_a_denied_call_tells_the_model_with_the_note_and_never_runs() -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="deny")
    ran: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def drop_table(name: str) -> str:
        ran.append(name)
        return "dropped"

    body = agent_body(agent)
    async with open_runtime(bodies={"deny": body}) as runtime:
        assert isinstance(await runtime.execute(body, run_id="dn", input="x"), RunState.Awaiting)
        with pytest.raises(InvalidPayload):
            await runtime.resume("dn", {"decision": "maybe"})
        assert isinstance(await runtime.state("dn"), RunState.Awaiting)  # the ticket stays
        handle = await runtime.resume("dn", {"decision": "deny", "note": "not in prod"})
        assert await handle.wait() == NATURAL
        result = (await runtime.record("dn")).result
    assert ran == []
    assert "not in prod" in result["output"]


async def test_two_calls_that_need_approval_are_asked_one_ticket_at_a_time() -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="two")
    ran: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def first(x: int) -> str:
        ran.append("first")
        return "1"

    @agent.tool_plain(requires_approval=True)
    def second(x: int) -> str:
        ran.append("second")
        return "2"

    body = agent_body(agent)
    asked: list[str] = []
    async with open_runtime(bodies={"two": body}) as runtime:
        state = await runtime.execute(body, run_id="t", input="x")
        for decision in ({"decision": "allow"}, {"decision": "deny"}):
            assert isinstance(state, RunState.Awaiting)
            asked.append(state.ticket.payload["tool_call"]["name"])
            state = await (await runtime.resume("t", decision)).wait()
        assert state == NATURAL
    assert asked == ["first", "second"]
    assert ran == ["first"]


# ---------------------------------------------------------------------------- control


async def test_a_cancel_reaches_the_model_request_on_asyncio_at_once() -> None:
    script = Script(hang_at=1)
    agent, _ = lookup_agent(script, name="cancelled")
    body = agent_body(agent)
    async with open_runtime(bodies={"cancelled": body}) as runtime:
        handle = await runtime.start(body, run_id="c", input="x")
        await until(lambda: bool(script.loops))
        assert bridge_threads() == ["asyncio bridge"]
        runtime.deliver(LiveCommand.Cancel("c"))
        with trio.fail_after(10):
            assert await handle.wait() == CANCELLED
        # The request saw the cancellation, and the loop and its thread are gone.
        assert script.cancelled == [1]
        assert script.loops[0].is_closed()
        assert bridge_threads() == []
        assert step_names(await events_of(runtime, "c")) == []


async def test_runs_at_once_share_one_loop_which_goes_with_the_last_of_them() -> None:
    """A provider's HTTP client belongs to the loop that opened its connections, so agent
    runs at once in a runtime share one loop; it stops (its thread gone) with the last."""
    script = Script(hang_at=1)
    agent, _ = lookup_agent(script, name="shared")
    body = agent_body(agent)
    async with open_runtime(bodies={"shared": body}) as runtime:
        first = await runtime.start(body, run_id="s1", input="x")
        await until(lambda: len(script.loops) == 1)
        second = await runtime.start(body, run_id="s2", input="x")
        await until(lambda: len(script.loops) == 3)  # s2's two requests (the hang was s1's)
        assert await second.wait() == NATURAL
        assert script.loops[0] is script.loops[1] is script.loops[2]
        assert bridge_threads() == ["asyncio bridge"]  # s1 still runs on it
        runtime.deliver(LiveCommand.Cancel("s1"))
        assert await first.wait() == CANCELLED
        assert bridge_threads() == []
        assert script.loops[0].is_closed()
        # The next run gets a new loop.
        assert await runtime.execute(body, run_id="s3", input="x") == NATURAL
        assert script.loops[-1] is not script.loops[0]
        assert bridge_threads() == []


async def test_a_pause_takes_effect_before_the_next_model_request() -> None:
    script = Script()
    agent: Agent[None, str] = Agent(FunctionModel(script), name="paused")
    looked: list[str] = []
    in_tool = threading.Event()
    release = threading.Event()

    @agent.tool_plain
    def lookup(key: str) -> str:
        looked.append(key)
        in_tool.set()
        release.wait(30)
        return f"value of {key}"

    body = agent_body(agent)
    async with open_runtime(bodies={"paused": body}) as runtime:
        handle = await runtime.start(body, run_id="p", input="x")
        # The pause arrives while the tool runs; the next model request does not start.
        await trio.to_thread.run_sync(in_tool.wait, 30)
        runtime.deliver(LiveCommand.Pause("p"))
        release.set()
        state = await handle.wait()
        assert isinstance(state, RunState.Awaiting)
        assert state.ticket.reason == "manual_pause"
        assert script.calls == 1
        assert bridge_threads() == []
        handle = await runtime.resume("p")
        assert await handle.wait() == NATURAL
    assert script.calls == 2  # the first request was replayed, not made again
    assert looked == ["k"]


async def test_messages_sent_to_the_run_are_recorded_unread_not_lost() -> None:
    script = Script()
    agent: Agent[None, str] = Agent(FunctionModel(script), name="inbox")
    in_tool = threading.Event()
    release = threading.Event()

    @agent.tool_plain
    def lookup(key: str) -> str:
        in_tool.set()
        release.wait(30)
        return f"value of {key}"

    body = agent_body(agent)
    async with open_runtime(bodies={"inbox": body}) as runtime:
        handle = await runtime.start(body, run_id="i", input="x")
        await trio.to_thread.run_sync(in_tool.wait, 30)
        runtime.deliver(LiveCommand.Message("i", "also check the weather"))
        release.set()
        assert await handle.wait() == NATURAL
        unread = [e for e in await events_of(runtime, "i") if e.kind.startswith("pydantic_ai.")]
    assert [(e.kind, e.detail) for e in unread] == [
        ("pydantic_ai.messages_unread", {"messages": ["also check the weather"]})
    ]


async def test_max_steps_counts_new_model_requests() -> None:
    script = Script()
    agent, _ = lookup_agent(script, name="budget")
    body = agent_body(agent)
    async with open_runtime(bodies={"budget": body}) as runtime:
        state = await runtime.execute(body, run_id="m", input="x", max_steps=1)
    assert state == RunState.Ended(EndCause.MaxSteps())
    assert script.calls == 1


async def test_an_agent_turn_of_three_steps_costs_at_most_three_writes_on_sqlite(
    tmp_path: Path,
) -> None:
    """A turn (a model request, a tool call, a model request) is three steps: one commit
    each, and commits made together share one group-committed write."""
    store = CountingStore(SQLiteStore(tmp_path / "runs.db", synchronous="normal"))
    script = Script()
    agent, _ = lookup_agent(script, name="turn")
    body = agent_body(agent)
    async with open_runtime(store, bodies={"turn": body}) as runtime:
        assert await runtime.execute(body, run_id="t", input="x") == NATURAL
        assert len(step_names(await events_of(runtime, "t"))) == 3
    # The start, the three steps, the end.
    assert store.applies - 2 <= 3
    assert store.reads == 1


# ---------------------------------------------------------------------------- the bridge


async def test_an_asyncio_task_that_stops_waiting_cancels_its_trio_call() -> None:
    import asyncio

    from awaken_trio.integrations._asyncio_bridge import open_asyncio_bridge

    entered = trio.Event()
    cancelled: list[bool] = []

    async def trio_side() -> None:
        entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise

    async with open_asyncio_bridge("test") as bridge:

        async def asyncio_side() -> str:
            try:
                await asyncio.wait_for(bridge.call(trio_side), timeout=0.05)
            except TimeoutError:
                return "timed out"
            return "no"  # pragma: no cover

        assert await bridge.run(asyncio_side) == "timed out"
        await until(lambda: bool(cancelled))
    assert entered.is_set()
    assert bridge_threads() == []


async def test_an_error_of_a_trio_call_reaches_asyncio_as_itself() -> None:
    from awaken_trio.integrations._asyncio_bridge import open_asyncio_bridge

    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("missing")

    async with open_asyncio_bridge("test") as bridge:

        async def asyncio_side() -> str:
            try:
                await bridge.call(fails)
            except KeyError as exc:
                return f"caught {exc}"
            return "no"  # pragma: no cover

        assert await bridge.run(asyncio_side) == "caught 'missing'"


@pytest.fixture
async def runtime_on_memory() -> AsyncIterator[Runtime]:
    async with open_runtime(MemoryStore()) as runtime:
        yield runtime


async def test_a_trio_call_asked_for_after_its_bridge_closed_is_cancelled_on_asyncio() -> None:
    import asyncio

    from awaken_trio.integrations._asyncio_bridge import open_asyncio_bridge

    ran: list[bool] = []
    outcomes: list[str] = []

    async def trio_side() -> None:
        ran.append(True)

    async with open_asyncio_bridge("keeper") as keeper:  # keeps the loop running
        async with open_asyncio_bridge("closing") as closing:

            async def late_caller(go: asyncio.Event) -> None:
                await go.wait()
                try:
                    await closing.call(trio_side)
                except asyncio.CancelledError:
                    outcomes.append("cancelled")

            async def leave_a_task_behind() -> asyncio.Event:
                go = asyncio.Event()
                keep.append(asyncio.get_running_loop().create_task(late_caller(go)))
                return go

            keep: list[asyncio.Task[None]] = []
            go = await closing.run(leave_a_task_behind)
        closing.loop.call_soon_threadsafe(go.set)
        await until(lambda: bool(outcomes))
        assert keeper.loop is closing.loop
    assert outcomes == ["cancelled"]
    assert ran == []
    assert bridge_threads() == []
