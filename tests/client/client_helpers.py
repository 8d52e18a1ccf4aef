"""Helpers of the client tests: bounded polling, SQLite URLs, and a worker process.

The clients are called from plain threads and from asyncio here, so these helpers are
plain (not Trio) ones. Every wait polls for its condition every `TICK` seconds under a
bound, never a fixed sleep; worker processes are killed in teardown, whatever the test did.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, final

import anyio

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "multiprocess" / "worker_process.py"

POLL = 0.02
"""The clients' and the worker's poll interval: a commit elsewhere is seen within a few."""
TICK = 0.01
WAIT = 30.0
"""The bound of every wait: generous (a loaded machine), and a failure, never a hang."""


def until(check: Callable[[], T | None], what: str, *, seconds: float = WAIT) -> T:
    """Call ``check`` every `TICK` seconds until it returns something other than None or
    False, and return that; an `AssertionError` naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(TICK)


async def until_async(check: Callable[[], bool], what: str) -> None:
    """Look every `TICK` seconds until ``check()`` holds, on whatever backend runs this;
    a failure naming ``what`` after `WAIT` seconds."""
    try:
        with anyio.fail_after(WAIT):
            while True:
                if check():
                    return
                await anyio.sleep(TICK)
    except TimeoutError:
        raise AssertionError(f"timed out after {WAIT} s waiting for {what}") from None


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


@final
class WorkerProcess:
    """``tests/multiprocess/worker_process.py`` serving a store with the test bodies
    (``tests/multiprocess/mp_bodies.py``), its output collected by a reader thread."""

    def __init__(self, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, str(WORKER), url, "--lease", "1.0", "--poll", str(POLL)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, env=env, cwd=str(ROOT), text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited with {self.process.returncode}")
            return "ready worker" in self.lines

        until(ready, "the worker to print 'ready'")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self._reader.join()
        assert self.process.stdout is not None
        self.process.stdout.close()
