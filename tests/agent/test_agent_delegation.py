"""Delegation: a sub-agent runs as a child run; its end is a tool result for the parent."""

from __future__ import annotations

import trio
import trio.testing

from awaken_trio import EndCause, LiveCommand, RunEvent, RunState, Runtime
from awaken_trio.agent import Agent, ModelError, ModelReply, ScriptedModel, SubAgentTool
from tests.agent.agent_helpers import (
    Messages,
    agent_events,
    call,
    calls,
    parsed,
    text,
    tool_contents,
    transcript,
)
from tests.run_helpers import reach, settle

NATURAL_END = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())


def delegate(child: Agent) -> SubAgentTool:
    return SubAgentTool("research", child, description="asks a researcher")


async def child_run_id(runtime: Runtime, parent_id: str) -> str:
    """The child's run id, from the parent's ``agent.delegated`` event."""
    with trio.fail_after(60):
        async for event in runtime.events(parent_id):
            if event.kind == "agent.delegated":
                run_id: str = event.detail["child_run_id"]
                return run_id
    raise AssertionError("no delegation")


async def test_the_sub_agents_final_text_is_the_tool_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    child_model = ScriptedModel([text("Paris")])
    parent_model = ScriptedModel(
        [calls(call("c1", "research", prompt="capital of France?")), text("It is Paris.")]
    )
    agent = Agent(parent_model, [delegate(Agent(child_model, system="researcher"))])
    handle = await runtime.start(agent, input="where?")
    assert await settle(handle) == NATURAL_END
    assert tool_contents(await transcript(runtime, handle.run_id)) == {"c1": "Paris"}
    assert parent_model.tools[0][0]["function"]["parameters"]["required"] == ["prompt"]
    child_id = await child_run_id(runtime, handle.run_id)
    child = await runtime.record(child_id)
    assert child.parent_run_id == handle.run_id
    assert child.input == "capital of France?"
    assert child.state == NATURAL_END
    assert child_model.calls[0] == [
        {"role": "system", "content": "researcher"},
        {"role": "user", "content": "capital of France?"},
    ]


async def test_cancelling_the_parent_cancels_the_sub_agent(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def hang(messages: Messages, tools: Messages) -> ModelReply:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    parent_model = ScriptedModel([calls(call("c1", "research", prompt="dig"))])
    agent = Agent(parent_model, [delegate(Agent(ScriptedModel([hang])))])
    handle = await runtime.start(agent, input="go")
    await reach(entered)
    child_id = await child_run_id(runtime, handle.run_id)
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    with trio.fail_after(1):
        assert await handle.wait() == CANCELLED
    assert await runtime.state(child_id) == CANCELLED
    terminal = [
        e
        async for e in runtime.events(child_id, follow=False)
        if isinstance(e.state, RunState.Ended)
    ]
    assert terminal[0].detail["source"] == "parent"
    interrupted = [
        e.detail
        for e in await agent_events(runtime, handle.run_id)
        if e.kind == "agent.interrupted"
    ]
    assert interrupted == [{"step": 1, "phase": "tools", "tool_call_ids": ["c1"]}]


async def test_a_cancelled_sub_agent_is_a_tool_result_and_the_parent_goes_on(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    entered = trio.Event()

    async def hang(messages: Messages, tools: Messages) -> ModelReply:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    parent_model = ScriptedModel(
        [calls(call("c1", "research", prompt="dig")), text("the researcher was cancelled")]
    )
    agent = Agent(parent_model, [delegate(Agent(ScriptedModel([hang])))])
    handle = await runtime.start(agent, input="go")
    await reach(entered)
    runtime.deliver(LiveCommand.Cancel(await child_run_id(runtime, handle.run_id)))
    assert await settle(handle) == NATURAL_END
    content = parsed(tool_contents(await transcript(runtime, handle.run_id))["c1"])
    assert content["error"] == "child_cancelled"
    finished = [
        e.detail
        for e in await agent_events(runtime, handle.run_id)
        if e.kind == "agent.tool_finished"
    ]
    assert finished == [
        {
            "step": 1,
            "tool_call_id": "c1",
            "name": "research",
            "ok": False,
            "error": "child_cancelled",
        }
    ]


async def test_a_failed_sub_agent_is_a_tool_result_with_its_code(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    child = Agent(ScriptedModel([ModelError("unauthorized", "bad key")]))
    parent_model = ScriptedModel([calls(call("c1", "research", prompt="dig")), text("sorry")])
    handle = await runtime.start(Agent(parent_model, [delegate(child)]), input="go")
    assert await settle(handle) == NATURAL_END
    content = parsed(tool_contents(parent_model.calls[1])["c1"])
    assert content == {"error": "child_failed", "message": "unauthorized: bad key"}


async def test_a_sub_agent_that_reaches_max_steps_is_a_tool_result(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    inner = Agent(
        ScriptedModel([calls(call("x", "research", prompt="deeper"))]),
        [delegate(Agent(ScriptedModel([text("bottom")])))],
        max_steps=1,
    )
    parent_model = ScriptedModel([calls(call("c1", "research", prompt="dig")), text("ok")])
    handle = await runtime.start(Agent(parent_model, [delegate(inner)]), input="go")
    assert await settle(handle) == NATURAL_END
    assert parsed(tool_contents(parent_model.calls[1])["c1"])["error"] == "child_max_steps"


async def test_a_sub_agent_call_without_a_prompt_is_an_error_tool_message(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    child_model = ScriptedModel([text("never")])
    parent_model = ScriptedModel([calls(call("c1", "research", query="x")), text("ok")])
    handle = await runtime.start(Agent(parent_model, [delegate(Agent(child_model))]), input="go")
    assert await settle(handle) == NATURAL_END
    assert parsed(tool_contents(parent_model.calls[1])["c1"])["error"] == "invalid_arguments"
    assert child_model.calls == []


async def test_a_sub_agent_that_stops_to_ask_is_ended_with_the_parents_step(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    from awaken_trio.agent import Tool

    asker = Agent(
        ScriptedModel([calls(call("x", "risky"))]),
        [Tool("risky", None, permission="client")],
    )
    parent_model = ScriptedModel([calls(call("c1", "research", prompt="dig")), text("ok")])
    handle = await runtime.start(Agent(parent_model, [delegate(asker)]), input="go")
    assert await settle(handle) == NATURAL_END
    assert parsed(tool_contents(parent_model.calls[1])["c1"])["error"] == "child_awaiting"
    child_id = await child_run_id(runtime, handle.run_id)
    assert await runtime.state(child_id) == CANCELLED  # ended with its parent's attempt
    events: list[RunEvent] = await agent_events(runtime, child_id)
    assert events == []
