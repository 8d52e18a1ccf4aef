"""The store's file deleted or replaced while the store has it open: the connection would
go on writing into a file no other process sees (the old inode), so every commit from then
on raises `StoreError` saying what happened and what to do, nothing of it reaches either
file, and a serving runtime stops claiming.

These tests use real time (the store works on a thread of its own), bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import trio

from awaken_trio import EndCause, RunContext, RunState, StoreError, open_runtime
from awaken_trio.store import Accepted
from awaken_trio.store.sqlite._store import SQLiteStore
from tests.store.sqlite_helpers import start

WAIT = 30.0
DONE = RunState.Ended(EndCause.NaturalEnd())


async def _a_store_with(path: Path, *run_ids: str) -> None:
    async with SQLiteStore(path, synchronous="normal") as store:
        for run_id in run_ids:
            (result,) = await store.apply([start(run_id)])
            assert isinstance(result, Accepted)


async def _runs_in(path: Path, *run_ids: str) -> dict[str, bool]:
    async with SQLiteStore(path, synchronous="normal") as store:
        return {run_id: await store.load(run_id) is not None for run_id in run_ids}


def _replace(path: Path, other: Path) -> None:
    """Put ``other`` at ``path``, as a restore or a careless copy would."""
    for suffix in ("-wal", "-shm"):
        Path(f"{other}{suffix}").unlink(missing_ok=True)
    os.replace(other, path)


async def test_a_replaced_file_fails_every_commit_and_version_poll(tmp_path: Path) -> None:
    path, other = tmp_path / "runs.db", tmp_path / "other.db"
    await _a_store_with(other, "theirs")
    async with SQLiteStore(path, synchronous="normal") as store:
        (result,) = await store.apply([start("before")])
        assert isinstance(result, Accepted)
        _replace(path, other)
        with pytest.raises(StoreError) as caught:
            await store.apply([start("after")])
        message = str(caught.value)
        assert str(path) in message
        assert "replaced" in message
        assert "open the store again" in message
        assert caught.value.outcome_unknown is False
        with pytest.raises(StoreError, match="replaced"):
            await store.version()
        with pytest.raises(StoreError, match="replaced"):  # and it stays so
            await store.apply([start("later")])
        with pytest.raises(StoreError, match="replaced"):  # reads too: they would be stale
            await store.load("before")
    # Nothing of the refused commits reached the file now at the path. (What else that
    # file shows is SQLite's: the old file's write-ahead log, named after the path, is
    # read as the new file's.)
    found = await _runs_in(path, "after", "later")
    assert found == {"after": False, "later": False}


async def test_a_deleted_file_fails_every_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteStore(path, synchronous="normal") as store:
        (result,) = await store.apply([start("before")])
        assert isinstance(result, Accepted)
        path.unlink()
        with pytest.raises(StoreError) as caught:
            await store.apply([start("after")])
        assert "deleted" in str(caught.value)
        assert str(path) in str(caught.value)
        with pytest.raises(StoreError, match="deleted"):
            await store.version()


async def _body(ctx: RunContext) -> object:
    return "done"


def _logged(caplog: pytest.LogCaptureFixture, word: str) -> int:
    return sum(word in record.getMessage() for record in caplog.records)


async def test_a_runtime_whose_file_is_replaced_fails_loudly_and_stops_claiming(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="awaken_trio")
    path, other = tmp_path / "runs.db", tmp_path / "other.db"
    await _a_store_with(other)
    url = f"sqlite:///{path}"
    serve_errors: list[StoreError] = []
    async with open_runtime(url, bodies={"job": _body}, poll=0.01) as runtime:

        async def serving(task_status: trio.TaskStatus[None]) -> None:
            try:
                await runtime.serve(task_status=task_status)
            except StoreError as exc:
                serve_errors.append(exc)

        async with trio.open_nursery() as nursery:
            await nursery.start(serving)
            handle = await runtime.submit("job")
            assert await handle.wait() == DONE
            _replace(path, other)
            with pytest.raises(StoreError, match="replaced"):
                await runtime.submit("job")
            # A run queued in the file now at the path is never claimed by this runtime:
            # every claim it tries is refused, and it says so (serve raises, or logs its
            # refusal besides the store's own first report).
            async with open_runtime(url) as control:
                queued = await control.submit("job")
                with trio.fail_after(WAIT):
                    while not serve_errors and _logged(caplog, "replaced") < 2:  # noqa: ASYNC110
                        await trio.sleep(0.01)  # (polled: the log has no event to wait on)
                assert await control.state(queued.run_id) == RunState.Queued()
            nursery.cancel_scope.cancel()
    assert all("replaced" in str(exc) for exc in serve_errors)
