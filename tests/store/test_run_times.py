"""A run's times, its end cause as a filter, and the counts by state and cause: through the
runtime on the memory and SQLite stores, from a file written before they existed, and by
the indexes SQLite reads them from."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from awaken_trio import (
    InvalidArgument,
    LiveCommand,
    RunContext,
    RunCounts,
    Runtime,
    open_runtime,
)
from awaken_trio.store.sqlite import _reads as reads
from awaken_trio.store.sqlite import _schema as schema
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.store.sqlite_helpers import pragma

LATEST = len(schema.MIGRATIONS)


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def finish(ctx: RunContext) -> object:
    return None


async def fail(ctx: RunContext) -> object:
    raise ValueError("no good")


async def wait(ctx: RunContext) -> object:
    await ctx.boundary(wait=True)
    return None


@pytest.fixture(params=["memory", "sqlite"])
async def clocked(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Runtime, Clock]]:
    clock = Clock()
    store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/runs.db"
    async with open_runtime(store, clock=clock) as runtime:
        yield runtime, clock


async def test_a_record_carries_its_times_from_the_runtimes_clock(
    clocked: tuple[Runtime, Clock],
) -> None:
    runtime, clock = clocked
    handle = await runtime.start(wait, run_id="r1")
    started = await runtime.record("r1")
    assert (started.created_at, started.started_at, started.ended_at) == (1000.0, 1000.0, None)
    clock.now = 1004.5
    runtime.deliver(LiveCommand.Wake("r1"))
    await handle.wait()
    ended = await runtime.record("r1")
    assert ended.created_at == 1000.0
    assert ended.started_at == 1000.0
    assert ended.ended_at == ended.updated_at == 1004.5


async def test_a_queued_run_starts_when_its_thread_frees(clocked: tuple[Runtime, Clock]) -> None:
    runtime, clock = clocked
    first = await runtime.start(wait, run_id="a", thread_id="t")
    second = await runtime.start(finish, run_id="b", thread_id="t")
    queued = await runtime.record("b")
    assert (queued.created_at, queued.started_at) == (1000.0, None)
    clock.now = 1002.0
    await runtime.cancel_run("a")
    await first.wait()
    with trio.fail_after(5):
        await second.wait()
    done = await runtime.record("b")
    assert (done.created_at, done.started_at, done.ended_at) == (1000.0, 1002.0, 1002.0)


async def test_an_end_cause_filters_and_the_counts_add_up(
    clocked: tuple[Runtime, Clock],
) -> None:
    runtime, _ = clocked
    await runtime.execute(finish, run_id="ok")
    await runtime.execute(fail, run_id="bad1")
    await runtime.start(wait, run_id="live")
    await runtime.execute(fail, run_id="bad2")
    await runtime.cancel_run("live")
    assert [r.run_id for r in await runtime.list_runs(state="failed")] == ["bad2", "bad1"]
    assert [r.run_id for r in await runtime.list_runs(state="cancelled")] == ["live"]
    assert [r.run_id for r in await runtime.list_runs(state="natural_end")] == ["ok"]
    assert await runtime.list_runs(state="max_steps") == []
    counts = await runtime.count_runs()
    assert counts == RunCounts(ended=4, natural_end=1, failed=2, cancelled=1)
    assert counts["failed"] == counts.failed == 2
    assert counts.total == 4
    assert dict(counts)["queued"] == 0
    with pytest.raises(KeyError):
        counts["bogus"]
    with pytest.raises(InvalidArgument, match="natural_end"):
        await runtime.list_runs(state="broken")  # type: ignore[arg-type]


def _version_6_file(path: Path) -> None:
    """A store as the release before times wrote it: a run ended (failed), one running
    under a claim, one queued that never ran, one whose events were pruned."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for version, migration in enumerate(schema.MIGRATIONS[:6]):
            migration(conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        failed = '{"kind":"ended","cause":{"kind":"failed","code":"x","message":"m"}}'
        running = '{"kind":"running","generation":1}'
        queued = '{"kind":"queued"}'
        for run_id, kind, state in (
            ("done", "ended", failed),
            ("live", "running", running),
            ("waiting", "queued", queued),
            ("bare", "queued", queued),
        ):
            conn.execute(
                "INSERT INTO runs (run_id, thread_id, root_run_id, name, input, kind, state,"
                " generation) VALUES (?, ?, ?, 'job', 'null', ?, ?, 1)",
                (run_id, run_id, run_id, kind, state),
            )
        for run_id, state, at in (
            ("done", queued, 10.0),
            ("done", running, 11.0),
            ("done", failed, 12.0),
            ("live", running, 20.0),
            ("waiting", queued, 30.0),
        ):
            conn.execute(
                "INSERT INTO events (run_id, thread_id, generation, kind, state, detail, at)"
                " VALUES (?, ?, 1, 'committed', ?, '{}', ?)",
                (run_id, run_id, state, at),
            )
        conn.execute("INSERT INTO claims VALUES ('live', 'host:1:abc', 1, 1e12)")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_a_file_from_before_times_takes_them_from_its_events(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _version_6_file(path)
    async with SQLiteStore(path) as store:
        done = await store.load("done")
        live = await store.load("live")
        waiting = await store.load("waiting")
        bare = await store.load("bare")
        assert done is not None
        assert live is not None
        assert waiting is not None
        assert bare is not None
        assert (done.created_at, done.started_at, done.updated_at, done.ended_at) == (
            10.0,
            11.0,
            12.0,
            12.0,
        )
        assert (live.created_at, live.started_at, live.ended_at) == (20.0, 20.0, None)
        assert live.worker_id == "host:1:abc"
        assert (waiting.created_at, waiting.started_at) == (30.0, None)
        assert (bare.created_at, bare.updated_at, bare.worker_id) == (None, None, None)
        assert [r.run_id for r in await store.list_runs(state="failed")] == ["done"]
        counts = await store.count_runs()
        assert (counts["failed"], counts["ended"], counts["queued"]) == (1, 1, 2)
    assert pragma(path, "user_version") == LATEST


def _plan(path: Path, query: str, params: tuple[object, ...]) -> str:
    conn = sqlite3.connect(path)
    try:
        return "\n".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params))
    finally:
        conn.close()


async def test_filters_and_counts_read_the_indexes_not_the_table(tmp_path: Path) -> None:
    """The statements `list_runs` and `count_runs` send, as SQLite plans them: a cause
    filter walks ``runs_by_cause`` newest first with no sort, an unended kind
    ``runs_unended``, the counts read both indexes alone."""
    path = tmp_path / "runs.db"
    async with open_runtime(f"sqlite:///{path}") as runtime:
        await runtime.execute(finish)
    traced: list[str] = []
    conn = sqlite3.connect(path)
    conn.set_trace_callback(traced.append)
    reads.list_runs(conn, "failed", None, None, 50, None)
    reads.list_runs(conn, "queued", None, None, 50, None)
    reads.count_runs(conn)
    conn.close()
    by_cause, unended, count_kinds, count_causes = traced
    plan = _plan(path, by_cause.replace("'failed'", "?"), ("failed",))
    assert "USING INDEX runs_by_cause" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    plan = _plan(path, unended.replace("'queued'", "?"), ("queued",))
    assert "USING INDEX runs_unended" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert "USING COVERING INDEX runs_unended" in _plan(path, count_kinds, ())
    assert "USING COVERING INDEX runs_by_cause" in _plan(path, count_causes, ())
