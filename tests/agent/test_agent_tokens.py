"""An agent's tokens: ``OpenAIChatModel(stream=True)`` sends the reply's text to the run's
``"agent.tokens"`` stream as the server streams it, while the transcript, the result and
the step commits stay exactly those of a model that does not; a retried inference's partial
text is marked; a cancel mid-reply closes the response at once; ``send_token`` lets any
model stream. Against the fake server on loopback (real sockets: the real clock, every
wait bounded)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from awaken_trio import (
    EndCause,
    InvalidArgument,
    JsonValue,
    LiveCommand,
    RunState,
    Runtime,
    StreamChunk,
    open_runtime,
)
from awaken_trio.agent import Agent, ModelReply, OpenAIChatModel, ScriptedModel, Tool, send_token
from tests.agent.agent_helpers import all_events, echo
from tests.agent.fake_openai import FakeOpenAI, Stream, chunk, text_stream, usage_chunk
from tests.run_helpers import settle
from tests.wrapped_stores import WrappedStore

BOUND = 10
TOKENS = "agent.tokens"


@pytest.fixture(autouse=True)
def _no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeOpenAI:
    fake = FakeOpenAI()
    await nursery.start(fake.serve)
    return fake


def model_for(server: FakeOpenAI, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("fake-model", base_url=server.base_url, **options)


async def tokens_of(runtime: Runtime, run_id: str) -> list[JsonValue]:
    return [
        c.value async for c in runtime.read_stream(run_id, TOKENS, follow=False) if c.kind == "data"
    ]


def tool_step() -> Stream:
    return Stream(
        [
            chunk(content="Let me look. "),
            chunk(
                tool_calls=[
                    {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": '{"n"'}}
                ]
            ),
            chunk(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]),
            chunk(finish="tool_calls"),
            usage_chunk(10, 3),
        ]
    )


def script(server: FakeOpenAI) -> None:
    server.script(tool_step(), text_stream("The ", "answer ", "is 1.", usage=(20, 4)))


def committed(events: list[Any]) -> list[tuple[str, Any, Any]]:
    """What a run committed, without the times: kinds, states and details in order."""
    return [(e.kind, e.state, dict(e.detail)) for e in events]


async def test_tokens_stream_while_the_transcript_and_commits_stay_the_same(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    runs: dict[bool, str] = {}
    for stream in (False, True):
        script(server)
        agent = Agent(model_for(server, stream=stream), [Tool("echo", echo)])
        handle = await runtime.start(agent, input="what is n?", run_id=f"stream-{stream}")
        with trio.fail_after(BOUND):
            assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
        runs[stream] = handle.run_id
    plain, streamed = (await runtime.record(runs[False])), (await runtime.record(runs[True]))
    assert streamed.result == plain.result
    assert streamed.checkpoint == plain.checkpoint
    assert committed(await all_events(runtime, runs[True])) == committed(
        await all_events(runtime, runs[False])
    )
    # The request is the same too: the wire format streams either way.
    assert server.requests[0].body == server.requests[2].body
    assert await tokens_of(runtime, runs[True]) == ["Let me look. ", "The ", "answer ", "is 1."]
    with pytest.raises(InvalidArgument, match=r"without writing stream 'agent\.tokens'"):
        await tokens_of(runtime, runs[False])


async def test_tokens_are_readable_before_the_reply_is_complete_and_a_cancel_closes_it(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    server.script(
        Stream(
            [chunk(content="I am"), chunk(content=" thinking"), chunk(finish="stop")],
            stall_after=2,
        )
    )
    handle = await runtime.start(Agent(model_for(server, stream=True)), input="think")
    got: list[StreamChunk] = []
    with trio.fail_after(BOUND):
        async for token in runtime.read_stream(handle.run_id, TOKENS):
            got.append(token)
            if len(got) == 2:
                break
    assert [c.value for c in got] == ["I am", " thinking"]
    assert isinstance(await runtime.state(handle.run_id), RunState.Running)  # still reading
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    with trio.fail_after(BOUND):
        assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
        await server.disconnected.wait()  # the response was closed at once
    record = await runtime.record(handle.run_id)
    assert record.checkpoint is None  # nothing of the partial reply was committed
    kinds = [c.kind async for c in runtime.read_stream(handle.run_id, TOKENS)]
    assert kinds == ["data", "data", "end"]


async def test_a_retried_inference_marks_its_partial_text(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    server.script(
        Stream([chunk(content="Half a")], done=False),  # cut off: retryable
        text_stream("Whole ", "answer."),
    )
    agent = Agent(model_for(server, stream=True), backoff=lambda retry: 0.0)
    handle = await runtime.start(agent, input="hi")
    with trio.fail_after(BOUND):
        assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert await tokens_of(runtime, handle.run_id) == [
        "Half a",
        {"retry": 1, "code": "provider_error"},
        "Whole ",
        "answer.",
    ]
    assert (await runtime.record(handle.run_id)).result == {"text": "Whole answer.", "steps": 1}


async def test_a_streaming_model_outside_an_agent_streams_nothing(server: FakeOpenAI) -> None:
    server.script(text_stream("plain"))
    with trio.fail_after(BOUND):
        reply = await model_for(server, stream=True).infer([{"role": "user", "content": "x"}], [])
    assert reply == ModelReply(text="plain", finish_reason="stop")


def test_stream_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgument, match="stream must be a bool"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1", stream="yes")  # type: ignore[arg-type]


async def test_any_model_streams_with_send_token(runtime: Runtime) -> None:
    async def reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        for word in ("one ", "two"):
            send_token(word)
            await trio.lowlevel.checkpoint()
        return ModelReply(text="one two")

    handle = await runtime.start(Agent(ScriptedModel([reply])), input="count")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert await tokens_of(runtime, handle.run_id) == ["one ", "two"]
    send_token("outside any agent: nothing happens")
    with pytest.raises(InvalidArgument, match="send_token"):
        send_token(3)  # type: ignore[arg-type]


async def test_an_agent_on_a_store_that_keeps_no_streams_runs_and_says_why_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        send_token("a")
        send_token("b")
        return ModelReply(text="ab")

    caplog.set_level(logging.WARNING, "awaken_trio.agent")
    async with open_runtime(WrappedStore()) as runtime:
        state = await runtime.execute(Agent(ScriptedModel([reply])), input="x")
    assert state == RunState.Ended(EndCause.NaturalEnd())
    warned = [r for r in caplog.records if "tokens are not streamed" in r.getMessage()]
    assert len(warned) == 1
