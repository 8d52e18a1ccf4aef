"""OpenAIChatModel against a fake OpenAI-compatible server on loopback (no network).

These tests use real sockets, so they run on the real clock; every wait is bounded by
``trio.fail_after`` and nothing sleeps for a fixed time.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from awaken_trio import EndCause, InvalidArgument, LiveCommand, RunContext, RunState, Runtime
from awaken_trio.agent import Agent, ModelError, ModelReply, OpenAIChatModel, Tool, ToolCall
from tests.agent.agent_helpers import call, calls, echo, tool_contents, transcript
from tests.agent.fake_openai import FakeOpenAI, Raw, Status, Stream, chunk, text_stream, usage_chunk
from tests.run_helpers import settle

USER = [{"role": "user", "content": "hi"}]
BOUND = 10  # seconds any single exchange with the local server may take


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


async def infer(model: OpenAIChatModel, tools: list[dict[str, Any]] | None = None) -> ModelReply:
    with trio.fail_after(BOUND):
        return await model.infer(list(USER), tools or [])


async def infer_error(model: OpenAIChatModel) -> ModelError:
    with pytest.raises(ModelError) as raised:
        await infer(model)
    return raised.value


async def test_a_streamed_reply_is_assembled_with_its_usage(server: FakeOpenAI) -> None:
    server.script(text_stream("Hel", "lo", "!", usage=(12, 3)))
    spec = Tool("add", echo, description="adds").spec()
    reply = await infer(model_for(server, api_key="sk-test"), [spec])
    assert reply == ModelReply(
        text="Hello!",
        usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        finish_reason="stop",
    )
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "fake-model",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [spec],
    }


async def test_tool_calls_are_assembled_from_their_deltas(server: FakeOpenAI) -> None:
    first = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "add"}}
    second = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "look"}}
    server.script(
        Stream(
            [
                chunk(content="Let me check."),
                chunk(tool_calls=[{**first, "function": {"name": "add", "arguments": ""}}]),
                chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"a": 1, '}}]),
                chunk(tool_calls=[{**second, "function": {"name": "look", "arguments": '{"q"'}}]),
                chunk(tool_calls=[{"index": 0, "function": {"arguments": '"b": 2}'}}]),
                chunk(tool_calls=[{"index": 1, "function": {"arguments": ': "x"}'}}]),
                chunk(finish="tool_calls"),
                usage_chunk(5, 7),
            ]
        )
    )
    reply = await infer(model_for(server))
    assert (reply.text, reply.finish_reason) == ("Let me check.", "tool_calls")
    assert reply.tool_calls == (
        ToolCall("call_a", "add", {"a": 1, "b": 2}),
        ToolCall("call_b", "look", {"q": "x"}),
    )
    assert "authorization" not in server.requests[0].headers  # no key: none sent


async def test_a_tool_call_without_arguments_gets_an_empty_object(server: FakeOpenAI) -> None:
    server.script(
        Stream(
            [
                chunk(tool_calls=[{"index": 0, "id": "c", "function": {"name": "now"}}]),
                chunk(finish="tool_calls"),
            ]
        )
    )
    assert (await infer(model_for(server))).tool_calls == (ToolCall("c", "now", {}),)


@pytest.mark.parametrize(
    ("status", "body", "headers", "code", "retryable"),
    [
        (429, {"error": {"message": "Rate limit", "type": "requests"}}, {}, "rate_limited", True),
        (
            429,
            {"error": {"message": "quota", "code": "insufficient_quota"}},
            {},
            "rate_limited",
            False,
        ),
        (401, {"error": {"message": "Incorrect API key"}}, {}, "unauthorized", False),
        (403, {"error": "forbidden"}, {}, "unauthorized", False),
        (
            400,
            {"error": {"message": "too long", "code": "context_length_exceeded"}},
            {},
            "context_overflow",
            False,
        ),
        (
            400,
            {"error": {"message": "This model's maximum context length is 8192 tokens"}},
            {},
            "context_overflow",
            False,
        ),
        (400, {"error": {"message": "unknown parameter"}}, {}, "provider_error", False),
        (404, b"not here", {}, "provider_error", False),
        (408, {}, {}, "timeout", True),
        (500, {"error": {"message": "boom"}}, {}, "provider_error", True),
        (503, b"<html>unavailable</html>", {}, "provider_error", True),
    ],
)
async def test_error_statuses_map_to_stable_codes(
    server: FakeOpenAI,
    status: int,
    body: Any,
    headers: dict[str, str],
    code: str,
    retryable: bool,
) -> None:
    server.script(Status(status, body, headers))
    error = await infer_error(model_for(server))
    assert (error.code, error.retryable) == (code, retryable)
    assert f"HTTP {status}" in error.message


async def test_a_rate_limit_carries_the_providers_retry_after(server: FakeOpenAI) -> None:
    server.script(
        Status(429, {"error": {"message": "slow"}}, {"Retry-After": "7"}),
        Status(429, {"error": {"message": "slow"}}, {"retry-after-ms": "250"}),
    )
    model = model_for(server)
    assert (await infer_error(model)).retry_after == 7.0
    assert (await infer_error(model)).retry_after == 0.25


@pytest.mark.parametrize(
    ("response", "code", "retryable"),
    [
        (Raw(b"data: {not json}\n\n"), "invalid_reply", False),
        (Raw(b"data: [1, 2]\n\n"), "invalid_reply", False),
        (
            Stream(
                [
                    chunk(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}]),
                    chunk(finish="stop"),
                ]
            ),
            "invalid_reply",
            False,
        ),
        (Stream([chunk(content="cut")], done=False), "provider_error", True),
        (
            Stream([{"error": {"message": "overloaded", "type": "server_error"}}]),
            "provider_error",
            True,
        ),
        (Raw(b"{broken", content_type="application/json"), "invalid_reply", False),
    ],
)
async def test_a_reply_that_cannot_be_read_fails_with_a_stable_code(
    server: FakeOpenAI, response: Stream | Raw, code: str, retryable: bool
) -> None:
    server.script(response)
    error = await infer_error(model_for(server))
    assert (error.code, error.retryable) == (code, retryable)


async def test_a_server_that_ignores_stream_is_still_understood(server: FakeOpenAI) -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x": 1}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"total_tokens": 4},
    }
    server.script(Raw(json.dumps(completion).encode(), content_type="application/json"))
    reply = await infer(model_for(server))
    assert reply == ModelReply(
        tool_calls=(ToolCall("c1", "f", {"x": 1}),),
        usage={"total_tokens": 4},
        finish_reason="tool_calls",
    )


async def test_a_stalled_stream_times_out_as_a_retryable_timeout(server: FakeOpenAI) -> None:
    server.script(Stream([chunk(content="partial"), chunk(finish="stop")], stall_after=1))
    error = await infer_error(model_for(server, timeout=0.3))
    assert (error.code, error.retryable) == ("timeout", True)


async def test_a_refused_connection_is_a_retryable_provider_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1")
    error = await infer_error(model)
    assert (error.code, error.retryable) == ("provider_error", True)


async def test_base_url_and_api_key_default_to_the_environment(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    model = OpenAIChatModel("fake-model")
    assert model.base_url == server.base_url
    server.script(text_stream("ok"))
    assert (await infer(model)).text == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIChatModel("m").base_url == "https://api.openai.com/v1"


async def test_a_given_http_client_is_used_and_left_open(server: FakeOpenAI) -> None:
    seen: list[str] = []

    async def note(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async with httpx.AsyncClient(event_hooks={"request": [note]}) as client:
        model = model_for(server, http_client=client)
        server.script(text_stream("one"), text_stream("two"))
        assert (await infer(model)).text == "one"
        assert (await infer(model)).text == "two"
        assert not client.is_closed
    assert seen == [f"{server.base_url}/chat/completions"] * 2


async def test_an_agent_runs_over_the_openai_adapter(runtime: Runtime, server: FakeOpenAI) -> None:
    server.script(
        Stream(
            [
                chunk(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "call_1",
                            "function": {"name": "echo", "arguments": '{"n": 1}'},
                        }
                    ]
                ),
                chunk(finish="tool_calls"),
                usage_chunk(10, 2),
            ]
        ),
        text_stream("The tool said 1.", usage=(20, 5)),
    )
    agent = Agent(model_for(server), [Tool("echo", echo)], system="be brief")
    handle = await runtime.start(agent, input="use the tool")
    with trio.fail_after(BOUND):
        assert await handle.wait() == RunState.Ended(EndCause.NaturalEnd())
    record = await runtime.record(handle.run_id)
    assert record.result == {
        "text": "The tool said 1.",
        "steps": 2,
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    }
    second = server.requests[1].body["messages"]
    assert second == (await transcript(runtime, handle.run_id))[:-1]
    assert tool_contents(second) == {"call_1": '{"n": 1}'}


async def test_a_stream_that_stalls_mid_reply_is_cancelled_and_its_connection_closed(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    server.script(Stream([chunk(content="I am thinking"), chunk(finish="stop")], stall_after=1))
    handle = await runtime.start(Agent(model_for(server)), input="think hard")
    with trio.fail_after(BOUND):
        await server.stalled.wait()
    runtime.deliver(LiveCommand.Cancel(handle.run_id))
    with trio.fail_after(BOUND):
        assert await handle.wait() == RunState.Ended(EndCause.Cancelled())
        await server.disconnected.wait()
    record = await runtime.record(handle.run_id)
    assert record.checkpoint is None
    assert record.result is None


async def test_a_retryable_provider_error_is_retried_by_the_agent(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    server.script(Status(503, {"error": {"message": "busy"}}), text_stream("recovered"))
    agent = Agent(model_for(server), backoff=lambda retry: 0.0)
    handle = await runtime.start(agent, input="hi")
    assert await settle(handle) == RunState.Ended(EndCause.NaturalEnd())
    assert len(server.requests) == 2
    assert (await runtime.record(handle.run_id)).result == {"text": "recovered", "steps": 1}
    assert calls(call("x", "y")).tool_calls  # the helpers build the same values as the adapter


@pytest.mark.parametrize(
    "arguments", ["{oops", '{"path": "a', "[1, 2]", '"text"', '{"n": NaN}', '{"a": 1} {"b": 2}']
)
async def test_tool_call_arguments_that_are_not_a_json_object_are_kept_as_sent(
    server: FakeOpenAI, arguments: str
) -> None:
    server.script(
        Stream(
            [
                chunk(
                    tool_calls=[
                        {"index": 0, "id": "c", "function": {"name": "f", "arguments": arguments}}
                    ]
                ),
                chunk(finish="tool_calls"),
            ]
        )
    )
    reply = await infer(model_for(server))
    assert reply.tool_calls == (ToolCall("c", "f", raw_arguments=arguments),)


async def test_a_reply_cut_off_by_the_length_limit_says_so(server: FakeOpenAI) -> None:
    server.script(Stream([chunk(content="The answer is"), chunk(finish="length")]))
    reply = await infer(model_for(server))
    assert (reply.text, reply.finish_reason) == ("The answer is", "length")
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A"},
                "finish_reason": "length",
            }
        ]
    }
    server.script(Raw(json.dumps(completion).encode(), content_type="application/json"))
    assert (await infer(model_for(server))).finish_reason == "length"


async def test_an_agent_tells_the_model_its_tool_call_arguments_were_not_json(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    ran: list[object] = []

    async def look(arguments: dict[str, Any], ctx: RunContext) -> object:
        ran.append(arguments)
        return "found"

    cut = '{"path": "notes'
    server.script(
        Stream(
            [
                chunk(
                    tool_calls=[
                        {"index": 0, "id": "call_1", "function": {"name": "look", "arguments": cut}}
                    ]
                ),
                chunk(finish="length"),
            ]
        ),
        text_stream("I will not guess the path."),
    )
    handle = await runtime.start(Agent(model_for(server), [Tool("look", look)]), input="look")
    with trio.fail_after(BOUND):
        assert await handle.wait() == RunState.Ended(EndCause.NaturalEnd())
    assert ran == []
    # The second request is valid chat-completions input: the call as the model sent it,
    # then its tool message.
    assistant, tool = server.requests[1].body["messages"][1:]
    assert assistant["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": cut}}
    ]
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_1"
    assert json.loads(tool["content"])["error"] == "invalid_arguments"
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "I will not guess the path.", "steps": 2}
    events = [e async for e in runtime.events(handle.run_id, follow=False)]
    truncated = [e.detail for e in events if e.kind == "agent.truncated"]
    assert truncated == [{"step": 1, "finish_reason": "length"}]


async def test_an_agent_run_cut_off_by_the_length_limit_reports_it_in_its_result(
    runtime: Runtime, server: FakeOpenAI
) -> None:
    server.script(Stream([chunk(content="Once upon"), chunk(finish="length")]))
    handle = await runtime.start(Agent(model_for(server)), input="a long story")
    with trio.fail_after(BOUND):
        assert await handle.wait() == RunState.Ended(EndCause.NaturalEnd())
    record = await runtime.record(handle.run_id)
    assert record.result == {"text": "Once upon", "steps": 1, "finish_reason": "length"}


async def test_request_parameters_are_passed_through_unchanged(server: FakeOpenAI) -> None:
    tool_choice = {"type": "function", "function": {"name": "add"}}
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}
    extra_body = {"seed": 7, "top_p": 0.5, "metadata": {"tags": ["a", None]}}
    model = model_for(
        server,
        api_key="sk-test",
        temperature=0.2,
        max_tokens=50,
        tool_choice=tool_choice,
        response_format=response_format,
        extra_headers={"X-Org": "acme", "OpenAI-Beta": "x=1"},
        extra_body=extra_body,
    )
    # What the caller keeps and changes afterwards is not what the model sends.
    extra_body["seed"] = 8
    tool_choice["type"] = "changed"
    spec = Tool("add", echo).spec()
    server.script(text_stream("one"), text_stream("two"))
    assert (await infer(model, [spec])).text == "one"
    assert (await infer(model, [spec])).text == "two"
    first, second = server.requests
    assert (
        first.body
        == second.body
        == {
            "model": "fake-model",
            "messages": USER,
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [spec],
            "temperature": 0.2,
            "max_tokens": 50,
            "tool_choice": {"type": "function", "function": {"name": "add"}},
            "response_format": response_format,
            "seed": 7,
            "top_p": 0.5,
            "metadata": {"tags": ["a", None]},
        }
    )
    assert first.headers["x-org"] == "acme"
    assert first.headers["openai-beta"] == "x=1"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert "acme" not in repr(model)


async def test_a_request_without_tools_sends_no_tool_choice(server: FakeOpenAI) -> None:
    # The API refuses a tool_choice without tools; an agent with no tools sends none.
    server.script(text_stream("ok"))
    assert (await infer(model_for(server, tool_choice="required", temperature=0))).text == "ok"
    body = server.requests[0].body
    assert "tool_choice" not in body
    assert body["temperature"] == 0


async def test_an_extra_header_replaces_the_one_the_model_would_send(server: FakeOpenAI) -> None:
    model = model_for(
        server,
        api_key="sk-test",
        extra_headers={"authorization": "Basic dXNlcjpwYXNz", "ACCEPT": "text/event-stream"},
    )
    server.script(text_stream("ok"))
    assert (await infer(model)).text == "ok"
    headers = server.requests[0].headers
    assert headers["authorization"] == "Basic dXNlcjpwYXNz"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"tool_choice": 3}, "tool_choice"),
        ({"tool_choice": ""}, "tool_choice"),
        ({"tool_choice": {"x": (1,)}}, "tool_choice"),
        ({"response_format": "json"}, "response_format"),
        ({"extra_headers": {"X-Key": 1}}, "extra_headers"),
        ({"extra_headers": {"bad name": "v"}}, "extra_headers"),
        ({"extra_headers": {"X-Key": "a\r\nInjected: 1"}}, "extra_headers"),
        ({"extra_headers": ["X-Key"]}, "extra_headers"),
        ({"extra_body": [1]}, "extra_body"),
        ({"extra_body": {"seed": float("inf")}}, "extra_body"),
        ({"extra_body": {"stream": False}}, "stream"),
        ({"extra_body": {"messages": []}}, "messages"),
        ({"temperature": 1, "extra_body": {"temperature": 0}}, "temperature"),
    ],
)
def test_bad_request_parameters_are_refused_when_the_model_is_built(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", **options)
    assert named in str(refused.value)


def test_a_refused_header_value_is_not_repeated() -> None:
    with pytest.raises(InvalidArgument) as refused:
        OpenAIChatModel("m", base_url="http://x", extra_headers={"X-Key": "sk-secret\n"})
    assert "sk-secret" not in str(refused.value)
