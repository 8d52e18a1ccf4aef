"""A pydantic-ai agent the multi-process tests run in worker processes (by the name "pa"),
on pydantic-ai's FunctionModel (no network). A worker started with ``--agents`` serves it.

What the model does is read from the run's prompt:

- it asks for ``lookup``, then (with ``approve`` in the prompt) for ``delete``, which needs
  approval, then answers ``found <lookup's value>`` (and what ``delete`` said);
- ``hang-first``: its first request waits until it is cancelled;
- ``hang-once:<path>``: its request after the lookup waits forever, once per marker file
  (the worker is killed there; the next worker finds the marker and goes on);
- ``slow-tool``: ``lookup`` takes a second (a pause can be sent while it runs).

``pa_tokens`` is the same agent on a model that streams (``agent_body(..., stream=True)``):
it says ``Let me look.`` before asking for ``lookup``, then answers ``found `` and
``<lookup's value>`` in two pieces; with ``hang-once:<path>`` it waits forever between the
two, once per marker file.

Every request, tool call and cancellation is printed (``model <run_id>``, ``tool
<run_id>``, ``hanging <run_id>``, ``cancelled <run_id>``), flushed, so a test in another
process sees what ran where.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from awaken_trio import current_context
from awaken_trio.integrations.pydantic_ai import agent_body


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


async def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    run_id = current_context().run_id
    print("model", run_id, flush=True)
    prompt = _prompt(messages)
    returns = {
        part.tool_name: part.content
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    if prompt == "hang-first" or (
        prompt.startswith("hang-once:") and "lookup" in returns and _first(prompt)
    ):
        print("hanging", run_id, flush=True)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print("cancelled", run_id, flush=True)
            raise
    if "lookup" not in returns:
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": "k"}, tool_call_id="c1")])
    if "approve" in prompt and "delete" not in returns:
        return ModelResponse(parts=[ToolCallPart("delete", {"path": "/x"}, tool_call_id="c2")])
    said = f"found {returns['lookup']}"
    if "delete" in returns:
        said += f"; {returns['delete']}"
    return ModelResponse(parts=[TextPart(said)])


def _first(prompt: str) -> bool:
    marker = Path(prompt.split(":", 1)[1])
    if marker.exists():
        return False
    marker.write_text("hung once")
    return True


agent: Agent[None, str] = Agent(FunctionModel(_model), name="pa")


@agent.tool_plain
def lookup(key: str) -> str:
    print("tool", current_context().run_id, flush=True)
    if _prompt_of_run() == "slow-tool":
        time.sleep(1.0)
    return f"value of {key}"


@agent.tool_plain(requires_approval=True)
def delete(path: str) -> str:
    return f"deleted {path}"


def _prompt_of_run() -> str:
    value = current_context().input
    return value if isinstance(value, str) else ""


async def _streamed(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    run_id = current_context().run_id
    print("model", run_id, flush=True)
    returns = {
        part.tool_name: part.content
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    if "lookup" not in returns:
        yield "Let me look."
        yield {0: DeltaToolCall("lookup", '{"key": "k"}', tool_call_id="c1")}
        return
    yield "found "
    prompt = _prompt(messages)
    if prompt.startswith("hang-once:") and _first(prompt):
        print("hanging", run_id, flush=True)
        await asyncio.sleep(3600)
    yield str(returns["lookup"])


streaming: Agent[None, str] = Agent(FunctionModel(stream_function=_streamed), name="pa_tokens")
streaming.tool_plain(lookup)

AGENT_BODIES = {"pa": agent_body(agent), "pa_tokens": agent_body(streaming, stream=True)}
