"""The store contracts on the PostgreSQL store, each test on a fresh database of the
session's throwaway server. Real time (the store works in worker threads), bounded by the
contract's own waits; the lease clock is the server's, moved forward by an offset the
tests control (`LeaseOffset`), so no test waits for a lease to lapse."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from awaken_trio.store import Store
from awaken_trio.store.postgres._store import PostgresStore
from awaken_trio.testing import DurableStoreContract, StoreContract, StreamStoreContract
from tests.store.handover_checks import HandsOverStoredCommands


class LeaseOffset:
    """Seconds added to the server's clock by every store of one test."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds

    async def elapse(self, seconds: float) -> None:
        self.seconds += seconds
        await trio.lowlevel.checkpoint()


class TestPostgresStore(StoreContract):
    @pytest.fixture
    async def store(self, pg_url: str) -> AsyncIterator[Store]:
        store = PostgresStore(pg_url)
        yield store
        await store.aclose()


class TestPostgresStoreStreams(StreamStoreContract):
    @pytest.fixture
    async def store(self, pg_url: str) -> AsyncIterator[PostgresStore]:
        store = PostgresStore(pg_url)
        yield store
        await store.aclose()


class TestPostgresStoreDurable(HandsOverStoredCommands, DurableStoreContract):
    @pytest.fixture
    def offset(self) -> LeaseOffset:
        return LeaseOffset()

    @pytest.fixture
    def elapse(self, offset: LeaseOffset) -> Callable[[float], Awaitable[None]]:
        return offset.elapse

    @pytest.fixture
    async def store(self, pg_url: str, offset: LeaseOffset) -> AsyncIterator[PostgresStore]:
        store = PostgresStore(pg_url, lease_offset=offset)
        yield store
        await store.aclose()

    @pytest.fixture
    async def peer(
        self, pg_url: str, store: PostgresStore, offset: LeaseOffset
    ) -> AsyncIterator[PostgresStore]:
        peer = PostgresStore(pg_url, lease_offset=offset)
        yield peer
        await peer.aclose()
