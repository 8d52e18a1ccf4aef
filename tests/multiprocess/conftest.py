"""Fixtures the multi-process test modules share: the test process's own runtime on the
module's store (``url``), and the worker processes a test starts (killed at teardown)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from awaken_trio import Runtime
from tests.multiprocess.mp_harness import Cluster, control_runtime, open_cluster


@pytest.fixture
async def control(url: str) -> AsyncIterator[Runtime]:
    """The test process's runtime on the store (it opens it first); it serves nothing."""
    async with control_runtime(url) as runtime:
        yield runtime


@pytest.fixture
async def cluster(url: str, control: Runtime) -> AsyncIterator[Cluster]:
    """Worker processes on the store, started by each test; all killed at teardown."""
    async with open_cluster(url) as workers:
        yield workers
