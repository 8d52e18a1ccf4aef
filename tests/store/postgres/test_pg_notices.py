"""A write transaction's notice (the ``NOTIFY`` the other runtimes' listeners hear) is sent
after its ``COMMIT``, in a transaction of its own: the server commits notifying
transactions one at a time, under a lock it holds through each one's WAL flush, and the
store's writes must not take it (``_tx``'s docstring). The notice's transaction commits
without waiting for its flush, and only that one; and it is not sent when the ``COMMIT``
it follows fails. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

import attrs
import psycopg
import pytest
import trio

from awaken_trio._core import Queued
from awaken_trio.store import Accepted
from awaken_trio.store.postgres import _listen as listen_module
from awaken_trio.store.postgres._queries import Queries
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued
from tests.pg_server import PgServer

_NOTIFY_LOCK_WAITS = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'object'"
    " AND classid = 'pg_database'::regclass AND objid = 0 AND NOT granted"
)
"""Sessions waiting for the lock a notifying transaction takes before its commit."""


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture
def no_standby_answers(pg_server: PgServer, pg_url: str) -> Iterator[None]:
    """The server waits, at every commit that asks for it, for a synchronous standby that
    does not exist; this test's database asks for none by default (``local``), so only a
    session that sets ``synchronous_commit = on`` waits. Set back afterwards."""
    database = pg_url.rsplit("/", 1)[1]
    with _connect(pg_url) as admin:
        admin.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = local')
    _standby(pg_url, "'nobody'")
    try:
        yield
    finally:
        _standby(pg_url, "DEFAULT")


def _standby(url: str, names: str) -> None:
    """Set the server's ``synchronous_standby_names`` to ``names`` (SQL) and reload, from
    a session that waits for no standby itself."""
    with _connect(url) as admin:
        admin.execute("SET synchronous_commit = local")
        admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = {names}")
        admin.execute("SELECT pg_reload_conf()")


def _commit_then_notice(
    writer: psycopg.Connection[tuple[object, ...]], q: Queries, statement: str
) -> None:
    """``statement`` and a notice left in the session, committed, then ``notice``: one
    pipeline, as a store's write transaction sends them."""
    with writer.pipeline():
        writer.execute("BEGIN")
        writer.execute(statement)
        writer.execute("SELECT set_config('awaken_trio.notice', 'failed', false)")
        writer.execute("COMMIT")
        writer.execute(q.notice, (q.channel,))


async def _until(url: str, query: str, wanted: object) -> None:
    """Poll ``query`` (on a worker thread, a connection of its own) until it answers
    ``wanted``."""
    with _connect(url) as conn:
        conn.execute("SET synchronous_commit = local")

        def answer() -> object:
            found = conn.execute(query).fetchone()
            return None if found is None else found[0]

        while await trio.to_thread.run_sync(answer) != wanted:  # noqa: ASYNC110 - a server's state
            await trio.sleep(0.01)


@pytest.mark.usefixtures("no_standby_answers")
async def test_a_write_commits_while_another_transaction_holds_the_notify_lock(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session's notifying transaction holds the lock through its commit (it
    waits there for the standby). The store's write still commits: its run can be read
    while its notice waits for the lock; once the lock is let go, the write is answered
    and another store hears the notice. A write that notified in its own transaction
    would wait for the lock before committing, and its run could not be read."""
    # (A listener's ping is a notice too, which would wait for the lock meanwhile.)
    monkeypatch.setattr(listen_module, "PING_EVERY", 3600.0)
    holder = _connect(pg_url)
    try:
        holder.execute("SET synchronous_commit = local")
        holder.execute("CREATE TABLE held (k int)")
        holder.execute("SET synchronous_commit = on")
        holder_pid = holder.info.backend_pid

        def hold() -> None:
            # (A write: a transaction that wrote nothing but its commit record does not
            # wait for a standby, nor for its flush.)
            with holder.transaction():
                holder.execute("INSERT INTO held VALUES (1)")
                holder.execute("SELECT pg_notify('elsewhere', 'a notice')")

        async with PostgresStore(pg_url) as here, PostgresStore(pg_url) as there:
            assert there.notices_changes()
            await there.wait_for_change(0.01)  # (its listener LISTENs from now on)
            answered = trio.Event()
            heard: list[bool] = []
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        functools.partial(trio.to_thread.run_sync, hold, abandon_on_cancel=True)
                    )
                    await _until(
                        pg_url,
                        f"SELECT wait_event FROM pg_stat_activity WHERE pid = {holder_pid}",
                        "SyncRep",
                    )

                    async def write() -> None:
                        await here.apply([new_queued("r1")])
                        answered.set()

                    nursery.start_soon(write)
                    await _until(pg_url, "SELECT count(*) FROM awaken.runs", 1)
                    await _until(pg_url, _NOTIFY_LOCK_WAITS, 1)
                    assert not answered.is_set()  # (its notice waits for the lock)
                    heard.append(await there.wait_for_change(0.05))
                    _standby(pg_url, "DEFAULT")
                    await answered.wait()
                    heard.append(await there.wait_for_change(10.0))
            assert heard == [False, True]
    finally:
        holder.close()


@pytest.mark.usefixtures("no_standby_answers")
async def test_a_notice_is_sent_in_a_transaction_that_waits_for_no_flush(pg_url: str) -> None:
    """The ``notice`` statement after a ``COMMIT`` sends what the transaction left in the
    session, in a transaction that writes nothing but its commit record: it waits for no
    flush, so not for the standby a session that asks for one waits for (the write before
    it, committed asking for none, does not either)."""
    q = Queries.of("notices")
    with _connect(pg_url) as listener, _connect(pg_url) as writer:
        listener.execute(f'LISTEN "{q.channel}"')
        with writer.pipeline():
            writer.execute("BEGIN")
            writer.execute("SELECT set_config('awaken_trio.notice', 'sender 1', false)")
            writer.execute("COMMIT")
            writer.execute("SET synchronous_commit = on")
            writer.execute(q.notice, (q.channel,))
        heard = [n.payload for n in listener.notifies(timeout=10.0, stop_after=1)]
    assert heard == ["sender 1"]


async def test_no_notice_is_sent_after_a_commit_that_failed(pg_url: str) -> None:
    """A ``COMMIT`` that fails (here a deferred unique check) skips the ``notice`` queued
    after it in the pipeline: the listener hears the next notice sent, and nothing
    before it."""
    q = Queries.of("notices")
    with _connect(pg_url) as listener, _connect(pg_url) as writer:
        writer.execute("CREATE TABLE once (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        listener.execute(f'LISTEN "{q.channel}"')
        with pytest.raises(psycopg.errors.UniqueViolation):
            _commit_then_notice(writer, q, "INSERT INTO once VALUES (1), (1)")
        writer.execute("SELECT pg_notify(%s, 'after')", (q.channel,))
        heard = [n.payload for n in listener.notifies(timeout=10.0, stop_after=1)]
    assert heard == ["after"]


async def test_a_commit_whose_notice_the_server_refuses_still_stands(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server refuses the notice after a ``COMMIT`` (here a payload too long; a full
    notice queue is the real case): the write is answered as committed, its run is
    there, and the refusal is logged at WARNING."""
    async with PostgresStore(pg_url) as store:
        refused = b"SELECT pg_notify(%s, repeat('x', 9000))"
        store._queries = attrs.evolve(store._queries, notice=refused)
        with caplog.at_level(logging.WARNING, logger="awaken_trio.store"):
            [answer] = await store.apply([new_queued("r1")])
        assert isinstance(answer, Accepted)
        assert await store.states(["r1"]) == {"r1": Queued()}
    [record] = [r for r in caplog.records if "notice" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "payload string too long" in record.getMessage()
