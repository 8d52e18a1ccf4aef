"""`agent_body(agent, stream=True)`: the text of the model's streamed replies goes to the run's
``"agent.tokens"`` stream as it arrives, while the journal stays what it is without streaming
(the same steps, the same whole responses); a replayed request is not streamed again, and a
cancel mid-stream leaves the text sent so far and no step. On pydantic-ai's ``FunctionModel``
(no network)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from awaken_trio import (
    EndCause,
    EventKind,
    InvalidArgument,
    LiveCommand,
    RunEvent,
    RunState,
    Runtime,
    StreamChunk,
    open_runtime,
)
from awaken_trio.integrations.pydantic_ai import agent_body, load_messages
from awaken_trio.store import MemoryStore, Store
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.integrations.pa_helpers import tool_returns, until
from tests.wrapped_stores import WrappedStore

NATURAL = RunState.Ended(EndCause.NaturalEnd())
CANCELLED = RunState.Ended(EndCause.Cancelled())
TOKENS = "agent.tokens"


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "runs.db", synchronous="normal")
    return MemoryStore()


async def events_of(runtime: Runtime, run_id: str) -> list[RunEvent]:
    return [event async for event in runtime.events(run_id, follow=False)]


async def chunks_of(runtime: Runtime, run_id: str) -> list[tuple[str, Any]]:
    return [
        (chunk.kind, chunk.value)
        async for chunk in runtime.read_stream(run_id, TOKENS, follow=False)
    ]


def journal(events: list[RunEvent]) -> list[tuple[str, Any]]:
    """The run's events as kinds, with each step's name, index and result."""
    return [
        (e.kind, (e.detail["name"], e.detail["index"]) if e.kind == EventKind.STEP else None)
        for e in events
    ]


def transcript(messages: list[ModelMessage]) -> list[list[tuple[str, Any]]]:
    """What the messages say, without their clocks and provider details."""
    said: list[list[tuple[str, Any]]] = []
    for message in messages:
        parts: list[tuple[str, Any]] = []
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                call = (part.tool_name, part.args_as_dict(), part.tool_call_id)
                parts.append(("tool-call", call))
            else:
                parts.append((part.part_kind, getattr(part, "content", None)))
        said.append(parts)
    return said


class Talker:
    """A model that streams: it asks for ``lookup`` (after a few words), then answers in
    pieces with what it got. It answers plain requests the same way. ``gate`` (when set)
    makes the streamed answer wait after its first piece until the asyncio event is set, or
    the request is cancelled (``cancelled`` records it)."""

    def __init__(self, *, hold_answer: bool = False) -> None:
        self.calls = 0
        self.hold_answer = hold_answer
        self.gate: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cancelled = threading.Event()

    def _answer(self, messages: list[ModelMessage]) -> list[str]:
        returned = tool_returns(messages)
        return ["found ", str(returned[-1].content), ", done"]

    async def plain(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        if not tool_returns(messages):
            return ModelResponse(
                parts=[
                    TextPart("Let me check."),
                    ToolCallPart("lookup", {"key": "k"}, tool_call_id="c1"),
                ]
            )
        return ModelResponse(parts=[TextPart("".join(self._answer(messages)))])

    async def streamed(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        self.calls += 1
        if not tool_returns(messages):
            yield "Let me "
            yield "check."
            yield {0: DeltaToolCall("lookup", '{"key": "k"}', tool_call_id="c1")}
            return
        first, *rest = self._answer(messages)
        yield first
        if self.hold_answer:
            self.loop = asyncio.get_running_loop()
            self.gate = asyncio.Event()
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        for piece in rest:
            yield piece

    def release(self) -> None:
        loop, gate = self.loop, self.gate
        assert loop is not None
        assert gate is not None
        loop.call_soon_threadsafe(gate.set)


def talking_agent(talker: Talker, *, name: str = "talker") -> tuple[Agent[None, str], list[str]]:
    agent: Agent[None, str] = Agent(
        FunctionModel(talker.plain, stream_function=talker.streamed, model_name="talker"),
        name=name,
    )
    looked: list[str] = []

    @agent.tool_plain
    def lookup(key: str) -> str:
        looked.append(key)
        return f"value of {key}"

    return agent, looked


async def test_streamed_text_goes_to_agent_tokens_and_the_journal_is_as_without_streaming(
    any_store: Store,
) -> None:
    talker = Talker()
    agent, looked = talking_agent(talker)
    plain, streamed = agent_body(agent), agent_body(agent, stream=True)
    async with open_runtime(any_store, bodies={"plain": plain, "talker": streamed}) as runtime:
        assert await runtime.execute(plain, run_id="p", input="what is k?") == NATURAL
        assert await runtime.execute(streamed, run_id="s", input="what is k?") == NATURAL
        results = [(await runtime.record(r)).result for r in ("p", "s")]
        journals = [journal(await events_of(runtime, r)) for r in ("p", "s")]
        assert await runtime.stream_channels("p") == []
        tokens = await chunks_of(runtime, "s")
    # Each piece of text is a chunk, in the order the model sent it; tool calls are not text.
    assert tokens == [
        ("data", "Let me "),
        ("data", "check."),
        ("data", "found "),
        ("data", "value of k"),
        ("data", ", done"),
        ("end", None),
    ]
    # The journal and the transcript are the same as without streaming.
    assert journals[0] == journals[1]
    assert [name for _, name in journals[1] if name is not None] == [
        ("talker__model.request", 0),
        ("talker__function_toolset__<agent>.call_tool:lookup", 0),
        ("talker__model.request", 1),
    ]
    assert results[0]["output"] == results[1]["output"] == "found value of k, done"
    said = [transcript(load_messages(result["messages"])) for result in results]
    assert said[0] == said[1]
    assert (talker.calls, looked) == (4, ["k", "k"])


async def test_tokens_are_readable_while_the_request_still_streams() -> None:
    talker = Talker(hold_answer=True)
    agent, _ = talking_agent(talker)
    body = agent_body(agent, stream=True)
    async with open_runtime(bodies={"talker": body}) as runtime:
        handle = await runtime.start(body, run_id="live", input="x")
        seen: list[StreamChunk] = []
        with trio.fail_after(10):
            async for chunk in runtime.read_stream("live", TOKENS):
                seen.append(chunk)
                if chunk.value == "found ":
                    break
        # The answer's first piece is out; its request's step is not committed yet.
        steps = [e for e in await events_of(runtime, "live") if e.kind == EventKind.STEP]
        assert len(steps) == 2
        talker.release()
        assert await handle.wait() == NATURAL
    assert [chunk.value for chunk in seen] == ["Let me ", "check.", "found "]


async def test_a_cancel_mid_stream_keeps_the_text_sent_and_commits_no_step() -> None:
    talker = Talker(hold_answer=True)
    agent, _ = talking_agent(talker)
    body = agent_body(agent, stream=True)
    async with open_runtime(bodies={"talker": body}) as runtime:
        handle = await runtime.start(body, run_id="c", input="x")
        await until(lambda: talker.gate is not None)
        runtime.deliver(LiveCommand.Cancel("c"))
        with trio.fail_after(10):
            assert await handle.wait() == CANCELLED
        events = await events_of(runtime, "c")
        tokens = await chunks_of(runtime, "c")
    assert talker.cancelled.is_set()
    # The first request and the tool call were committed; the answer was not.
    assert [name for _, name in journal(events) if name is not None] == [
        ("talker__model.request", 0),
        ("talker__function_toolset__<agent>.call_tool:lookup", 0),
    ]
    assert tokens == [
        ("data", "Let me "),
        ("data", "check."),
        ("data", "found "),
        ("end", None),
    ]
    assert [t.name for t in threading.enumerate() if t.name.startswith("asyncio bridge")] == []


async def test_a_later_attempt_streams_only_its_new_requests_after_a_reset(
    any_store: Store,
) -> None:
    talker = Talker()
    agent: Agent[None, str] = Agent(
        FunctionModel(talker.plain, stream_function=talker.streamed, model_name="talker"),
        name="talker",
    )
    looked: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def lookup(key: str) -> str:
        looked.append(key)
        return f"value of {key}"

    body = agent_body(agent, stream=True)
    async with open_runtime(any_store, bodies={"talker": body}) as runtime:
        state = await runtime.execute(body, run_id="r", input="x")
        assert isinstance(state, RunState.Awaiting)
        handle = await runtime.resume("r", {"decision": "allow"})
        assert await handle.wait() == NATURAL
        tokens = await chunks_of(runtime, "r")
    # The first request was replayed from the journal, not asked (nor streamed) again.
    assert talker.calls == 2
    assert looked == ["k"]
    assert tokens == [
        ("data", "Let me "),
        ("data", "check."),
        ("reset", None),
        ("data", "found "),
        ("data", "value of k"),
        ("data", ", done"),
        ("end", None),
    ]


async def test_a_run_journaled_without_streaming_replays_with_it(tmp_path: Path) -> None:
    """A streamed request is the same step as a plain one: a deploy that turns streaming on
    continues the runs the last one journaled."""
    talker = Talker()
    agent: Agent[None, str] = Agent(
        FunctionModel(talker.plain, stream_function=talker.streamed, model_name="talker"),
        name="talker",
    )

    @agent.tool_plain(requires_approval=True)
    def lookup(key: str) -> str:
        return f"value of {key}"

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    plain = agent_body(agent)
    async with open_runtime(url, bodies={"talker": plain}) as runtime:
        assert isinstance(await runtime.execute(plain, run_id="d", input="x"), RunState.Awaiting)
    streaming = agent_body(agent, stream=True)
    async with open_runtime(url, bodies={"talker": streaming}) as runtime:
        assert await (await runtime.resume("d", {"decision": "allow"})).wait() == NATURAL
        result = (await runtime.record("d")).result
        tokens = await chunks_of(runtime, "d")
    assert talker.calls == 2
    assert result["output"] == "found value of k, done"
    assert tokens == [
        ("data", "found "),
        ("data", "value of k"),
        ("data", ", done"),
        ("end", None),
    ]


async def test_a_store_that_keeps_no_streams_runs_the_agent_and_says_why_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    talker = Talker()
    agent, _ = talking_agent(talker)
    body = agent_body(agent, stream=True)
    with caplog.at_level(logging.WARNING, logger="awaken_trio.integrations.pydantic_ai"):
        async with open_runtime(WrappedStore(), bodies={"talker": body}) as runtime:
            assert await runtime.execute(body, run_id="n", input="x") == NATURAL
            assert (await runtime.record("n")).result["output"] == "found value of k, done"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "run 'n': its tokens are not streamed" in warnings[0]
    assert "keeps no streams" in warnings[0]


def test_agent_body_refuses_a_stream_that_is_not_a_bool() -> None:
    agent, _ = talking_agent(Talker())
    with pytest.raises(InvalidArgument, match="stream must be a bool or None, not 'yes'"):
        agent_body(agent, stream="yes")  # type: ignore[arg-type]


async def test_test_models_streamed_reply_arrives_in_pieces_that_make_the_output() -> None:
    from pydantic_ai.models.test import TestModel

    agent: Agent[None, str] = Agent(
        TestModel(custom_output_text="Your order has shipped"), name="t"
    )
    body = agent_body(agent, stream=True)
    async with open_runtime(bodies={"t": body}) as runtime:
        assert await runtime.execute(body, run_id="tm", input="x") == NATURAL
        output = (await runtime.record("tm")).result["output"]
        tokens = await chunks_of(runtime, "tm")
    pieces = [value for kind, value in tokens if kind == "data"]
    assert len(pieces) > 1
    assert "".join(pieces) == output == "Your order has shipped"
    assert tokens[-1] == ("end", None)


async def test_a_model_that_answers_streamed_requests_only_is_streamed_by_default() -> None:
    talker = Talker()
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=talker.streamed), name="only")

    @agent.tool_plain
    def lookup(key: str) -> str:
        return f"value of {key}"

    body = agent_body(agent)
    async with open_runtime(bodies={"only": body}) as runtime:
        assert await runtime.execute(body, run_id="o", input="x") == NATURAL
        tokens = await chunks_of(runtime, "o")
        # A model that answers both ways is not streamed unless asked.
        both, _ = talking_agent(Talker(), name="both")
        plain = agent_body(both)
        assert await runtime.execute(plain, run_id="b", input="x") == NATURAL
        assert await runtime.stream_channels("b") == []
    assert [value for kind, value in tokens if kind == "data"] == [
        "Let me ",
        "check.",
        "found ",
        "value of k",
        ", done",
    ]
