"""One SQLite store file per test module: tests use run ids of their own."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('cli')}/runs.db"
