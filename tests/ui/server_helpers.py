"""``awaken-trio ui`` and ``awaken-trio worker`` in real processes: started on a free port,
waited for by reading what they print (under `trio.fail_after`, never a fixed sleep), and
always killed when the test ends."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

HERE: Final = Path(__file__).resolve().parent
COMMAND: Final = (sys.executable, "-m", "awaken_trio")
TIMEOUT: Final = 60.0
"""Seconds a process may take to start or stop before the test fails (a loaded machine
is slow)."""
_URL: Final = re.compile(r"awaken-trio ui: (http://\S+?)/ over")


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWAKEN_TRIO")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@attrs.define
class Process:
    """A process and everything it has written to stderr so far."""

    process: trio.Process
    stderr: bytearray = attrs.field(factory=bytearray)

    @property
    def text(self) -> str:
        return self.stderr.decode(errors="replace")

    async def read_until(self, pattern: str) -> re.Match[str]:
        stream = self.process.stderr
        assert stream is not None
        with trio.fail_after(TIMEOUT):
            while (found := re.search(pattern, self.text)) is None:
                chunk = await stream.receive_some()
                if not chunk:
                    raise AssertionError(f"stderr closed before {pattern!r}: {self.text!r}")
                self.stderr += chunk
        return found

    async def read_to_end(self) -> str:
        stream = self.process.stderr
        assert stream is not None
        with trio.fail_after(TIMEOUT):
            while chunk := await stream.receive_some():
                self.stderr += chunk
        return self.text

    async def wait(self) -> int:
        with trio.fail_after(TIMEOUT):
            return await self.process.wait()


@asynccontextmanager
async def started(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Process]:
    process = await trio.lowlevel.open_process(
        [*COMMAND, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env if env is not None else environment(),
        cwd=HERE,
    )
    try:
        yield Process(process)
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
        if process.stderr is not None:
            await process.stderr.aclose()


@attrs.frozen
class Server:
    process: Process
    url: str


@asynccontextmanager
async def ui_server(
    store: str, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """``awaken-trio ui`` on a free port, once it accepts connections."""
    async with started("ui", "--store", store, "--port", "0", *args, env=env) as process:
        found = await process.read_until(_URL.pattern)
        yield Server(process, found.group(1))


@asynccontextmanager
async def worker(store: str) -> AsyncIterator[Process]:
    """``awaken-trio worker ui_bodies``, once it serves."""
    async with started("worker", "ui_bodies", "--store", store, "--poll", "0.02") as process:
        await process.read_until("serving")
        yield process


class EventStream:
    """A raw HTTP/1.1 reader of ``GET /api/stream`` (the server-sent events), on a socket
    of its own: what the server has sent so far, read until a pattern appears."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.seen = b""

    @property
    def text(self) -> str:
        return self.seen.decode(errors="replace")

    async def read_until(self, pattern: str) -> re.Match[str]:
        with trio.fail_after(TIMEOUT):
            while (found := re.search(pattern, self.text)) is None:
                chunk = await self.stream.receive_some()
                if not chunk:
                    raise AssertionError(f"the stream closed before {pattern!r}: {self.text!r}")
                self.seen += chunk
        return found

    async def read_to_end(self) -> str:
        with trio.fail_after(TIMEOUT):
            while chunk := await self.stream.receive_some():
                self.seen += chunk
        return self.text


@asynccontextmanager
async def event_stream(url: str, query: str = "") -> AsyncIterator[EventStream]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        request = (
            f"GET /api/stream{query} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Accept: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        await stream.send_all(request.encode())
        yield EventStream(stream)
