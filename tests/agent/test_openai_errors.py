"""OpenAIChatModel: a connection or timeout failure names the server's host (never the
credentials in base_url) and says what to check, even when httpx gives no message."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
import trio

from awaken_trio.agent import ModelError, OpenAIChatModel

BASE_URL = "https://alice:s3cret@llm.example:8443/v1"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def failing_client(error: Exception) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> Any:
        raise error

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def infer_error(model: OpenAIChatModel) -> ModelError:
    with trio.fail_after(10), pytest.raises(ModelError) as raised:
        await model.infer(list(USER), [])
    return raised.value


@pytest.mark.parametrize(
    ("error", "code", "says"),
    [
        (httpx.ConnectError(""), "provider_error", "could not connect to llm.example:8443"),
        (httpx.ConnectTimeout(""), "timeout", "llm.example:8443 did not answer in time"),
        (httpx.ReadTimeout(""), "timeout", "llm.example:8443 did not answer in time"),
        (httpx.ReadError(""), "provider_error", "the connection to llm.example:8443 failed"),
    ],
)
async def test_a_transport_failure_names_the_host_and_what_to_check(
    error: Exception, code: str, says: str
) -> None:
    async with failing_client(error) as client:
        failure = await infer_error(OpenAIChatModel("m", base_url=BASE_URL, http_client=client))
    assert (failure.code, failure.retryable) == (code, True)
    assert says in failure.message
    assert f"{type(error).__name__} (no message)" in failure.message
    assert "check base_url and the network" in failure.message
    assert "s3cret" not in failure.message
    assert "alice" not in failure.message


async def test_a_refused_connection_names_the_host_and_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    failure = await infer_error(OpenAIChatModel("m", base_url=f"http://bob:pw@127.0.0.1:{port}/v1"))
    assert (failure.code, failure.retryable) == ("provider_error", True)
    assert f"could not connect to 127.0.0.1:{port}" in failure.message
    assert "check base_url and the network" in failure.message
    assert ":pw@" not in failure.message


@pytest.mark.parametrize(
    ("base_url", "shown"),
    [
        (BASE_URL, "https://alice:***@llm.example:8443/v1"),
        ("https://alice:s3/cr@et@llm.example/v1", "https://alice:***@llm.example/v1"),
        ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    ],
)
def test_the_repr_hides_the_password_of_base_url(base_url: str, shown: str) -> None:
    assert (
        repr(OpenAIChatModel("m", base_url=base_url)) == f"OpenAIChatModel('m', base_url={shown!r})"
    )
