"""Fixtures of the client tests: a worker process serving an SQLite store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.client_helpers import WorkerProcess, sqlite_url


@pytest.fixture(scope="module")
def served_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An SQLite store served by a worker process with the multi-process test bodies
    (``stepper``, ``parker``, ``napper``, ...): runs submitted to it actually execute.
    One per test module; tests use runs of their own."""
    url = sqlite_url(tmp_path_factory.mktemp("served") / "runs.db")
    worker = WorkerProcess(url)
    try:
        worker.wait_ready()
        yield url
    finally:
        worker.kill()
