"""Shared fixtures: a runtime on the memory store, inline or through the mailbox."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from awaken_trio import Runtime, open_runtime
from awaken_trio.store import MemoryStore
from tests.cancelled_guard import pytest_runtest_call as pytest_runtest_call
from tests.pg_server import INSTALL_HINT, PgServer, find_bindir, start_server

# `pytester` runs the store contract in a project of its own (test_contract_suite.py).
pytest_plugins = ["pytester"]


@pytest.fixture(params=["inline", "mailbox"])
def store(request: pytest.FixtureRequest) -> MemoryStore:
    """A memory store applied inline, and one applied through the supervisor's mailbox
    (group commit), so every behaviour is checked on both commit paths."""
    return MemoryStore(inline=request.param == "inline")


@pytest.fixture
async def runtime(store: MemoryStore) -> AsyncIterator[Runtime]:
    async with open_runtime(store) as rt:
        yield rt


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway PostgreSQL server for the session (see `pg_server.py`), stopped at its
    end. Without the server's binaries or psycopg the tests that need it skip, saying what to
    install; under CI=true (where `.ci/run` installs them) that is a failure instead."""
    missing: str | None = None
    if importlib.util.find_spec("psycopg") is None:
        missing = "psycopg is not installed (from a checkout: pip install -e '.[postgres]')"
    elif find_bindir() is None:
        missing = INSTALL_HINT
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {missing}", pytrace=False)
        pytest.skip(missing)
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh empty database on the session's server (password included),
    dropped after the test with every connection a test left open to it."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url.rsplit("/", 1)[1])


@pytest.fixture(params=["sqlite", "postgres"])
def durable_at(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a test's durable store is, once per store real processes can share: the path
    of a fresh SQLite file, and the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "runs.db"
    url: str = request.getfixturevalue("pg_url")
    return url
