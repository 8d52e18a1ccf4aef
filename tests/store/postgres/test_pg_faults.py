"""The PostgreSQL store under faults: the server restarted and connections killed in the
middle of a load, a commit whose answer was lost, a query that hangs, and a cancel sent
while the owner's listener is down. Real time (worker threads, a real server), every wait
bounded by ``trio.fail_after`` and polling, never a fixed sleep."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import psycopg
import pytest
import trio

from awaken_trio import (
    EndCause,
    EventKind,
    JsonValue,
    RunContext,
    RunState,
    open_runtime,
)
from awaken_trio.store import Accepted
from awaken_trio.store.postgres import _tx as tx_module
from awaken_trio.store.postgres._listen import APPLICATION_NAME
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued
from tests.pg_server import PgServer, lock_waiters

T = TypeVar("T")

DONE = RunState.Ended(EndCause.NaturalEnd())
RUNS = 60
LEASE = 1.0
POLL = 0.02


async def _step(ctx: RunContext) -> JsonValue:
    for i in range(3):
        await ctx.boundary({"step": i})
        await trio.sleep(0.01)
    return ctx.run_id


STOPPED: dict[str, trio.Event] = {}
"""Set when the body of that run, in this process, has been stopped."""


async def _forever(ctx: RunContext) -> JsonValue:
    try:
        while True:
            await ctx.boundary(None)
            await trio.sleep(0.01)
    finally:
        STOPPED.setdefault(ctx.run_id, trio.Event()).set()


async def _until(check: Callable[[], Awaitable[T | bool | None]], what: str, seconds: float) -> T:
    try:
        with trio.fail_after(seconds):
            while True:
                found = await check()
                if found:
                    return found  # type: ignore[return-value]
                await trio.sleep(0.05)
    except trio.TooSlowError:
        raise AssertionError(f"timed out after {seconds} s waiting for {what}") from None


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def _run_a_load_through(
    url: str, fault: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker and a control runtime on ``url``; ``RUNS`` runs submitted, ``fault`` done
    once some have ended and others have not; then every run must end, each with exactly
    one terminal commit."""
    caplog.set_level(logging.INFO, logger="awaken_trio")
    bodies = {"step": _step}
    with trio.fail_after(120):
        async with (
            open_runtime(url, bodies=bodies, lease=LEASE, poll=POLL) as worker,
            open_runtime(url, lease=LEASE, poll=POLL) as control,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(lambda task_status: worker.serve(task_status=task_status))
            for i in range(RUNS):
                await control.submit("step", run_id=f"r{i}")

            async def some_ended() -> bool:
                states = [await control.state(f"r{i}") for i in range(RUNS)]
                return any(isinstance(s, RunState.Ended) for s in states)

            await _until(some_ended, "the first runs to end", 60)
            states = [await control.state(f"r{i}") for i in range(RUNS)]
            assert not all(isinstance(s, RunState.Ended) for s in states), "no load left"
            await trio.to_thread.run_sync(fault)

            async def all_ended() -> bool:
                try:
                    states = [await control.state(f"r{i}") for i in range(RUNS)]
                except Exception:
                    return False  # the control runtime's store is reconnecting too
                return all(isinstance(s, RunState.Ended) for s in states)

            await _until(all_ended, "every run to end", 100)
            events = [e async for e in control.events(None, follow=False)]
            nursery.cancel_scope.cancel()
    ends: dict[str, int] = {}
    for event in events:
        if event.kind == EventKind.COMMITTED and isinstance(event.state, RunState.Ended):
            ends[event.run_id] = ends.get(event.run_id, 0) + 1
    assert ends == {f"r{i}": 1 for i in range(RUNS)}
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs))
    # Every run that ended naturally returned its id; one lost to the fault ended
    # indeterminate (owner lost), never twice.
    for i in range(RUNS):
        record = None
        async with PostgresStore(url) as store:
            record = await store.load(f"r{i}")
        assert record is not None
        if record.state == DONE:
            assert record.result == f"r{i}"


@pytest.mark.slow
async def test_a_server_restart_in_the_middle_of_a_load_loses_nothing(
    pg_server: PgServer, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _run_a_load_through(pg_url, pg_server.restart, caplog)
    assert any(
        r.name == "awaken_trio.store" and r.levelno == logging.INFO for r in caplog.records
    ), "the reconnection was not logged"
    assert all(pg_server.password not in r.getMessage() for r in caplog.records)


@pytest.mark.slow
async def test_terminated_backends_in_the_middle_of_a_load_lose_nothing(
    pg_server: PgServer, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = _database(pg_url)

    def terminate() -> None:
        assert pg_server.terminate_backends(name) > 0

    await _run_a_load_through(pg_url, terminate, caplog)
    assert all(pg_server.password not in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------- commits


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_url) as store:
        yield store


async def test_a_commit_whose_answer_was_lost_is_looked_up_not_applied_again(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection breaks right after COMMIT reached the server: the store cannot tell
    from the connection whether it landed, so it looks the transaction's token up and
    answers with what the commit did; applying it again would be refused (the run
    exists)."""
    original = tx_module.PgTx.commit
    broken: list[str] = []

    def commit_then_break(self: tx_module.PgTx) -> None:
        original(self)
        if not broken:
            broken.append("once")
            self.conn.close()
            raise psycopg.OperationalError("the connection was lost")

    monkeypatch.setattr(tx_module.PgTx, "commit", commit_then_break)
    with trio.fail_after(30):
        [result] = await store.apply([new_queued("r1")])
    assert broken == ["once"]
    assert isinstance(result, Accepted)
    assert result.state == RunState.Queued()
    events = await store.events_after(0)
    assert [(e.run_id, e.seq) for e in events] == [("r1", result.last_seq)]


async def test_a_commit_whose_connection_broke_before_commit_is_applied_once(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = tx_module.PgTx.commit
    broken: list[str] = []

    def break_first(self: tx_module.PgTx) -> None:
        if not broken:
            broken.append("once")
            self.conn.close()
            raise psycopg.OperationalError("the connection was lost")
        original(self)

    monkeypatch.setattr(tx_module.PgTx, "commit", break_first)
    with trio.fail_after(30):
        [result] = await store.apply([new_queued("r1")])
    assert isinstance(result, Accepted)
    assert len(await store.events_after(0)) == 1


async def test_a_hanging_query_is_cancelled_on_the_server_with_its_caller(
    store: PostgresStore, pg_url: str
) -> None:
    """Another connection holds the events table, which a write that writes events locks
    (for a moment, to insert): the store's write waits. Its caller gives up; the query
    must not go on waiting on the server (it would hold a pooled connection, and then
    write, long after its caller left)."""
    await store.open()
    holder = await trio.to_thread.run_sync(lambda: psycopg.connect(pg_url))
    try:
        await trio.to_thread.run_sync(
            lambda: holder.execute("LOCK TABLE awaken.events IN EXCLUSIVE MODE")
        )

        def waiting() -> int:
            return lock_waiters(pg_url)

        with trio.move_on_after(30) as gave_up:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.apply, [new_queued("r1")])
                await _until(lambda: trio.to_thread.run_sync(waiting), "the write to wait", 20)
                nursery.cancel_scope.cancel()
        assert not gave_up.cancelled_caught

        async def no_one_waits() -> bool:
            return await trio.to_thread.run_sync(waiting) == 0

        await _until(no_one_waits, "the server to cancel the waiting query", 20)
    finally:
        await trio.to_thread.run_sync(holder.close)
    assert await store.load("r1") is None  # the cancelled write never landed
    [result] = await store.apply([new_queued("r1")])  # and the store goes on
    assert isinstance(result, Accepted)


# ---------------------------------------------------------------------------- signals


async def test_a_cancel_sent_while_the_owners_listener_is_down_still_reaches_it(
    pg_server: PgServer, pg_url: str
) -> None:
    name = _database(pg_url)

    def kill_listeners() -> int:
        rows = pg_server.admin_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s",
            (name, APPLICATION_NAME),
        )
        return int(str(rows[0][0]))

    with trio.fail_after(60):
        async with (
            open_runtime(pg_url, bodies={"forever": _forever}, lease=LEASE, poll=POLL) as owner,
            open_runtime(pg_url, lease=LEASE, poll=POLL) as control,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(lambda task_status: owner.serve(task_status=task_status))
            await control.submit("forever", run_id="r1")

            async def running() -> bool:
                return isinstance(await control.state("r1"), RunState.Running)

            await _until(running, "the owner to run r1", 30)

            async def listening() -> bool:
                rows = pg_server.admin_sql(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = %s AND application_name = %s",
                    (name, APPLICATION_NAME),
                )
                return int(str(rows[0][0])) > 0

            await _until(listening, "the owner's listener to connect", 30)
            assert await trio.to_thread.run_sync(kill_listeners) > 0
            # Sent at once, while the listener is down: its NOTIFY reaches no one.
            await control.cancel_run("r1", reason="while the listener was down")

            # The owner's body is stopped: the owner learned of the cancel although the
            # notice of it was sent to no listener.
            await STOPPED.setdefault("r1", trio.Event()).wait()
            nursery.cancel_scope.cancel()
    async with PostgresStore(pg_url) as store:
        loaded = await store.load("r1")
    assert loaded is not None
    assert loaded.state == RunState.Ended(EndCause.Cancelled())
