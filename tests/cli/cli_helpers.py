"""Running ``python -m awaken_trio`` in real processes: on pipes, or on a pseudo-terminal
whose screen is read back; every process is killed when the test ends."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import trio

HERE: Final = Path(__file__).resolve().parent
COMMAND: Final = (sys.executable, "-m", "awaken_trio")
TIMEOUT: Final = 60.0
"""Seconds any one command may take before a test fails (a loaded machine is slow)."""

# CSI and OSC escape sequences, and the other escapes rich writes on a terminal.
_ESCAPES: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[=>()][0-9A-B]?"
)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWAKEN_TRIO")}
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@attrs.frozen
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


async def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Result:
    """Run one command to its end on pipes."""
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [*COMMAND, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env if env is not None else environment(),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def plain(text: str) -> str:
    """Terminal output with its escape sequences removed."""
    return _ESCAPES.sub("", text).replace("\r", "")


class Terminal:
    """A process on a pseudo-terminal (120 x 50): what it wrote, read back."""

    def __init__(self, process: trio.Process, master: int) -> None:
        self.process = process
        self.master = master
        self.raw = b""

    async def read_until(self, pattern: str) -> str:
        """Read until the screen text (escapes removed) matches ``pattern``."""
        while not re.search(pattern, self.text):
            if not await self._read():
                raise AssertionError(f"the terminal closed before {pattern!r}: {self.text!r}")
        return self.text

    async def read_to_end(self) -> str:
        while await self._read():
            pass
        return self.text

    @property
    def text(self) -> str:
        return plain(self.raw.decode(errors="replace"))

    async def _read(self) -> bool:
        await trio.lowlevel.wait_readable(self.master)
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the other side closed
            return False
        self.raw += chunk
        return bool(chunk)


@asynccontextmanager
async def terminal(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[Terminal]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
    process = await trio.lowlevel.open_process(
        [*COMMAND, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env if env is not None else environment(TERM="xterm-256color"),
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    os.set_blocking(master, False)
    try:
        with trio.fail_after(TIMEOUT):
            yield Terminal(process, master)
    finally:
        kill(process)
        os.close(master)


def kill(process: trio.Process) -> None:
    if process.returncode is None:
        process.kill()


@asynccontextmanager
async def background(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[trio.Process]:
    """A command left running (a worker, a follower), on pipes; killed at the end."""
    process = await trio.lowlevel.open_process(
        [*COMMAND, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env if env is not None else environment(),
        cwd=cwd,
    )
    try:
        yield process
    finally:
        kill(process)
        with trio.CancelScope(shield=True):
            await process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


async def read_until(stream: trio.abc.ReceiveStream | None, needle: str, seen: bytearray) -> str:
    """Read a process's pipe until ``needle`` has appeared; all read so far."""
    assert stream is not None
    with trio.fail_after(TIMEOUT):
        while needle.encode() not in seen:
            chunk = await stream.receive_some()
            if not chunk:
                raise AssertionError(f"the pipe closed before {needle!r}: {bytes(seen)!r}")
            seen += chunk
    return seen.decode()


async def wait_exit(process: trio.Process) -> int:
    with trio.fail_after(TIMEOUT):
        return await process.wait()


def send_signal(process: trio.Process, signum: signal.Signals) -> None:
    process.send_signal(signum)
