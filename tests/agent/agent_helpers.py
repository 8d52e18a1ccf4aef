"""Helpers the agent tests share: building replies, reading what a run committed."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from awaken_trio import RunContext, RunEvent, RunRecord, RunState, Runtime
from awaken_trio.agent import ModelReply, ToolCall

Messages = list[dict[str, Any]]


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


def calls(*tool_calls: ToolCall, text: str | None = None, usage: Any = None) -> ModelReply:
    return ModelReply(text=text, tool_calls=tool_calls, usage=usage)


def text(value: str, usage: Any = None) -> ModelReply:
    return ModelReply(text=value, usage=usage)


async def echo(arguments: dict[str, Any], ctx: RunContext) -> object:
    return arguments


async def agent_events(runtime: Runtime, run_id: str) -> list[RunEvent]:
    """The run's own ``agent.*`` events, oldest first."""
    return [e async for e in runtime.events(run_id, follow=False) if e.kind.startswith("agent.")]


async def all_events(runtime: Runtime, run_id: str) -> list[RunEvent]:
    return [e async for e in runtime.events(run_id, follow=False)]


def terminal_index(events: list[RunEvent]) -> int:
    return next(
        i
        for i, e in enumerate(events)
        if e.kind == "committed" and isinstance(e.state, RunState.Ended)
    )


async def transcript(runtime: Runtime, run_id: str) -> Messages:
    record = await runtime.record(run_id)
    assert isinstance(record.checkpoint, dict), record.checkpoint
    messages: Messages = record.checkpoint["messages"]
    return messages


def tool_contents(messages: Messages) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def parsed(content: str) -> Any:
    return json.loads(content)


def blocking_reply(
    reply: ModelReply, release: trio.Event, entered: trio.Event | None = None
) -> Callable[[Messages, Messages], Awaitable[ModelReply]]:
    """A scripted step that waits for ``release`` before answering ``reply``."""

    async def step(messages: Messages, tools: Messages) -> ModelReply:
        if entered is not None:
            entered.set()
        await release.wait()
        return reply

    return step


async def hang(messages: Messages, tools: Messages) -> ModelReply:
    """A scripted step for a provider that never answers."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def ended(runtime: Runtime, run_id: str) -> RunRecord:
    record = await runtime.record(run_id)
    assert isinstance(record.state, RunState.Ended), record.state
    return record
