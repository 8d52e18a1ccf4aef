"""Shared fixtures: a runtime on the memory store, inline or through the mailbox."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from cancelled_guard import pytest_runtest_call as pytest_runtest_call

from awaken_trio import Runtime, open_runtime
from awaken_trio.store import MemoryStore

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
