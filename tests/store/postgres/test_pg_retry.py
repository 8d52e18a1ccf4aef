"""The PostgreSQL store's answers to a failed write, each policy of its `Retry` to its end: a
connection that keeps breaking, a transaction the server keeps rolling back, and a commit
whose answer was lost and cannot be looked up. Real server, real time (each policy's waits
set to nothing), bounded by ``trio.fail_after``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import psycopg
import pytest
import trio

from awaken_trio import StoreError
from awaken_trio._core import Backoff
from awaken_trio.store import Accepted, Commit
from awaken_trio.store.postgres import _tx as tx_module
from awaken_trio.store.postgres._conn import RETRY, Connections, Retry
from awaken_trio.store.postgres._guess import Guess
from awaken_trio.store.postgres._store import PostgresStore
from tests.commits import new_queued


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_url) as store:
        yield store


def _failing_begins(
    monkeypatch: pytest.MonkeyPatch, error: Exception, times: int | None = None
) -> list[int]:
    """Make the next ``times`` write transactions (every one: None) fail as they begin,
    with ``error``; the list counts the transactions begun."""
    begun: list[int] = []
    begin, begin_guessed = tx_module.PgTx.begin, tx_module.PgTx.begin_guessed

    def fail() -> None:
        begun.append(1)
        if times is None or len(begun) <= times:
            raise error

    def failing(self: tx_module.PgTx, batch: Sequence[Commit] = ()) -> float:
        fail()
        return begin(self, batch)

    def failing_guessed(self: tx_module.PgTx, guess: Guess) -> float:
        fail()  # (a transaction written on a guess of its reads begins here)
        return begin_guessed(self, guess)

    monkeypatch.setattr(tx_module.PgTx, "begin", failing)
    monkeypatch.setattr(tx_module.PgTx, "begin_guessed", failing_guessed)
    return begun


def test_the_stores_retries_by_default() -> None:
    assert [RETRY.broken.wait(n) for n in range(6)] == [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0]
    assert RETRY.broken.spent(6)
    assert not RETRY.broken.spent(5)
    assert RETRY.rolled_back.wait(0) == 0.0
    assert RETRY.rolled_back.spent(20)


async def test_a_write_whose_connection_keeps_breaking_gives_up_after_its_tries(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store._conns.retry = Retry(broken=Backoff(0.0, 0.0, tries=2))
    begun = _failing_begins(monkeypatch, psycopg.OperationalError("the server went away"))
    with trio.fail_after(30), pytest.raises(StoreError) as failed:
        await store.apply([new_queued("r1")])
    assert len(begun) == 3  # the first try and two more
    assert failed.value.outcome_unknown is False
    assert "failed to write a batch of 1 commits" in str(failed.value)
    assert "nothing was written" in str(failed.value)
    monkeypatch.undo()
    assert await store.load("r1") is None


async def test_a_write_whose_connection_broke_lands_on_a_later_try(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store._conns.retry = Retry(broken=Backoff(0.0, 0.0, tries=2))
    begun = _failing_begins(monkeypatch, psycopg.OperationalError("the server went away"), 2)
    with trio.fail_after(30):
        [result] = await store.apply([new_queued("r1")])
    assert isinstance(result, Accepted)
    assert len(begun) == 3
    assert len(await store.events_after(0)) == 1


async def test_a_write_the_server_keeps_rolling_back_gives_up_after_its_tries(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store._conns.retry = Retry(rolled_back=Backoff(0.0, 0.0, tries=3))
    begun = _failing_begins(monkeypatch, psycopg.errors.DeadlockDetected("deadlock detected"))
    with trio.fail_after(30), pytest.raises(StoreError) as failed:
        await store.apply([new_queued("r1")])
    assert len(begun) == 4
    assert failed.value.outcome_unknown is False
    assert "rolled a batch of 1 commits back 4 times in a row" in str(failed.value)
    monkeypatch.undo()
    assert await store.load("r1") is None


async def test_a_lost_commit_that_cannot_be_looked_up_is_an_unknown_outcome(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = tx_module.PgTx.commit

    def commit_then_break(self: tx_module.PgTx) -> None:
        commit(self)
        self.conn.close()
        raise psycopg.OperationalError("the connection was lost")

    def look_up(self: Connections, *args: object, **kwargs: object) -> None:
        raise psycopg.OperationalError("the server cannot be reached")

    monkeypatch.setattr(tx_module.PgTx, "commit", commit_then_break)
    monkeypatch.setattr(Connections, "_look_up", look_up)
    with trio.fail_after(30), pytest.raises(StoreError) as failed:
        await store.apply([new_queued("r1")])
    assert failed.value.outcome_unknown is True
    assert "could not learn whether the commit landed" in str(failed.value)
    monkeypatch.undo()
    assert await store.load("r1") is not None  # (it had landed: only the answer was lost)
