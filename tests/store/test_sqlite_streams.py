"""Streams on the SQLite store: a file written before streams existed opens with its runs
readable and streams from then on, and runtimes sharing a file read each other's streams
(woken by the relay's look at the file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from awaken_trio import InvalidArgument, RunContext, RunState, open_runtime
from awaken_trio.store import Accepted, Commit, Expect, StreamDraft, StreamPage
from awaken_trio.store.sqlite import _schema as schema
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.store.sqlite_helpers import pragma, tables

LATEST = len(schema.MIGRATIONS)


def _version_5_file(path: Path) -> None:
    """A store as the release before streams wrote it: one run ended, one running."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for version, migration in enumerate(schema.MIGRATIONS[:5]):
            migration(conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        for run_id, kind, state in (
            ("done", "ended", '{"kind":"ended","cause":{"kind":"natural_end"}}'),
            ("live", "running", '{"kind":"running","generation":1}'),
        ):
            conn.execute(
                "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
                " generation) VALUES (?, ?, ?, 'job', 'null', ?, ?, 1)",
                (run_id, run_id, run_id, kind, state),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_a_file_from_before_streams_is_migrated_and_keeps_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _version_5_file(path)
    assert pragma(path, "user_version") == 5
    async with SQLiteStore(path) as store:
        done = await store.load("done")
        assert done is not None
        assert isinstance(done.state, RunState.Ended)
        assert await store.read_chunks("done", "output", 0, 10) == StreamPage((), 0, True)
        chunks = Commit(
            run_id="live",
            state=RunState.Running(1),
            generation=1,
            expect=Expect(generation=1, state=RunState.Running),
            at=2.0,
            announce=False,
            chunks=(StreamDraft("output", ("hello",)),),
        )
        (result,) = await store.apply([chunks])
        assert isinstance(result, Accepted)
        page = await store.read_chunks("live", "output", 0, 10)
        assert page is not None
        assert [c.value for c in page.chunks] == ["hello"]
    assert pragma(path, "user_version") == LATEST >= 6  # streams came with version 6
    assert "stream_chunks" in tables(path)


async def test_a_run_that_never_streamed_reads_as_such_after_the_migration(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _version_5_file(path)
    async with open_runtime(path) as runtime:
        with pytest.raises(InvalidArgument, match="without writing stream 'output'"):
            async for _ in runtime.read_stream("done"):
                pass


async def test_a_runtime_follows_a_stream_another_runtime_writes_to_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"

    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(20):
            out.send(i)
            await trio.sleep(0.01)
        return None

    with trio.fail_after(30):
        async with (
            open_runtime(path, poll=0.02) as writer,
            open_runtime(path, poll=0.02) as reader,
        ):
            handle = await writer.start(body, run_id="r1")
            got = [c async for c in reader.read_stream("r1")]
            assert [c.value for c in got] == [*range(20), None]
            assert [c.offset for c in got] == list(range(1, 22))
            await handle.wait()
