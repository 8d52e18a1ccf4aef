"""How many connections a PostgreSQL store holds at most: its reads' ``pool_size``, its
writes' two (`_conn.WRITERS`), one for a held look, and its listener's. That is the bound
"Scaling out on PostgreSQL" tells a deployment to size ``max_connections`` by. Every way in
is made to wait at once: another session locks every table of the store's schema, so each
call holds its connection until the lock is let go. And a server with no connection left
for a store is refused with what to do. Real time, bounded by ``trio.fail_after``."""

from __future__ import annotations

import secrets

import psycopg
import pytest
import trio

from awaken_trio import StoreError, open_runtime
from awaken_trio.store.postgres._conn import WRITERS
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued
from tests.pg_server import PgServer
from tests.worker.worker_helpers import until

POOL_SIZE = 2
AT_MOST = POOL_SIZE + WRITERS + 2
"""Reads, writes, a held look and the listener."""
READS = 3 * POOL_SIZE
WRITES = 3 * WRITERS


def _sessions(server: PgServer, url: str, but: int) -> tuple[int, int]:
    """The sessions connected to ``url``'s database but the one of pid ``but``, and how
    many of them wait for a lock. (Asked from the server's own database, so that the
    asking is none of them.)"""
    database = url.rsplit("/", 1)[1].split("?")[0]
    rows = server.admin_sql(
        "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')"
        " FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
        (database, but),
    )
    return int(str(rows[0][0])), int(str(rows[0][1]))


class _Locked:
    """Every table of the store's schema locked by a session of its own, until `release`:
    each statement of the store's on one of them waits meanwhile."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self.pid = self._conn.info.backend_pid
        self._conn.execute("BEGIN")
        found = self._conn.execute(
            "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')"
            " FROM pg_tables WHERE schemaname = 'awaken'"
        ).fetchone()
        assert found is not None
        self._conn.execute(f"LOCK TABLE {found[0]} IN ACCESS EXCLUSIVE MODE")

    def release(self) -> None:
        if not self._conn.closed:
            self._conn.execute("ROLLBACK")
            self._conn.close()


async def test_a_store_holds_its_pool_its_writers_a_held_look_and_a_listener_at_most(
    pg_server: PgServer, pg_url: str
) -> None:
    with trio.fail_after(90):
        async with PostgresStore(pg_url, pool_size=POOL_SIZE) as store:
            await store.apply([new_queued("r0")])  # (a run the look finds)
            assert store.notices_changes()
            done: list[str] = []

            async def read(i: int) -> None:
                await store.load(f"r{i}")
                done.append("read")

            async def write(i: int) -> None:
                # A renewal is written on the writers' connections, whatever a look holds
                # (a batch applied meanwhile would be written in the look's transaction).
                await store.renew(f"owner-{i}", {}, 30.0)
                done.append("write")

            async def look() -> None:
                async with store.looking({"job"}, 0.0, 10) as found:
                    done.append(f"look found {len(found)}")
                    await trio.sleep_forever()

            locked = _Locked(pg_url)

            async def sessions() -> tuple[int, int]:
                return await trio.to_thread.run_sync(_sessions, pg_server, pg_url, locked.pid)

            try:
                async with trio.open_nursery() as nursery:
                    try:
                        nursery.start_soon(store.wait_for_change, 60.0)  # (its listener)
                        for i in range(READS):
                            nursery.start_soon(read, i)
                        for i in range(WRITES):
                            nursery.start_soon(write, i)
                        nursery.start_soon(look)

                        async def all_held() -> bool:
                            # Every read, write and look that may hold a connection waits
                            # on the lock, and the listener has connected (it reads no
                            # table).
                            return await sessions() == (AT_MOST, AT_MOST - 1)

                        await until(all_held, seconds=30)
                        # Watched a while longer, nothing more connects: the reads and
                        # writes beyond their limits wait for a connection in this process.
                        most = 0
                        for _ in range(10):
                            most = max(most, (await sessions())[0])
                            await trio.sleep(0.05)
                        assert most == AT_MOST, f"{most} connections, {AT_MOST} at most"
                        assert done == []
                    finally:
                        # (Before the nursery waits for its tasks: a held look is never
                        # abandoned, and waits for the lock until it is let go.)
                        locked.release()  # every call goes on, on the connections it holds
                    await until(lambda: _return(len(done) == READS + WRITES + 1), seconds=30)
                    nursery.cancel_scope.cancel()
            finally:
                locked.release()
    assert sorted(done) == ["look found 1"] + ["read"] * READS + ["write"] * WRITES


async def _return(value: bool) -> bool:
    await trio.lowlevel.checkpoint()
    return value


async def test_a_server_with_no_connection_left_for_the_store_is_refused_with_what_to_do(
    pg_server: PgServer, pg_url: str
) -> None:
    # A role allowed no connection: the server refuses it for want of a slot, as it does a
    # store whose workers outnumber max_connections.
    role, password = f"full_{secrets.token_hex(4)}", secrets.token_urlsafe(12)
    pg_server.admin_sql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' CONNECTION LIMIT 0")
    try:
        info = psycopg.conninfo.conninfo_to_dict(pg_url)
        url = f"postgresql://{role}:{password}@{info['host']}:{info['port']}/{info['dbname']}"
        with trio.fail_after(30), pytest.raises(StoreError) as refused:
            async with open_runtime(f"{url}?pool_size=3"):
                pass
    finally:
        pg_server.admin_sql(f"DROP ROLE {role}")
    said = str(refused.value)
    assert f'too many connections for role "{role}"' in said
    assert "raise its max_connections" in said
    assert f"lower ?pool_size= (a runtime holds at most pool_size + {WRITERS + 2}" in said
    assert f"{3 + WRITERS + 2} here" in said
    assert password not in said
