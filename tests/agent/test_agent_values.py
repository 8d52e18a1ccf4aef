"""The agent package's values and constructors: checked where they are written."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import trio

import awaken_trio.agent
from awaken_trio import FrozenDict, InvalidArgument, RunContext, RunError
from awaken_trio.agent import (
    Agent,
    Model,
    ModelError,
    ModelReply,
    ScriptedModel,
    SubAgentTool,
    Tool,
    ToolCall,
)
from tests.agent.agent_helpers import Messages, call, echo, text


def test_public_names_report_the_public_module() -> None:
    for name in awaken_trio.agent.__all__:
        assert getattr(awaken_trio.agent, name).__module__ == "awaken_trio.agent", name


def test_a_tool_call_keeps_frozen_json_arguments() -> None:
    tool_call = ToolCall("c1", "add", {"a": [1, 2]})
    assert isinstance(tool_call.arguments, FrozenDict)
    with pytest.raises(TypeError):
        tool_call.arguments["a"] = 3
    assert tool_call == ToolCall("c1", "add", {"a": [1, 2]})
    assert hash(tool_call) == hash(ToolCall("c1", "add", {"a": [1, 2]}))


@pytest.mark.parametrize(
    ("call_id", "name", "arguments"),
    [("", "add", {}), ("c1", "", {}), ("c1", "add", [1]), ("c1", "add", {"x": (1,)})],
)
def test_a_malformed_tool_call_is_refused(call_id: str, name: str, arguments: Any) -> None:
    with pytest.raises(InvalidArgument):
        ToolCall(call_id, name, arguments)


def test_a_reply_holds_its_tool_calls_as_a_tuple_with_distinct_ids() -> None:
    reply = ModelReply(tool_calls=[call("a", "t"), call("b", "t")])
    assert reply.tool_calls == (call("a", "t"), call("b", "t"))
    with pytest.raises(InvalidArgument):
        ModelReply(tool_calls=(call("a", "t"), call("a", "u")))
    with pytest.raises(InvalidArgument):
        ModelReply(text=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ModelReply(usage={"tokens": float("nan")})


def test_a_model_error_is_a_run_error_with_a_stable_code() -> None:
    error = ModelError("rate_limited", "slow down", retryable=True, retry_after=2)
    assert isinstance(error, RunError)
    assert (error.code, error.message, error.retryable, error.retry_after) == (
        "rate_limited",
        "slow down",
        True,
        2.0,
    )
    assert not ModelError("unauthorized").retryable
    with pytest.raises(InvalidArgument):
        ModelError("Not Snake")
    with pytest.raises(InvalidArgument):
        ModelError("timeout", retry_after=float("inf"))


def test_tools_are_checked_when_built() -> None:
    assert Tool("ok-name_1", echo).permission == "auto"
    assert Tool("client", None, permission="client").call is None
    bad_tools: list[Callable[[], object]] = [
        lambda: Tool("has space", echo),
        lambda: Tool("x" * 65, echo),
        lambda: Tool("t", None),
        lambda: Tool("t", echo, permission="sometimes"),  # type: ignore[arg-type]
        lambda: Tool("t", echo, parameters=[1]),
        lambda: Tool("t", "not callable"),  # type: ignore[arg-type]
    ]
    for bad in bad_tools:
        with pytest.raises(InvalidArgument):
            bad()


def test_a_tools_spec_is_an_openai_function_spec() -> None:
    tool = Tool("add", echo, description="adds", parameters={"type": "object", "required": ["a"]})
    assert tool.spec() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "adds",
            "parameters": {"type": "object", "required": ["a"]},
        },
    }
    assert Tool("bare", echo).spec()["function"]["parameters"] == {
        "type": "object",
        "properties": {},
    }


def test_an_agent_is_checked_when_built() -> None:
    model = ScriptedModel([])
    bad_agents: list[Callable[[], object]] = [
        lambda: Agent(object()),  # type: ignore[arg-type]
        lambda: Agent(model, [Tool("t", echo), Tool("t", echo)]),
        lambda: Agent(model, [echo]),  # type: ignore[list-item]
        lambda: Agent(model, max_steps=0),
        lambda: Agent(model, retries=-1),
        lambda: Agent(model, system=3),  # type: ignore[arg-type]
    ]
    for bad in bad_agents:
        with pytest.raises(InvalidArgument):
            bad()


def test_an_agent_is_a_body_that_can_be_registered_by_name() -> None:
    agent = Agent(ScriptedModel([]), [SubAgentTool("helper", Agent(ScriptedModel([])))])
    assert inspect.iscoroutinefunction(type(agent).__call__)
    assert [tool.name for tool in agent.tools] == ["helper"]
    assert not hasattr(agent, "__dict__")  # no room for per-run state


def test_the_bundled_models_satisfy_the_model_port() -> None:
    assert isinstance(ScriptedModel([]), Model)
    assert isinstance(awaken_trio.agent.OpenAIChatModel("m", base_url="http://x"), Model)


async def test_a_scripted_model_plays_its_script_and_keeps_copies_of_what_it_saw() -> None:
    async def computed(messages: Messages, tools: Messages) -> ModelReply:
        return text(f"{len(messages)} messages")

    error = ModelError("timeout", "t", retryable=True)
    model = ScriptedModel([text("one"), error, computed])
    messages = [{"role": "user", "content": "hi"}]
    assert await model.infer(messages, []) == text("one")
    messages.append({"role": "user", "content": "again"})
    with pytest.raises(ModelError) as raised:
        await model.infer(messages, [{"type": "function"}])
    assert raised.value is error
    assert await model.infer(messages, []) == text("2 messages")
    assert model.calls[0] == [{"role": "user", "content": "hi"}]  # a copy, not the list
    assert model.tools[1] == [{"type": "function"}]
    assert model.remaining == 0
    with pytest.raises(ModelError) as ran_out:
        await model.infer(messages, [])
    assert ran_out.value.code == "invalid_reply"
    assert len(model.calls) == 4


async def test_every_scripted_inference_is_a_checkpoint() -> None:
    model = ScriptedModel([text("x")])
    with trio.CancelScope() as scope:
        scope.cancel()
        await model.infer([], [])
    assert scope.cancelled_caught
    assert model.remaining == 1


def test_a_scripted_model_refuses_entries_it_cannot_play() -> None:
    with pytest.raises(InvalidArgument):
        ScriptedModel(["not a reply"])  # type: ignore[list-item]


def test_sub_agent_tool_checks_its_name() -> None:
    with pytest.raises(InvalidArgument):
        SubAgentTool("bad name", Agent(ScriptedModel([])))

    async def body(ctx: RunContext) -> object:
        return None

    assert SubAgentTool("any_body", body).as_tool().parameters is not None


def test_a_tool_call_can_carry_arguments_text_that_is_not_a_json_object() -> None:
    cut = ToolCall("c1", "add", raw_arguments='{"a": 1')
    assert (cut.arguments, cut.raw_arguments) == (FrozenDict(), '{"a": 1')
    assert ToolCall("c1", "add", {"a": 1}).raw_arguments is None
    bad_calls: list[Callable[[], object]] = [
        lambda: ToolCall("c1", "add", {"a": 1}, raw_arguments="{oops"),  # both
        lambda: ToolCall("c1", "add", raw_arguments='{"a": 1}'),  # readable: use arguments
        lambda: ToolCall("c1", "add", raw_arguments=""),  # no arguments: use arguments={}
        lambda: ToolCall("c1", "add", raw_arguments=3),  # type: ignore[arg-type]
    ]
    for bad in bad_calls:
        with pytest.raises(InvalidArgument):
            bad()


def test_a_reply_says_why_the_model_stopped_if_it_said() -> None:
    assert ModelReply(text="x").finish_reason is None
    assert ModelReply(text="x", finish_reason="length").finish_reason == "length"
    with pytest.raises(InvalidArgument):
        ModelReply(finish_reason=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ModelReply("x", (), None, "length")  # type: ignore[call-arg]
