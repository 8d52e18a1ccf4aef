"""Helpers for the SQLite store's tests: reading a file as SQLite sees it, from outside the
store, and running a snippet in another process with this checkout's package."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import threading
from pathlib import Path

import trio

from awaken_trio import RunState
from awaken_trio.store import Commit, Expect, NewRun
from awaken_trio.store.sqlite._store import THREAD_NAME_PREFIX, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pragma(path: Path, name: str) -> object:
    """A PRAGMA read through a connection of its own (file-wide settings only)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
    finally:
        conn.close()


def execute(path: Path, *statements: str) -> None:
    """Run statements through a connection of its own, committed."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def store_threads(store: SQLiteStore) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"{THREAD_NAME_PREFIX} {store.path}"]


def any_store_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME_PREFIX)]


def start(run_id: str, *, at: float = 1.0) -> Commit:
    """A commit creating ``run_id`` Running, named ``job``."""
    return Commit(
        run_id=run_id,
        state=RunState.Running(1),
        generation=1,
        expect=Expect(new=True),
        at=at,
        new_run=NewRun(f"thread-{run_id}", None, "job", {"run": run_id}),
        detail={"source": "start"},
    )


async def run_python(snippet: str, *args: str) -> str:
    """Run ``snippet`` in another Python process with this checkout's package; its stdout
    (it must exit 0)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-W", "error", "-c", snippet, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()
