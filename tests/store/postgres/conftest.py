"""Fixtures of the PostgreSQL store's tests: stores on one database, each with a lease
clock a test can move (``offset``), and a relay that counts round trips (``wire``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import psycopg
import pytest

from awaken_trio.store.postgres._store import PostgresStore
from tests.pg_server import Wire


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


# ---------------------------------------------------------------------------- the wire


@pytest.fixture
def wire(pg_url: str) -> Iterator[tuple[Wire, str]]:
    """A relay to the test's database, and the URL through it."""
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    relay = Wire(str(info["host"]), int(str(info["port"])))
    info["port"] = str(relay.port)
    try:
        yield relay, psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]
    finally:
        relay.close()
