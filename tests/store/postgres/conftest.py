"""Fixtures of the PostgreSQL store's tests that look for work: stores on one database,
each with a lease clock a test can move (``offset``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from awaken_trio.store.postgres._store import PostgresStore


@pytest.fixture
async def offset() -> list[float]:
    """Seconds added to the server's clock by every store of `stores`."""
    return [0.0]


@pytest.fixture
async def stores(pg_url: str, offset: list[float]) -> AsyncIterator[list[PostgresStore]]:
    """Four stores on one fresh database, as four runtimes' would be."""
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                PostgresStore(pg_url, pool_size=2, lease_offset=lambda: offset[0])
            )
            for _ in range(4)
        ]
