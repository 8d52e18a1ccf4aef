"""Streams on the PostgreSQL store: a schema from before streams is migrated with its runs
readable; a commit that wrote stream chunks is announced as one, so a runtime's stream
readers are woken by another runtime's chunks whatever its relay waits for; a runtime
follows a stream another runtime writes. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import threading

import psycopg
import trio

from awaken_trio import RunContext, RunState, open_runtime
from awaken_trio.store import Accepted, Commit, Expect, StreamDraft, StreamPage
from awaken_trio.store.postgres import _schema as schema
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued, still_running


def _running(run_id: str) -> Commit:
    return still_running(run_id, expect=Expect(generation=0, state=RunState.Queued), at=1.5)


def _chunks(run_id: str, *values: str) -> Commit:
    return Commit(
        run_id=run_id,
        state=RunState.Running(1),
        generation=1,
        expect=Expect(generation=1, state=RunState.Running),
        at=2.0,
        announce=False,
        chunks=(StreamDraft("output", values),),
    )


def _version_4_schema(pg_url: str) -> None:
    """A store as the release before streams wrote it: one run ended, one running."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema.open_schema(conn, "awaken", "test", schema.MIGRATIONS[:4])
        for run_id, kind, state in (
            ("done", "ended", '{"kind":"ended","cause":{"kind":"natural_end"}}'),
            ("live", "running", '{"kind":"running","generation":1}'),
        ):
            conn.execute(
                "INSERT INTO awaken.runs (run_id, thread_id, root_run_id, name, input, kind,"
                " state, generation) VALUES (%s, %s, %s, 'job', 'null', %s, %s, 1)",
                (run_id, run_id, run_id, kind, state),
            )


async def test_a_schema_from_before_streams_is_migrated_and_its_runs_stream(pg_url: str) -> None:
    _version_4_schema(pg_url)
    async with PostgresStore(pg_url) as store:
        done = await store.load("done")
        assert done is not None
        assert isinstance(done.state, RunState.Ended)
        assert await store.read_chunks("done", "output", 0, 10) == StreamPage((), 0, True)
        (result,) = await store.apply([_chunks("live", "a", "b")])
        assert isinstance(result, Accepted)
        page = await store.read_chunks("live", "output", 0, 10)
        assert page is not None
        assert [c.value for c in page.chunks] == ["a", "b"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        version = conn.execute("SELECT value FROM awaken.meta WHERE key = 'version'").fetchone()
    assert version == (str(schema.LATEST),)
    assert schema.LATEST >= 5  # streams came with version 5


async def test_another_stores_stream_write_is_heard_while_the_relay_rests(pg_url: str) -> None:
    """A stream write is not a control commit: `wait_for_control` goes on resting, but the
    store's stream callback is called at once."""
    heard = threading.Event()
    async with PostgresStore(pg_url) as here, PostgresStore(pg_url) as there:
        (result,) = await there.apply([new_queued("r1")])
        assert isinstance(result, Accepted)
        await there.apply([_running("r1")])
        assert here.notices_changes()
        here.notice_streams(heard.set)
        await here.wait_for_change(0.01)  # the listener LISTENs
        rested: list[bool] = []

        async def rest() -> None:
            rested.append(await here.wait_for_control(3.0))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rest)
                await trio.sleep(0.05)
                await there.apply([_chunks("r1", "x")])
                await trio.to_thread.run_sync(heard.wait)
                assert rested == []  # still resting: only the stream readers were woken
        assert rested == [False]
        heard.clear()
        here.notice_streams(None)
        await there.apply([_chunks("r1", "y")])
        await here.wait_for_change(0.5)
        assert not heard.is_set()


async def test_a_plain_commit_is_not_announced_as_a_stream_write(pg_url: str) -> None:
    heard = threading.Event()
    async with PostgresStore(pg_url) as here, PostgresStore(pg_url) as there:
        assert here.notices_changes()
        here.notice_streams(heard.set)
        await here.wait_for_change(0.01)
        await there.apply([new_queued("r1")])
        with trio.fail_after(20):
            assert await here.wait_for_change(10.0) is True
        assert not heard.is_set()


async def test_a_runtime_follows_a_stream_another_runtime_writes(pg_url: str) -> None:
    async def body(ctx: RunContext) -> object:
        out = ctx.stream()
        for i in range(20):
            out.send(i)
            await trio.sleep(0.01)
        return None

    with trio.fail_after(60):
        async with (
            open_runtime(pg_url, bodies={"w": body}) as writer,
            open_runtime(pg_url) as reader,
        ):
            handle = await writer.start(body, run_id="r1")
            got = [c async for c in reader.read_stream("r1")]
            assert [c.value for c in got] == [*range(20), None]
            await handle.wait()
