"""The SQLite store: the store contracts on a real file, its schema and file handling,
its thread, and sharing a file between stores and processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from awaken_trio.store import Store
from awaken_trio.store._sqlite import SQLiteStore
from awaken_trio.testing import DurableStoreContract, StoreContract


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        yield store
        await store.aclose()


class TestSQLiteStoreDurable(DurableStoreContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        yield store
        await store.aclose()

    @pytest.fixture
    async def peer(self, tmp_path: Path, store: Store) -> AsyncIterator[Store]:
        await store.open()  # type: ignore[attr-defined]
        peer = SQLiteStore(tmp_path / "runs.db", synchronous="normal")
        yield peer
        await peer.aclose()
