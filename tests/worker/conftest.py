"""Fixtures of the durable-layer tests: a store several runtimes of this process share."""

from __future__ import annotations

import pytest

from awaken_trio.store import MemoryStore


@pytest.fixture(params=["inline", "mailbox"])
def shared_store(request: pytest.FixtureRequest) -> MemoryStore:
    """A shared (durable) memory store, applied inline and through the mailbox (group
    commit), so every durable behaviour is checked on both commit paths."""
    return MemoryStore(inline=request.param == "inline", shared=True)
