"""Helpers for the pydantic-ai integration's tests: the skip when pydantic-ai is absent, and
agents on pydantic-ai's own test models (no network)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable

import pytest
import trio


def require_pydantic_ai() -> None:
    """Skip the calling test module, saying what to install, when pydantic-ai is missing;
    under CI=true (where ``.ci/run`` installs the extra) that is a failure instead."""
    if importlib.util.find_spec("pydantic_ai") is None:
        why = "pydantic-ai is not installed (from a checkout: pip install -e '.[pydantic-ai]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)


require_pydantic_ai()

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)
    ]


class Script:
    """A model that asks for one tool call (``lookup``), then answers with what it got.
    ``calls`` counts its requests; ``hang_at`` makes that request (1-based) wait until it is
    cancelled (``cancelled`` is set then), or until ``release`` is set."""

    def __init__(self, *, hang_at: int | None = None) -> None:
        self.calls = 0
        self.hang_at = hang_at
        self.entered: asyncio.Event | None = None
        self.cancelled: list[int] = []
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        n = self.calls
        self.loops.append(asyncio.get_running_loop())
        if n == self.hang_at:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.append(n)
                raise
        returns = tool_returns(messages)
        if not returns:
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": "k"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(f"found {returns[-1].content}")])


def lookup_agent(script: Script, *, name: str = "looker") -> tuple[Agent[None, str], list[str]]:
    """An agent on ``script`` with one tool, ``lookup``, whose calls are counted."""
    agent: Agent[None, str] = Agent(FunctionModel(script), name=name)
    looked: list[str] = []

    @agent.tool_plain
    def lookup(key: str) -> str:
        looked.append(key)
        return f"value of {key}"

    return agent, looked


async def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll ``check`` (something another thread changes) until it holds."""
    with trio.fail_after(seconds):
        while True:
            if check():
                return
            await trio.sleep(0.01)
