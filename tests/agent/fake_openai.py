"""A fake OpenAI-compatible chat-completions server on loopback, for adapter tests.

A small Trio HTTP/1.1 server (one request per connection) that answers each request with
the next scripted response: an event stream of chunks (optionally stalling part-way), or
an error status with a body. It records every request it received.
"""

from __future__ import annotations

import json
from collections import deque
from functools import partial
from typing import Any

import attrs
import trio

Chunk = dict[str, Any]


@attrs.frozen
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@attrs.frozen
class Stream:
    """A 200 event stream: ``chunks`` as ``data:`` events, then ``[DONE]`` (if ``done``).
    With ``stall_after`` set, only that many chunks are sent and the stream stays open."""

    chunks: list[Chunk]
    done: bool = True
    stall_after: int | None = None


@attrs.frozen
class Status:
    """An error status with a body (JSON if it is not bytes)."""

    code: int
    body: Any = None
    headers: dict[str, str] = attrs.Factory(dict)


@attrs.frozen
class Raw:
    """A 200 response with exactly these body bytes and content type."""

    body: bytes
    content_type: str = "text/event-stream"


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}


class FakeOpenAI:
    """Serve ``responses`` in order; ``requests`` records what came in."""

    def __init__(self) -> None:
        self.responses: deque[Stream | Status | Raw] = deque()
        self.requests: list[Request] = []
        self.port = 0
        self.stalled = trio.Event()  # a stalling stream has sent its chunks
        self.disconnected = trio.Event()  # ... and then saw its client go away

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *responses: Stream | Status | Raw) -> None:
        self.responses.extend(responses)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
            )
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started()

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            request = await _read_request(stream)
            if request is None:
                return
            self.requests.append(request)
            response = self.responses.popleft() if self.responses else Status(500, "no reply")
            await self._respond(stream, response)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _respond(self, stream: trio.SocketStream, response: Stream | Status | Raw) -> None:
        if isinstance(response, Status):
            body = (
                response.body
                if isinstance(response.body, bytes)
                else json.dumps(response.body).encode()
            )
            lines = [f"HTTP/1.1 {response.code} {_REASONS.get(response.code, 'Error')}"]
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
            lines += [f"{k}: {v}" for k, v in response.headers.items()]
            lines += ["Connection: close", "", ""]
            await stream.send_all("\r\n".join(lines).encode() + body)
            return
        if isinstance(response, Raw):
            head = f"HTTP/1.1 200 OK\r\nContent-Type: {response.content_type}\r\n"
            head += f"Content-Length: {len(response.body)}\r\nConnection: close\r\n\r\n"
            await stream.send_all(head.encode() + response.body)
            return
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        chunks = response.chunks
        if response.stall_after is not None:
            chunks = chunks[: response.stall_after]
        for chunk in chunks:
            await _send_chunk(stream, f"data: {json.dumps(chunk)}\n\n".encode())
        if response.stall_after is not None:
            self.stalled.set()
            while await stream.receive_some(4096):
                pass  # the client sends nothing more; EOF means it went away
            self.disconnected.set()
            return
        if response.done:
            await _send_chunk(stream, b"data: [DONE]\n\n")
        await stream.send_all(b"0\r\n\r\n")


async def _send_chunk(stream: trio.SocketStream, data: bytes) -> None:
    await stream.send_all(b"%x\r\n%s\r\n" % (len(data), data))


async def _read_request(stream: trio.SocketStream) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = await stream.receive_some(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        more = await stream.receive_some(65536)
        if not more:
            return None
        body += more
    return Request(method, path, headers, json.loads(body) if body else None)


# --------------------------------------------------------------------------- chunks


def chunk(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
) -> Chunk:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion: int) -> Chunk:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def text_stream(*pieces: str, usage: tuple[int, int] | None = None) -> Stream:
    chunks = [chunk(content=piece) for piece in pieces] + [chunk(finish="stop")]
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return Stream(chunks)
